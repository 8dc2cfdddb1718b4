"""Scatterbrain: sparse (LSH) + low-rank (Performer) attention with the overlap corrected.

Paper: Chen, Dao, Winsor, Song, Rudra, Ré, "Scatterbrain: Unifying Sparse and Low-rank Attention Approximation",
NeurIPS 2021, https://arxiv.org/abs/2110.15343 (§3, Algorithm 1). Reference code: HazyResearch/fly,
``src/models/attention/sbsmyrf_attention.py`` (SMYRF clustering + Performer features).

The unnormalised attention matrix exp(QKᵀ/√d) is estimated as M̂ = φ(Q)φ(K)ᵀ + S, with φ Performer's positive
random features and S sparse on an LSH support 𝒮: S_ij = exp(q_i·k_j/√d) − φ(q_i)ᵀφ(k_j) for (i, j) ∈ 𝒮, else 0,
so that M̂ is exact on 𝒮 and the low-rank estimate elsewhere. The output is M̂V / M̂1, i.e.

    out_i = [φ(q_i)ᵀ(φ(K)ᵀV) + Σ_{j∈𝒮_i} S_ij v_j] / [φ(q_i)ᵀ(φ(K)ᵀ1) + Σ_{j∈𝒮_i} S_ij].

Pieces reused from the zoo: ``performer.gaussian_random_features`` (the orthogonal random features ω) and
``_lsh.lsh_buckets`` (angular LSH, argmax([xR; −xR]), padding hashed past every real bucket). The function
``scatterbrain_attention`` is the whole sparse + low-rank computation; ``ScatterbrainAttention`` adds the
projections, the padding to whole chunks, the asymmetric transform of Q and K and the per-call rotations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._lsh import LSHHashing, check_n_buckets, lsh_buckets
from .base import ProjectedAttention, merge_heads, no_autocast, pad_to_length, with_ones_columns, zero_padding
from .performer import gaussian_random_features
from .registry import AttentionConfig, Capabilities, register

__all__ = [
    "ScatterbrainAttention",
    "ScatterbrainConfig",
    "log_scaled_features",
    "scatterbrain_attention",
    "xbox_plus",
]


def xbox_plus(q: Tensor, k: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """SMYRF's asymmetric XBOX+ transform: F(q) = [q, √(M² − ‖q‖²), 0], G(k) = [k, 0, √(M² − ‖k‖²)].

    M² = max‖q‖² + max‖k‖² over the real positions of each (batch row, head), so every transformed vector has
    norm M and F(q)·G(k) = q·k: the angle between F(q) and G(k) falls as q·k grows, and an angular LSH of the
    transformed vectors groups queries with the keys of large inner product (maximum inner-product search),
    which plain angular LSH of q and k (norms ignored) does not.

    Args:
        q, k: [B, H, N, d].
        mask: [B, N] bool, True = real; padded positions are left out of the maxima.

    Returns:
        F(q), G(k): [B, H, N, d+2] each, without gradient (they only feed the hash).
    """
    with torch.no_grad():
        nq = q.square().sum(-1, keepdim=True)  # [B, H, N, 1]
        nk = k.square().sum(-1, keepdim=True)  # [B, H, N, 1]
        if mask is not None:
            pad = ~mask[:, None, :, None]  # [B, 1, N, 1]
            m2 = nq.masked_fill(pad, 0.0).amax(-2, keepdim=True) + nk.masked_fill(pad, 0.0).amax(-2, keepdim=True)
        else:
            m2 = nq.amax(-2, keepdim=True) + nk.amax(-2, keepdim=True)  # [B, H, 1, 1]
        zero = torch.zeros_like(nq)
        # clamp: padded positions may exceed M (their buckets are overridden by lsh_buckets anyway).
        fq = torch.cat((q, (m2 - nq).clamp_min(0.0).sqrt(), zero), dim=-1)  # [B, H, N, d+2]
        gk = torch.cat((k, zero, (m2 - nk).clamp_min(0.0).sqrt()), dim=-1)  # [B, H, N, d+2]
    return fq, gk


def log_scaled_features(x: Tensor, features: Tensor, *, is_query: bool,
                        mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Performer's positive softmax-kernel features, split into a bounded part and a log scale: φ(x) = e·exp(a).

    φ(x)_l = exp(ω_lᵀx̂ − ‖x̂‖²/2) / √m with x̂ = d^(-1/4) x, so E[φ(q)ᵀφ(k)] = exp(qᵀk/√d) (Performer Lemma 1).
    The log scale a is the largest log-feature of the row (queries: [B, H, N, 1]) or of every real key row
    (keys: [B, H, 1, 1], as the fly code), detached; e = exp(log φ − a) ∈ [0, 1]. Scatterbrain needs a itself
    (``performer.softmax_kernel_features`` divides it away), to put the low-rank estimate on the scale of the
    exact scores exp(qᵀk/√d) it is corrected by.

    Args:
        x: queries or keys [B, H, N, d].
        features: ω [m, d].
        is_query: per-row scale (queries) or one scale per (batch row, head) over real keys (keys).
        mask: keys only: [B, N] bool, True = real; padded key rows get e = 0 exactly and are left out of a.

    Returns:
        e [B, H, N, m] and a ([B, H, N, 1] for queries, [B, H, 1, 1] for keys).
    """
    d, m = x.shape[-1], features.shape[0]
    normalizer = d**-0.25
    proj = torch.matmul(x, features.t() * normalizer)  # [B, H, N, m]: ωᵀx̂
    logf = proj - (x.square().sum(-1, keepdim=True) * (0.5 * normalizer**2) + 0.5 * math.log(m))  # log φ
    if is_query:
        scale = logf.detach().amax(-1, keepdim=True)  # [B, H, N, 1]
    else:
        if mask is not None:
            logf = logf.masked_fill(~mask[:, None, :, None], float("-inf"))  # exp(−inf) = 0: padded keys vanish
        scale = logf.detach().amax(dim=(-2, -1), keepdim=True)  # [B, H, 1, 1]
        scale = torch.where(torch.isfinite(scale), scale, torch.zeros_like(scale))  # no real key: any finite a
    return (logf - scale).exp(), scale


