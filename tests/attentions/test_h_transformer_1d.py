"""H-Transformer-1D against exact softmax attention (one block) and against the hierarchical attention matrix
built densely, entry by entry, from the paper's construction (Zhu & Soricut 2021, §5)."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.h_transformer_1d import HTransformer1DAttention
from tests.attentions.reference import module_qkv

CFG = {"dim": 32, "heads": 2, "max_seq_len": 128, "dropout": 0.0}


def _build(seed: int = 0, **overrides: object) -> HTransformer1DAttention:
    torch.manual_seed(seed)
    return attentions.build("h_transformer_1d", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _finish(module: HTransformer1DAttention, y: torch.Tensor) -> torch.Tensor:
    b, h, n, dh = y.shape
    return module.out(y.transpose(1, 2).reshape(b, n, h * dh))


def _exact(module: HTransformer1DAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    q, k, v = module_qkv(module, x)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
    return _finish(module, s.softmax(-1) @ v)


def _level_matrix(n: int, nr: int) -> torch.Tensor:
    """[n, n] level of each entry: 0 inside a block or between sibling blocks, else ⌊log2(b_i XOR b_j)⌋."""
    blocks = torch.arange(n) // nr
    xor = blocks[:, None] ^ blocks[None, :]
    return torch.where(xor == 0, 0, torch.floor(torch.log2(xor.clamp_min(1).double())).long())


def _hierarchical_reference(
    module: HTransformer1DAttention, x: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Y = Ã V / Ã 1 with Ã [n, n] built explicitly: Ã_ij = exp(q̄_i·k̄_j/√d), q̄_i (k̄_j) the mean of the real
    queries (keys) in the aligned group of 2^l tokens holding i (j), l = the entry's level; padded keys: 0."""
    b, n, _ = x.shape
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool)
    x = x * mask[..., None]
    q, k, v = module_qkv(module, x)
    level = _level_matrix(n, module.cfg.block_size)
    real = mask[:, None, :, None].double()  # [B, 1, N, 1]
    scores = torch.zeros(b, q.shape[1], n, n, dtype=torch.float64)
    for lv in range(int(level.max()) + 1):
        group = torch.arange(n) >> lv  # aligned groups of 2^lv tokens
        same = (group[:, None] == group[None, :]).double()  # [N, N]
        cnt = (same @ real).clamp_min(1.0)  # [B, 1, N, 1]: real tokens in each token's group
        q_bar, k_bar = (same @ (q * real)) / cnt, (same @ (k * real)) / cnt  # [B, H, N, dh]
        s = q_bar @ k_bar.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = torch.where(level == lv, s, scores)
    a = torch.exp(scores) * mask[:, None, None, :]
    return _finish(module, (a @ v) / a.sum(-1, keepdim=True))


@pytest.mark.parametrize("n", [16, 11])
def test_one_block_is_exact_softmax_attention(n: int) -> None:
    module = _build()
    x = torch.randn(2, n, 32, dtype=torch.float64, requires_grad=True)
    y, ref = module(x), _exact(module, x)
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y)
    for a, r in zip(
        torch.autograd.grad((y * g).sum(), [x, *module.parameters()]),
        torch.autograd.grad((ref * g).sum(), [x, *module.parameters()]),
        strict=True,
    ):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize(("n", "padded"), [(64, False), (64, True), (50, True), (37, False)])
def test_matches_the_dense_hierarchical_matrix_forward_and_backward(n: int, padded: bool) -> None:
    module = _build(block_size=4)  # n = 64: 16 blocks, 4 levels
    x = torch.randn(2, n, 32, dtype=torch.float64, requires_grad=True)
    mask = None
    if padded:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, n - 13 :] = False
        mask[1, 5:19:2] = False  # padding in the middle, across blocks
    y, ref = module(x, mask), _hierarchical_reference(module, x, mask)
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y) * (mask[..., None] if padded else 1.0)
    for a, r in zip(
        torch.autograd.grad((y * g).sum(), [x, *module.parameters()]),
        torch.autograd.grad((ref * g).sum(), [x, *module.parameters()]),
        strict=True,
    ):
        torch.testing.assert_close(a, r)


