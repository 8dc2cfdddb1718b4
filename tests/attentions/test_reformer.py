"""Reformer LSH attention against brute-force references written from the paper (§2), with the module weights.

The references recompute everything from the definition with dense [N, N] masks: hashes as
argmax([xR; −xR]), the per-round order by (bucket, position) with padding last, candidate sets = own chunk
and the previous chunk (wrapping within the round), self score −1e5, and the logsumexp merge of rounds.
Only the random rotations are taken from the module (``draw_rotations`` under the same seed).
"""

from __future__ import annotations

import pytest
import torch

import attentions
import attentions.reformer  # noqa: F401  (registers the variant even before the package imports it)
from attentions._lsh import lsh_attention, lsh_buckets, self_score
from attentions.reformer import ReformerAttention

CFG = {"dim": 32, "heads": 2, "dropout": 0.0}


def _build(**overrides: object) -> ReformerAttention:
    torch.manual_seed(0)
    module = attentions.build("reformer", **{**CFG, **overrides}).double().eval()
    return module  # type: ignore[return-value]


def _pad(x: torch.Tensor, mask: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x, mask right-padded to n positions (the reference's own padding)."""
    b, n_in, d = x.shape
    real = torch.ones(b, n_in, dtype=torch.bool) if mask is None else mask
    x = torch.cat((x, x.new_zeros(b, n - n_in, d)), dim=1)  # [B, n, D]
    return x, torch.cat((real, torch.zeros(b, n - n_in, dtype=torch.bool)), dim=1)  # [B, n]


def _projections(module: ReformerAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared QK and V, [B, H, N, dh] each, from the module's own weights."""
    b, n, d = x.shape
    h = module.cfg.heads
    qk, v = (x @ module.qkv.weight.T + module.qkv.bias).chunk(2, dim=-1)
    return tuple(t.reshape(b, n, h, d // h).transpose(1, 2) for t in (qk, v))  # type: ignore[return-value]


def _attend(qk: torch.Tensor, v: torch.Tensor, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared-QK attention of one head over candidates cand [N, N] (query, key): out [N, dh], lse [N]."""
    k = qk / qk.norm(dim=-1, keepdim=True)
    scores = qk @ k.T  # [N, N]: q·k/‖k‖, no 1/√d (trax/HF)
    scores = scores.masked_fill(~cand, float("-inf"))
    scores = scores.masked_fill(torch.eye(len(qk), dtype=torch.bool), self_score(qk.dtype))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v, lse


def _finish(module: ReformerAttention, y: torch.Tensor, n_in: int) -> torch.Tensor:
    b, h, n, dh = y.shape
    return module.out(y.transpose(1, 2).reshape(b, n, h * dh)[:, :n_in])  # [B, n_in, D]


def _dense_reference(module: ReformerAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Exact shared-QK softmax attention over all real keys, self score −1e5 (one bucket, one chunk)."""
    qk, v = _projections(module, x)
    real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask
    y = torch.zeros_like(v)
    for bi in range(x.shape[0]):
        cand = real[bi][None, :].expand(x.shape[1], -1)  # every real key, for every query
        for hi in range(module.cfg.heads):
            y[bi, hi] = _attend(qk[bi, hi], v[bi, hi], cand)[0]
    return _finish(module, y, x.shape[1])


def _lsh_reference(module: ReformerAttention, x: torch.Tensor, mask: torch.Tensor | None,
                   seed: int) -> torch.Tensor:
    """Per-round attention restricted to (own chunk ∪ previous chunk) after sorting, merged by logsumexp."""
    cfg = module.cfg
    c, n_in = cfg.bucket_size, x.shape[1]
    n = -(-n_in // c) * c
    nc = n // c
    nb = module.n_buckets_for(n)
    torch.manual_seed(seed)  # the forward draws its rotations first thing, from the global RNG
    rot = module.draw_rotations(nb, x.device, x.dtype)  # [H, dh, R, nb/2]
    x, real = _pad(x, mask, n)
    qk, v = _projections(module, x)
    y = torch.zeros_like(v)
    for bi in range(x.shape[0]):
        for hi in range(cfg.heads):
            outs, lses = [], []
            for r in range(cfg.n_hashes):
                proj = qk[bi, hi] @ rot[hi, :, r, :]  # [N, nb/2]
                bucket = torch.cat((proj, -proj), dim=-1).argmax(dim=-1).tolist()
                order = sorted(range(n), key=lambda i: (bucket[i] if real[bi, i] else nb, i))
                chunk = torch.empty(n, dtype=torch.long)
                chunk[torch.tensor(order)] = torch.arange(n) // c  # chunk of each position in this round
                cq, ck = chunk[:, None], chunk[None, :]
                near = (ck == cq) | ((ck == (cq - 1) % nc) if nc > 1 else False)  # [N, N]
                o, lse = _attend(qk[bi, hi], v[bi, hi], near & real[bi][None, :])
                outs.append(o)
                lses.append(lse)
            lse = torch.stack(lses)  # [R, N]
            w = torch.exp(lse - torch.logsumexp(lse, dim=0))  # [R, N]
            y[bi, hi] = (w[..., None] * torch.stack(outs)).sum(0)
    return _finish(module, y, n_in)


@pytest.mark.parametrize(("n", "n_hashes", "n_buckets", "masked"), [
    (20, 1, None, False),  # n < bucket_size: internal padding, one bucket
    (32, 1, 1, True),
    (32, 3, 4, True),  # several rounds and buckets, but one chunk: every round is the dense attention
])
def test_single_chunk_equals_exact_shared_qk_attention(n: int, n_hashes: int, n_buckets: int | None,
                                                        masked: bool) -> None:
    module = _build(bucket_size=32, n_hashes=n_hashes, n_buckets=n_buckets)
    x = torch.randn(2, n, 32, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[1, n // 2:] = False
    torch.manual_seed(1)
    y = module(x, mask)
    expected = _dense_reference(module, x, mask)
    if mask is not None:
        y, expected = y[mask], expected[mask]
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize(("n", "bucket_size", "n_hashes"), [(37, 8, 3), (40, 20, 2), (30, 8, 1)])
def test_rounds_merge_equals_per_round_brute_force(n: int, bucket_size: int, n_hashes: int) -> None:
    module = _build(bucket_size=bucket_size, n_hashes=n_hashes)
    x = torch.randn(2, n, 32, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, 25:] = False
    mask[1, 3:6] = False  # a hole: padding need not be at the end
    torch.manual_seed(5)
    y = module(x, mask)
    expected = _lsh_reference(module, x, mask, seed=5)
    torch.testing.assert_close(y[mask], expected[mask])


def test_gradients_equal_brute_force_gradients() -> None:
    """The merge's gradient flows through the per-round logsumexp (the module holds it as a constant)."""
    module = _build(bucket_size=8, n_hashes=3)
    x = torch.randn(2, 37, 32, dtype=torch.float64)
    mask = torch.ones(2, 37, dtype=torch.bool)
    mask[0, 30:] = False
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(2, 37, 32, dtype=torch.float64) * mask[..., None]
    torch.manual_seed(5)
    (module(xa, mask) * g).sum().backward()
    grad_w = module.qkv.weight.grad.clone()
    module.zero_grad()
    (_lsh_reference(module, xb, mask, seed=5) * g).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(grad_w, module.qkv.weight.grad)


def test_buckets_are_argmax_of_rotations_and_padding_is_last() -> None:
    torch.manual_seed(0)
    qk = torch.randn(2, 3, 16, 4)
    rot = torch.randn(3, 4, 2, 5)  # [H, d, R, nb/2], nb = 10
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 9:] = False
    buckets = lsh_buckets(qk, rot, 2, 10, mask)  # [B, H, R, N]
    proj = torch.einsum("bhnd,hdrk->bhrnk", qk, rot)
    expected = torch.cat((proj, -proj), dim=-1).argmax(dim=-1)
    assert torch.equal(buckets[0], expected[0])
    assert torch.equal(buckets[1, ..., :9], expected[1, ..., :9])
    assert (buckets[1, ..., 9:] == 10).all()


def test_query_with_no_other_candidate_attends_to_itself() -> None:
    module = _build(bucket_size=8)
    x = torch.randn(1, 20, 32, dtype=torch.float64)
    mask = torch.zeros(1, 20, dtype=torch.bool)
    mask[0, 11] = True  # the only real token
    torch.manual_seed(0)
    y = module(x, mask)
    _, v = _projections(module, x)
    torch.testing.assert_close(y[0, 11], _finish(module, v[:, :, 11:12], 1)[0, 0])


def test_padded_content_never_reaches_real_positions() -> None:
    module = _build(bucket_size=8, n_hashes=2)
    x = torch.randn(2, 45, 32, dtype=torch.float64)
    mask = torch.ones(2, 45, dtype=torch.bool)
    mask[0, 30:] = False
    mask[1, 4:9] = False
    noisy = torch.where(mask[..., None], x, 1e3 * torch.randn_like(x))
    with torch.no_grad():
        torch.manual_seed(3)
        a = module(x, mask)
        torch.manual_seed(3)
        b = module(noisy, mask)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    torch.testing.assert_close(a[mask], b[mask], rtol=0, atol=0)


def test_rotations_are_fresh_per_call_and_fixed_by_seed() -> None:
    x = torch.randn(2, 64, 32)
    module = _build(bucket_size=8, dropout=0.1).float().train()
    torch.manual_seed(9)
    first = module(x)
    torch.manual_seed(9)
    assert torch.equal(module(x), first)  # rotations and dropout both from the global RNG
    module.eval()
    assert not torch.equal(module(x), module(x))  # paper/trax: new rotations on every call
    fixed = _build(bucket_size=8, hash_seed=4).float()
    state = torch.get_rng_state()
    assert torch.equal(fixed(x), fixed(x))
    assert torch.equal(torch.get_rng_state(), state)  # hash_seed leaves the global RNG alone


def test_finite_outputs_and_gradients_when_n_is_not_a_multiple_of_the_chunk() -> None:
    torch.manual_seed(0)
    module = attentions.build("reformer_h4", dim=32, heads=2).train()
    x = torch.randn(2, 100, 32, requires_grad=True)  # chunks of 64: padded to 128 inside
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 70:] = False
    y = module(x, mask)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y[mask].square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad[mask].abs().sum() > 0
    assert (x.grad[~mask] == 0).all()  # padded inputs influence no real output
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_bucket_count_follows_length_and_config() -> None:
    module = _build()
    assert [module.n_buckets_for(n) for n in (64, 128, 192, 4096)] == [1, 2, 4, 64]
    assert _build(n_buckets=8).n_buckets_for(64) == 8
    with pytest.raises(ValueError, match="n_buckets"):
        attentions.build("reformer", n_buckets=3)
    with pytest.raises(ValueError, match="n_hashes"):
        attentions.build("reformer", n_hashes=0)


def test_presets() -> None:
    assert {"reformer", "reformer_h4"} <= set(attentions.list_attentions("reformer*"))
    assert attentions.spec("reformer").config.n_hashes == 2
    assert attentions.spec("reformer_h4").config.n_hashes == 4
    caps = attentions.spec("reformer").caps
    assert caps.complexity == "n log n" and caps.supports_mask and not caps.exact
    assert caps.seq_len_multiple_of == 64 and caps.pads_to_multiple  # forward pads to whole chunks


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_core_gradcheck_with_fixed_buckets(dropout: float) -> None:
    """Analytic gradients of the chunked core (custom backward, dropout, padding) vs finite differences."""
    torch.manual_seed(0)
    qk = torch.randn(1, 2, 16, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 16, 3, dtype=torch.float64, requires_grad=True)
    buckets = torch.randint(0, 4, (1, 2, 2, 16))
    buckets[..., 13:] = 4  # padding

    def f(qk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(1)  # the same dropout mask at every evaluation
        return lsh_attention(qk, v, buckets, 4, 4, dropout=dropout, training=True)[:, :, :13]

    assert torch.autograd.gradcheck(f, (qk, v), fast_mode=True)


def test_core_gradcheck_when_a_round_leaves_only_self() -> None:
    """Token 0 sees only itself in round 0 (its look-back chunk is padding), itself and token 1 in round 1."""
    torch.manual_seed(0)
    qk = torch.randn(1, 1, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 4, 3, dtype=torch.float64, requires_grad=True)
    buckets = torch.tensor([[[[0, 1, 2, 2], [1, 0, 2, 2]]]])  # [B, H, R, N]; bucket 2 = padding

    def f(qk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return lsh_attention(qk, v, buckets, 2, 1)[:, :, :2]

    assert torch.autograd.gradcheck(f, (qk, v), fast_mode=True)


def _causal_keys(bucket: torch.Tensor, real: torch.Tensor, window: int) -> torch.Tensor:
    """[B, H, N, N] bool: key j is real, j <= i, in query i's bucket (bucket [B, H, N]), and at most ``window`` real
    tokens of that bucket lie in (j, i] (itself and the ``window`` latest earlier tokens of its bucket)."""
    n = bucket.shape[-1]
    same = (bucket[..., :, None] == bucket[..., None, :]) & real[:, None, None, :]  # [B, H, N, N]
    earlier = same & torch.ones(n, n, dtype=torch.bool).tril()  # ... and j <= i
    # between[i, j] = #{j' in i's bucket, real, j < j' <= i}: row i's count minus its running count up to j
    between = earlier.sum(-1, keepdim=True) - earlier.long().cumsum(-1)
    return earlier & (between <= window)


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py), brute force with dense [N, N] masks: per round, query i
    reads the real keys j <= i of its own bucket with at most c = bucket_size real tokens of that bucket in (j, i]
    (itself and the c latest earlier ones), scores q·k/‖k‖, its own score −1e5; rounds merged by logsumexp.

    The buckets are a discrete choice: they are recomputed here as argmax([xR; −xR]) with the rotations the module
    draws (``draw_rotations`` with its bucket count: the forward's own draw under ``hash_seed``, or none with one
    bucket), so the reference takes the module's hash draw as given and computes the masked softmax over exactly
    the keys the causal rule allows."""
    cfg = module.cfg
    c, n = cfg.bucket_size, x.shape[1]
    nb = module.n_buckets_for(-(-n // c) * c)
    rot = module.draw_rotations(nb, x.device, x.dtype)  # [H, dh, R, nb/2] or None
    real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask
    qk, v = _projections(module, x)  # [B, H, N, dh]
    k = qk / qk.norm(dim=-1, keepdim=True)
    scores = (qk @ k.transpose(-1, -2)).masked_fill(torch.eye(n, dtype=torch.bool), self_score(x.dtype))
    outs, lses = [], []
    for r in range(cfg.n_hashes):
        if rot is None:
            bucket = torch.zeros(qk.shape[:3], dtype=torch.long)
        else:
            proj = torch.einsum("bhnd,hdk->bhnk", qk, rot[:, :, r])  # [B, H, N, nb/2]
            bucket = torch.cat((proj, -proj), dim=-1).argmax(dim=-1)  # [B, H, N]
        s = scores.masked_fill(~_causal_keys(bucket, real, c), torch.finfo(x.dtype).min)
        outs.append(s.softmax(-1) @ v)
        lses.append(s.logsumexp(-1))
    w = torch.stack(lses).softmax(dim=0)  # [R, B, H, N]
    return _finish(module, (w[..., None] * torch.stack(outs)).sum(0), n)


def _causal_module(**overrides: object) -> ReformerAttention:
    """Chunks of 4 over 40 tokens (10 chunks, 10 buckets by default), three rounds, a fixed hash draw."""
    return _build(causal=True, bucket_size=4, n_hashes=3, hash_seed=7, **overrides)


def _prompt_padding(n: int = 40) -> torch.Tensor:
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, :3] = False
    mask[1, 9:12] = False
    return mask


@pytest.mark.parametrize("padded", [False, True])
def test_causal_form_matches_its_reference_across_chunks_and_buckets(padded: bool) -> None:
    """test_causal.py's N = 40 fits one chunk of 64 (one bucket); here 10 chunks and 10 buckets, forward and
    gradients."""
    module = _causal_module()
    x = torch.randn(2, 40, 32, dtype=torch.float64, requires_grad=True)
    mask = _prompt_padding() if padded else None
    rows = torch.ones(2, 40, dtype=torch.bool) if mask is None else mask
    y, ref = module(x, mask), causal_reference(module, x, mask)
    torch.testing.assert_close(y[rows], ref[rows])
    g = torch.randn_like(y) * rows[..., None]
    for a, b in zip(torch.autograd.grad((y * g).sum(), [x, *module.parameters()]),
                    torch.autograd.grad((ref * g).sum(), [x, *module.parameters()]), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("padded", [False, True])
def test_later_tokens_move_no_earlier_output_across_chunks(padded: bool) -> None:
    """The paper's rule would fail this: a later token hashed to a smaller bucket shifts the sorted chunks."""
    module = _causal_module()
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    mask = _prompt_padding() if padded else None
    y = module(x, mask)
    for t in (3, 17, 30):
        later = x.clone()
        later[:, t + 1 :] = 3.0 * torch.randn(2, 39 - t, 32, dtype=torch.float64)
        rows = torch.zeros(2, 40, dtype=torch.bool)
        rows[:, : t + 1] = True
        if mask is not None:
            rows &= mask
        torch.testing.assert_close(module(later, mask)[rows], y[rows], rtol=0, atol=1e-12)
        xg = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad((module(xg, mask)[rows] ** 2).sum(), [xg])
        assert (grad[:, t + 1 :] == 0).all()


def test_one_bucket_is_a_causal_window_of_the_chunk_length() -> None:
    """With one bucket every round reads the c = 4 tokens before the query (itself only when there are none)."""
    module = _causal_module(n_buckets=1)
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    qk, v = _projections(module, x)
    k = qk / qk.norm(dim=-1, keepdim=True)
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    band = ((i - j >= 1) & (i - j <= 4)) | ((i == 0) & (j == 0))  # token 0 has no earlier token: itself
    y = (qk @ k.transpose(-1, -2)).masked_fill(~band, -torch.inf).softmax(-1) @ v
    torch.testing.assert_close(module(x), _finish(module, y, 20))


def test_a_token_with_no_earlier_token_in_its_bucket_reads_itself() -> None:
    module = _causal_module(n_buckets=1)
    x = torch.randn(1, 12, 32, dtype=torch.float64)
    mask = torch.ones(1, 12, dtype=torch.bool)
    mask[0, :5] = False  # token 5 is the first real one
    _, v = _projections(module, x)
    torch.testing.assert_close(module(x, mask)[0, 5], _finish(module, v[:, :, 5:6], 1)[0, 0])


@pytest.mark.parametrize("prompt", [0, 7, 21, 39])
def test_prefill_and_steps_equal_the_causal_form_across_chunks(prompt: int) -> None:
    """The state keeps the prompt's hash draw: every step hashes with it; 10 buckets as the forward over 40."""
    module = _causal_module()
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    mask = _prompt_padding()
    mask[:, prompt:] = True
    with torch.no_grad():
        y = module(x, mask)
        out, state = module.prefill(x[:, :prompt], mask[:, :prompt], capacity=40)
        assert state.n_buckets == 10 and state.buckets.shape == (2, 2, 3, 40)
        pieces = [out] + [module.step(x[:, t : t + 1], state)[0] for t in range(prompt, 40)]
    torch.testing.assert_close(torch.cat(pieces, dim=1)[mask], y[mask])
