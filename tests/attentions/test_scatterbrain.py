"""Scatterbrain against dense references written from the paper's equations (Chen et al. 2021, Algorithm 1).

The main reference builds the whole [N, N] matrix M̂ = φ(Q)φ(K)ᵀ with the entries of the LSH support replaced by
exp(q·k/√d), padded keys zeroed, and returns M̂V / M̂1, forward and backward. The LSH support is recomputed from
its definition (XBOX+ vectors, argmax([xR; −xR]) hashes, per-round order by (bucket, position) with padding
last, query chunk t paired with key chunk t, union over rounds); only the random rotations (``draw_rotations``
under the same seed) and the random features ω (the ``features`` buffer) are taken from the module.
"""

from __future__ import annotations

import math

import pytest
import torch

import attentions
import attentions.scatterbrain  # noqa: F401  (registers the variant even before the package imports it)
from attentions.scatterbrain import ScatterbrainAttention, _ChunkPairProducts, xbox_plus

CFG = {"dim": 32, "heads": 2, "dropout": 0.0}


def _build(**overrides: object) -> ScatterbrainAttention:
    torch.manual_seed(0)
    return attentions.build("scatterbrain", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _batch(n_in: int, real: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sequences in float64, the second padded after ``real`` tokens."""
    torch.manual_seed(1)
    x = torch.randn(2, n_in, CFG["dim"], dtype=torch.float64)
    mask = torch.ones(2, n_in, dtype=torch.bool)
    mask[1, real:] = False
    return x, mask


def _qkv(module: ScatterbrainAttention, x: torch.Tensor, mask: torch.Tensor, n: int):
    """Q, K, V [B, H, n, dh] from the module's weights, x zeroed at padding and right-padded to n; mask [B, n]."""
    b, n_in, d = x.shape
    h = module.cfg.heads
    x = torch.cat((x * mask[..., None], x.new_zeros(b, n - n_in, d)), dim=1)  # [B, n, D]
    mask = torch.cat((mask, torch.zeros(b, n - n_in, dtype=torch.bool)), dim=1)  # [B, n]
    q, k, v = (x @ module.proj.qkv.weight.T + module.proj.qkv.bias).chunk(3, dim=-1)
    return *(t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v)), mask


def _support(q: torch.Tensor, k: torch.Tensor, real: torch.Tensor, rot: torch.Tensor | None, n_buckets: int,
             c: int, n_hashes: int) -> torch.Tensor:
    """Union over rounds of {(i, j): query i and key j in the same chunk of their sorted orders}: [N, N] bool.

    One batch row and head: q, k [N, dh], real [N], rot [dh+2, R, nb/2] or None (one bucket).
    """
    n = q.shape[0]
    m2 = q[real].square().sum(-1).max() + k[real].square().sum(-1).max()
    zero = torch.zeros(n, 1, dtype=q.dtype)
    fq = torch.cat((q, (m2 - q.square().sum(-1, keepdim=True)).clamp_min(0).sqrt(), zero), dim=-1)
    gk = torch.cat((k, zero, (m2 - k.square().sum(-1, keepdim=True)).clamp_min(0).sqrt()), dim=-1)
    pos = torch.arange(n)
    support = torch.zeros(n, n, dtype=torch.bool)
    rounds = []
    for r in range(n_hashes):
        chunks = []
        for vec in (fq, gk):
            if rot is None:
                bucket = torch.zeros(n, dtype=torch.long)
            else:
                proj = vec @ rot[:, r]  # [N, nb/2]
                bucket = torch.cat((proj, -proj), dim=-1).argmax(-1)  # angular LSH (Reformer §2)
            bucket = torch.where(real, bucket, n_buckets)  # padding in a bucket of its own, sorted last
            order = sorted(range(n), key=lambda i: (int(bucket[i]), i))
            rank = torch.empty(n, dtype=torch.long)
            rank[order] = pos
            chunks.append(rank // c)  # chunk of every position in this round
        this_round = chunks[0][:, None] == chunks[1][None, :]  # [N, N]: query chunk t pairs with key chunk t
        rounds.append(this_round)
        support |= this_round
    if n_hashes > 1:
        # The de-duplication is exercised: rounds overlap, yet the union is larger than any one round.
        overlap = rounds[0] & rounds[1]
        assert overlap.any() and all(int(support.sum()) > int(s.sum()) for s in rounds)
    return support


def _phi(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Performer's positive features exp(ωᵀx̂ − ‖x̂‖²/2)/√m, x̂ = d^(-1/4)x, unstabilised: [..., N, m]."""
    xh = x * x.shape[-1] ** -0.25
    return torch.exp(xh @ w.T - xh.square().sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[0])


def _dense_reference(module: ScatterbrainAttention, x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """(φ(Q)φ(K)ᵀ + S)V / (φ(Q)φ(K)ᵀ + S)1 with S = exp(QKᵀ/√d) − φ(Q)φ(K)ᵀ on the LSH support, dense."""
    cfg = module.cfg
    c, n_in = cfg.bucket_size, x.shape[1]
    n = -(-n_in // c) * c
    nb = module.n_buckets_for(n)
    torch.manual_seed(seed)  # the forward draws its rotations first thing, from the global RNG
    rot = module.draw_rotations(nb, x.device, x.dtype)  # [H, dh+2, R, nb/2]
    q, k, v, real = _qkv(module, x, mask, n)
    y = torch.zeros_like(v)
    for bi in range(x.shape[0]):
        for hi in range(cfg.heads):
            qi, ki, vi = q[bi, hi], k[bi, hi], v[bi, hi]
            with torch.no_grad():
                sup = _support(qi, ki, real[bi], None if rot is None else rot[hi], nb, c, cfg.n_hashes)
            low = _phi(qi, module.features) @ _phi(ki, module.features).T  # [N, N]: φ(Q)φ(K)ᵀ
            exact = torch.exp(qi @ ki.T / math.sqrt(qi.shape[-1]))  # [N, N]
            approx = low + torch.where(sup, exact - low, torch.zeros_like(low))  # M̂ = φφᵀ + S
            approx = approx * real[bi][None, :]  # padded keys get no weight
            y[bi, hi] = (approx @ vi) / approx.sum(-1, keepdim=True)
    b, h, _, dh = y.shape
    return module.out(y.transpose(1, 2).reshape(b, n, h * dh)[:, :n_in])


def _exact_softmax(module: ScatterbrainAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√d)V over the real keys, with the module's projections."""
    q, k, v, real = _qkv(module, x, mask, x.shape[1])
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~real[:, None, None, :], -math.inf)
    y = scores.softmax(-1) @ v
    b, h, n, dh = y.shape
    return module.out(y.transpose(1, 2).reshape(b, n, h * dh))


def _forward_and_grads(module: ScatterbrainAttention, fn, x: torch.Tensor, mask: torch.Tensor,
                       g: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fn(x) and the gradients of Σ g·fn(x) with respect to x and every module parameter."""
    x = x.clone().requires_grad_(True)
    y = fn(x)
    params = [x, *module.parameters()]
    grads = torch.autograd.grad((y * g).sum(), params)
    return y.detach(), list(grads)


def _compare(module: ScatterbrainAttention, reference, x: torch.Tensor, mask: torch.Tensor, seed: int) -> None:
    g = torch.randn(x.shape, dtype=x.dtype)

    def ours(xx: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(seed)
        return module(xx, mask)

    y, grads = _forward_and_grads(module, ours, x, mask, g)
    y_ref, grads_ref = _forward_and_grads(module, reference, x, mask, g)
    real = mask[..., None]
    torch.testing.assert_close(y * real, y_ref * real, rtol=1e-9, atol=1e-10)
    names = ["x", *(name for name, _ in module.named_parameters())]
    for name, a, b in zip(names, grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("n_hashes", [1, 2])
def test_equals_dense_low_rank_plus_sparse_correction(n_hashes: int) -> None:
    """Forward and backward equal the dense M̂V / M̂1 on the LSH support (union of rounds, each pair once).

    44 tokens in chunks of 8 (padded inside to 48, 6 buckets), 30 real in the second row; with two rounds the
    rounds overlap (asserted in ``_support``), so counting a pair twice would fail this test.
    """
    module = _build(bucket_size=8, n_hashes=n_hashes, nb_features=32)
    x, mask = _batch(44, 30)
    seed = 5
    _compare(module, lambda xx: _dense_reference(module, xx, mask, seed), x, mask, seed)


def test_sparse_part_changes_the_output() -> None:
    """The reference can tell: the same matrix without the correction (pure low-rank) differs from the module."""
    module = _build(bucket_size=8, nb_features=32)
    x, mask = _batch(44, 30)
    b, n_in, _ = x.shape
    q, k, v, real = _qkv(module, x, mask, 48)
    low = (_phi(q, module.features) @ _phi(k, module.features).transpose(-1, -2)) * real[:, None, None, :]
    y = (low @ v) / low.sum(-1, keepdim=True)
    y_low = module.out(y.transpose(1, 2).reshape(b, 48, -1)[:, :n_in])
    with torch.no_grad():
        torch.manual_seed(0)
        y_sb = module(x, mask)
    assert (y_sb - y_low)[mask].abs().max() > 1e-3


@pytest.mark.parametrize("n_hashes", [1, 2])
def test_all_pairs_in_one_bucket_is_exact_softmax(n_hashes: int) -> None:
    """One bucket and one chunk: every pair is in the support, S corrects all of φφᵀ, the output is exact."""
    module = _build(n_buckets=1, bucket_size=64, n_hashes=n_hashes, nb_features=16)
    x, mask = _batch(50, 37)
    _compare(module, lambda xx: _exact_softmax(module, xx, mask), x, mask, seed=0)


def test_approaches_softmax_as_the_support_grows() -> None:
    """Error against exact softmax: one big chunk (exact) < chunks of 16 < chunks of 8, at n = 64."""
    torch.manual_seed(3)
    x = torch.randn(1, 64, CFG["dim"], dtype=torch.float64)
    mask = torch.ones(1, 64, dtype=torch.bool)
    errors = []
    for c in (64, 16, 8):
        module = _build(bucket_size=c, nb_features=16)
        with torch.no_grad():
            torch.manual_seed(0)
            y = module(x, mask)
            ref = _exact_softmax(module, x, mask)
        errors.append(float((y - ref).norm() / ref.norm()))
    assert errors[0] < 1e-12 < errors[1] < errors[2], errors


def test_xbox_plus_preserves_inner_products_with_equal_norms() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 2, 10, 4, dtype=torch.float64) * torch.rand(2, 2, 10, 1, dtype=torch.float64)
    k = torch.randn(2, 2, 10, 4, dtype=torch.float64) * 3
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False
    k[1, :, 6:] = 100.0  # padded keys: huge, and left out of M
    fq, gk = xbox_plus(q, k, mask)
    torch.testing.assert_close(fq @ gk.transpose(-1, -2), q @ k.transpose(-1, -2))
    pad = ~mask[:, None]  # [B, 1, N]
    m2 = q.square().sum(-1).masked_fill(pad, 0).amax(-1) + k.square().sum(-1).masked_fill(pad, 0).amax(-1)  # [B, H]
    norms = torch.cat((fq, gk), dim=2).square().sum(-1)  # [B, H, 2N]
    real = torch.cat((mask, mask), dim=1)[:, None].expand_as(norms)
    torch.testing.assert_close(norms[real], m2[..., None].expand_as(norms)[real])


def test_chunk_pair_products_equal_gathered_bmm_forward_and_backward() -> None:
    """The memory-saving op (re-gathers in backward) against autograd through gather + bmm, on 3 random orders."""
    torch.manual_seed(0)
    b, h, r, n, m, c = 2, 3, 3, 12, 5, 4
    e_q = torch.rand(b, h, n, m, dtype=torch.float64, requires_grad=True)
    e_k = torch.rand(b, h, n, m, dtype=torch.float64, requires_grad=True)
    sq_idx = torch.rand(b, h, r, n).argsort(-1)  # [B, H, R, N]: a permutation per round
    sk_idx = torch.rand(b, h, r, n).argsort(-1)

    def gathered(e: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return e.gather(2, idx.reshape(b, h, r * n, 1).expand(-1, -1, -1, m)).view(-1, c, m)  # [M, c, m]

    reference = torch.bmm(gathered(e_q, sq_idx), gathered(e_k, sk_idx).transpose(1, 2))  # [M, c, c]
    out = _ChunkPairProducts.apply(e_q, e_k, sq_idx, sk_idx, c)
    torch.testing.assert_close(out, reference, rtol=1e-13, atol=1e-13)
    upstream = torch.randn_like(out)
    expected = torch.autograd.grad(reference, (e_q, e_k), upstream)
    got = torch.autograd.grad(out, (e_q, e_k), upstream)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-13, atol=1e-13)
    assert torch.autograd.gradcheck(lambda a, k: _ChunkPairProducts.apply(a, k, sq_idx, sk_idx, c), (e_q, e_k))


def test_config_rejects_odd_bucket_counts() -> None:
    with pytest.raises(ValueError, match="n_buckets"):
        attentions.make_config("scatterbrain", n_buckets=3)
    with pytest.raises(ValueError, match="nb_features must be a positive integer"):
        attentions.make_config("scatterbrain", nb_features=0)


def test_no_causal_form_because_the_hash_reads_the_whole_sequence() -> None:
    """The reason the variant gives: XBOX+ scales by the largest norms of the sequence, so a later key of larger
    norm changes every earlier query's and key's hashed vector (and the sorted clusters move with the buckets)."""
    assert not attentions.spec("scatterbrain").caps.causal
    assert "XBOX+" in attentions.spec("scatterbrain").caps.causal_note
    with pytest.raises(attentions.NoCausalFormError, match="no causal form"):
        attentions.make_config("scatterbrain", causal=True)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, 12, 4, generator=g, dtype=torch.float64) for _ in range(2))
    fq, gk = xbox_plus(q, k)
    k_later = k.clone()
    k_later[..., 11, :] *= 10.0  # the last key only
    fq_later, gk_later = xbox_plus(q, k_later)
    assert not torch.allclose(fq_later[..., :11, :], fq[..., :11, :])
    assert not torch.allclose(gk_later[..., :11, :], gk[..., :11, :])