@torch.no_grad()
def test_hierarchy_differs_from_exact_attention_except_when_groups_are_constant() -> None:
    """Coarsening averages groups; with tokens constant over the coarsest groups it is exact."""
    module = _build(block_size=4)
    x = torch.randn(1, 32, 32, dtype=torch.float64)  # 8 blocks: levels 0, 1, 2 (groups of 4 at level 2)
    assert (module(x) - _exact(module, x)).abs().max() > 1e-3
    piecewise = torch.randn(1, 8, 32, dtype=torch.float64).repeat_interleave(4, dim=1)
    torch.testing.assert_close(module(piecewise), _exact(module, piecewise))


def test_level_structure_partitions_the_matrix() -> None:
    """The reference's levels: 0 on the diagonal blocks and their siblings, l where the blocks' level-l
    ancestors are siblings (checked on n = 16, N_r = 2)."""
    level = _level_matrix(16, 2)
    assert level[0, 1] == 0 and level[0, 2] == 0 and level[0, 3] == 0  # same block, sibling block
    assert level[0, 4] == 1 and level[0, 7] == 1 and level[3, 4] == 1
    assert level[0, 8] == 2 and level[7, 8] == 2 and level[15, 0] == 2


@torch.no_grad()
def test_padding_never_leaks_and_short_equals_padded() -> None:
    module = _build(block_size=4)
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[0, 27:] = False
    mask[1, 3:30:3] = False
    noisy = torch.where(mask[..., None], x, 1e3 * torch.randn_like(x))
    y, y_noisy = module(x, mask), module(noisy, mask)
    torch.testing.assert_close(y[mask], y_noisy[mask], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y[0, :27], module(x[:1, :27])[0])
    assert torch.isfinite(module(x, torch.zeros_like(mask))).all()


