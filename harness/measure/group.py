"""Time a group of prepared workloads together: interleaved rounds, the machine's load and the reference kernel's
drift around them, the GPU's state, each call as a CUDA graph where asked. Shared by the kinds that time (speed,
approximation); each builds its own workloads.

While a group is timed, whoever listens in this process (:func:`listening`: the run's console) hears after each
timed block how far the group has got and can ask the other processes' load so far: a group of many variants takes
minutes, and an ETA or a busy machine that waits for its end comes late."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..core.cell import Cell, CellResult, CellTimeout, Context, classify_exception, memory_cap, time_limit
from ..core.tunables import release_freed_memory, timing_env_active
from .compile import compiles, no_recompiles
from .flops import measure_gemm_peak_gflops
from .gpu import gpu_state, slowdown_reason, time_graph
from .quiet import calibrate, cpu_times, load_between, noise_flags
from .timing import MIN_ROUNDS, time_interleaved
from .traffic import measure_memory_bandwidth_gbs


def is_time_cell(cell: Cell) -> bool:
    """A cell the timed kinds time (its metrics name ``time``)."""
    return "time" in cell.metrics


def timing_env(cells: list[Cell], device: torch.device) -> dict[str, Any]:
    """What a run of timed cells measures of the machine once, before the first: the GEMM peak and the memory
    bandwidth (the roofline's ceilings) where FLOPs are counted, and the reference kernel every timed group's drift is
    compared with (:func:`harness.measure.quiet.calibrate`; a GPU kernel on a GPU)."""
    env: dict[str, Any] = {}
    if any("flops" in c.metrics and "time" in c.metrics for c in cells):
        env["gemm_peak_gflops"] = measure_gemm_peak_gflops(device)
        env["memory_bandwidth_gbs"] = measure_memory_bandwidth_gbs(device)
    if any("time" in c.metrics for c in cells):
        env["calibration_ms"] = calibrate(device)
    return env


@dataclass
class Workload:
    """A cell built, checked finite and measured for memory and FLOPs, ready to be timed with its group."""

    cell: Cell
    fn: Callable[[], Tensor]
    module: nn.Module
    metrics: dict[str, Any]
    spent_s: float  # of its time limit
    result: CellResult | None = None  # set by the group's timing; None = ok, untimed (memory and FLOPs only)


#: A listener hears (the share of the group's timed blocks done, a call giving other processes' CPU use in cores
#: since the group's timing began, None where unknown).
Listener = Callable[[float, Callable[[], float | None]], None]
_LISTENERS: list[Listener] = []


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Inside, ``listener`` hears every timed group of this process after each of its timed blocks."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def _blocks(n: int, timing: dict[str, Any]) -> int:
    """How many timed blocks :func:`~harness.measure.timing.time_interleaved` runs for ``n`` functions: a warm-up
    block each, then one per function per round."""
    return n * (1 + max(int(timing.get("min_repeats", MIN_ROUNDS)), MIN_ROUNDS))


def time_group(timed: list[Workload], ctx: Context) -> None:
    """Time the workloads interleaved and set each one's result (ok with samples, or the failure)."""
    device = torch.device(timed[0].cell.device)
    blocks = [0, 0]  # done, expected (set below, once the timing settings are read)

    @contextlib.contextmanager
    def guard(i: int) -> Iterator[None]:
        left = None if not ctx.timeout_s else ctx.timeout_s - timed[i].spent_s
        if left is not None and left <= 0:
            raise CellTimeout(f"cell exceeded its {ctx.timeout_s:g} s time limit")
        started = time.perf_counter()
        try:
            with time_limit(left):
                yield
        except CellTimeout:  # what is left of the limit fired: the message names the cell's limit
            raise CellTimeout(f"cell exceeded its {ctx.timeout_s:g} s time limit") from None
        finally:
            timed[i].spent_s += time.perf_counter() - started
            blocks[0] += 1
            for listener in list(_LISTENERS):
                # what is printed about a timing must never become the timed cell's failure
                with contextlib.suppress(Exception):
                    listener(blocks[0] / blocks[1], lambda: load_between(window, cpu_times())["load_other_cores"])

    timing = dict(timed[0].cell.timing)
    graphs = bool(timing.pop("cuda_graph", False)) and device.type == "cuda"
    timing.pop("gpu_profile", None)
    blocks[1] = _blocks(len(timed), timing)
    before = calibrate(device) if ctx.calibration_ms else None
    state = gpu_state(device)
    window = cpu_times()
    with memory_cap(device), no_recompiles(any(compiles(w.cell.params) for w in timed)):
        timings = time_interleaved([w.fn for w in timed], device, guard=guard, **timing)
    load = load_between(window, cpu_times())
    state_after = gpu_state(device)
    # the faster of the reference before and after the group: a slowdown that lasted through the group shows in
    # both, a transient of a few milliseconds in one (see harness.measure.quiet)
    calibration = min(before, calibrate(device)) / ctx.calibration_ms if before and ctx.calibration_ms else None
    flags = noise_flags(load, calibration, slowdown_reason(state, state_after))
    flags.update({k: v for k, v in state_after.items()})
    group = uuid.uuid4().hex[:12]
    for w, t in zip(timed, timings, strict=True):
        if isinstance(t, Exception):
            w.result = classify_exception(t)
            w.result.metrics = w.metrics
            continue
        q25, q75 = np.percentile(t.times_ms, [25, 75])
        w.metrics.update(time_ms_median=t.median_ms, time_ms_iqr=t.iqr_ms, time_ms_q25=float(q25),
                         time_ms_q75=float(q75), time_ms_mean=t.mean_ms, n_calls=t.n_calls, rounds=len(t.times_ms),
                         threads=t.threads, timing_group=group, timing_method=t.method,
                         **({} if t.page_faults_per_call is None else {"page_faults_per_call": t.page_faults_per_call}),
                         steps_per_s=1000.0 / t.median_ms if t.median_ms > 0 else float("nan"), **flags)
        if graphs:  # the same call captured as a CUDA graph, timed after the eager rounds
            with memory_cap(device):
                w.metrics.update(time_graph(w.fn, device, timing))
        w.result = CellResult("ok", "", w.metrics, samples=list(t.times_ms))


def measure_workloads(cells: list[Cell], ctx: Context, prepare: Callable[[Cell, Context], Workload | CellResult], *,
                      timed: Callable[[Workload], bool] = lambda w: True,
                      scope: contextlib.AbstractContextManager[object] | None = None) -> list[CellResult]:
    """The tail every timed kind's group shares: prepare each cell alone (build, check, untimed metrics), time the
    workloads ``timed`` selects in interleaved rounds (:func:`time_group`), drop the workloads and give the group's
    memory back (:func:`release_group_memory`), so that the next group starts from what it needs. ``scope`` wraps
    preparing and timing (the compile axis's settings). Returns each cell's result, in the cells' order."""
    with scope if scope is not None else contextlib.nullcontext():
        prepared = [prepare(cell, ctx) for cell in cells]
        to_time = [w for w in prepared if isinstance(w, Workload) and timed(w)]
        if to_time:
            time_group(to_time, ctx)
    out = [item if isinstance(item, CellResult) else item.result or CellResult("ok", "", item.metrics)
           for item in prepared]
    del prepared, to_time  # the workloads' tensors and modules, before the memory is given back
    if cells:
        release_group_memory(cells[0].device)
    return out


def release_group_memory(device: str) -> None:
    """After a group, once its workloads are dropped: give what it freed back (the CUDA cache; on the CPU, under the
    timing malloc settings, which never trim during a group, glibc's free memory), so the next group starts from the
    memory it needs, not the largest group's so far."""
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    elif timing_env_active():
        release_freed_memory()