def _gather_rows(t: Tensor, idx: Tensor) -> Tensor:
    """Rows of t [B, H, N, f] at idx [B, H, R, N] -> [B, H, R*N, f] (each round's sorted order, concatenated)."""
    b, h, r, n = idx.shape
    return t.gather(2, idx.reshape(b, h, r * n, 1).expand(-1, -1, -1, t.shape[-1]))


class _ChunkPairProducts(torch.autograd.Function):
    """φ(q)ᵀφ(k)/exp(a_q + a_k) on every round's chunk pairs, [M, c, c], from the unsorted features and sort orders.

    The same function as ``bmm(gather(e_q), gather(e_k)ᵀ)``, but autograd through that would save both gathered
    copies, each [B, H, R·N, m] (R times a feature tensor: 2 × 67 MB at n = 4096, m = 256, B·H = 8). This op saves
    only e_q and e_k (the exp that makes them saves them anyway) and the orders, and gathers again in backward,
    one round at a time, so its backward holds one round's copies at once.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, e_q: Tensor, e_k: Tensor, sq_idx: Tensor, sk_idx: Tensor,
                c: int) -> Tensor:
        ctx.save_for_backward(e_q, e_k, sq_idx, sk_idx)
        m_chunks = sq_idx.numel() // c
        seq = _gather_rows(e_q, sq_idx).view(m_chunks, c, -1)  # [M, c, m]
        sek = _gather_rows(e_k, sk_idx).view(m_chunks, c, -1)  # [M, c, m]
        return torch.bmm(seq, sek.transpose(1, 2))  # [M, c, c]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        e_q, e_k, sq_idx, sk_idx = ctx.saved_tensors
        b, h, r, n = sq_idx.shape
        m, c = e_q.shape[-1], grad.shape[-1]
        grad = grad.view(b, h, r, n // c, c, c)
        need_q, need_k = ctx.needs_input_grad[:2]
        grad_q = torch.zeros_like(e_q) if need_q else None
        grad_k = torch.zeros_like(e_k) if need_k else None
        for rr in range(r):
            # Each round's order is a permutation of the N positions: a gather there, a scatter_add back.
            iq = sq_idx[:, :, rr, :, None].expand(-1, -1, -1, m)  # [B, H, N, m]
            ik = sk_idx[:, :, rr, :, None].expand(-1, -1, -1, m)  # [B, H, N, m]
            g = grad[:, :, rr].reshape(-1, c, c)  # [B·H·N/c, c, c]: this round's chunk pairs
            if grad_q is not None:
                sek = e_k.gather(2, ik).view(-1, c, m)  # [B·H·N/c, c, m]
                grad_q.scatter_add_(2, iq, torch.bmm(g, sek).view(b, h, n, m))
            if grad_k is not None:
                seq = e_q.gather(2, iq).view(-1, c, m)  # [B·H·N/c, c, m]
                grad_k.scatter_add_(2, ik, torch.bmm(g.transpose(1, 2), seq).view(b, h, n, m))
        return grad_q, grad_k, None, None, None


def _duplicate_counts(sq_idx: Tensor, sk_idx: Tensor, c: int) -> Tensor:
    """For each (query, key) pair of every round's chunks, in how many rounds the pair shares a chunk: [M, c, c].

    Round r' pairs query i with key j iff i's slot in r''s query order and j's slot in r''s key order lie in the
    same chunk. Dividing a pair's correction by this count makes the sparse part live on the union 𝒮 of the
    rounds' supports, each pair counted once (the fly code's de-duplication).
    """
    b, h, r, n = sq_idx.shape
    slots = torch.arange(n, device=sq_idx.device).expand(b, h, r, n)
    chunk_q = torch.empty_like(sq_idx).scatter_(3, sq_idx, slots) // c  # [B, H, R, N]: chunk of each query
    chunk_k = torch.empty_like(sk_idx).scatter_(3, sk_idx, slots) // c  # [B, H, R, N]: chunk of each key
    # Every round's chunk for the rows of each sorted slot: [B, H, R*N, R'] -> [M, c, R'].
    cq = _gather_rows(chunk_q.transpose(2, 3), sq_idx).view(-1, c, r)
    ck = _gather_rows(chunk_k.transpose(2, 3), sk_idx).view(-1, c, r)
    # uint8 (ScatterbrainConfig allows at most 255 rounds): the division below saves this tensor for backward, at a
    # quarter of a float's size.
    counts = torch.zeros(cq.shape[0], c, c, dtype=torch.uint8, device=sq_idx.device)  # [M, c, c]
    for rr in range(r):  # one [M, c, c] comparison per round rather than an [M, c, c, R] temporary
        counts += cq[:, :, None, rr] == ck[:, None, :, rr]
    return counts


def _sorted_orders(q_buckets: Tensor, k_buckets: Tensor, mask: Tensor | None,
                   c: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """Each round's query and key positions sorted by (bucket, position), [B, H, R, N] each, and for every key slot
    of the chunks whether it is a real key ([M, 1, c], None without a mask); no gradient flows through an order."""
    b, h, r, n = q_buckets.shape
    with torch.no_grad():
        pos = torch.arange(n, device=q_buckets.device)
        # Unique keys bucket·N + position: one sort orders by bucket, ties by position.
        sq_idx = (q_buckets * n + pos).sort(dim=-1).indices  # [B, H, R, N]: query positions in sorted order
        sk_idx = (k_buckets * n + pos).sort(dim=-1).indices  # [B, H, R, N]: key positions in sorted order
        kvalid = None
        if mask is not None:
            kvalid = mask[:, None, None, :].expand(b, h, r, n).gather(3, sk_idx).view(-1, 1, c)  # [M, 1, c]
    return sq_idx, sk_idx, kvalid


def scatterbrain_attention(q: Tensor, k: Tensor, v: Tensor, q_buckets: Tensor, k_buckets: Tensor,
                           features: Tensor, bucket_size: int, mask: Tensor | None = None, *,
                           dropout: float = 0.0, training: bool = False) -> Tensor:
    """Low-rank φ(Q)(φ(K)ᵀ[V, 1]) plus the sparse correction on the LSH chunks, normalised.

    Per hash round, queries are sorted by (bucket, position) and keys by (bucket, position) (padding, in the
    last bucket, sorts last in both), both orders are cut into chunks of ``bucket_size``, and query chunk t
    pairs with key chunk t (SMYRF's balanced clusters; equal real counts keep every real query's chunk holding
    a real key). On those pairs the weight is exp(q·k/√d) − φ(q)ᵀφ(k), divided by the number of rounds pairing
    them; everything is evaluated at one common log scale per query (the max of its exact scores over all
    rounds and of the low-rank scale), which cancels in the normalisation.

    Args:
        q, k, v: [B, H, N, d], N a multiple of ``bucket_size``.
        q_buckets, k_buckets: [B, H, R, N] from ``lsh_buckets`` (padding in the bucket past every real one).
        features: ω [m, d].
        bucket_size: chunk length c.
        mask: [B, N] bool, True = real; padded keys get no weight in either part.
        dropout: dropout probability on the sparse weights (training only).
        training: apply dropout.

    Returns:
        [B, H, N, d]. Memory O(N·(m + R·c)): chunk scores [B·H·R·N/c, c, c], features [B, H, N, m].
    """
    b, h, n, d = q.shape
    r = q_buckets.shape[2]
    c = bucket_size
    if n % c:
        raise ValueError(f"sequence length {n} is not a multiple of bucket_size={c}")
    m_chunks = b * h * r * (n // c)

    # Low-rank part over all (real) keys, at log scale a_q + a_k per query.
    e_q, a_q = log_scaled_features(q, features, is_query=True)  # [B, H, N, m], [B, H, N, 1]
    e_k, a_k = log_scaled_features(k, features, is_query=False, mask=mask)  # [B, H, N, m], [B, H, 1, 1]
    v1 = with_ones_columns(v)  # [B, H, N, w]: [V, 1] (w >= d + 1), numerator and normaliser in one product
    low = torch.matmul(e_q, torch.matmul(e_k.transpose(-1, -2), v1))  # [B, H, N, w]
    low_log = (a_q + a_k).squeeze(-1)  # [B, H, N]

    sq_idx, sk_idx, kvalid = _sorted_orders(q_buckets, k_buckets, mask, c)

    # Chunked layouts: [B, H, R*N, f] -> [M, c, f], M = B·H·R·N/c chunks.
    sq = _gather_rows(q, sq_idx).view(m_chunks, c, d)
    sk = _gather_rows(k, sk_idx).view(m_chunks, c, d)
    sv = _gather_rows(v, sk_idx).view(m_chunks, c, d)
    scores = torch.bmm(sq, sk.transpose(1, 2)) * d**-0.5  # [M, c, c]: q·k/√d
    if kvalid is not None:
        scores = scores.masked_fill(~kvalid, float("-inf"))  # exp(−inf − g) = 0: padded keys get no weight
    # [M, c, c]: φ(q)ᵀφ(k)/exp(a_q + a_k) on the chunk pairs (padded keys have e_k = 0 already)
    low_s = _ChunkPairProducts.apply(e_q, e_k, sq_idx, sk_idx, c)

    with torch.no_grad():
        # One log scale g per query position: the max over rounds of its exact row maxima and the low-rank
        # scale, so that every exp below is <= 1 (the fly code's choice per round, here shared by the rounds).
        row_max = scores.amax(dim=-1).view(b, h, r, n)  # [B, H, R, N], sorted order
        row_max = torch.empty_like(row_max).scatter_(3, sq_idx, row_max)  # [B, H, R, N], positions
        g = torch.maximum(row_max.amax(dim=2), low_log)  # [B, H, N]
        g_sorted = g.gather(2, sq_idx.view(b, h, r * n)).view(m_chunks, c, 1)
        low_factor = (low_log - g).exp()  # [B, H, N]: exp(a_q + a_k − g) <= 1
        low_factor_sorted = low_factor.gather(2, sq_idx.view(b, h, r * n)).view(m_chunks, c, 1)
        counts = _duplicate_counts(sq_idx, sk_idx, c) if r > 1 else None  # [M, c, c] uint8

    # S_ij = exp(s_ij) − φ(q_i)ᵀφ(k_j), both at scale exp(−g_i); shared by the rounds that find the pair.
    weights = (scores - g_sorted).exp() - low_factor_sorted * low_s  # [M, c, c]
    if counts is not None:
        weights = weights / counts
    den_s = weights.sum(dim=-1)  # [M, c]: normaliser from the undropped weights, as the fly code
    if training and dropout > 0.0:
        weights = F.dropout(weights, p=dropout, training=True)
    num_s = torch.bmm(weights, sv)  # [M, c, d]

    # Sum the rounds' corrections into the low-rank part at each query's position.
    low = low * low_factor[..., None]  # [B, H, N, w] at scale exp(−g)
    num = low[..., :d].scatter_add(2, sq_idx.view(b, h, r * n, 1).expand(-1, -1, -1, d),
                                   num_s.view(b, h, r * n, d))  # [B, H, N, d]
    den = low[..., d].scatter_add(2, sq_idx.view(b, h, r * n), den_s.view(b, h, r * n))  # [B, H, N]
    # den > 0 for every real query (its own exact terms); a row with no real key has num = den = 0, and an
    # underflowed den is replaced by 1 so that outputs and gradients stay finite.
    tiny = torch.finfo(den.dtype).tiny ** 0.5
    den = torch.where(den > tiny, den, torch.ones_like(den))
    return num / den[..., None]  # [B, H, N, d]


@dataclass(frozen=True)
class ScatterbrainConfig(AttentionConfig):
    """Config of Scatterbrain (LSH sparse + Performer low-rank); defaults as the zoo's Reformer and Performer.

    Attributes:
        nb_features: random features m of the low-rank part (256, the Performer default).
        ortho: orthogonal random features (Performer §2.4) rather than i.i.d. Gaussian ones.
        n_hashes: LSH rounds R; the sparse support is the union of the rounds' chunk pairs (2: the fly
            SMYRF configs' ``n_hashes`` and the zoo Reformer's default).
        bucket_size: chunk length c of the sorted queries and keys (64, as the zoo's Reformer); the input is
            padded internally to a multiple of it.
        n_buckets: hash buckets, 1 or even; None = N/c rounded up to even (1 when N = c), buckets of about
            one chunk on average.
        hash_seed: None = fresh LSH rotations from torch's global RNG on every forward call (as Reformer);
            an int = rotations from a generator with this seed, the same on every call.
    """

    nb_features: int = 256
    ortho: bool = True
    n_hashes: int = 2
    bucket_size: int = 64
    n_buckets: int | None = None
    hash_seed: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("nb_features", "n_hashes", "bucket_size")
        if self.n_hashes > 255:
            raise ValueError(f"n_hashes must be at most 255 (pair counts are uint8), got {self.n_hashes!r}")
        check_n_buckets(self.n_buckets)


# complexity "n log n": the per-round sort of queries and keys, as Reformer; the chunked scores are
# O(R·N·c·(d+m)) and the low-rank part O(N·m·d), linear. pads_to_multiple: forward pads to whole chunks.


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = ("the authors' causal form (fly sbsmyrf_attention.py: causal Performer sums, keys after the query masked "
               "in SMYRF's clusters) is not causal: XBOX+ scales by the largest norms of the whole sequence and the "
               "clusters are cut from the sort of every token, so later tokens re-hash and re-cluster earlier ones")


@register(
    "scatterbrain",
    ScatterbrainConfig,
    Capabilities(approximates_softmax=True, complexity="n log n", seq_len_multiple_of=64, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/2110.15343", display="Scatterbrain", group="low rank",
)
class ScatterbrainAttention(LSHHashing, ProjectedAttention):
    """Scatterbrain: LSH-sparse exact scores plus Performer low-rank, overlap corrected; arxiv.org/abs/2110.15343.

    Paper: Chen et al., "Scatterbrain: Unifying Sparse and Low-rank Attention Approximation", NeurIPS 2021
    (Algorithm 1). out = (φ(Q)φ(K)ᵀ + S)V / (φ(Q)φ(K)ᵀ + S)1 with S_ij = exp(q_i·k_j/√d) − φ(q_i)ᵀφ(k_j) on the
    LSH support and 0 elsewhere, computed as φ(Q)(φ(K)ᵀV) plus chunked sparse products (never N×N).

    Choices where the paper is open, and deviations (the fly reference code decides where it can):
    - Separate Q and K (the paper approximates softmax(QKᵀ/√d)); the sparse support comes from SMYRF-style
      asymmetric LSH as in the fly code: XBOX+ transform (``xbox_plus``, so angle tracks q·k), then the zoo
      Reformer's angular LSH ``lsh_buckets`` (argmax([xR; −xR])) with the same rotations for F(Q) and G(K);
      the fly code hashes the XBOX+ vectors with E2LSH instead. Queries and keys are each sorted by (bucket,
      position) and cut into chunks of c; query chunk t pairs with key chunk t (no look-back, as SMYRF/fly).
    - Rotations R ~ N(0, 1) [heads, d+2, n_hashes, n_buckets/2], drawn on every forward call from torch's
      global RNG (as the zoo's Reformer), or from ``hash_seed``'s generator; n_buckets as Reformer's default.
    - Several rounds: the support is the union of the rounds' pairs and a pair found by k rounds has its
      correction divided by k in each (de-duplication, as the fly code), so S has exactly one entry per pair.
    - Low-rank part: Performer's positive orthogonal random features (``gaussian_random_features``: QR blocks
      with chi(d) norms), one ω [m, d_head] per layer shared by heads, a buffer drawn at construction and never
      redrawn (the fly code also draws once). Plain exp(ωᵀx̂ − ‖x̂‖²/2)/√m features, not the fly code's
      cosh (±ω) features, so that the low-rank part is exactly the zoo's Performer kernel; no eps (as fly).
    - Numerics: each feature row is stored as e·exp(a) with a detached log scale (per query row; one for all
      real keys of a batch row and head), and every term is evaluated at one per-query log scale g = max(exact
      row maxima over rounds, a_q + a_k), which cancels between numerator and normaliser; the fly code uses a
      scale per round and merges rounds by logsumexp weights, the same function.
    - Normaliser: the paper's (φ(Q)φ(K)ᵀ + S)1, positive for real queries; a value below √tiny (a row with no
      real key, or an underflow) is replaced by 1 (the fly code clamps it at 1e-6 instead).
    - Padding: X is zeroed at padded positions; padded keys get zero features, −inf scores, and are left out
      of M (XBOX+) and of the key log scale; padded queries and keys hash past every real bucket
      (``lsh_buckets``), so real chunks never depend on padded content.
    - Dropout (cfg.dropout, training only): on the sparse weights S, after the normaliser is taken, as the fly
      code (the low-rank part has no explicit attention matrix to drop from).
    - Projections: fused Q/K/V Linear (``QKVProjection``) and an output Linear, as the zoo's other variants.
    - No causal form (``causal`` is refused, with ``CAUSAL_NOTE``). The authors' code (HazyResearch/fly and
      HazyResearch/scatterbrain, ``src/models/attention/sbsmyrf_attention.py`` with ``causal=True``) adds the
      low-rank part's causal prefix sums (fast-transformers' ``causal_dot_product``) to the bidirectional SMYRF
      clusters with the pairs whose key is after the query masked. That sparse support depends on later tokens
      twice: XBOX+ (``hash_utils.XBOXPLUS.set_norms``) takes M² = max‖q‖² + max‖k‖² over the whole sequence, so a
      later token of larger norm changes every earlier transformed vector and its bucket; and the clusters are runs
      of c tokens of the sort of all queries (keys), so a later token sorted before an earlier one moves the
      cluster boundaries, and with them which earlier pairs are exact and which low-rank. Outputs before a token
      would move with it (and prefill + one-token steps could not reproduce them). A causal support needs another
      norm for XBOX+ and another cluster rule, which the code does not define; Reformer's fix here (the query's own
      bucket, counted back from the query in one sorted order) does not carry over, since queries and keys are
      hashed into buckets of their own, and a query's keys are not one window of a single sorted order.
    - Precision (a numerical choice, not the paper's): between the projections everything runs in float32 at
      least, with autocast off. S is the difference of two nearly equal estimates of the same scores (the exact
      exp and the low-rank φᵀφ on the support) and the scores enter through exp, which bf16's 8 bits serve badly:
      float32 lowers the bf16-autocast forward's error against float64, mean and largest (measured: docs/results/
      2026-11-26-cpu-2core.md, "From the code: bf16 under autocast"). And under autocast the chunk
      products came back bf16 while the features stayed float32, which CUDA's backward refused ("expected scalar
      type BFloat16 but found Float"). A bf16 or fp16 layer gets its output in its own dtype.
    """

    cfg: ScatterbrainConfig
    hash_extra_dims = 2  # the rotations hash the XBOX+ vectors, [B, H, N, d+2]

    def __init__(self, cfg: ScatterbrainConfig) -> None:
        super().__init__(cfg)
        self.register_buffer("features", gaussian_random_features(cfg.nb_features, cfg.head_dim, cfg.ortho))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n_in = x.shape[1]
        c = cfg.bucket_size
        n = -(-n_in // c) * c
        x = zero_padding(x, mask)
        x, mask = pad_to_length(x, mask, n)  # [B, N, D], mask [B, N] (None only if unpadded and unmasked)
        q, k, v = self.proj(x)  # [B, H, N, dh] each
        n_buckets = self.n_buckets_for(n)
        # Float32 at least, with autocast off, from the hash to the normalised output (see the class docstring).
        ft = torch.promote_types(q.dtype, torch.float32)
        with no_autocast(x.device):
            q, k, v = q.to(ft), k.to(ft), v.to(ft)
            rotations = self.draw_rotations(n_buckets, x.device, ft)
            fq, gk = xbox_plus(q, k, mask)  # [B, H, N, dh+2] each
            q_buckets = lsh_buckets(fq, rotations, cfg.n_hashes, n_buckets, mask)  # [B, H, R, N]
            k_buckets = lsh_buckets(gk, rotations, cfg.n_hashes, n_buckets, mask)  # [B, H, R, N]
            y = scatterbrain_attention(q, k, v, q_buckets, k_buckets, self.features.to(ft), c, mask,
                                       dropout=cfg.dropout, training=self.training)  # [B, H, N, dh]
        return self.out(merge_heads(y.to(x.dtype))[:, :n_in])
