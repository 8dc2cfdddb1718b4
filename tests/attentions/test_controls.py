"""The controls against independent references: ``none`` leaves a block its MLP path alone, and ``mean_pool`` is
softmax attention whose scores are all equal (queries zeroed), with padding excluded from the mean."""

from __future__ import annotations

import torch

import attentions
from harness.models.classifier import Block

DIM, HEADS = 32, 2


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
