"""Measure one cell: build the workload and its plan, check it is finite, then time it, take its peak memory, count
FLOPs. One-time costs are metrics of their own, never inside a timed call: ``plan_ms`` (the modules' ``build_plan``)
and ``first_call_ms`` (for a compiled cell the compilation, ``compile_s``). On CUDA, ``warm_cache`` flags a cell whose
working set fits in L2 while ``timing.flush_l2`` is off (:func:`harness.measure.timing.warm_cache`).

Every failure becomes a status (never an exception out of ``measure_cell``): ``oom`` for allocation failures
(CUDA OOM, CPU allocator failure, MemoryError), ``timeout`` when the cell's time limit fires, ``nan`` for
non-finite outputs, losses or gradients, ``unsupported`` for capability refusals, ``error`` for the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attentions

from ...core import faults
from ...core.cell import (
    Cell,
    CellResult,
    Context,
    NonFinite,
    classify_exception,
    memory_cap,
    time_limit,
)
from ...measure.compile import checked_first_call, compile_module, compile_scope, compiles
from ...measure.flops import achieved_rates, work_metrics
from ...measure.gpu import pinned_sdpa, profile_call
from ...measure.group import Workload, measure_workloads
from ...measure.memory import peak_memory_bytes
from ...measure.timing import allocated_footprint, build_plans, cache_flags, wall_ms
from ...models.classifier import Classifier

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Mixed precision (torch's AMP recipe): float32 weights and inputs, the forward under autocast to this dtype, the
#: backward and the optimiser step outside it. What most GPU training runs, and the paper-era "fp16" runs.
AMP_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}


def _autocast(device: torch.device, dtype_name: str, forward: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``forward`` under autocast to the AMP dtype the cell names, or itself for a plain dtype."""
    if dtype_name not in AMP_DTYPES:
        return forward

    def amp(x: Tensor) -> Tensor:
        with torch.autocast(device.type, dtype=AMP_DTYPES[dtype_name]):
            return forward(x)

    return amp


def _check_finite(what: str, *tensors: Tensor | None) -> None:
    for t in tensors:
        if t is not None and not torch.isfinite(t).all():
            raise NonFinite(f"non-finite values in {what}")


def build_workload(cell: Cell, device: torch.device) -> tuple[Callable[[], Tensor], Callable[[], Tensor], nn.Module]:
    """The function timed for this cell (one call = one fwd, fwd+bwd or training step), the same call on the eager
    module (what FLOPs and bytes are counted on: Inductor's fused kernels are not aten ops) and the module.

    A ``compile: inductor`` cell times the module wrapped in ``torch.compile`` (:mod:`harness.measure.compile`);
    compilation happens at its first call.
    """
    p, fx = cell.params, cell.fixed
    dtype = TORCH_DTYPES.get(p["dtype"], torch.float32)  # AMP cells keep float32 weights and inputs
    b, n, d = p["batch_size"], p["seq_len"], p["dim"]
    torch.manual_seed(fx["seed"])
    if p["mode"] == "train_step":
        return _train_step_workload(cell, device, dtype)

    module = attentions.build(p["attention"], **cell.config, dim=d, heads=p["heads"], max_seq_len=n)
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(b, n, d, device=device, dtype=dtype)
    if p["mode"] == "fwd":
        module.eval()

        def inference(forward: Callable[[Tensor], Tensor]) -> Callable[[], Tensor]:
            def fwd() -> Tensor:
                with torch.inference_mode():
                    return _autocast(device, p["dtype"], forward)(x)

            return fwd

        return _calls(cell, module, inference)

    module.train()
    x.requires_grad_(True)
    grad_out = torch.randn(b, n, d, device=device, dtype=dtype)
    params = [q for q in module.parameters() if q.requires_grad]

    def forward_backward(forward: Callable[[Tensor], Tensor]) -> Callable[[], Tensor]:
        amp = _autocast(device, p["dtype"], forward)
        grad_like: dict[torch.dtype, Tensor] = {dtype: grad_out}  # the output gradient in the output's dtype (AMP)

        def fwd_bwd() -> Tensor:
            for q in params:  # grads set to None so every call allocates the same (no accumulation)
                q.grad = None
            x.grad = None
            y = amp(x)
            if y.dtype not in grad_like:  # cast once, at the first call, outside every later timing
                grad_like[y.dtype] = grad_out.to(y.dtype)
            y.backward(grad_like[y.dtype])
            return y

        return fwd_bwd

    return _calls(cell, module, forward_backward)


