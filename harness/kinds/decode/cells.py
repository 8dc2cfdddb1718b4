"""One decode cell: a causal layer prefilled with a prompt of ``context`` tokens, then timed one token at a time.

A cell builds the variant's causal form (``causal=True``, eval, ``dropout`` 0), runs ``prefill`` over a random
prompt of ``context`` tokens into a state sized for ``context + 1`` tokens (:mod:`attentions._decode`), and measures:

- ``prefill_ms``: the prompt through the parallel causal form, the median of :data:`PREFILL_CALLS` − 1 calls (each
  allocating its own state, as a new request does), or the one call measured for the state where that took longer
  than :data:`PREFILL_ONCE_S`;
- ``state_bytes``: what the state holds per batch, as the allocator counts it (the bytes a prefill allocates and still
  holds at its end, less its output), and ``state_bytes_per_sequence``; ``state_bytes_tensors`` is the sum of the
  state's tensors, which the allocator's figure must equal on the CPU;
- ``time_ms_median`` (``ms_per_token``): one ``step`` of a batch at that context, timed in interleaved rounds beside
  the other variants of the group (:func:`harness.measure.group.time_group`: the load and drift flags of the speed
  suite come with it). Each timed step writes the same position: the state's length is set back to ``context`` first
  (:func:`rewind`), so every sample decodes token ``context + 1`` and the state never outgrows its allocation;
- ``tokens_per_s``: the batch's tokens per second. (The reports add ``bandwidth_bound_ms``, the state's bytes over the
  copy bandwidth the run measured, since a step reads its whole state, and ``bound_ratio``, ms per token over it.)
- ``gflops``, ``gbytes_moved``, ``intensity_flop_per_byte`` of one step, counted on a step as the speed kind counts a
  call (:func:`harness.measure.flops.work_metrics`: FlopCounterMode's FLOPs, the operator graph's bytes: the state
  and the weights read, the new token written), and the achieved ``gflops_per_s`` and ``gbytes_per_s``;
- one-time costs, each outside every timed step: ``plan_ms`` (the module's ``build_plan`` for the prompt, where it
  has one: :func:`harness.measure.timing.build_plans`) and ``first_call_ms`` (the first step);
- on CUDA, ``warm_cache`` where the state and the weights fit in L2 and ``timing.flush_l2`` is off
  (:func:`harness.measure.timing.warm_cache`).

Every failure is the cell's status, as in the speed kind: ``oom``, ``timeout``, ``nan``, ``error``, ``unsupported``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

import attentions

from ...core import faults
from ...core.cell import Cell, CellResult, Context, NonFinite, classify_exception, memory_cap, time_limit
from ...core.tunables import map_large_blocks
from ...measure.flops import achieved_rates, work_metrics
from ...measure.group import Workload, measure_workloads
from ...measure.memory import prefilled_state
from ...measure.timing import build_plans, cache_flags, wall_ms

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Prefill calls a cell times (each a whole prompt: seconds at long contexts, so a few, not a timing loop); one only
#: where it took longer than :data:`PREFILL_ONCE_S` (a long prompt's prefill varies by a few percent, and three of
#: them at 32K tokens took minutes per group: the prefill is a side figure of a decode cell).
PREFILL_CALLS = 3
PREFILL_ONCE_S = 0.5


def rewind(state: Any, length: int) -> None:
    """Set every ``length`` of a decoding state (a state, or a tuple or dataclass of states) back to ``length``: the
    next step writes the position after it again, reading as many tokens as at the cell's context."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        for f in dataclasses.fields(state):
            value = getattr(state, f.name)
            if f.name == "length" and isinstance(value, int):
                setattr(state, f.name, length)
            else:
                rewind(value, length)
    elif isinstance(state, tuple | list):
        for part in state:
            rewind(part, length)


def _layer(cell: Cell, device: torch.device, dtype: torch.dtype) -> nn.Module:
    p = cell.params
    torch.manual_seed(cell.fixed["seed"])
    module = attentions.build(p["attention"], **cell.config, dim=p["heads"] * p["head_dim"], heads=p["heads"],
                              max_seq_len=p["context"] + 1)
    return module.to(device=device, dtype=dtype).eval()


def _check_finite(what: str, tensor: Tensor) -> None:
    if not torch.isfinite(tensor).all():
        raise NonFinite(f"non-finite values in {what}")


