"""Wall-clock timing of one attention call, on CPU or CUDA.

CPU calls are timed with ``torch.utils.benchmark`` (blocked autorange), CUDA calls with CUDA
events so that the asynchronous launch queue does not hide the kernel time.
"""

from __future__ import annotations

import contextlib
import math
import resource
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.benchmark as benchmark

from ..core.tunables import GLIBC_TUNABLES_TIMING, timing_env_active  # noqa: F401  (re-exported: the timing settings)

#: A suite's ``timing`` settings and their defaults (the timed kinds' suites). ``flush_l2``: CUDA only, evict L2 before
#: each timed call so every call starts cold (triton's do_bench); no effect on the CPU. Checked by the types of these
#: defaults (:func:`~harness.core.suite.validate_numbers`) when the suite loads: a nan or inf run time never ends, a
#: fractional count fails in `range` in every cell.
TIMING_DEFAULTS: dict[str, Any] = {"min_run_time_s": 1.0, "min_repeats": 5, "warmup": 2, "flush_l2": False}

# Least size of the buffer zeroed before each CUDA call to evict L2 (as triton's do_bench does): more than twice the
# L2 of any current GPU (H100: 50 MB, H200: 60 MB); a device with a larger L2 gets twice its L2 (:func:`_flush_buffer`).
_L2_FLUSH_BYTES = 256 * 2**20
# Upper bound on CUDA repeats, so that a microsecond kernel does not run for ages.
_MAX_CUDA_REPEATS = 1000
# Calls timed one by one to estimate how many repeats fill min_run_time_s on CUDA.
_CUDA_ESTIMATE_CALLS = 5
#: Fewest rounds of an interleaved timing: each round gives one paired sample per variant, and a ratio's confidence
#: interval needs about ten of them.
MIN_ROUNDS = 10


@dataclass(frozen=True)
class TimingResult:
    """Per-call timings of one function and their summary statistics.

    Attributes:
        times_ms: Per-call time of each sample, in milliseconds. On CPU a sample may average
            several back-to-back calls (``n_calls`` can exceed ``len(times_ms)``).
        median_ms: Median of ``times_ms``.
        iqr_ms: Interquartile range (q75 - q25) of ``times_ms``.
        mean_ms: Mean of ``times_ms``.
        n_calls: Total number of calls that were measured (warm-up excluded).
        threads: ``torch.get_num_threads()`` during the measurement.
        method: ``"torch.utils.benchmark.blocked_autorange"`` or ``"cuda_events"``.
        page_faults_per_call: minor page faults of this process per timed call (interleaved CPU timings; None
            elsewhere). Memory the allocator handed back to the OS and the next call touched again: its time is in
            the samples (e.g. explicit-softmax scores above glibc's trim threshold, re-faulted on every call).
    """

    times_ms: tuple[float, ...]
    median_ms: float
    iqr_ms: float
    mean_ms: float
    n_calls: int
    threads: int
    method: str
    page_faults_per_call: float | None = None


def time_fn(
    fn: Callable[[], object],
    device: torch.device,
    *,
    min_run_time_s: float = 1.0,
    min_repeats: int = 5,
    warmup: int = 2,
    flush_l2: bool = False,
) -> TimingResult:
    """Times ``fn`` on ``device``.

    Args:
        fn: The call to time; takes no arguments, its result is discarded.
        device: Device the call runs on; CUDA devices are timed with CUDA events.
        min_run_time_s: Minimum total measured time.
        min_repeats: Minimum number of samples (needed for a meaningful IQR).
        warmup: Untimed calls made first (allocator, caches, lazy initialisation).
        flush_l2: CUDA only: evict L2 before each call, so that every call starts cold.

    Returns:
        The per-call samples and their statistics.
    """
    if device.type == "cuda":
        times_s, n_calls, method = _time_cuda(fn, device, min_run_time_s, min_repeats, warmup, flush_l2)
    else:
        times_s, n_calls, method = _time_cpu(fn, min_run_time_s, min_repeats, warmup)
    return _summary(times_s, n_calls, method)


def _summary(times_s: list[float], n_calls: int, method: str, faults: int | None = None) -> TimingResult:
    times_ms = tuple(t * 1e3 for t in times_s)
    q25, median, q75 = np.percentile(times_ms, [25, 50, 75])
    return TimingResult(times_ms=times_ms, median_ms=float(median), iqr_ms=float(q75 - q25),
                        mean_ms=float(np.mean(times_ms)), n_calls=n_calls, threads=torch.get_num_threads(),
                        method=method, page_faults_per_call=None if faults is None else faults / max(n_calls, 1))


@contextlib.contextmanager
def _unguarded(i: int) -> Iterator[None]:
    yield