def test_defaults_and_validation() -> None:
    entry = attentions.spec("h_transformer_1d")
    assert entry.config.block_size == 16
    assert entry.caps.complexity == "n" and entry.caps.pads_to_multiple and entry.caps.seq_len_multiple_of == 16
    with pytest.raises(ValueError, match="block_size"):
        attentions.make_config("h_transformer_1d", block_size=0)


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py), Ã [n, n] built densely: for a real key j <= i,
    Ã_ij = exp(q_i·k_j/√d) at level 0 (same block, or sibling blocks) and exp(q_f·k̄_j/√d) at level l >= 1, q_f the
    query of the first real token of i's aligned group of 2^l tokens and k̄_j the mean of the real keys in j's group;
    Y = Ã V / Ã 1."""
    b, n, _ = x.shape
    real = torch.ones(b, n, dtype=torch.bool) if mask is None else mask
    x = x * real[..., None]
    q, k, v = module_qkv(module, x)  # [B, H, N, dh]
    level = _level_matrix(n, module.cfg.block_size)
    weight = real[:, None, :, None].double()  # [B, 1, N, 1]
    pos = torch.arange(n)
    scores = torch.zeros(b, q.shape[1], n, n, dtype=torch.float64)
    for lv in range(int(level.max()) + 1):
        group = pos >> lv  # aligned groups of 2^lv tokens
        same = group[:, None] == group[None, :]  # [N, N]
        first = torch.where(same & real[:, None, :], pos, n).amin(-1)  # [B, N]: first real token of each group
        first = torch.where(first < n, first, pos)  # a group with no real token: any row (no real row reads it)
        q_first = q.gather(2, first[:, None, :, None].expand_as(q))  # [B, H, N, dh]
        cnt = (same.double() @ weight).clamp_min(1.0)  # [B, 1, N, 1]
        k_bar = (same.double() @ (k * weight)) / cnt  # [B, H, N, dh]
        s = q_first @ k_bar.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = torch.where(level == lv, s, scores)
    allowed = torch.ones(n, n, dtype=torch.bool).tril() & real[:, None, None, :]  # [B, 1, N, N]
    a = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).softmax(-1)
    return _finish(module, a @ v)


def _causal_mask(n: int) -> torch.Tensor:
    """Padding in the middle, across blocks and groups, and a first group with no real token."""
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 21:23] = False
    mask[1, :6] = False
    mask[1, 30:41:3] = False
    return mask


@pytest.mark.parametrize(("n", "padded"), [(64, False), (64, True), (53, True)])
def test_causal_form_matches_its_dense_matrix_at_every_level(n: int, padded: bool) -> None:
    """N_r = 4, n = 64: 16 blocks, levels 0-3 (test_causal.py's N = 40 at N_r = 16 reaches level 1 only)."""
    module = _build(block_size=4, causal=True)
    x = torch.randn(2, n, 32, dtype=torch.float64, requires_grad=True)
    mask = _causal_mask(n) if padded else None
    y, ref = module(x, mask), causal_reference(module, x, mask)
    rows = torch.ones(2, n, dtype=torch.bool) if mask is None else mask
    torch.testing.assert_close(y[rows], ref[rows])
    g = torch.randn_like(y) * rows[..., None]
    for a, r in zip(
        torch.autograd.grad((y * g).sum(), [x, *module.parameters()]),
        torch.autograd.grad((ref * g).sum(), [x, *module.parameters()]),
        strict=True,
    ):
        torch.testing.assert_close(a, r)


def test_one_causal_block_is_exact_causal_softmax_attention() -> None:
    module = _build(causal=True)
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    q, k, v = module_qkv(module, x)
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(torch.ones(16, 16).triu(1).bool(), -math.inf)
    torch.testing.assert_close(module(x), _finish(module, s.softmax(-1) @ v))


@torch.no_grad()
def test_a_row_does_not_move_with_the_later_tokens_of_its_coarse_groups() -> None:
    """Row 36 shares its groups with later tokens at every coarse level (36-37, 36-39, 32-39): a coarse query that
    averaged its group would move it; the sampled first token does not. Rows 33-35 likewise."""
    module = _build(block_size=4, causal=True)
    x = torch.randn(1, 64, 32, dtype=torch.float64)
    moved = x.clone()
    moved[0, 37:] += torch.randn(27, 32, dtype=torch.float64)
    torch.testing.assert_close(module(moved)[0, :37], module(x)[0, :37], rtol=0, atol=1e-12)


@pytest.mark.parametrize(("prompt", "hole"), [(0, None), (5, None), (22, None), (33, None), (63, None),
                                             (37, (32, 37)), (41, (40, 41)), (50, (48, 50))])
def test_prefill_and_steps_equal_the_causal_form_at_every_level(prompt: int, hole: tuple[int, int] | None) -> None:
    """N_r = 4, n = 64: the steps cross blocks and groups of every level. ``hole``: row 1's padding before the end
    of the prompt, so that a group of a right block (level 3 at 37, levels 1 and 3 at 41, levels 2 and 3 at 50) has
    no real prompt token in that row: its first step samples the group's query there."""
    module = _build(block_size=4, causal=True)
    x = torch.randn(2, 64, 32, dtype=torch.float64)
    mask = _causal_mask(64)
    if hole is not None:
        mask[1, hole[0] : hole[1]] = False
    mask[:, prompt:] = True  # the tokens a step adds are real
    with torch.no_grad():
        y = module(x, mask)
        out, state = module.prefill(x[:, :prompt], mask[:, :prompt], capacity=64)
        assert state.m.shape == (2, 2, 3)  # coarse levels 1, 2, 3: N_r·2^l < 64
        pieces = [out] + [module.step(x[:, t : t + 1], state)[0] for t in range(prompt, 64)]
    torch.testing.assert_close(torch.cat(pieces, dim=1)[mask], y[mask])
