"""Peak memory allocated by one call, on CPU or CUDA, net of what was allocated before it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

# The CPU method profiles every measured call; without this, kineto prints two log lines per profiled call. Set before
# the first profiler session (kineto reads it when it initialises), whoever imports this module first.
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
# Name the profiler gives to its allocation/free records.
_MEMORY_EVENT = "[memory]"


def peak_memory_bytes(fn: Callable[[], object], device: torch.device, calls: int = 1) -> int:
    """Returns the peak number of bytes allocated during one call of ``fn`` (the least over ``calls`` calls).

    The figure is net of what was allocated before the call: the high-water mark of
    (bytes allocated now - bytes allocated when the call started), and never below 0. It counts
    tensor memory obtained through PyTorch's allocators, not memory private to libraries (oneDNN
    scratch space, BLAS workspaces) or to the Python interpreter.

    Args:
        fn: The call to measure; takes no arguments. It is run ``calls`` times.
        device: ``cpu`` or ``cuda``.
        calls: measure this many calls and return the least peak. A call sometimes allocates a little more
            than the layer needs (a cache filled on first use, garbage of earlier calls collected inside the
            window): over two identical benchmark runs, single-call backward peaks differed in a few cells, while
            the least of three calls is the layer's own requirement and repeats exactly (measured: docs/measuring.md,
            "Peak memory").

    Returns:
        Peak net bytes.

    Raises:
        ValueError: If ``device`` is neither a CPU nor a CUDA device.
    """
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"peak_memory_bytes supports cpu and cuda devices, not {device}")
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    return min(allocated_by(fn, device)[1] for _ in range(calls))


def retained_memory_bytes(fn: Callable[[], object], device: torch.device) -> tuple[object, int]:
    """(``fn()``'s result, the bytes allocated during the call and still allocated at its end): what the result
    holds, as the allocator counts it (a decoding state: its caches and sums, with the allocator's rounding on CUDA).
    The result is kept alive until the count is taken."""
    result, _, retained = allocated_by(fn, device)
    return result, retained


def prefilled_state(module: torch.nn.Module, prompt: torch.Tensor, capacity: int,
                    device: torch.device) -> tuple[torch.Tensor, Any, int]:
    """(the output, the decoding state, the bytes the state holds as the allocator counts them) of a causal layer's
    ``prefill`` over ``prompt`` into a state for ``capacity`` tokens: what the prefill allocated and still holds at its
    end, less its output. The decode kind's ``state_bytes`` and the recall kind's state sizes are this figure."""

    def call() -> tuple[torch.Tensor, Any]:
        with torch.inference_mode():
            return module.prefill(prompt, None, capacity=capacity)

    (output, state), retained = retained_memory_bytes(call, device)
    return output, state, retained - output.numel() * output.element_size()


def allocated_by(fn: Callable[[], object], device: torch.device) -> tuple[object, int, int]:
    """(``fn()``'s result, the peak net bytes during the call, the net bytes still allocated at its end), both net
    of what was allocated before the call (see :func:`peak_memory_bytes`)."""
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"memory is measured on cpu and cuda devices, not {device}")
    return _allocated_cpu(fn) if device.type == "cpu" else _allocated_cuda(fn, device)


def _allocated_cuda(fn: Callable[[], object], device: torch.device) -> tuple[object, int, int]:
    """From the CUDA caching allocator's own counters."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = max(0, torch.cuda.max_memory_allocated(device) - base)
    return result, peak, max(0, torch.cuda.memory_allocated(device) - base)


def _allocated_cpu(fn: Callable[[], object]) -> tuple[object, int, int]:
    """Replayed from the profiler's allocation records.

    tracemalloc sees nothing of torch's allocator and ru_maxrss cannot be reset, but the profiler
    records every CPU allocation (+bytes) and free (-bytes) with a timestamp, which is exact and
    repeatable: the same call gives the same number every time.

    The call runs on one intra-op thread: with several, the records of parallel regions (per-thread
    scratch buffers, autograd's frees) interleave in a different order from run to run and the running
    sum's peak moved between identical runs (measured on a backward pass: docs/measuring.md, "Peak memory"). One
    thread makes the replay deterministic; the tensors a layer keeps, which make up the peak, do not depend on it.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
            result = fn()
    finally:
        torch.set_num_threads(threads)
    # The raw records are read from the kineto results: ``prof.events()`` folds each record into
    # the op that encloses it (as ``cpu_memory_usage``, the net of the op) and keeps "[memory]"
    # events only for records outside every op, so the temporaries of an op would be lost there.
    records = [
        (event.start_ns(), event.nbytes())
        for event in prof.profiler.kineto_results.events()
        if event.name() == _MEMORY_EVENT and event.device_type() == torch.autograd.DeviceType.CPU
    ]
    # The records come in time order; the stable sort only guards that assumption.
    records.sort(key=lambda record: record[0])
    current = peak = 0
    for _, nbytes in records:
        current += nbytes
        peak = max(peak, current)
    return result, peak, max(0, current)