def time_interleaved(
    fns: list[Callable[[], object]],
    device: torch.device,
    *,
    min_run_time_s: float = 1.0,
    min_repeats: int = 5,
    warmup: int = 2,
    flush_l2: bool = False,
    guard: Callable[[int], AbstractContextManager[None]] = _unguarded,
) -> list[TimingResult | Exception]:
    """Times several functions in interleaved rounds, so that a drift of the machine hits all of them alike.

    Each round times a block of calls of every function, in an order rotated by one each round (so no function is
    always first after another), and gives one sample per function: the mean per-call time of its block. Samples of
    the same round are paired: the ratio of two functions' samples in one round is free of whatever the machine did
    on a longer scale. Rounds = max(``min_repeats``, :data:`MIN_ROUNDS`); each function's block is sized so that its
    blocks add up to about ``min_run_time_s`` (at least one call per block).

    Args:
        fns: the calls to time (no arguments).
        device: where they run; CUDA blocks are timed with CUDA events.
        min_run_time_s, min_repeats, warmup, flush_l2: as for :func:`time_fn`.
        guard: ``guard(i)`` wraps every use of ``fns[i]`` (its time limit); an exception inside it ends the timing
            of that function alone.

    Returns:
        Per function, its samples (one per round) and statistics, or the exception that stopped it.
    """
    failed: dict[int, Exception] = {}
    estimate = [0.0] * len(fns)
    for i, fn in enumerate(fns):
        try:
            with guard(i):
                for _ in range(warmup):
                    fn()
                estimate[i] = _block(fn, 1, device, flush=None)
        except Exception as exc:  # the function's failure is its result; the others go on
            failed[i] = exc
    rounds = max(min_repeats, MIN_ROUNDS)
    number = [max(1, round(min_run_time_s / rounds / max(e, 1e-7))) for e in estimate]
    flush = _flush_buffer(device) if flush_l2 and device.type == "cuda" else None
    samples: list[list[float]] = [[] for _ in fns]
    faults = [0] * len(fns)
    for r in range(rounds):
        live = [i for i in range(len(fns)) if i not in failed]
        for i in live[r % len(live):] + live[: r % len(live)] if live else []:  # rotated by one each round
            try:
                with guard(i):
                    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    samples[i].append(_block(fns[i], number[i], device, flush))
                    faults[i] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            except Exception as exc:
                failed[i] = exc
    cpu = device.type != "cuda"
    method = "interleaved_perf_counter" if cpu else "interleaved_cuda_events"
    return [failed.get(i) or _summary(samples[i], number[i] * rounds, method, faults[i] if cpu else None)
            for i in range(len(fns))]


def _block(fn: Callable[[], object], number: int, device: torch.device, flush: torch.Tensor | None) -> float:
    """Mean seconds per call of ``number`` back-to-back calls (CUDA: events around each call, L2 flushed before
    each if ``flush`` is given)."""
    if device.type != "cuda":
        return timeit.Timer(fn).timeit(number) / number  # perf_counter, the clock torch.utils.benchmark uses
    with torch.cuda.device(device):
        torch.cuda.synchronize(device)
        return sum(_cuda_event_times(fn, number, device, flush)) / number


def _cuda_event_times(fn: Callable[[], object], number: int, device: torch.device,
                      flush: torch.Tensor | None) -> list[float]:
    """Seconds of each of ``number`` calls queued back to back, from CUDA events around each (L2 flushed before
    each, outside the timed region, if ``flush`` is given); synchronises once, at the end."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
    for start, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) * 1e-3 for start, end in zip(starts, ends, strict=True)]


def _time_cpu(
    fn: Callable[[], object], min_run_time_s: float, min_repeats: int, warmup: int
) -> tuple[list[float], int, str]:
    """Times ``fn`` on the CPU; returns per-call seconds, calls measured and the method name."""
    for _ in range(warmup):
        fn()
    # Timer's default is one thread, which would silently benchmark on a single core.
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=min_run_time_s)
    times = list(m.times)  # already per call, in seconds
    number = m.number_per_run
    missing = min_repeats - len(times)
    if missing > 0:
        # Slow calls give only 1-2 blocks. Top up with plain timeit blocks of the same size (the
        # same clock Timer uses) rather than Timer.timeit, which adds >= 2 warm-up calls per sample
        # and so would triple the cost of exactly these slow calls.
        raw = timeit.Timer(fn).repeat(repeat=missing, number=number)
        times += [t / number for t in raw]
    return times, len(times) * number, "torch.utils.benchmark.blocked_autorange"


def _time_cuda(
    fn: Callable[[], object],
    device: torch.device,
    min_run_time_s: float,
    min_repeats: int,
    warmup: int,
    flush_l2: bool,
) -> tuple[list[float], int, str]:
    """Times ``fn`` with CUDA events; returns per-call seconds, calls measured and the method name."""
    with torch.cuda.device(device):
        flush = _flush_buffer(device) if flush_l2 else None
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)

        # Estimate the per-call time from a few synchronised calls, then queue all repeats without
        # synchronising in between (as triton's do_bench does): a sync per call would let the GPU
        # idle and fold the host's launch latency into every sample.
        t0 = time.perf_counter()
        for _ in range(_CUDA_ESTIMATE_CALLS):
            if flush is not None:
                flush.zero_()
            fn()
        torch.cuda.synchronize(device)
        estimate_s = max((time.perf_counter() - t0) / _CUDA_ESTIMATE_CALLS, 1e-7)
        n_repeats = min(max(min_repeats, math.ceil(min_run_time_s / estimate_s)), _MAX_CUDA_REPEATS)

        times = _cuda_event_times(fn, n_repeats, device, flush)
    return times, n_repeats, "cuda_events"


def _flush_buffer(device: torch.device) -> torch.Tensor:
    """The buffer zeroed before each timed CUDA call (outside its events) so that the call starts with a cold L2:
    twice the device's L2, and at least :data:`_L2_FLUSH_BYTES`."""
    return torch.empty(max(_L2_FLUSH_BYTES, 2 * (l2_cache_bytes(device) or 0)), dtype=torch.int8, device=device)


