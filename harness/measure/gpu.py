"""What a speed cell records on a GPU besides its time: the GPU's clocks and throttle reasons (NVML), how busy the GPU
was during a call and how many kernels the call launched (the profiler), which SDPA backend ran, and the time of the
call captured as a CUDA graph.

Why: a variant whose call launches a hundred small kernels is bound by the host's launch rate, not by the GPU, and
its time says little about the GPU; ``gpu_busy_fraction`` (kernel time over wall time) and ``cuda_kernels_per_call``
show it, and the graph time (launch cost gone) shows what the GPU itself needs. A GPU that throttles (thermal or
power slowdown) times slower for reasons of its own: the run flags it.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .timing import TimingResult, time_fn

#: SDPA backends a cell can pin (``sdpa_backend`` axis), by the name of ``torch.nn.attention.SDPBackend`` member.
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "math": "MATH"}
#: Profiler op names of each SDPA backend (CPU and CUDA spellings), in the order they are looked for.
_SDPA_OPS = (("cudnn", "_scaled_dot_product_cudnn_attention"), ("flash", "_scaled_dot_product_flash_attention"),
             ("efficient", "_scaled_dot_product_efficient_attention"), ("math", "_scaled_dot_product_attention_math"),
             ("flash", "_flash_attention_forward"), ("efficient", "_efficient_attention_forward"))
#: NVML throttle reasons that mean the GPU slowed itself down (not idle, not an application clock setting).
_SLOWDOWNS = {"hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
              "hw_power_brake_slowdown": 0x80, "sw_power_cap": 0x4}


@contextlib.contextmanager
def pinned_sdpa(backend: str | None) -> Iterator[None]:
    """Run the block with SDPA restricted to ``backend`` (a key of :data:`SDPA_BACKENDS`); None or "auto": torch's
    own choice."""
    if backend in (None, "auto"):
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend])):
        yield


@functools.cache
def _nvml() -> Any | None:
    """The initialised ``pynvml`` module (package nvidia-ml-py), or None where it or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  (no package, no driver, no permission: no clock figures)
        return None
    return pynvml


def gpu_state(device: torch.device) -> dict[str, Any]:
    """Clocks (MHz), temperature (°C), power (W) and the active slowdown reasons of ``device`` now, from NVML; {}
    where NVML is unavailable or the device is not a CUDA GPU."""
    nvml = _nvml() if device.type == "cuda" else None
    if nvml is None:
        return {}
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return {
            "gpu_sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "gpu_mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "gpu_temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "gpu_power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "gpu_slowdowns": ",".join(name for name, bit in _SLOWDOWNS.items() if reasons & bit),
        }
    except Exception:  # noqa: BLE001  (a query this driver does not support: no figures rather than a failed cell)
        return {}


def slowdown_reason(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The noise reason for a group timed between two :func:`gpu_state` readings ("" when the GPU did not slow)."""
    seen = sorted({r for state in (before, after) for r in str(state.get("gpu_slowdowns", "")).split(",") if r})
    return f"GPU slowed down ({', '.join(seen)})" if seen else ""


def profile_call(fn: Callable[[], object], device: torch.device, calls: int = 3) -> dict[str, Any]:
    """Run ``fn`` ``calls`` times under the profiler (after one untimed call) and return the GPU busy fraction
    (the union of kernel intervals over the wall time of the calls), CUDA kernels launched per call and the SDPA
    backend that ran ("none" when no SDPA op did). On the CPU only the SDPA backend is returned."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fn()
    if cuda:
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.events()
    names = {e.name for e in events}
    backend = next((b for b, op in _SDPA_OPS if any(op in n for n in names)), "none")
    out: dict[str, Any] = {"sdpa_backend_used": backend}
    if not cuda:
        return out
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return out
    spans = [(e.time_range.start, e.time_range.end) for e in kernels]
    host = [(e.time_range.start, e.time_range.end) for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    out.update(gpu_busy_fraction=busy_fraction(spans, host), cuda_kernels_per_call=len(kernels) / calls)
    return out


def busy_fraction(kernels: list[tuple[float, float]], host: list[tuple[float, float]]) -> float:
    """The time some kernel ran (the union of the ``kernels`` intervals: streams may overlap) over the wall time from
    the first to the last event of either list (the host's op intervals included: a GPU waiting for launches is
    idle)."""
    if not kernels:
        return float("nan")
    busy, end = 0.0, -float("inf")
    for start, stop in sorted(kernels):
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    first = min(s for s, _ in kernels + host)
    last = max(e for _, e in kernels + host)
    return busy / (last - first) if last > first else float("nan")


def capture_graph(fn: Callable[[], object], device: torch.device, warmup: int = 3) -> Callable[[], object]:
    """``fn`` captured as a CUDA graph (warmed up on a side stream first, as torch requires): a call replays it.

    The capture records the kernels of one call with their memory; a replay launches them all at once, so the
    host's per-kernel launch cost is gone. A call that synchronises with the host, or allocates in a way a graph
    cannot hold, raises here, which is the cell's ``cuda_graph`` result.
    """
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def time_graph(fn: Callable[[], object], device: torch.device, timing: dict[str, Any]) -> dict[str, Any]:
    """``graph_time_ms_median`` / ``_iqr`` of ``fn`` captured as a CUDA graph (:func:`capture_graph`), or
    ``graph_error`` (one line) where it cannot be captured."""
    try:
        replay = capture_graph(fn, device)
        result: TimingResult = time_fn(replay, device, **{k: v for k, v in timing.items()
                                                          if k in ("min_run_time_s", "min_repeats", "warmup",
                                                                   "flush_l2")})
    except Exception as exc:  # noqa: BLE001  (a call that cannot be captured: recorded, the cell stays ok)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"graph_error": f"{type(exc).__name__}: {message}"[:300]}
    return {"graph_time_ms_median": result.median_ms, "graph_time_ms_iqr": result.iqr_ms}


def reference_kernel_ms(device: torch.device, repeats: int = 15) -> float:
    """Median time (ms) of a fixed GPU reference kernel (a 2048² float32 matrix product, CUDA events): the GPU's speed
    now, as :func:`harness.measure.quiet.calibrate` is the CPU's."""
    a = torch.ones(2048, 2048, device=device)
    out = torch.empty_like(a)
    torch.mm(a, a, out=out)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, a, out=out)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