def _prefill(module: nn.Module, prompt: Tensor, capacity: int, device: torch.device) -> tuple[list[float], Any, int]:
    """(the prefill times in ms, the state of the first prefill, the bytes it holds as the allocator counts them).

    The first call runs under the allocator's profiler (its state's bytes); where it took longer than
    :data:`PREFILL_ONCE_S` its time is the only sample (the profiler's record of a few large allocations costs
    little beside seconds of compute), else :data:`PREFILL_CALLS` − 1 more calls give the times."""

    def call() -> tuple[Tensor, Any]:
        with torch.inference_mode():
            return module.prefill(prompt, None, capacity=capacity)

    started = time.perf_counter()
    y, state, held = prefilled_state(module, prompt, capacity, device)
    first = (time.perf_counter() - started) * 1e3
    _check_finite("the prefill's output", y)
    del y
    if first > PREFILL_ONCE_S * 1e3:
        return [first], state, held
    times = []
    for _ in range(PREFILL_CALLS - 1):
        started = time.perf_counter()
        y, _ = call()
        _sync(device)
        times.append((time.perf_counter() - started) * 1e3)
        del y
    return times, state, held


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prepare(cell: Cell, ctx: Context) -> Workload | CellResult:
    """Build, prefill and measure the state; the step, ready to be timed with its group. A failure is the result."""
    faults.point("measure.cell", cell.label)
    map_large_blocks()  # a prefill's gigabytes mapped on their own and unmapped when freed (see map_large_blocks)
    device = torch.device(cell.device)
    p = cell.params
    try:
        entry = attentions.spec(p["attention"])
    except attentions.RegistryError as exc:
        return CellResult("error", str(exc))
    reason = cell.skip_reason or entry.unavailable_reason(device)
    if reason:
        return CellResult("unsupported", reason)
    started = time.perf_counter()
    metrics: dict[str, Any] = {"backend": entry.backend, "complexity": entry.caps.complexity}
    try:
        with time_limit(ctx.timeout_s), memory_cap(device):
            dtype = TORCH_DTYPES[p["dtype"]]
            module = _layer(cell, device, dtype)
            b, n, width = p["batch_size"], p["context"], p["heads"] * p["head_dim"]
            plan_ms = build_plans(module, n, b, device)  # the prefill's plan, a one-time cost before any call
            metrics.update({} if plan_ms is None else {"plan_ms": plan_ms})
            prompt = torch.randn(b, n, width, device=device, dtype=dtype)
            token = torch.randn(b, 1, width, device=device, dtype=dtype)
            times, state, held = _prefill(module, prompt, n + 1, device)
            del prompt
            metrics.update(prefill_ms=statistics.median(times), state_bytes=held, state_bytes_per_sequence=held / b,
                           state_bytes_tensors=attentions.state_bytes(state))
            step = _step(module, state, token, n)
            out, metrics["first_call_ms"] = wall_ms(step, device)  # the first step, a one-time cost of its own
            _check_finite("a step's output", out)
            del out
            metrics.update(work_metrics(step))  # FLOPs and bytes of one step, counted on a step (rewound as timed)
            # what persists between steps and each step reads: the state and the weights (the L2 flag, CUDA only)
            resident = held + sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
            metrics.update(cache_flags(resident, device, cell.timing.get("flush_l2")))
    except Exception as exc:  # every failure is a result, never the end of the sweep
        result = classify_exception(exc)
        result.metrics = metrics
        return result
    return Workload(cell, step, module, metrics, time.perf_counter() - started)


def _step(module: nn.Module, state: Any, token: Tensor, context: int) -> Callable[[], Tensor]:
    """One decoding step at ``context`` (the state rewound before it, so every call decodes the same position)."""

    def step() -> Tensor:
        rewind(state, context)
        with torch.inference_mode():
            return module.step(token, state)[0]

    return step


def measure_cell(cell: Cell, ctx: Context) -> CellResult:
    """One decode cell in this process."""
    return measure_group([cell], ctx)[0]


def measure_group(cells: list[Cell], ctx: Context) -> list[CellResult]:
    """Cells of one shape that differ only by attention: each prefilled and measured alone, then their steps timed in
    interleaved rounds, so their ratios survive a drifting machine."""
    results = measure_workloads(cells, ctx, _prepare)
    for cell, result in zip(cells, results, strict=True):
        m = result.metrics
        if result.status == "ok" and m.get("time_ms_median"):
            m["ms_per_token"] = m["time_ms_median"]
            m["tokens_per_s"] = cell.params["batch_size"] * 1e3 / m["time_ms_median"]
            if "gflops" in m:  # achieved rates of a step (the reports add the fraction of the copy bandwidth)
                m.update(achieved_rates(m["gflops"], m["gbytes_moved"], m["time_ms_median"]))
    return results


def describe(result: CellResult) -> str:
    """The progress line of a finished decode cell."""
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    noisy = f" noisy: {m['noisy_reason']}" if m.get("noisy") else ""
    return (f"ok {m['time_ms_median']:.3g} ms/token (IQR {m.get('time_ms_iqr', float('nan')):.2g}){noisy}, prefill "
            f"{m['prefill_ms']:.3g} ms, state {m['state_bytes'] / 2**20:.3g} MiB")
