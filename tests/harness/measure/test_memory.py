"""Tests of harness.memory on CPU, against allocations of known size."""

from __future__ import annotations

import pytest
import torch

from harness.measure.memory import peak_memory_bytes

CPU = torch.device("cpu")
FLOAT32_BYTES = 4


@pytest.mark.parametrize("k", [1024, 1000, 1025, 2**20])
def test_single_allocation_is_exact(k: int) -> None:
    # torch's CPU allocator reports the requested size, unrounded, so any k is exact.
    assert peak_memory_bytes(lambda: torch.empty(k), CPU) == FLOAT32_BYTES * k


def test_freed_memory_is_reused_not_summed() -> None:
    big, small = 4096, 1024

    def alloc_free_alloc() -> torch.Tensor:
        a = torch.empty(big)
        del a
        return torch.empty(small)

    assert peak_memory_bytes(alloc_free_alloc, CPU) == FLOAT32_BYTES * max(big, small)


def test_live_allocations_add_up() -> None:
    assert peak_memory_bytes(lambda: (torch.empty(4096), torch.empty(1024)), CPU) == FLOAT32_BYTES * 5120


def test_temporaries_inside_an_op_count() -> None:
    x = torch.randn(128, 128)
    # mm result and softmax result are alive together; the mm result is then freed.
    assert peak_memory_bytes(lambda: torch.softmax(x @ x, dim=-1), CPU) == 2 * FLOAT32_BYTES * 128 * 128


def test_memory_allocated_before_the_call_does_not_count() -> None:
    before = torch.empty(2**20)
    # No Python-scalar operands here: torch wraps those in small tensors, which do count.
    assert peak_memory_bytes(before.zero_, CPU) == 0
    assert peak_memory_bytes(before.clone, CPU) == FLOAT32_BYTES * 2**20


def test_freeing_older_memory_does_not_go_negative() -> None:
    held = [torch.empty(2**16)]
    assert peak_memory_bytes(held.clear, CPU) == 0


def test_repeatable() -> None:
    q = torch.randn(2, 4, 256, 32)

    def attention() -> torch.Tensor:
        return torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q

    first = peak_memory_bytes(attention, CPU)
    assert first > 0
    assert peak_memory_bytes(attention, CPU) == first


def test_unsupported_device_is_rejected() -> None:
    with pytest.raises(ValueError):
        peak_memory_bytes(lambda: None, torch.device("meta"))
