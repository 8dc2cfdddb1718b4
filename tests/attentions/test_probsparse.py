"""ProbSparse attention (Informer) against eq. 3–4 written with loops, and exact softmax when every query is active
(that limit is in test_softmax_reference.py); its causal form (masked ProbSparse, selection over the prefix) against
the same written with loops, and its ranks against a brute-force count."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.probsparse import ProbSparseAttention, active_count, prefix_rank
from tests.attentions.causal_reference import causal_softmax
from tests.attentions.reference import module_qkv

D, H = 16, 2


def _build(**overrides: object) -> ProbSparseAttention:
    torch.manual_seed(0)
    return attentions.build("probsparse", **{"dim": D, "heads": H, "max_seq_len": 64, "dropout": 0.0,  # type: ignore[return-value]
                                             **overrides}).double().eval()


def _reference(module: ProbSparseAttention, x: torch.Tensor, seed: int) -> torch.Tensor:
    """Eq. 3–4 per sequence and head with the layer's draws (same seed): M̄ over the sampled keys, the top-u queries
    get softmax(q Kᵀ/√d) V, the others the mean of V."""
    q, k, v = (t.view(x.shape[0], x.shape[1], H, -1) for t in module.proj.qkv(x).chunk(3, dim=-1))  # [B, L, H, d]
    b, length, _, d = q.shape
    u = active_count(module.cfg.factor, length)
    torch.manual_seed(seed)
    sample = torch.randint(length, (length, u))
    out = torch.empty_like(q)
    for row in range(b):
        for head in range(H):
            qh, kh, vh = q[row, :, head], k[row, :, head], v[row, :, head]  # [L, d]
            m = torch.stack([max(qh[i] @ kh[j] for j in sample[i]) - sum(qh[i] @ kh[j] for j in sample[i]) / length
                             for i in range(length)])
            active = set(torch.topk(m, u).indices.tolist())
            for i in range(length):
                if i in active:
                    out[row, i, head] = torch.softmax(kh @ qh[i] / math.sqrt(d), dim=0) @ vh
                else:
                    out[row, i, head] = vh.mean(dim=0)
    return out.reshape(b, length, -1) @ module.out.weight.T + module.out.bias


def causal_reference(module: ProbSparseAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form with loops (tests/attentions/test_causal.py), per sequence over its real tokens i = 0, 1, …:
    M̄_i over the layer's drawn keys j_s ≤ i (s < u_i = c⌈ln(i + 1)⌉), divided by i + 1; query i is active when
    fewer than u_i earlier queries have a larger M̄; active: softmax(q_i K_{≤i}ᵀ/√d) V_{≤i}, lazy: mean(V_{≤i})."""
    q, k, v = module_qkv(module, x)  # [B, H, N, d]
    b, h, n, d = q.shape
    rows = []
    for row in range(b):
        real = torch.arange(n) if mask is None else torch.nonzero(mask[row]).squeeze(1)
        heads = []
        for head in range(h):
            qh, kh, vh = q[row, head, real], k[row, head, real], v[row, head, real]  # [L, d]
            u = [active_count(module.cfg.factor, i + 1) for i in range(len(real))]
            measure = []
            for i in range(len(real)):
                scores = (kh[module.sample[i, : u[i]].long()] @ qh[i]).detach()  # [u_i]: it only selects
                measure.append(float(scores.max() - scores.sum() / (i + 1)))
            out = torch.zeros(n, d, dtype=x.dtype)
            for i in range(len(real)):
                active = sum(measure[j] > measure[i] for j in range(i)) < u[i]
                past = slice(0, i + 1)
                y = torch.softmax(kh[past] @ qh[i] / math.sqrt(d), 0) @ vh[past] if active else vh[past].mean(0)
                out = out.index_put((real[i : i + 1],), y[None])
            heads.append(out)
        rows.append(torch.stack(heads, 1).reshape(n, h * d))  # [N, D]: heads merged
    return torch.stack(rows) @ module.out.weight.T + module.out.bias


def test_prefix_ranks_count_the_larger_earlier_values() -> None:
    g = torch.Generator().manual_seed(3)
    for length in (1, 2, 7, 33, 64):
        m = torch.randn(3, length, generator=g, dtype=torch.float64)
        brute = (m[:, None, :] > m[:, :, None]).tril(-1).sum(-1)  # [3, L]: j < i with m_j > m_i
        assert torch.equal(prefix_rank(m), brute)


def test_causal_form_with_every_query_active_is_causal_softmax_attention() -> None:
    module = _build(factor=20, causal=True, max_seq_len=40)  # u_i = min(i + 1, 20⌈ln(i + 1)⌉) = i + 1
    x = torch.randn(2, 40, D, dtype=torch.float64)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 5:9] = False
    torch.testing.assert_close(module(x, mask)[mask], causal_softmax(module, x, mask)[mask])


@torch.no_grad()
def test_causal_selection_never_reads_a_later_query() -> None:
    """The authors' top-u over all L queries would move query i in or out of the active set when a later query's
    measure changes; here a prefix keeps its outputs whatever follows, and its own length (the rows after it cut
    off) gives them too."""
    module = _build(factor=1, causal=True, max_seq_len=64)
    x = torch.randn(1, 64, D, dtype=torch.float64)
    later = x.clone()
    later[0, 30:] *= 5.0
    torch.testing.assert_close(module(x)[0, :30], module(later)[0, :30])
    torch.testing.assert_close(module(x)[0, :30], module(x[:, :30])[0])


@pytest.mark.parametrize("factor", [1, 2])
def test_the_layer_equals_equations_3_and_4(factor: int) -> None:
    module = _build(factor=factor)
    x = torch.randn(2, 40, D, dtype=torch.float64)
    torch.manual_seed(5)
    got = module(x)
    torch.testing.assert_close(got, _reference(module, x, seed=5))


def test_lazy_queries_get_the_mean_of_the_values() -> None:
    """With c = 1 at L = 40 and one head, u = 4 queries are active and the other 36 rows are one and the same
    vector (with several heads each head picks its own active queries)."""
    module = _build(factor=1, heads=1)
    x = torch.randn(1, 40, D, dtype=torch.float64)
    with torch.no_grad():
        out = module(x)[0]
    rows = torch.unique(out.round(decimals=10), dim=0)
    assert active_count(1, 40) == 4 and len(rows) == 5
