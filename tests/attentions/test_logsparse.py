"""LogSparse attention (LogTrans) against its definition: a dense causal softmax restricted to the log pattern."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions.logsparse import LogSparseAttention, log_offsets

D, H = 16, 2


def _build(**overrides: object) -> LogSparseAttention:
    torch.manual_seed(0)
    return attentions.build("logsparse", **{"dim": D, "heads": H, "max_seq_len": 64, "dropout": 0.0,  # type: ignore[return-value]
                                            **overrides}).double().eval()


def causal_reference(module: LogSparseAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Dense [N, N] scores from the convolution written as a sum over taps, the pattern j = i or i − j a power of 2,
    padded keys excluded (a query keeps itself), softmax, values, output projection: the layer's definition, causal
    as it is (tests/attentions/test_causal.py reads it as the causal form's quadratic masked form)."""
    b, n, _ = x.shape
    if mask is not None:
        x = x * mask[..., None]
    w, bias, kk = module.qk.weight, module.qk.bias, module.cfg.kernel  # [2D, D, k]
    qk = bias + sum(torch.nn.functional.pad(x, (0, 0, kk - 1 - s, s))[:, : n] @ w[:, :, s].T
                    for s in range(kk))  # tap s reads x[t - (k - 1) + s]
    q, k = qk.chunk(2, dim=-1)
    v = module.v(x)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    gap = i - j
    allowed = (gap == 0) | ((gap > 0) & ((gap & (gap - 1)) == 0))  # itself, or a power of 2 back
    out = torch.zeros(b, n, D, dtype=x.dtype)
    dh = D // H
    for head in range(H):
        sl = slice(head * dh, (head + 1) * dh)
        scores = q[:, :, sl] @ k[:, :, sl].transpose(1, 2) / dh**0.5  # [B, N, N]
        keep = allowed.expand(b, n, n)
        if mask is not None:
            keep = keep & (mask[:, None, :] | (gap == 0))
        scores = scores.masked_fill(~keep, float("-inf"))
        out[:, :, sl] = scores.softmax(-1) @ v[:, :, sl]
    return module.out(out)


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("padded", [False, True])
def test_the_layer_equals_the_dense_log_pattern(kernel: int, padded: bool) -> None:
    module = _build(kernel=kernel)
    x = torch.randn(2, 37, D, dtype=torch.float64)
    mask = None
    if padded:
        mask = torch.ones(2, 37, dtype=torch.bool)
        mask[1, 20:] = False
        mask[0, 5] = False  # padding inside the sequence too
    got, want = module(x, mask), causal_reference(module, x, mask)
    keep = torch.ones(2, 37, dtype=torch.bool) if mask is None else mask
    torch.testing.assert_close(got[keep], want[keep])


def test_offsets_are_powers_of_two_below_the_length() -> None:
    assert log_offsets(1).tolist() == [0] and log_offsets(9).tolist() == [0, 1, 2, 4, 8]
    assert log_offsets(8).tolist() == [0, 1, 2, 4]


def test_a_cell_never_sees_the_future() -> None:
    module = _build()
    x = torch.randn(1, 30, D, dtype=torch.float64)
    changed = x.clone()
    changed[0, 20:] += 5.0
    torch.testing.assert_close(module(x)[0, :20], module(changed)[0, :20])


def test_the_causal_flag_builds_the_same_layer() -> None:
    """The pattern is causal either way (the paper defines no other): causal=True changes no output."""
    x = torch.randn(2, 23, D, dtype=torch.float64)
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, 3] = False
    torch.testing.assert_close(_build(causal=True)(x, mask), _build(causal=False)(x, mask), rtol=0, atol=0)


@torch.no_grad()
def test_the_decoding_state_holds_the_last_inputs_of_the_convolution() -> None:
    """After a prompt shorter than k − 1 the convolution's window still starts with its zero left padding, and each
    step shifts it by one input."""
    module = _build(kernel=4)
    x = torch.randn(1, 6, D, dtype=torch.float64)
    _, state = module.prefill(x[:, :2], None, capacity=6)
    torch.testing.assert_close(state.recent[0], torch.cat([torch.zeros(1, D, dtype=x.dtype), x[0, :2]]))
    for t in range(2, 5):
        _, state = module.step(x[:, t : t + 1], state)
    torch.testing.assert_close(state.recent[0], x[0, 2:5])
    assert state.cache.length == 5
