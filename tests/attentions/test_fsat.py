"""FSAT and FAT against independent references: direct anti-diagonal loops (eq. 2), the direct central-token
merge (eq. 4), a dense masked softmax built from the same edge sets (eq. 7), the Gaussian density (eq. 8/10),
and the behaviour the paper prescribes (gradient truncation, predicted ∪ random indices, padding)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attentions._fsat_ops as fsat_ops
import attentions.fat as fat
import attentions.fsat as fsat
from attentions import build, list_attentions, spec

F64 = torch.float64


def _small(name: str = "fsat", **overrides: object) -> torch.nn.Module:
    cfg = {"dim": 16, "heads": 2, "max_seq_len": 32, **overrides}
    return build(name, **cfg)


# ---------------------------------------------------------------------------------------------------------
# Eq. 2–4: the pooled hidden-state cross.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 7, 16])
def test_fft_cross_equals_antidiagonal_sums(length: int) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(2, length, 3, dtype=F64), torch.randn(2, length, 3, dtype=F64)
    ref = torch.zeros(2, 2 * length - 1, 3, dtype=F64)
    for i in range(length):
        for j in range(length):
            ref[:, i + j] += a[:, i] * b[:, j]  # eq. 2: c_k = Σ_{i+j=k} f₁(x_i) ⊙ f₂(x_j)
    torch.testing.assert_close(fsat_ops.pooled_cross(a, b), ref)


def test_fft_cross_backward_passes_gradcheck() -> None:
    torch.manual_seed(0)
    a, b = (torch.randn(1, 5, 2, dtype=F64, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(fsat_ops.pooled_cross, (a, b))
    assert torch.autograd.gradcheck(lambda a, b: fsat_ops.pooled_cross(a, b, pad_to=20), (a, b))


def test_padded_sequence_gives_bitwise_the_same_cross() -> None:
    torch.manual_seed(0)
    cross = fat.HiddenStateCross(fat.FATConfig(dim=8, heads=2, max_seq_len=32))
    x = torch.randn(1, 32, 8)
    mask = torch.arange(32) < 21
    assert torch.equal(cross(x, mask[None])[:, :21], cross(x[:, :21]))
    # Eq. 4 as written: the last real row is 0 before LN, so it is LN's bias.
    torch.testing.assert_close(cross(x[:, :21])[0, 20], cross.norm.bias, atol=1e-3, rtol=0)


def test_fft_cross_in_float32_and_half_keeps_dtype() -> None:
    a = torch.randn(1, 5, 4)
    assert fsat_ops.pooled_cross(a, a).dtype == torch.float32
    assert fsat_ops.pooled_cross(a.half(), a.half()).dtype == torch.float16


def test_fast_fft_length_is_smallest_5_smooth() -> None:
    def smooth(m: int) -> bool:
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        return m == 1

    for n in range(1, 300):
        assert fsat_ops._fast_fft_len(n) == next(m for m in range(n, 4 * n + 2) if smooth(m))


@pytest.mark.parametrize("length", [1, 6, 9])
def test_central_symmetry_merge_equals_direct_pairs(length: int) -> None:
    torch.manual_seed(1)
    a, b = torch.randn(2, length, 3, dtype=F64), torch.randn(2, length, 3, dtype=F64)
    ref = torch.zeros(2, length, 3, dtype=F64)
    for t in range(length):
        # Anti-diagonals 2t (centre t) and 2t+1 (centre between t and t+1), minus the t–t combination.
        for i in range(length):
            for j in range(length):
                if i + j in (2 * t, 2 * t + 1) and not i == j == t:
                    ref[:, t] += a[:, i] * b[:, j]
    torch.testing.assert_close(fsat_ops.central_symmetry_merge(fsat_ops.pooled_cross(a, b), a, b), ref)


def test_cross_module_is_layernorm_of_merge() -> None:
    torch.manual_seed(2)
    cross = fat.HiddenStateCross(fat.FATConfig(dim=8, heads=2)).double()
    x = torch.randn(2, 5, 8, dtype=F64)
    w, bias = cross.fc.weight, cross.fc.bias
    a, b = F.gelu(x @ w[:8].T + bias[:8]), F.gelu(x @ w[8:].T + bias[8:])  # f₁, f₂: Linear + GELU
    torch.testing.assert_close(cross.features(x, None), (a, b))
    merged = torch.zeros(2, 5, 8, dtype=F64)
    for t in range(5):
        for i in range(5):
            for j in range(5):
                if i + j in (2 * t, 2 * t + 1) and not i == j == t:
                    merged[:, t] += a[:, i] * b[:, j]
    torch.testing.assert_close(cross(x), F.layer_norm(merged, (8,), cross.norm.weight, cross.norm.bias))


# ---------------------------------------------------------------------------------------------------------
# Eq. 7: sparse attention against a dense masked reference built from the same edges.
# ---------------------------------------------------------------------------------------------------------


def _dense_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_index: torch.Tensor, confidence: torch.Tensor
) -> torch.Tensor:
    """softmax over each query's incoming edges (−inf elsewhere) ⊙ confidence, times V, from n×n matrices.

    Parallel edges j→i count c_ij times in the softmax and contribute the sum of their confidences S_ij.
    """
    bsz, n, heads, d = q.shape
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, N, d]
    count = torch.zeros(bsz, heads, n + 1, n, dtype=q.dtype)  # [B, H, query (+ discard), key]
    conf_sum = torch.zeros(bsz, heads, n + 1, n, dtype=q.dtype)
    bb, jj, hh, ee = torch.meshgrid(*(torch.arange(s) for s in query_index.shape), indexing="ij")
    pos = (bb.flatten(), hh.flatten(), query_index.flatten(), jj.flatten())
    count = count.index_put(pos, torch.ones(bb.numel(), dtype=q.dtype), accumulate=True)[:, :, :n]
    conf_sum = conf_sum.index_put(pos, confidence.flatten(), accumulate=True)[:, :, :n]
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(d) + count.log()  # log 0 = −inf outside the edge set
    has_edge = count.sum(-1, keepdim=True) > 0
    p = torch.where(has_edge, scores, 0.0).softmax(-1) * has_edge  # rows without edges → 0
    weight = torch.where(count > 0, p * conf_sum / count.clamp(min=1), 0.0)
    return (weight @ vh).transpose(1, 2)  # [B, N, H, d]


def _random_graph(bsz: int, n: int, heads: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, n, (bsz, n, heads, e), generator=g)
    index[index == 3] = 5  # query 3 receives no edge
    index[..., 1] = index[..., 0]  # parallel edges: the same key → query pair twice
    index[0, -2:] = n  # the last two keys of sequence 0 emit nothing (padded keys)
    conf = torch.rand(bsz, n, heads, e, generator=g, dtype=F64) + 0.1
    return index, conf


def test_sparse_attention_equals_dense_reference_forward_and_grads() -> None:
    torch.manual_seed(3)
    bsz, n, heads, d, e = 2, 9, 2, 4, 5
    q, k, v = (torch.randn(bsz, n, heads, d, dtype=F64, requires_grad=True) for _ in range(3))
    index, conf = _random_graph(bsz, n, heads, e, seed=0)
    conf.requires_grad_(True)
    y = fsat_ops.sparse_attention(q, k, v, index, conf)
    ref = _dense_reference(q, k, v, index, conf)
    torch.testing.assert_close(y, ref)
    assert (y[:, 3] == 0).all()  # a query without incoming edges outputs the zero vector
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (q, k, v, conf), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v, conf), g)
    torch.testing.assert_close(grads, ref_grads)


def test_sparse_attention_backward_passes_gradcheck_with_dropout() -> None:
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 6, 2, 3, dtype=F64, requires_grad=True) for _ in range(3))
    index, conf = _random_graph(1, 6, 2, 3, seed=1)
    conf.requires_grad_(True)

    def f(*args: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)  # the same dropout mask on every evaluation
        return fsat_ops.sparse_attention(*args[:3], index, args[3], dropout_p=0.3)

    assert torch.autograd.gradcheck(f, (q, k, v, conf))


def test_complete_graph_with_unit_confidence_is_softmax_attention() -> None:
    torch.manual_seed(5)
    bsz, n, heads, d = 2, 6, 2, 4
    q, k, v = (torch.randn(bsz, n, heads, d, dtype=F64) for _ in range(3))
    index = torch.arange(n).expand(bsz, n, heads, n)  # every key → every query
    y = fsat_ops.sparse_attention(q, k, v, index, torch.ones(bsz, n, heads, n, dtype=F64))
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(y, ref)


# ---------------------------------------------------------------------------------------------------------
# Eq. 8–10 and §4.2.3–4.2.4: confidences, index sets, gradient truncation.
# ---------------------------------------------------------------------------------------------------------


def test_gaussian_confidence_is_the_normal_density() -> None:
    index = torch.tensor([0, 3, 7, 30])
    mean = torch.tensor([0.5, 3.0, 12.25, 1.0], dtype=F64)
    ref = torch.distributions.Normal(mean, math.sqrt(32.0)).log_prob(index.to(F64)).exp()
    torch.testing.assert_close(fsat_ops.gaussian_confidence(index, mean, 32.0), ref)
    torch.testing.assert_close(fsat_ops.gaussian_confidence(index, mean, 32.0, normalized=False),
                               ref * math.sqrt(2 * math.pi * 32.0))


def test_truncate_positive_grad_is_identity_with_clamped_gradient() -> None:
    s = torch.randn(50, requires_grad=True)
    g = torch.randn(50)
    out = fsat_ops.truncate_positive_grad(s)
    assert torch.equal(out, s)
    (out * g).sum().backward()
    torch.testing.assert_close(s.grad, g.clamp(max=0))


def test_confidence_gradients_reaching_it_are_never_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    original = fsat_ops.truncate_positive_grad

    def spy(s: torch.Tensor) -> torch.Tensor:
        s.retain_grad()  # the confidence tensor of eq. 10, upstream of the truncation
        out = original(s)
        out.retain_grad()  # the gradient arriving from eq. 7, before truncation
        seen["conf"], seen["out"] = s, out
        return out

    monkeypatch.setattr(fsat, "truncate_positive_grad", spy)
    torch.manual_seed(6)
    m = _small(dropout=0.0).train()
    x = torch.randn(2, 24, 16)
    (m(x) * torch.randn(2, 24, 16)).sum().backward()
    arriving, reaching = seen["out"].grad, seen["conf"].grad
    assert (arriving > 0).any() and (arriving < 0).any()  # the truncation has something to do
    assert (reaching <= 0).all()
    torch.testing.assert_close(reaching, arriving.clamp(max=0))
    assert m.ckv.weight.grad is not None and m.ckv.weight.grad[32:].abs().sum() > 0  # reaches W_I


def test_predicted_indices_follow_eq_9() -> None:
    torch.manual_seed(7)
    m = _small(max_seq_len=40).eval()
    x = torch.randn(2, 30, 16)
    graph = m.edges(x)
    logits = F.linear(m.cross(x), m.ckv.weight[32:], m.ckv.bias[32:])  # C W_I + b_I
    ibar = torch.sigmoid(logits).view(2, 30, 2, 4) * 40  # eq. 9 with L_max = max_seq_len
    torch.testing.assert_close(graph.predicted, ibar)
    floor = ibar.floor().long()
    assert torch.equal(graph.query_index, floor.masked_fill(floor > 29, 30))  # ⌊Ī⌋; past the length: no edge
    assert (floor > 29).any() and (floor <= 29).any()  # both kinds occur (Ī spans [0, L_max = 40])
    torch.testing.assert_close(graph.confidence, fsat_ops.gaussian_confidence(graph.query_index, ibar, 40.0))


def test_train_uses_predicted_and_random_indices_eval_predicted_only() -> None:
    torch.manual_seed(8)
    m = _small(m_per_key=3, n_random=5)
    x = torch.randn(2, 20, 16)
    predicted = m.eval().edges(x).query_index
    assert predicted.shape == (2, 20, 2, 3)
    m.train()
    torch.manual_seed(0)
    first = m.edges(x)
    torch.manual_seed(0)
    again = m.edges(x).query_index
    torch.manual_seed(1)
    other = m.edges(x).query_index
    assert first.query_index.shape == (2, 20, 2, 3 + 5)
    assert torch.equal(first.query_index[..., :3], predicted)  # I_p
    rand = first.query_index[..., 3:]  # I_r ~ U[0, N−1]
    assert rand.min() >= 0 and rand.max() <= 19 and rand.unique().numel() > 10
    assert torch.equal(again, first.query_index) and not torch.equal(other[..., 3:], rand)
    # Random column r is scored against predicted column r mod M (eq. 10).
    mean = first.predicted[..., [0, 1, 2, 0, 1]]
    torch.testing.assert_close(first.confidence[..., 3:], fsat_ops.gaussian_confidence(rand, mean, 32.0))
    assert m.eval().edges(x).query_index.shape[-1] == 3
    assert _small(n_random=0).train().edges(x).query_index.shape[-1] == 4  # "Only I_p"; default M = 4


def test_forward_is_sparse_attention_over_its_edges() -> None:
    torch.manual_seed(9)
    m = _small().double().eval()
    x = torch.randn(2, 12, 16, dtype=F64)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 8:] = False
    q, k, v, _ = m._project(x, mask)
    graph = m.edges(x, mask)
    ref = m.out(_dense_reference(q, k, v, graph.query_index, graph.confidence).reshape(2, 12, 16))
    torch.testing.assert_close(m(x, mask)[mask], ref[mask])


# ---------------------------------------------------------------------------------------------------------
# Padding, determinism, finiteness, registry.
# ---------------------------------------------------------------------------------------------------------

PADDING_CASES = [
    ("fsat", {}),
    ("fsat_m8", {}),
    ("fsat", {"feature_map": "dconv"}),
    ("fsat", {"index_scale": "length"}),
    ("fat", {}),
    ("fat", {"feature_map": "dconv"}),
]


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize(("name", "overrides"), PADDING_CASES)
def test_padded_content_never_reaches_real_outputs(name: str, overrides: dict, train: bool) -> None:
    torch.manual_seed(10)
    m = _small(name, dropout=0.0, **overrides).train(train)
    x = torch.randn(3, 24, 16)
    mask = torch.ones(3, 24, dtype=torch.bool)
    mask[0, 15:] = False
    mask[2, 1:] = False
    x2 = x.clone()
    x2[~mask] = torch.randn(int((~mask).sum()), 16) * 100
    torch.manual_seed(0)
    y = m(x, mask)
    torch.manual_seed(0)  # the same random indices: they depend on shapes and lengths only
    y2 = m(x2, mask)
    torch.testing.assert_close(y[mask], y2[mask])
    # The same sequences without the padding at all give the same real outputs (eval: no random draw).
    if not train and overrides.get("index_scale") == "length":
        torch.testing.assert_close(m(x[:1, :15])[0], y[0, :15])


def test_padded_keys_emit_no_edges_and_indices_stay_real() -> None:
    torch.manual_seed(11)
    m = _small().train()
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[1, 10:] = False
    index = m.edges(torch.randn(2, 24, 16), mask).query_index
    assert (index[1, 10:] == 24).all()  # the discard marker
    real = index[1, :10]
    assert real[real != 24].max() <= 9 and index[0].max() <= 24


def test_deterministic_under_manual_seed() -> None:
    def run() -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(12)
        m = _small().train()
        x = torch.randn(2, 20, 16, requires_grad=True)
        y = m(x)
        y.square().sum().backward()
        return y, x.grad

    torch.testing.assert_close(run(), run(), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["fsat", "fsat_m8", "fat"])
def test_finite_outputs_and_grads_with_padding_and_empty_rows(name: str) -> None:
    torch.manual_seed(13)
    m = _small(name).train()
    x = torch.randn(3, 20, 16, requires_grad=True)
    mask = torch.ones(3, 20, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2] = False  # a sequence with no real token
    y = m(x, mask)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    assert torch.isfinite(m.eval()(x, mask)).all()


@pytest.mark.parametrize("out_of_range", ["drop", "clamp"])
def test_query_without_edges_outputs_the_output_bias(out_of_range: str) -> None:
    m = _small(max_seq_len=16, out_of_range=out_of_range).eval()
    with torch.no_grad():
        m.ckv.bias[32:] = 50.0  # σ → 1: every key predicts query L_max, past the 10 tokens
    y = m(torch.randn(1, 10, 16))
    # drop: no query has an edge; clamp: every edge lands on the last token, the others have none
    silent = 10 if out_of_range == "drop" else 9
    torch.testing.assert_close(y[0, :silent], m.out.bias.expand(silent, 16))
    assert out_of_range == "drop" or not torch.allclose(y[0, 9], m.out.bias)


# ---------------------------------------------------------------------------------------------------------
# Predicted indices past the real length (``out_of_range``).
# ---------------------------------------------------------------------------------------------------------


def _padded_document(length: int, pad: int, seed: int = 21) -> tuple[torch.Tensor, torch.Tensor]:
    """One document of ``length`` tokens followed by ``pad`` padding positions of large noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat((torch.randn(1, length, 16, generator=g), 100 * torch.randn(1, pad, 16)), dim=1)
    mask = torch.arange(length + pad)[None] < length  # [1, L + p]
    return x, mask


