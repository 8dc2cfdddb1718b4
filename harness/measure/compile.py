"""The ``compile`` axis of the speed and memory suites: each variant as it runs eager, or wrapped in ``torch.compile``.

``inductor`` cells compile the timed module (the attention layer, or the whole encoder of a ``train_step`` cell; the
optimiser step stays eager) with static shapes. Choices, each so that a compiled figure means one thing:
- Cold compile: the first call runs inside an empty Inductor cache directory (``fresh_cache``), so ``compile_s`` is
  what a user's first run pays (Dynamo tracing, AOTAutograd, Inductor code generation, the C++ build and one
  execution), not whatever a previous run left on disk.
- The explicit-softmax ``vanilla`` (registry backend ``math``) is compiled with Inductor's pattern matcher off:
  with it on, Inductor rewrites softmax(QKᵀ)V into SDPA and the row stops being the papers' vanilla Transformer
  (DESIGN §4; `vanilla_sdpa` is the SDPA row). Every other variant is compiled with the default passes, since that
  is how a user would run it.
- Each group of cells starts from a reset Dynamo (:func:`compile_scope`), so compiled modules of earlier groups do
  not count towards the recompile limit, and hitting that limit is an error rather than a silent fall-back to eager.
  While a group is timed, any recompilation is an error of its cell (:func:`no_recompiles`): a timing that includes
  a compilation is not a steady-state figure.
- A compiled cell is timed only if it computes what eager computes (:func:`checked_first_call`): its first call's
  output and gradients against the eager call's on the same weights and inputs. A compiler that is fast because it
  is wrong would otherwise be the fastest row of the table.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import attentions

MODES = ("eager", "inductor")

#: Largest relative difference, max |compiled - eager| / max |eager| over the output and each gradient (with a floor
#: under the scale, ``SCALE_FLOOR``), accepted for a compiled call. Inductor's reordered float32 sums differ from eager
#: by rounding, orders of magnitude below the bound; a wrong kernel by O(1) (seen: torch 2.13 computed
#: S3Attention's Fourier-weight gradient wrongly, in a formulation the layer no longer uses). Low precision rounds each
#: partial result: a few units of its epsilon. Measured: docs/measuring.md, "Compiled cells", and the results it links.
AGREEMENT_TOL = {"float32": 1e-3, "bfloat16": 5e-2, "float16": 2e-2, "amp_bf16": 5e-2, "amp_fp16": 2e-2}


class CompiledMismatch(RuntimeError):
    """A compiled call's output or gradients differ from the eager call's beyond :data:`AGREEMENT_TOL`."""


def compiles(params: dict[str, Any]) -> bool:
    """Whether a cell's parameters ask for a compiled workload (no ``compile`` axis = eager)."""
    return params.get("compile", "eager") != "eager"


def compile_options(attention: str) -> dict[str, Any]:
    """Inductor options for ``attention``: the pattern matcher off for the explicit-softmax baseline."""
    return {"pattern_matcher": False} if attentions.spec(attention).backend == "math" else {}


def compile_module(module: nn.Module, attention: str) -> Callable[..., torch.Tensor]:
    """``module``'s call under ``torch.compile`` (Inductor, static shapes); compilation happens at the first call.

    What is compiled is a wrapper with a code object of its own. Dynamo keeps compiled code per code object, so two
    cells of one group whose modules share a class (every ``train_step`` encoder, or ``vanilla`` and
    ``vanilla_sdpa``) would otherwise share cache entries: an entry compiled for a variant with a graph break guards
    only what it traced before the break, and a later variant's call can pass those guards and run that variant's
    partial graph (seen: ``vanilla_sdpa``'s encoder running Performer's prefix, its blocks then recompiled).
    """

    def call(*args: Any) -> torch.Tensor:
        return module(*args)

    own = types.FunctionType(call.__code__.replace(co_name=f"compiled_{attention}"), call.__globals__,
                             closure=call.__closure__)
    return torch.compile(own, backend="inductor", dynamic=False, options=compile_options(attention))


@contextlib.contextmanager
def compile_scope(active: bool) -> Iterator[None]:
    """A group's compiled cells: Dynamo reset on entry, and hitting the recompile limit raises (no eager fall-back)."""
    if not active:
        yield
        return
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield


def no_recompiles(active: bool) -> contextlib.AbstractContextManager[None]:
    """While timing: a recompilation raises (``torch._dynamo`` ``error_on_recompile``) instead of being timed."""
    return torch._dynamo.config.patch(error_on_recompile=True) if active else contextlib.nullcontext()