def l2_cache_bytes(device: torch.device) -> int | None:
    """The device's L2 cache in bytes (CUDA), or None: on the CPU no cache flag is set (:func:`warm_cache`)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).L2_cache_size) or None


def warm_cache(working_set_bytes: float | None, l2_bytes: int | None, flush_l2: bool) -> bool | None:
    """Whether a timed cell ran from a warm cache: its working set fits in the device's L2 and L2 was not flushed
    between calls (``timing.flush_l2`` off), so every timed call found its data where the previous call left it and a
    flush would change its time (a cold-cache user's first call is slower than the table says). None where that is
    unknown: no L2 size (the CPU: this harness has no flush there, and a CPU's last-level cache is shared with the
    other processes, so it cannot be said to hold the set) or no working set."""
    if l2_bytes is None or working_set_bytes is None or not math.isfinite(working_set_bytes):
        return None
    return not flush_l2 and working_set_bytes <= l2_bytes


def cache_flags(working_set_bytes: float | None, device: torch.device, flush_l2: bool | None) -> dict[str, Any]:
    """A timed cell's cache metrics: ``working_set_bytes``, ``l2_cache_bytes`` and ``warm_cache``
    (:func:`warm_cache`), or none where the flag is unknown (the CPU)."""
    l2 = l2_cache_bytes(device)
    flag = warm_cache(working_set_bytes, l2, bool(flush_l2))
    return {} if flag is None else {"working_set_bytes": working_set_bytes, "l2_cache_bytes": l2, "warm_cache": flag}


@contextlib.contextmanager
def allocated_footprint(device: torch.device) -> Iterator[dict[str, int]]:
    """CUDA: ``working_set_bytes``, the most bytes the block had allocated at once beyond what was allocated when it
    began (a speed cell's module, inputs and its first call's temporaries: every byte its calls touch, since the caching
    allocator hands freed blocks back at the same addresses), set in the yielded dict when the block ends. An upper
    bound where the block holds more at once than a timed call touches (a compiled cell's check keeps the eager calls'
    results beside the compiled one's): such a cell may go unflagged, never flagged wrongly. Nothing on the CPU
    (:func:`warm_cache`)."""
    found: dict[str, int] = {}
    if device.type != "cuda":
        yield found
        return
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield found
    found["working_set_bytes"] = torch.cuda.max_memory_allocated(device) - base


def wall_ms(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """(result, milliseconds) of one call of ``fn``, the device synchronised after it (a first call or a one-time
    cost: no timing loop, since it happens once). The device is synchronised before it too, so that work queued
    earlier (building the module and its inputs) is not counted."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize(device)
    return out, (time.perf_counter() - started) * 1e3


def build_plans(module: torch.nn.Module, seq_len: int, batch_size: int, device: torch.device) -> float | None:
    """Milliseconds to build the plans of ``module`` and its submodules for inputs of ``seq_len`` × ``batch_size``
    (``plan_ms``), or None where none defines ``build_plan``.

    The contract: an attention module MAY define ``build_plan(seq_len: int, batch_size: int) -> bool | None``, which
    builds and caches whatever its forward needs that depends only on the shapes and the module's device (a
    FlexAttention ``BlockMask``), and returns False when it had nothing to build (a pattern variant on its ``blocks``
    backend). A cell calls it once, here, before its first call, so that the plan is a one-time cost of its own and
    never inside a steady-state time; every module of a model that has one is called (an encoder's layers), and the
    total is their sum (None when none built anything)."""
    planners = [m for m in module.modules() if callable(getattr(m, "build_plan", None))]
    if not planners:
        return None
    built, ms = wall_ms(lambda: [m.build_plan(seq_len, batch_size) is not False for m in planners], device)
    return ms if any(built) else None