@pytest.mark.parametrize("train", [False, True])
def test_no_edge_reaches_a_position_past_the_real_length(train: bool) -> None:
    torch.manual_seed(22)
    m = _small(max_seq_len=48).train(train)
    x, mask = _padded_document(30, 18)
    graph = m.edges(x, mask)
    index = graph.query_index[0]  # [N, H, E]
    attached = index[index != 48]  # 48 = N: the discard marker
    assert attached.numel() > 0 and attached.max() < 30
    # Ī spans [0, L_max = 48]: predictions past the 30 tokens occur, and are dropped, not moved
    past = graph.predicted[0, :30].floor() >= 30  # [30, H, M]
    assert past.any() and (index[:30, :, :4][past] == 48).all() and (index[:30, :, :4][~past] < 30).all()
    # with clamp the same predictions land on the last real token instead
    clamp = _small(max_seq_len=48, out_of_range="clamp").train(train)
    clamp.load_state_dict(m.state_dict())
    clamped = clamp.edges(x, mask).query_index[0, :30, :, :4]
    assert (clamped[past] == 29).all() and torch.equal(clamped[~past], index[:30, :, :4][~past])


@pytest.mark.parametrize("train", [False, True])
def test_clamp_reproduces_the_clamping_graph_and_output(train: bool) -> None:
    """``out_of_range="clamp"``: I_p = min(⌊Ī⌋, last real position), written out here, and the forward over it."""
    torch.manual_seed(23)
    m = _small(max_seq_len=40, out_of_range="clamp", dropout=0.0).train(train)
    x = torch.randn(3, 30, 16)
    mask = torch.ones(3, 30, dtype=torch.bool)
    mask[0, 17:] = False
    mask[2, 5:] = False
    torch.manual_seed(0)
    graph = m.edges(x, mask)
    last = torch.tensor([16, 29, 4]).view(3, 1, 1, 1)
    expected = torch.minimum(graph.predicted.floor().long().clamp(min=0), last)
    expected = expected.masked_fill(~mask[:, :, None, None], 30)
    assert torch.equal(graph.query_index[..., :4], expected)
    q, k, v, _ = m._project(x, mask)
    direct = m.out(fsat_ops.sparse_attention(q, k, v, graph.query_index, graph.confidence).reshape(3, 30, 16))
    torch.manual_seed(0)
    assert torch.equal(m(x, mask), direct)


