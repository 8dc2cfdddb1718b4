"""The shared blockwise primitive (attentions/_blocks.py) against dense masked softmax with the same n×n pattern; and
the brute-force probes the causal variants built on it share (which inputs move which outputs, which cache entries a
decoding step reads, prefill + steps), used by tests/attentions/test_local.py, test_longformer.py and
test_sparse_transformer.py."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attentions._blocks import (
    attend_slots,
    block_sparse_attention,
    dense_rows,
    gather_blocks,
    key_positions,
    neighbour_blocks,
    pad_for_blocks,
    query_positions,
    sliding_window_attention,
)
from attentions._decode import WindowCache

B, H, W, NB, D = 2, 3, 4, 6, 5
N = W * NB


def _dense(q, k, v, pattern, extra_k=None, extra_v=None, extra_pattern=None):
    """softmax over the keys allowed by a dense pattern [B|1, H|1, N, N] (+ extra keys [B, H, G, d])."""
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5  # [B, H, N, N]
    # The most negative finite score, not -inf: a padded query row with no allowed key stays finite (uniform).
    scores = scores.masked_fill(~pattern, torch.finfo(q.dtype).min)
    values = v
    if extra_k is not None:
        es = (q @ extra_k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~extra_pattern, torch.finfo(q.dtype).min)
        scores = torch.cat([scores, es], -1)
        values = torch.cat([v, extra_v], -2)
    return scores.softmax(-1) @ values


def _pattern_from_blocks(key_blocks: torch.Tensor) -> torch.Tensor:
    """Dense block pattern [.., N, N]: query i sees key j when j's block is listed for i's block (union)."""
    kb = key_blocks if key_blocks.dim() == 3 else key_blocks[None]
    blocks = torch.zeros(kb.shape[0], NB, NB, dtype=torch.bool)
    for hh in range(kb.shape[0]):
        for i in range(NB):
            for j in kb[hh, i].tolist():
                if j >= 0:
                    blocks[hh, i, j] = True
    return blocks.repeat_interleave(W, -2).repeat_interleave(W, -1)[None]  # [1, H|1, N, N]


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3)]


def _check_grads(out, ref, tensors, rows=None):
    """Outputs equal, and so do the gradients of q, k, v for a random loss, at the query ``rows`` [B, N].

    A query row with no allowed real key (a padded query) gets uniform weights over whatever slots it has, which
    differ between the dense and the blocked layout, so such rows are left out when ``rows`` is given.
    """
    go = torch.randn_like(out)
    if rows is not None:
        go = go * rows[:, None, :, None]
        out, ref = out * rows[:, None, :, None], ref * rows[:, None, :, None]
    torch.testing.assert_close(out, ref)
    ga = torch.autograd.grad(out, tensors, go)
    gb = torch.autograd.grad(ref, tensors, go)
    for a, b in zip(ga, gb, strict=True):
        torch.testing.assert_close(a, b)


def test_helpers() -> None:
    nb = neighbour_blocks(4, 1, 1)
    assert nb.tolist() == [[-1, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, -1]]
    assert query_positions(2, 3).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert key_positions(torch.tensor([[1, 0]]), 2).tolist() == [[2, 3, 0, 1]]
    x = torch.arange(2 * 8, dtype=torch.float64).view(1, 1, 8, 2)
    g = gather_blocks(x, torch.tensor([[1, 0], [-1, 1]]), 4)  # blocks of 4 positions, 2 query blocks
    assert g.shape == (1, 1, 2, 8, 2)
    assert g[0, 0, 0, :, 0].tolist() == [8, 10, 12, 14, 0, 2, 4, 6]
    assert g[0, 0, 1, :, 0].tolist() == [0, 2, 4, 6, 8, 10, 12, 14]  # a -1 slot reads block 0
    xp, mp = pad_for_blocks(torch.ones(2, 5, 3), None, 4)
    assert xp.shape == (2, 8, 3) and mp is not None and mp.sum().item() == 10 and not mp[:, 5:].any()
    x8 = torch.ones(2, 8, 3)
    assert pad_for_blocks(x8, None, 4) == (x8, None)


@pytest.mark.parametrize("per_head", [False, True])
def test_block_pattern_with_repeats_and_padding_matches_dense(per_head: bool) -> None:
    """Neighbour blocks + a repeated block + empty slots, per-head or shared, with a key-padding mask."""
    q, k, v = _inputs()
    kb = torch.cat([neighbour_blocks(NB, 1, 1), torch.tensor([[0], [0], [5], [1], [1], [-1]])], -1)  # [nb, 4]
    if per_head:
        g = torch.Generator().manual_seed(3)
        kb = torch.stack([kb] + [torch.randint(-1, NB, (NB, 4), generator=g) for _ in range(H - 1)])
        kb[..., 1] = torch.arange(NB)  # every query block sees itself, so a real query has a real key
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 17:] = False
    mask[0, 5] = False
    out = block_sparse_attention(q, k, v, W, kb, key_mask=mask)
    pattern = _pattern_from_blocks(kb) & mask[:, None, None, :]
    ref = _dense(q, k, v, pattern)
    _check_grads(out, ref, [q, k, v], rows=mask)


def test_allowed_band_and_extra_keys_match_dense() -> None:
    """A sliding band |i - j| <= 3 with key 0 excluded locally and passed as an extra (global) key."""
    q, k, v = _inputs(1)
    kb = neighbour_blocks(NB, 1, 1)
    qp = query_positions(NB, W)[:, :, None]  # [nb, w, 1]
    kp = key_positions(kb, W)[:, None, :]  # [nb, 1, 3w]
    allowed = ((qp - kp).abs() <= 3) & (kp > 0)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 20:] = False
    out = block_sparse_attention(
        q, k, v, W, kb, key_mask=mask, allowed=allowed, extra_k=k[:, :, :1], extra_v=v[:, :, :1],
        extra_mask=mask[:, :1],
    )
    pos = torch.arange(N)
    pattern = ((pos[:, None] - pos[None]).abs() <= 3) & (pos[None] > 0) & mask[:, None, None, :]
    ref = _dense(q, k, v, pattern, k[:, :, :1], v[:, :, :1], torch.ones(1, 1, 1, 1, dtype=torch.bool))
    _check_grads(out, ref, [q, k, v])
    # The band without the global key and with it written into the pattern: the same function.
    full = ((pos[:, None] - pos[None]).abs() <= 3) | (pos[None] == 0)
    torch.testing.assert_close(out, _dense(q, k, v, full & mask[:, None, None, :]))


def test_per_block_extra_keys_match_dense() -> None:
    q, k, v = _inputs(2)
    g = torch.Generator().manual_seed(5)
    ek = torch.randn(B, H, NB, 2, D, dtype=torch.float64, generator=g)
    ev = torch.randn(B, H, NB, 2, D, dtype=torch.float64, generator=g)
    kb = torch.arange(NB)[:, None]  # block diagonal
    out = block_sparse_attention(q, k, v, W, kb, extra_k=ek, extra_v=ev)
    for i in range(NB):
        sl = slice(i * W, (i + 1) * W)
        ref = _dense(q[:, :, sl], k[:, :, sl], v[:, :, sl], torch.ones(1, 1, W, W, dtype=torch.bool),
                     ek[:, :, i], ev[:, :, i], torch.ones(1, 1, 1, 1, dtype=torch.bool))
        torch.testing.assert_close(out[:, :, sl], ref)


def test_full_window_is_exact_softmax_and_dense_rows() -> None:
    q, k, v = _inputs(3)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 11:] = False
    out = block_sparse_attention(q, k, v, W, neighbour_blocks(NB, NB, NB), key_mask=mask)
    ref = _dense(q, k, v, mask[:, None, None, :].expand(B, 1, N, N))
    _check_grads(out, ref, [q, k, v])
    torch.testing.assert_close(dense_rows(q[:, :, :2], k, v, key_mask=mask), ref[:, :, :2])


def test_fully_masked_rows_stay_finite_and_padding_gets_no_gradient() -> None:
    q, k, v = _inputs(4)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1] = False
    mask[0, 13:] = False
    out = block_sparse_attention(q, k, v, W, neighbour_blocks(NB, 1, 1), key_mask=mask, dropout_p=0.3, training=True)
    assert torch.isfinite(out).all()
    (out[0, :, :13]).sum().backward()
    assert torch.count_nonzero(k.grad[0, :, 13:]) == 0 and torch.count_nonzero(v.grad[0, :, 13:]) == 0
    assert k.grad[0, :, :13].abs().sum() > 0


def test_wrong_length_is_an_error() -> None:
    q = torch.randn(1, 1, 10, 2)
    with pytest.raises(ValueError, match="multiple"):
        block_sparse_attention(q, q, q, 4, torch.zeros(2, 1, dtype=torch.long))


@pytest.mark.parametrize(("radius", "dilation", "n"), [(3, 1, 24), (2, 3, 23), (0, 1, 7), (4, 2, 5), (30, 1, 24)])
def test_sliding_window_matches_dense_band(radius: int, dilation: int, n: int) -> None:
    """|i - j| <= radius·dilation and i ≡ j (mod dilation), any n (internal padding), plus a global key 0."""
    g = torch.Generator().manual_seed(radius + 10 * dilation + n)
    q, k, v = (torch.randn(B, H, n, D, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, n - 2 :] = False
    pos = torch.arange(n)
    diff = pos[:, None] - pos[None]
    band = (diff.abs() <= radius * dilation) & (diff % dilation == 0)
    out = sliding_window_attention(q, k, v, radius, dilation=dilation, key_mask=mask)
    _check_grads(out, _dense(q, k, v, band & mask[:, None, None, :]), [q, k, v], rows=mask)
    # Key 0 as an extra (global) key, kept out of the band through the key mask.
    local_mask = mask & (pos > 0)
    out = sliding_window_attention(
        q, k, v, radius, dilation=dilation, key_mask=local_mask, extra_k=k[:, :, :1], extra_v=v[:, :, :1],
        extra_mask=mask[:, :1],
    )
    ref = _dense(q, k, v, (band | (pos[None] == 0)) & mask[:, None, None, :])
    _check_grads(out, ref, [q, k, v], rows=mask)


@pytest.mark.parametrize(("radius", "dilation", "n"), [(3, 1, 24), (2, 3, 23), (0, 1, 7), (4, 2, 5), (30, 1, 24)])
def test_causal_sliding_window_matches_dense_left_band(radius: int, dilation: int, n: int) -> None:
    """0 <= i - j <= radius·dilation and i ≡ j (mod dilation): the left half of the band, the query included."""
    g = torch.Generator().manual_seed(radius + 10 * dilation + n)
    q, k, v = (torch.randn(B, H, n, D, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, n - 2 :] = False
    mask[0, 1] = False
    pos = torch.arange(n)
    diff = pos[:, None] - pos[None]
    band = (diff >= 0) & (diff <= radius * dilation) & (diff % dilation == 0)
    out = sliding_window_attention(q, k, v, radius, dilation=dilation, causal=True, key_mask=mask)
    _check_grads(out, _dense(q, k, v, band & mask[:, None, None, :]), [q, k, v], rows=mask)


def test_attend_slots_reads_the_listed_slots_only() -> None:
    """One query over slots 4, 1, 6 of a cache equals dense attention over those keys; the other slots, NaN, are
    never read."""
    g = torch.Generator().manual_seed(6)
    q = torch.randn(B, H, 1, D, dtype=torch.float64, generator=g)
    k, v = (torch.randn(B, H, 8, D, dtype=torch.float64, generator=g) for _ in range(2))
    real = torch.ones(B, 8, dtype=torch.bool)
    real[1, 4] = False
    slots = torch.tensor([4, 1, 6])
    want = dense_rows(q, k[:, :, slots], v[:, :, slots], key_mask=real[:, slots])
    unread = torch.ones(8, dtype=torch.bool)
    unread[slots] = False
    k[:, :, unread] = v[:, :, unread] = float("nan")
    got = attend_slots(q, k, v, real, slots)
    torch.testing.assert_close(got, want)
    scores = (q * D**-0.5) @ k[:, :, slots].transpose(-1, -2)  # [B, H, 1, 3]
    scores[1, :, :, 0] = float("-inf")  # the padded slot
    torch.testing.assert_close(got, scores.softmax(-1) @ v[:, :, slots])


# Brute-force probes of a causal layer, written against nothing but its public interface (forward, prefill, step).


def influence(module: torch.nn.Module, n: int, seed: int = 7) -> Tensor:
    """[N, N] bool: (i, j) is True when input j moves output i, i.e. the gradient of a random projection of
    output i with respect to input j is nonzero, at one random x [1, N, dim]. A key outside a query's pattern gets
    exactly zero weight, so its input gets exactly zero gradient; a key inside gets a nonzero one (almost surely)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, module.cfg.dim, dtype=torch.float64, generator=g, requires_grad=True)
    y = module(x)  # [1, N, D]
    rows = []
    for i in range(n):
        (grad,) = torch.autograd.grad(y[0, i] @ torch.randn(y.shape[-1], dtype=y.dtype, generator=g), [x],
                                      retain_graph=True)
        rows.append(grad[0].ne(0).any(-1))  # [N]
    return torch.stack(rows)  # [N, N]


