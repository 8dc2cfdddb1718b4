"""ProbSparse attention (Informer) against eq. 3–4 written with loops, and exact softmax when every query is active
(that limit is in test_softmax_reference.py)."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.probsparse import ProbSparseAttention, active_count

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
