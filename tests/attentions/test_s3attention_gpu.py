"""S3Attention's GPU layout, checked on a machine without a GPU: the operations one forward+backward dispatches, on
the meta device (shapes only, no data), where the layer takes the same branches as on CUDA.

What the GPU wants of a layer is few kernels (each costs a launch: a layer of many small ones is bound by the host)
and no host round trips (a device or dtype copy of the same data back and forth). A dispatched ATen op that is not a
view is at most a kernel or two on CUDA, so their count is the CPU-checkable proxy; the GPU check (``make gpu-check``)
counts the CUDA kernels themselves with the profiler. The bound is the count of this layout: an added op fails here.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

import attentions

#: Non-view ATen ops of one fwd+bwd of the GPU layout at the speed suite's GPU shape (B 4, D 512, H 8), training mode
#: (three dropouts), float32, SDPA and dropout counted as CUDA runs them (:class:`_AsOnCuda`): the layout's count, the
#: regression bound. History: 119 with the row attention in framework ops; 96 with it one SDPA call; 94 with one
#: gather of the projection's rows; 92 without the copies before the column softmax and after the complex product;
#: 86 of those 92 counted with dropout fused as on CUDA (the same layout; the meta device decomposes dropout).
MAX_OPS = 86
#: Ops that move no data (views, and the split/unbind that only make views).
_NO_DATA = {"aten.detach", "aten._unsafe_view", "aten.split_with_sizes", "aten.split", "aten.unbind",
            "aten.promote_types"}


class _OpLog(TorchDispatchMode):
    """Counts the non-view ops dispatched, and every dtype or device copy that undoes an earlier one."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.round_trips: list[str] = []
        self._copied_from: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> (dtype, device) it was copied from

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if func.is_view or name in _NO_DATA:
            return out
        self.ops[name] += 1
        if name == "aten._to_copy":
            src = args[0]
            origin = self._copied_from.get(src)
            if origin is not None and origin == (out.dtype, out.device):
                self.round_trips.append(f"{origin} -> {(src.dtype, src.device)} -> back, shape {tuple(out.shape)}")
            self._copied_from[out] = (src.dtype, src.device)
        return out


class _AsOnCuda(TorchFunctionMode):
    """SDPA and dropout on the meta device as CUDA runs them, where torch itself decomposes them into ops no GPU runs.

    SDPA: one fused kernel forward and one backward (the memory-efficient kernel, which takes a mask and float32;
    flash, bf16 without a mask, counts the same), not the math decomposition's dozen. Dropout: CUDA's fused
    ``native_dropout`` (one kernel each way), not empty + bernoulli + div + mul."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout:
            x, p = args[0], kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return torch.native_dropout(x, p, training)[0] if training and p > 0 else func(*args, **kwargs)
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v = args[:3]
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, kwargs.get("attn_mask"), True, kwargs.get("dropout_p", 0.0))[0]


def _fwd_bwd_ops(name: str, dtype: torch.dtype, n: int = 1024) -> _OpLog:
    torch.manual_seed(0)
    module = attentions.build(name, dim=512, heads=8, max_seq_len=n).train().to("meta", dtype)
    x = torch.randn(4, n, 512, device="meta", dtype=dtype, requires_grad=True)
    grad = torch.randn(4, n, 512, device="meta", dtype=dtype)
    module(x).backward(grad)  # first call: lazily built state, as a warm-up
    for p in module.parameters():  # as the speed suite's fwd+bwd: gradients set to None, nothing accumulated
        p.grad = None
    with _AsOnCuda(), _OpLog() as log:
        module(x).backward(grad)
    return log


@pytest.mark.parametrize("name", ["s3attention", "s3attention_released"])
def test_one_gpu_layout_step_dispatches_at_most_the_bound_and_no_round_trip(name: str) -> None:
    log = _fwd_bwd_ops(name, torch.float32)
    total = sum(log.ops.values())
    assert total <= MAX_OPS, f"{total} ops > {MAX_OPS}: {log.ops.most_common()}"
    assert log.ops["aten._to_copy"] == 0, "a float32 layer casts nothing"
    assert not log.round_trips


def test_a_bf16_layer_casts_only_into_and_out_of_its_float32_fft() -> None:
    """bf16 has no FFT of its precision: the Fourier convolution upcasts its input and its weights once and casts the
    result back once (and backward the same), never the same data back and forth."""
    log = _fwd_bwd_ops("s3attention", torch.bfloat16)
    assert not log.round_trips
    assert log.ops["aten._to_copy"] <= 7, log.ops["aten._to_copy"]


def test_the_count_sees_an_added_op() -> None:
    """The proxy can fail: the same layer with one more elementwise op in its forward counts more."""
    base = sum(_fwd_bwd_ops("s3attention", torch.float32).ops.values())
    layer_cls = type(attentions.build("s3attention", dim=32, heads=2, max_seq_len=16))
    original = layer_cls.forward
    try:
        layer_cls.forward = lambda self, x, mask=None: original(self, x * 1.0, mask)  # type: ignore[method-assign]
        assert sum(_fwd_bwd_ops("s3attention", torch.float32).ops.values()) > base
    finally:
        layer_cls.forward = original  # type: ignore[method-assign]