@pytest.mark.parametrize("out_of_range", ["drop", "clamp"])
def test_real_outputs_do_not_depend_on_the_amount_of_padding(out_of_range: str) -> None:
    torch.manual_seed(24)
    m = _small(max_seq_len=64, out_of_range=out_of_range).eval()
    length, p = 13, 17
    x, mask = _padded_document(length, 2 * p)
    y_2p = m(x, mask)[0, :length]
    y_p = m(x[:, : length + p], mask[:, : length + p])[0, :length]
    y_0 = m(x[:, :length])[0]  # no padding, no mask
    torch.testing.assert_close(y_p, y_2p, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(y_0, y_2p, rtol=1e-6, atol=1e-7)


def test_longer_than_max_seq_len_is_rejected_and_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_seq_len"):
        _small(max_seq_len=8)(torch.randn(1, 9, 16))
    _small(max_seq_len=8, index_scale="length")(torch.randn(1, 9, 16))  # L_max is not used then
    for bad in ({"m_per_key": 0}, {"n_random": -1}, {"sigma2": 0.0}, {"dconv_kernel": 4},
                {"feature_map": "mlp"}, {"index_scale": "n"}, {"out_of_range": "wrap"}):
        with pytest.raises(ValueError):
            _small(**bad)


def test_registered_names_presets_and_capabilities() -> None:
    assert {"fat", "fsat", "fsat_m8"} <= set(list_attentions("f*at*"))
    assert spec("fsat").caps.complexity == "n log n" and not spec("fsat").caps.needs_fixed_length
    assert spec("fat").caps.complexity == "n^2"
    assert spec("fsat").config.m_per_key == 4 and spec("fsat_m8").config.m_per_key == 8
    assert spec("fsat").config.randoms == 4 and spec("fsat").config.variance == 1024.0


@pytest.mark.parametrize("name", ["fsat", "fat"])
def test_bfloat16_runs_and_keeps_its_dtype(name: str) -> None:
    torch.manual_seed(14)
    m = _small(name).to(torch.bfloat16).train()  # FFTs and sparse products run in float32 inside
    x = torch.randn(2, 20, 16, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all() and torch.isfinite(x.grad).all()


def test_compiles_with_its_sparse_part_run_eagerly() -> None:
    """torch.compile cannot trace the sparse CSR products (Dynamo failed on them in every compiled cell); the sparse
    part runs eagerly between compiled graphs, and the compiled layer computes what the eager one does (float64,
    eval mode: the predicted edges only, no random draw; aot_eager runs the same ATen kernels, so the bound is a few
    float64 roundings of the output's scale)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    module = build("fsat", dim=32, heads=2, max_seq_len=64).double().eval()
    x = torch.randn(2, 64, 32, dtype=torch.float64, requires_grad=True)
    eager = module(x)
    (g_eager,) = torch.autograd.grad(eager.sum(), x)
    compiled = torch.compile(module, backend="aot_eager", fullgraph=False)(x)
    (g_compiled,) = torch.autograd.grad(compiled.sum(), x)
    for got, want in ((compiled, eager), (g_compiled, g_eager)):
        assert float((got - want).abs().max()) <= 64 * torch.finfo(torch.float64).eps * float(want.abs().max())
