"""S3Attention's GPU layout, checked on a machine without a GPU: the operations one forward+backward dispatches, on
the meta device (shapes only, no data), where the layer takes the same branches as on CUDA (``tests.attentions.oplog``).

What the GPU wants of a layer is few kernels (each costs a launch: a layer of many small ones is bound by the host)
and no host round trips (a device or dtype copy of the same data back and forth). The bound is the count of this
layout: an added op fails here.
"""

from __future__ import annotations

import pytest
import torch

import attentions
from tests.attentions.oplog import fwd_bwd_ops

#: Non-view ATen ops of one fwd+bwd of the GPU layout at the speed suite's GPU shape (B 4, D 512, H 8), training mode
#: (three dropouts), float32, SDPA and dropout counted as CUDA runs them (``tests.attentions.oplog.AsOnCuda``): the
#: layout's count, the regression bound. History: 119 with the row attention in framework ops; 96 with it one SDPA
#: call; 94 with one gather of the projection's rows; 92 without the copies before the column softmax and after the
#: complex product; 86 of those 92 counted with dropout fused as on CUDA (the meta device decomposes dropout).
MAX_OPS = 86


@pytest.mark.parametrize("name", ["s3attention", "s3attention_released"])
def test_one_gpu_layout_step_dispatches_at_most_the_bound_and_no_round_trip(name: str) -> None:
    log = fwd_bwd_ops(name, torch.float32)
    total = sum(log.ops.values())
    assert total <= MAX_OPS, f"{total} ops > {MAX_OPS}: {log.ops.most_common()}"
    assert log.ops["aten._to_copy"] == 0, "a float32 layer casts nothing"
    assert not log.round_trips


def test_a_bf16_layer_casts_only_into_and_out_of_its_float32_fft() -> None:
    """bf16 has no FFT of its precision: the Fourier convolution upcasts its input and its weights once and casts the
    result back once (and backward the same), never the same data back and forth."""
    log = fwd_bwd_ops("s3attention", torch.bfloat16)
    assert not log.round_trips
    assert log.ops["aten._to_copy"] <= 7, log.ops["aten._to_copy"]


def test_the_count_sees_an_added_op() -> None:
    """The proxy can fail: the same layer with one more elementwise op in its forward counts more."""
    base = sum(fwd_bwd_ops("s3attention", torch.float32).ops.values())
    layer_cls = type(attentions.build("s3attention", dim=32, heads=2, max_seq_len=16))
    original = layer_cls.forward
    try:
        layer_cls.forward = lambda self, x, mask=None: original(self, x * 1.0, mask)  # type: ignore[method-assign]
        assert sum(fwd_bwd_ops("s3attention", torch.float32).ops.values()) > base
    finally:
        layer_cls.forward = original  # type: ignore[method-assign]