def _train_step_workload(cell: Cell, device: torch.device, dtype: torch.dtype
                         ) -> tuple[Callable[[], Tensor], Callable[[], Tensor], nn.Module]:
    """A ``train_step`` cell's workload: the encoder classifier, AdamW, one step per call (as ``build_workload``)."""
    p, fx = cell.params, cell.fixed
    b, n, d = p["batch_size"], p["seq_len"], p["dim"]
    model = Classifier(
        p["attention"], num_classes=fx["num_classes"], vocab_size=fx["vocab_size"], max_seq_len=n, dim=d,
        heads=p["heads"], layers=fx["layers"], mlp_dim=fx["mlp_dim"], attention_overrides=cell.config,
    ).to(device=device, dtype=dtype).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(fx["vocab_size"], (b, n), device=device)
    labels = torch.randint(fx["num_classes"], (b,), device=device)

    def train_step(forward: Callable[[Tensor], Tensor]) -> Callable[[], Tensor]:
        def step() -> Tensor:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(_autocast(device, p["dtype"], forward)(tokens).float(), labels)
            loss.backward()
            opt.step()
            return loss

        return step

    return _calls(cell, model, train_step)


def _calls(cell: Cell, module: nn.Module, call: Callable[[Callable[[Tensor], Tensor]], Callable[[], Tensor]]
           ) -> tuple[Callable[[], Tensor], Callable[[], Tensor], nn.Module]:
    """(timed call, eager call, module): ``call`` around the compiled module where the cell compiles, else eager;
    either with SDPA pinned to the cell's ``sdpa_backend`` where it names one."""
    backend = cell.params.get("sdpa_backend")

    def pinned(fn: Callable[[], Tensor]) -> Callable[[], Tensor]:
        if backend in (None, "auto"):
            return fn

        def run() -> Tensor:
            with pinned_sdpa(backend):
                return fn()

        return run

    eager = pinned(call(module))
    if not compiles(cell.params):
        return eager, eager, module
    return pinned(call(compile_module(module, cell.params["attention"]))), eager, module


def _prepare(cell: Cell, ctx: Context) -> Workload | CellResult:
    """Build the cell's workload and its plan, make and check its first call, take its peak memory and FLOPs; a
    failure is its result. The one-time costs are metrics of their own, never inside the timed calls: ``plan_ms``
    (:func:`~harness.measure.timing.build_plans`, before the first call), ``first_call_ms`` (:func:`_first_call`)."""
    faults.point("measure.cell", cell.label)
    device = torch.device(cell.device)
    try:
        entry = attentions.spec(cell.params["attention"])
    except attentions.RegistryError as exc:
        return CellResult("error", str(exc))
    metrics: dict[str, Any] = {"backend": entry.backend, "complexity": entry.caps.complexity}
    reason = cell.skip_reason or entry.unavailable_reason(device)
    if reason:
        return CellResult("unsupported", reason, metrics)
    started = time.perf_counter()
    try:
        with time_limit(ctx.timeout_s), memory_cap(device):
            with allocated_footprint(device) as footprint:  # CUDA: what the cell's calls touch, for the L2 flag
                fn, eager, module = build_workload(cell, device)
                metrics["params"] = sum(q.numel() for q in module.parameters())
                plan_ms = build_plans(module, cell.params["seq_len"], cell.params["batch_size"], device)
                metrics.update({} if plan_ms is None else {"plan_ms": plan_ms})
                out = _first_call(cell, fn, eager, module, metrics)
            metrics.update(cache_flags(footprint.get("working_set_bytes"), device, cell.timing.get("flush_l2")))
            grads = [q.grad for q in module.parameters()]
            _check_finite(f"{cell.params['mode']} output/loss", out)
            _check_finite("gradients", *grads)
            del out, grads
            if "memory" in cell.metrics:
                metrics["peak_mem_bytes"] = peak_memory_bytes(fn, device, calls=3)
            if "flops" in cell.metrics:
                metrics.update(work_metrics(eager))
            if device.type == "cuda" and cell.timing.get("gpu_profile"):  # launch-bound or not, which SDPA ran
                metrics.update(profile_call(fn, device))
    except Exception as exc:  # every failure is a result, never the end of the sweep
        result = classify_exception(exc)
        result.metrics = metrics
        return result
    return Workload(cell, fn, module, metrics, time.perf_counter() - started)


