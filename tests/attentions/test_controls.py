"""The controls against independent references: ``none`` leaves a block its MLP path alone, and ``mean_pool`` is
softmax attention whose scores are all equal (queries zeroed), with padding excluded from the mean; their causal
forms (``causal_reference``, read by tests/attentions/test_causal.py) and their decoding states."""

from __future__ import annotations

import torch

import attentions
from attentions.mean_pool import MeanPool
from attentions.none import NoMixing
from harness.models.classifier import Block
from tests.attentions.causal_reference import causal_allowed

DIM, HEADS = 32, 2


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form of either control: ``none`` gives zeros (kept in the graph), ``mean_pool`` the dense
    [N, N] average over the real tokens j <= i, then W·mean + b (a row with no such token averages nothing: 0)."""
    if isinstance(module, NoMixing):
        return x * 0.0
    assert isinstance(module, MeanPool)
    weights = causal_allowed(x.shape[1], mask, x.device)[:, 0].to(x.dtype)  # [B or 1, N, N]: 1 where j <= i is real
    mean = weights @ x / weights.sum(-1, keepdim=True).clamp_min(1.0)  # [B, N, D]
    return mean @ module.proj.weight.T + module.proj.bias


def test_none_reduces_a_block_to_its_mlp_path() -> None:
    torch.manual_seed(0)
    block = Block("none", DIM, HEADS, mlp_dim=64, max_seq_len=64, dropout=0.0, attention_overrides={}).eval()
    x = torch.randn(2, 64, DIM)
    with torch.no_grad():
        torch.testing.assert_close(block(x, None), x + block.mlp(block.ln2(x)))
    assert not list(block.attn.parameters())  # nothing to train in the mixer
    assert not attentions.spec("none").caps.mixes_tokens and attentions.spec("mean_pool").caps.mixes_tokens


def test_mean_pool_is_attention_with_equal_scores() -> None:
    """Vanilla attention with W_q = 0 gives every key the same weight; with its value and output maps folded into
    one Linear, mean_pool must compute the same, padded keys excluded."""
    torch.manual_seed(0)
    exact = attentions.build("vanilla", dim=DIM, heads=HEADS, max_seq_len=64, dropout=0.0).eval()
    with torch.no_grad():
        exact.proj.qkv.weight[:DIM].zero_()
        exact.proj.qkv.bias[:DIM].zero_()
    pool = attentions.build("mean_pool", dim=DIM, heads=HEADS, max_seq_len=64).eval()
    w_v, b_v = exact.proj.qkv.weight[2 * DIM:], exact.proj.qkv.bias[2 * DIM:]
    with torch.no_grad():
        pool.proj.weight.copy_(exact.out.weight @ w_v)
        pool.proj.bias.copy_(exact.out.weight @ b_v + exact.out.bias)
    x = torch.randn(2, 64, DIM, dtype=torch.float32)
    mask = torch.ones(2, 64, dtype=torch.bool)
    mask[1, 40:] = False
    with torch.no_grad():
        torch.testing.assert_close(pool(x, mask), exact(x, mask), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(pool(x), exact(x), rtol=1e-5, atol=1e-5)


def test_mean_pool_decodes_with_a_running_sum_and_count() -> None:
    """Prompt padding stays out of the count: the step after a prompt with 3 padded tokens of 8 averages 6 tokens."""
    torch.manual_seed(0)
    pool = attentions.build("mean_pool", dim=DIM, causal=True).double().eval()
    x = torch.randn(2, 9, DIM, dtype=torch.float64)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 2:5] = False
    with torch.no_grad():
        _, state = pool.prefill(x[:, :8], mask, capacity=9)
        y, state = pool.step(x[:, 8:], state)
    assert state.count.tolist() == [9, 6] and attentions.state_bytes(state) == 2 * DIM * 8 + 2 * 8
    want = torch.cat([x[1, :2], x[1, 5:]]).mean(0)
    torch.testing.assert_close(y[1, 0], pool.proj(want))


def test_none_decodes_with_a_state_of_no_tensor() -> None:
    module = attentions.build("none", dim=DIM, causal=True)
    x = torch.randn(1, 4, DIM)
    y, state = module.prefill(x[:, :3], None, capacity=4)
    y_t, state = module.step(x[:, 3:], state)
    assert attentions.state_bytes(state) == 0 and not y.any() and not y_t.any()
