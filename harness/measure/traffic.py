"""Bytes a call moves, and the memory bandwidth of a device: the other axis of the roofline.

What the byte count counts (the operator-level traffic of the eager call, the analogue of summing every kernel's
DRAM traffic with no cache reuse between kernels):
- every aten op the call dispatches (forward and backward) reads each tensor operand once and writes each result
  once: bytes = Σ over ops of (operand bytes + result bytes);
- a view (``transpose``, ``view``, ``expand``, a slice, ``_unsafe_view``: any op whose result shares storage with
  an operand without mutating it) moves nothing;
- a broadcast operand (stride 0) is read once per distinct element, not once per use;
- an in-place op reads and writes its target (counted as operand and result);
- a higher-order op (FlexAttention) counts as one fused kernel: its tensor operands and results once each. It runs
  with every dispatch mode off (torch's FLOP counter has no rule for it and refuses it), so the ops of its eager
  implementation are not counted either: its FLOPs are the formula given for it (``hop_flops``), in ``flops``.
It is an upper bound on what the hardware moves (caches serve some operands again) and the count of the eager
graph: a compiled cell's fused kernels skip intermediate round trips, so its true intensity is higher than the one
reported beside it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from .timing import time_fn

# Size of each buffer of the bandwidth copy: far beyond any CPU's last-level cache and a GPU's L2.
_BANDWIDTH_BYTES = 256 * 2**20


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements of ``t`` (broadcast dimensions once; sparse: stored values and indices)."""
    if t.layout != torch.strided:
        parts = (t.values(), t.crow_indices(), t.col_indices()) if t.layout == torch.sparse_csr else (
            t._values(), t._indices())
        return sum(p.numel() * p.element_size() for p in parts)
    distinct = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return distinct * t.element_size()


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return None


class TrafficCounter(TorchDispatchMode):
    """Counts the bytes every dispatched aten op reads and writes (see the module docstring), in ``total``."""

    #: FlexAttention is a higher-order op: without this, the mode refuses it (and the failure leaves torch's eager
    #: FlexAttention path, which runs through torch.compile, broken for the rest of the process).
    supports_higher_order_operators = True

    def __init__(self, hop_flops: Mapping[Any, Callable[..., int]] | None = None) -> None:
        super().__init__()
        self.total = 0
        #: FLOPs of the higher-order ops, from ``hop_flops`` (op -> formula over its real arguments).
        self.flops = 0
        self.hop_flops = dict(hop_flops or {})

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):  # one fused kernel: nothing is a view, no other mode sees it
            with _disable_current_modes():
                out = func(*args, **kwargs)
            tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.total += sum(tensor_bytes(t) for t in tensors)
            if func in self.hop_flops:
                self.flops += self.hop_flops[func](*args, **kwargs)
            return out
        out = func(*args, **kwargs)
        operands = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        results = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if func.is_view or (not func._schema.is_mutable and _aliases(results, operands)):
            return out
        self.total += sum(tensor_bytes(t) for t in operands) + sum(tensor_bytes(t) for t in results)
        return out


def _aliases(results: list[torch.Tensor], operands: list[torch.Tensor]) -> bool:
    """Whether a result shares storage with an operand (a view that the schema does not mark as one)."""
    storages = {s for s in map(_storage, operands) if s}
    return any(_storage(t) in storages for t in results)


def count_bytes(fn: Callable[[], object]) -> int:
    """Bytes one call of ``fn`` moves at the operator level (it is run exactly once)."""
    with TrafficCounter() as counter:
        fn()
    return counter.total


def measure_memory_bandwidth_gbs(device: torch.device) -> float:
    """Achieved GB/s of copying between two 256 MiB buffers on ``device`` (bytes read + bytes written per second,
    the STREAM "copy" convention): the slanted roof of the roofline.

    Each call copies the next quarter of the buffers in turn (64 MiB, still far beyond any cache: the quarter copied
    before it is evicted by the three after), and the roof is the fastest round, for the reason the GEMM peak is
    (:func:`harness.measure.flops.measure_gemm_peak_gflops`): a whole 256 MiB copy outlasts another process's time
    slices, so under load no round of it ran alone."""
    src = torch.ones(_BANDWIDTH_BYTES // 4, device=device)
    dst = torch.zeros_like(src)  # touched now: a first copy into fresh pages would time the page faults
    quarters = itertools.cycle(list(zip(dst.chunk(4), src.chunk(4), strict=True)))

    def copy() -> None:
        to, source = next(quarters)
        to.copy_(source)

    timing = time_fn(copy, device, min_run_time_s=0.5)
    return 2 * (_BANDWIDTH_BYTES // 4) / (min(timing.times_ms) * 1e-3) / 1e9