def _drop_kept_cache_line(record: logging.LogRecord) -> bool:
    """False for Inductor's "on error, temporary cache dir kept at ..." line, which a failed compile would print between
    the progress lines: the failure is the cell's status, and the directory is under the run's own cache folder."""
    return not str(record.msg).startswith("on error, temporary cache dir kept")


@contextlib.contextmanager
def _kept_cache_unsaid() -> Iterator[None]:
    """:func:`_drop_kept_cache_line` on Inductor's utility logger for the block."""
    logger = logging.getLogger("torch._inductor.utils")
    logger.addFilter(_drop_kept_cache_line)
    try:
        yield
    finally:
        logger.removeFilter(_drop_kept_cache_line)


def first_call(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
    """Run a compiled workload's first call in an empty Inductor cache; its output and the compile metrics:
    ``compile_s`` (wall time of that call: compilation plus one execution), ``compile_graphs`` (graphs Dynamo
    captured), ``compile_graph_breaks`` (where it fell back to Python between them) and ``compile_warnings`` (the
    distinct warnings of the compilation, kept with the cell rather than printed between progress lines)."""
    import torch._dynamo.utils  # here, not at the top: Dynamo and Inductor load slowly
    import torch._inductor.utils

    counters = torch._dynamo.utils.counters
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    started = time.perf_counter()
    # private but stable since torch 2.1 (renamed from fresh_inductor_cache in 2.6): a temporary cache directory;
    # the compiler's warnings (e.g. "does not support code generation for complex operators") go with the cell
    with _kept_cache_unsaid(), torch._inductor.utils.fresh_cache(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    said = dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught)
    return out, {"compile_s": time.perf_counter() - started,
                 "compile_graphs": counters["stats"]["unique_graphs"] - graphs,
                 "compile_graph_breaks": sum(counters["graph_break"].values()) - breaks,
                 **({"compile_warnings": " | ".join(said)} if said else {})}


def _values(out: torch.Tensor, module: nn.Module) -> list[torch.Tensor]:
    """The call's output (or loss) and every parameter gradient it left, as float copies."""
    grads = [q.grad for q in module.parameters() if q.grad is not None]
    return [t.detach().float().clone() for t in (out, *grads)]


#: Floor of the scale a tensor's difference is measured against, as a fraction of the call's largest tensor: a
#: gradient that is mathematically zero is pure rounding noise (Transformer-LS's W_P bias: its softmax over the
#: sequence is shift-invariant, so the gradient is about 1e-5 eager and compiled alike, on a scale of 1e-14).
SCALE_FLOOR = 1e-2


def _rel_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max over the tensors of max |a - b| / max(max |b|, ``SCALE_FLOOR`` x the largest max |b|); inf where the two
    calls left different sets of gradients."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return float("inf")
    scales = [float(y.abs().max()) for y in b]
    floor = max(SCALE_FLOOR * max(scales), 1e-30)
    return max(float((x - y).abs().max()) / max(sc, floor) for x, y, sc in zip(a, b, scales, strict=True))


def checked_first_call(fn: Callable[[], torch.Tensor], eager: Callable[[], torch.Tensor], module: nn.Module,
                       dtype: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """:func:`first_call`, then the same call eager, twice, each from the weights (and buffers) the compiled call
    started from. ``compile_rel_err``: the compiled call's difference from the first eager call (:func:`_rel_diff`);
    above :data:`AGREEMENT_TOL` it raises :class:`CompiledMismatch` (the cell's ``error``). Where the two eager calls
    already differ by more than that, the forward draws random numbers (dropout, LSH rotations, redrawn random
    features) that Inductor draws differently, and ``compile_check`` says the values were not compared; likewise
    where the eager call runs out of memory (fusion can make the compiled call fit where eager does not)."""
    from ..core.cell import classify_exception

    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    out, metrics = first_call(fn)
    runs = [_values(out, module)]
    try:
        for _ in range(2):
            module.load_state_dict(state)  # in place: the compiled graph keeps reading the same parameters
            runs.append(_values(eager(), module))
    except Exception as exc:  # a compiled cell may fit where its eager call does not: that is its result, not a fail
        if classify_exception(exc).status != "oom":
            raise
        return out, {**metrics, "compile_check": "not compared: the eager call ran out of memory"}
    finally:
        module.load_state_dict(state)
    compiled, first, second = runs
    tol = AGREEMENT_TOL[dtype]
    if _rel_diff(second, first) > tol:
        return out, {**metrics, "compile_check": "not compared: two eager calls differ (random draws)"}
    err = _rel_diff(compiled, first)
    if not err <= tol:
        raise CompiledMismatch(f"compiled call differs from eager by {err:.3g} of the scale (tolerance {tol:g}), "
                               "output or gradients on the same weights and inputs")
    return out, {**metrics, "compile_rel_err": err, "compile_check": "matches eager"}