def _first_call(cell: Cell, fn: Callable[[], Tensor], eager: Callable[[], Tensor], module: nn.Module,
                metrics: dict[str, Any]) -> Tensor:
    """The cell's first call, its output, and ``first_call_ms`` in ``metrics``: its wall time (lazy initialisation,
    the allocator's first requests). A compiled cell's first call is the compilation plus one execution, stored as
    ``compile_s`` with the compile check (:func:`~harness.measure.compile.checked_first_call`): ``first_call_ms`` is
    that same call, in ms, so the two say the same of it and a table shows one of them."""
    if compiles(cell.params):
        out, compile_metrics = checked_first_call(fn, eager, module, cell.params["dtype"])
        metrics.update(compile_metrics, first_call_ms=compile_metrics["compile_s"] * 1e3)
        return out
    out, metrics["first_call_ms"] = wall_ms(fn, torch.device(cell.device))
    return out


def measure_cell(cell: Cell, ctx: Context) -> CellResult:
    """Run one cell in this process and return its final status and metrics (``ctx``: time limit, GEMM peak)."""
    return measure_group([cell], ctx)[0]


def measure_group(cells: list[Cell], ctx: Context) -> list[CellResult]:
    """Measure cells that differ only by attention together: each is built and checked alone, then all are timed in
    interleaved rounds (:func:`harness.measure.timing.time_interleaved`), so their ratios survive a drifting machine.

    The timing window's load and the reference kernel's drift are recorded in every timed cell (``noisy`` flag and
    reason, :mod:`harness.measure.quiet`), and the per-round samples are returned with each result (stored raw).
    A cell's time limit covers its own building, checking and timing.
    """
    results = measure_workloads(cells, ctx, _prepare, timed=lambda w: "time" in w.cell.metrics,
                                scope=compile_scope(any(compiles(cell.params) for cell in cells)))
    for result in results:
        m = result.metrics
        if result.status == "ok" and "time_ms_median" in m and "gflops" in m:
            m.update(achieved_rates(m["gflops"], m["gbytes_moved"], m["time_ms_median"]))
            if ctx.gemm_peak_gflops:
                m["gemm_peak_fraction"] = m["gflops_per_s"] / ctx.gemm_peak_gflops
    return results


def describe(result: CellResult) -> str:
    """The progress line of a finished speed cell."""
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m, parts = result.metrics, []
    if "time_ms_median" in m:
        parts.append(f"{m['time_ms_median']:.3g} ms (IQR {m.get('time_ms_iqr', float('nan')):.2g})"
                     + (f" noisy: {m['noisy_reason']}" if m.get("noisy") else ""))
    if "peak_mem_bytes" in m:
        parts.append(f"{m['peak_mem_bytes'] / 2**20:.3g} MiB")
    return "ok " + ", ".join(parts)