def decode(module: torch.nn.Module, x: Tensor, mask: Tensor | None, prompt: int, capacity: int | None = None) -> Tensor:
    """prefill(x[:, :prompt]) and one step per later token: the outputs [B, N, D] (without gradients)."""
    with torch.no_grad():
        out, state = module.prefill(x[:, :prompt], None if mask is None else mask[:, :prompt],
                                    capacity=capacity or x.shape[1])
        pieces = [out]
        for t in range(prompt, x.shape[1]):
            y_t, state = module.step(x[:, t : t + 1], state)
            pieces.append(y_t)
    return torch.cat(pieces, dim=1)


def step_reads(module: torch.nn.Module, x: Tensor, position: int) -> set[int]:
    """The positions a decoding step at ``position`` reads, brute force: after a prefill of x[:, :position] (capacity
    N), the cache entry of each earlier position in turn is made NaN (key and value), and the step's output turns NaN
    iff the step reads it (a value is read even where its weight is 0). The step's own token is always read; a
    position a ring buffer no longer holds is not read."""
    read = {position}
    for p in range(position):
        with torch.no_grad():
            _, state = module.prefill(x[:, :position], None, capacity=x.shape[1])
            if isinstance(state, WindowCache) and p < position - state.window:
                continue  # overwritten by a later token: not in the state
            slot = p % state.window if isinstance(state, WindowCache) else p  # the ring's slot, or the cache's
            state.k[:, :, slot] = state.v[:, :, slot] = float("nan")
            y, _ = module.step(x[:, position : position + 1], state)
        if y.isnan().any():
            read.add(p)
    return read
