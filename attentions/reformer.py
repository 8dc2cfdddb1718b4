"""Reformer LSH attention (Kitaev, Kaiser, Levskaya 2020, https://arxiv.org/abs/2001.04451), §2.

Shared-QK attention restricted to the keys that land in the same angular-LSH bucket as the query: hash,
sort by bucket, cut the sorted sequence into chunks, attend within a chunk and one chunk back, repeat for
``n_hashes`` independent hash rounds and merge the rounds with logsumexp weights. Reference code: trax
``LSHSelfAttention`` (https://github.com/google/trax, ``trax/layers/research/efficient_attention.py``) and the
Hugging Face port (``transformers/models/reformer/modeling_reformer.py``).

The pure functions ``lsh_buckets`` and ``lsh_attention`` are the whole algorithm; ``ReformerAttention`` adds
the projections, the padding to a whole number of chunks and the per-call random rotations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import fill_masked, masked_fill_value, merge_heads, no_autocast, pad_to_length, split_heads
from .registry import AttentionConfig, Capabilities, register, register_preset

__all__ = [
    "LSHHashing",
    "ReformerAttention",
    "ReformerConfig",
    "check_n_buckets",
    "lsh_attention",
    "lsh_buckets",
    "self_score",
]


def self_score(dtype: torch.dtype) -> float:
    """Score a query gives itself: −1e5 as trax (−1e4 where the dtype cannot hold it, as HF for fp16).

    Large and finite, not −inf: a query whose every other candidate is padding attends to itself.
    It stays above ``masked_fill_value`` (the dtype's minimum), so padding still loses to self.
    """
    return -1e5 if torch.finfo(dtype).max > 1e5 else -1e4


def lsh_buckets(qk: Tensor, rotations: Tensor | None, n_hashes: int, n_buckets: int,
                mask: Tensor | None = None) -> Tensor:
    """Angular LSH of the shared query/key vectors, h(x) = argmax([xR; −xR]) per round (paper §2, Fig. 1).

    Args:
        qk: shared query/key vectors [B, H, N, d].
        rotations: random rotations R [H, d, n_hashes, n_buckets/2] (one per head and round, shared over
            the batch); None when ``n_buckets == 1`` (every token in bucket 0).
        n_hashes: number of hash rounds.
        n_buckets: number of buckets (1 or even).
        mask: [B, N] bool, True = real token; padded tokens get bucket ``n_buckets``, past every real
            bucket, so they sort after all real tokens and cannot move a real token to another chunk.

    Returns:
        Buckets [B, H, n_hashes, N], int64 in [0, n_buckets] (n_buckets = padding).
    """
    b, h, n, _ = qk.shape
    with torch.no_grad():  # argmax has no gradient; nothing of this is kept for backward
        if rotations is None:
            buckets = torch.zeros(b, h, n_hashes, n, dtype=torch.long, device=qk.device)
        else:
            half = n_buckets // 2
            # One GEMM for all rounds: [B, H, N, d] @ [H, d, R*nb/2] -> [B, H, N, R*nb/2].
            rot = qk.detach() @ rotations.reshape(h, -1, n_hashes * half)
            rot = rot.view(b, h, n, n_hashes, half)  # [B, H, N, R, nb/2]
            # argmax over [xR; −xR] without materialising the concatenation: the largest of max(xR) and
            # −min(xR); ties go to the first half, as argmax over the concatenation would.
            hi, i_hi = rot.max(dim=-1)  # [B, H, N, R]
            lo, i_lo = rot.min(dim=-1)  # [B, H, N, R]
            buckets = torch.where(hi >= -lo, i_hi, i_lo + half).transpose(2, 3).contiguous()  # [B, H, R, N]
        if mask is not None:
            buckets = buckets.masked_fill(~mask[:, None, None, :], n_buckets)
    return buckets


class _ChunkAttention(torch.autograd.Function):
    """Attention of each chunk's queries over its candidate keys, softmax normalised per chunk row.

    Forward: S = q kᵀ [M, c, kc]; the own-chunk diagonal (self) is set to ``self_value`` and invalid keys
    to ``fill``; p = exp(S − lse); o = dropout(p) v. Outputs o [M, c, d], z [M, c] (the row sums of p, 1 by
    construction, returned so the caller's merge can differentiate through them) and lse [M, c] (not
    differentiable). The lse is a constant in this function: p = exp(S − lse) and z = Σ p with lse held fixed
    are what the caller's merge Σ_r a_r o_r / Σ_r a_r z_r needs for exact gradients (see ``lsh_attention``).

    Written as one autograd Function so that backward is dS = p ∘ (dp + dz) with the self diagonal zeroed
    (its score is a constant) — one score-sized temporary — and forward keeps only p and a bool dropout mask
    (autograd through masked_fill_/diagonal().fill_/exp_/dropout kept or cloned three or four score-sized
    tensors and spent as many passes over them).
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, kvalid: Tensor | None, self_value: float, fill: float,
                dropout: float) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        s = torch.bmm(q, k.transpose(1, 2))  # [M, c, kc]
        # Self is on the diagonal of the chunk's own block (the first c keys): a position occurs once per
        # round and the look-back block is another chunk. The value replaces the score, as trax/HF.
        s.diagonal(dim1=1, dim2=2).fill_(self_value)
        if kvalid is not None:
            s.masked_fill_(~kvalid[:, None, :], fill)
        m = s.amax(dim=-1, keepdim=True)  # [M, c, 1]
        p = s.sub_(m).exp_()  # [M, c, kc], in place: s is not needed again
        total = p.sum(dim=-1, keepdim=True)  # [M, c, 1]; >= 1 since the row max gives exp(0)
        p.div_(total)
        lse = (m + total.log()).squeeze(-1)  # [M, c]
        drop = None
        if dropout > 0.0:
            drop = torch.empty_like(p, dtype=torch.bool).bernoulli_(dropout)  # [M, c, kc], True = dropped
            o = torch.bmm(torch.where(drop, 0.0, p), v).mul_(1.0 / (1.0 - dropout))  # [M, c, d]
        else:
            o = torch.bmm(p, v)  # [M, c, d]
        ctx.save_for_backward(q, k, v, p, drop)
        ctx.dropout = dropout
        ctx.mark_non_differentiable(lse)
        z = torch.ones_like(lse)  # Σ_j p_j, equal to 1 after the division above
        return o, z, lse

    @staticmethod
    def backward(ctx, g_o: Tensor, g_z: Tensor | None, _g_lse: Tensor | None):  # type: ignore[override]
        q, k, v, p, drop = ctx.saved_tensors
        if drop is None:
            dv = torch.bmm(p.transpose(1, 2), g_o)  # [M, kc, d]
            dp = torch.bmm(g_o, v.transpose(1, 2))  # [M, c, kc]
        else:
            g_o = g_o * (1.0 / (1.0 - ctx.dropout))  # the dropout scale, on [M, c, d] rather than [M, c, kc]
            dv = torch.bmm(torch.where(drop, 0.0, p).transpose(1, 2), g_o)  # [M, kc, d]
            dp = torch.bmm(g_o, v.transpose(1, 2)).masked_fill_(drop, 0.0)  # [M, c, kc]
        if g_z is not None:
            dp.add_(g_z[..., None])
        ds = dp.mul_(p)  # dS = p ∘ (dp + dz): ∂p_j/∂S_j = p_j with lse constant; invalid keys have p = 0
        ds.diagonal(dim1=1, dim2=2).zero_()  # the self score is a constant
        dq = torch.bmm(ds, k)  # [M, c, d]
        dk = torch.bmm(ds.transpose(1, 2), q)  # [M, kc, d]
        return dq, dk, dv, None, None, None, None


def lsh_attention(qk: Tensor, v: Tensor, buckets: Tensor, n_buckets: int, bucket_size: int, *,
                  padded: bool = True, dropout: float = 0.0, training: bool = False) -> Tensor:
    """Chunked LSH attention of every hash round, merged by logsumexp weights.

    Per round: stable order by (bucket, position); chunks of ``bucket_size`` consecutive sorted tokens;
    each chunk's queries attend to the chunk's keys and the previous chunk's keys (the first chunk looks
    back at the last chunk of the same round; with a single chunk there is nothing to look back at).
    Scores are q·k/‖k‖; a query's score for itself is ``self_score``; padded keys get ``masked_fill_value``.
    Rounds are merged as out = Σ_r exp(lse_r − logsumexp_r lse_r) · out_r, with no de-duplication of a key
    found in several rounds (the paper's simple version, as trax's LSHSelfAttention and HF).

    The merge is computed as Σ_r a_r·o_r / Σ_r a_r·z_r with a_r = softmax_r(lse_r) held constant and
    z_r = Σ_j exp(S_rj − lse_r) (= 1): the same function of the scores as the paper's merge for any
    constant lse (it cancels), hence the same gradient, without differentiating through a logsumexp.

    Args:
        qk: shared query/key vectors [B, H, N, d]; N must be a multiple of ``bucket_size``.
        v: values [B, H, N, d].
        buckets: [B, H, R, N] from ``lsh_buckets`` (value ``n_buckets`` marks padding).
        n_buckets: number of real buckets.
        bucket_size: chunk length c.
        padded: whether any bucket may equal ``n_buckets`` (skips the key-padding fill when False).
        dropout: dropout probability on the attention weights.
        training: apply dropout.

    Returns:
        [B, H, N, d]. Memory is O(R·N·c): the scores are [B·H·R·N/c, c, 2c], never N×N.
    """
    b, h, n, d = qk.shape
    r = buckets.shape[2]
    c = bucket_size
    nc = n // c
    if nc * c != n:
        raise ValueError(f"sequence length {n} is not a multiple of bucket_size={c}")
    m = b * h * r * nc  # chunks of all batch rows, heads and rounds: the bmm batch
    with torch.no_grad():
        # Unique integer keys bucket·N + position: one sort orders by bucket, ties by position.
        sorted_key, sidx = (buckets * n + torch.arange(n, device=qk.device)).sort(dim=-1)  # [B, H, R, N]
        # Sorted slots holding a real token (padding was given bucket n_buckets, so it sorts last).
        kvalid = (sorted_key < n_buckets * n).view(b, h, r, nc, c) if padded else None  # [B, H, R, nc, c]
        widx = sidx.view(b, h, r, nc, c)  # positions of each chunk's keys
        if nc > 1:
            # Look one chunk back; roll wraps chunk 0 around to the last chunk of the same round.
            widx = torch.cat((widx, widx.roll(1, dims=3)), dim=4)  # [B, H, R, nc, 2c]
            if kvalid is not None:
                kvalid = torch.cat((kvalid, kvalid.roll(1, dims=3)), dim=4)  # [B, H, R, nc, 2c]
    kc = widx.shape[-1]
    # Gathers write the chunked layouts directly: queries [B, H, R*N, d], and the keys and values of every
    # chunk's window [B, H, R*nc*kc, d], so the look-back costs no extra copy.
    sq = qk.gather(2, sidx.view(b, h, r * n, 1).expand(-1, -1, -1, d))
    wflat = widx.reshape(b, h, r * nc * kc, 1).expand(-1, -1, -1, d)
    # Keys are the unit-length shared vectors (paper §2 "Shared-QK"; trax/HF normalise the same way).
    sk = F.normalize(qk, dim=-1, eps=1e-6).gather(2, wflat)
    sv = v.gather(2, wflat)
    # The core runs in qk's dtype with autocast off, so that forward and its hand-written backward agree on
    # dtypes (under autocast the normalised keys would otherwise come out in float32).
    with no_autocast(qk.device):
        o, z, lse = _ChunkAttention.apply(
            sq.view(m, c, d),  # [M, c, d]
            sk.view(m, kc, d).to(qk.dtype),  # [M, kc, d]
            sv.view(m, kc, d).to(qk.dtype),  # [M, kc, d]
            None if kvalid is None else kvalid.reshape(m, kc),
            self_score(qk.dtype),
            masked_fill_value(qk.dtype),
            dropout if training else 0.0,
        )
    # Merge weights per position: lse back to positions [B, H, R, N], softmax over rounds, and back to
    # sorted order so that each sorted output row is weighted before it is scattered home.
    with torch.no_grad():
        lse = torch.empty_like(lse.view(b, h, r, n)).scatter_(3, sidx, lse.view(b, h, r, n))  # [B, H, R, N]
        a = lse.softmax(dim=2).gather(3, sidx).view(b, h, r * n)  # [B, H, R*N], sorted order
    # Σ_r over rounds happens in the scatter_add: each position receives one row per round.
    num = o.view(b, h, r * n, d) * a[..., None]  # [B, H, R*N, d]
    num = qk.new_zeros(b, h, n, d).scatter_add(2, sidx.view(b, h, r * n, 1).expand(-1, -1, -1, d), num)
    den = qk.new_zeros(b, h, n).scatter_add(2, sidx.view(b, h, r * n), z.view(b, h, r * n) * a)  # [B, H, N]
    return num / den[..., None]  # [B, H, N, d]


class LSHHashing:
    """Bucket count and per-call random rotations of a module that hashes with ``lsh_buckets`` (Reformer, Scatterbrain).

    A mixin for an ``nn.Module`` whose ``cfg`` has ``heads``, ``head_dim``, ``n_hashes``, ``bucket_size``,
    ``n_buckets`` and ``hash_seed`` (as ``ReformerConfig``). ``hash_extra_dims``: how much wider than ``head_dim``
    the hashed vectors are (0: Reformer's shared QK; 2: Scatterbrain's XBOX+ vectors).
    """

    cfg: Any
    hash_extra_dims: int = 0

    def n_buckets_for(self, n: int) -> int:
        """Buckets for a sequence of n positions (n a multiple of bucket_size): ``n_buckets``, or by default N/c
        rounded up to even (1 when N = c), so buckets average about one chunk."""
        if self.cfg.n_buckets is not None:
            return self.cfg.n_buckets
        chunks = n // self.cfg.bucket_size
        return chunks if chunks <= 1 else chunks + chunks % 2

    def draw_rotations(self, n_buckets: int, device: torch.device, dtype: torch.dtype) -> Tensor | None:
        """Random rotations [H, d + hash_extra_dims, n_hashes, n_buckets/2] for one forward call (None for one
        bucket): from torch's global RNG, or from a generator seeded with ``hash_seed``.

        Drawn in float32 and cast to ``dtype``, so that a seed gives the same rotations, hence the same buckets, at
        every precision (torch draws other normal values in float64 than in float32 from one seed): a float64
        layer is then the exact counterpart of a float32 or bf16 one.
        """
        cfg = self.cfg
        if n_buckets == 1:
            return None
        gen = None
        if cfg.hash_seed is not None:
            gen = torch.Generator(device=device).manual_seed(cfg.hash_seed)
        shape = (cfg.heads, cfg.head_dim + self.hash_extra_dims, cfg.n_hashes, n_buckets // 2)
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def check_n_buckets(n_buckets: int | None) -> None:
    """Raise ValueError unless ``n_buckets`` is None, 1 or a positive even number (angular LSH needs nb/2 rotations)."""
    if n_buckets is not None and (n_buckets <= 0 or (n_buckets != 1 and n_buckets % 2)):
        raise ValueError(f"n_buckets must be None, 1 or a positive even number, got {n_buckets!r}")


@dataclass(frozen=True)
class ReformerConfig(AttentionConfig):
    """Config of Reformer LSH attention; defaults: 2 hash rounds, chunks of 64 (HF's default chunk length).

    Attributes:
        n_hashes: rounds of hashing merged by logsumexp (paper Fig. 4: 1, 2, 4, 8; more = closer to full).
        bucket_size: chunk length c of the sorted sequence (trax ``chunk_len``, HF ``lsh_attn_chunk_length``);
            the input is padded internally to a multiple of it. With ``n_buckets=None`` it is also the
            average bucket size.
        n_buckets: number of hash buckets, 1 or even. None = from the length N padded to a multiple of c:
            N / c, rounded up to even (1 when N = c), so buckets average about one chunk.
        hash_seed: None = fresh rotations from torch's global RNG on every forward call (paper, trax);
            an int = rotations drawn from a generator with this seed, the same on every call.
    """

    n_hashes: int = 2
    bucket_size: int = 64
    n_buckets: int | None = None
    hash_seed: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("n_hashes", "bucket_size")
        check_n_buckets(self.n_buckets)


# pads_to_multiple: forward pads to a whole number of chunks (bucket_size) and hashes the padding past every
# real bucket.


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "reformer",
    ReformerConfig,
    Capabilities(approximates_softmax=True, complexity="n log n", seq_len_multiple_of=64, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/2001.04451",
)
class ReformerAttention(LSHHashing, nn.Module):
    """Reformer LSH self-attention (shared QK, n_hashes rounds of angular LSH, chunked attention).

    Paper: Reformer: The Efficient Transformer, https://arxiv.org/abs/2001.04451 (§2, LSH attention).
    forward: X -> shared QK and V projections -> hash rounds -> sort by (bucket, position) -> chunks attend
    to themselves and one chunk back -> unsort -> logsumexp merge of rounds -> output projection.

    Choices where the paper is open, and deviations:
    - Rotations R ~ N(0, 1) of shape [heads, head_dim, n_hashes, n_buckets/2] (per head, shared over the
      batch, as HF), drawn on every forward call from torch's global RNG (paper/trax: fresh per call), so
      ``torch.manual_seed`` fixes them (they are forward's first draw, before dropout); ``hash_seed`` gives
      fixed rotations from a private generator instead. Nothing is a buffer. One bucket: no rotation drawn.
    - n_buckets by default = N/c (N padded to a multiple of c = bucket_size) rounded up to even, so it follows
      the input length: real outputs never depend on padded content, but a short input and the same input
      padded to a different number of chunks hash into different bucket counts.
    - Scores q·k/‖k‖ with no further 1/√d, as trax and HF (keys L2-normalised, queries not); the norm uses
      eps 1e-6 so a zero vector has finite gradients.
    - Self-exclusion replaces a query's own score with −1e5 (−1e4 for fp16), as trax/HF, not −inf.
    - Look-one-back wraps within a round (chunk 0 reads the round's last chunk); trax and HF roll over all
      rounds concatenated, so there round r's first chunk reads round r−1's last chunk. Ours keeps rounds
      independent, as the paper's per-round sets P̃⁽ʳ⁾. With a single chunk there is no look-back (it would
      read the chunk itself twice).
    - Keys found in several rounds are counted once per round (no de-duplication), as trax's
      LSHSelfAttention and HF; the paper's de-duplicated variant is not implemented.
    - Padding (user mask and the internal padding to a multiple of c) is hashed to an extra last bucket, so
      it sorts after every real token and real chunks are the same whatever the padded content; padded keys
      get ``masked_fill_value``. Self always remains a candidate, so a real query's softmax is never empty.
    - Hashing costs O(N · n_buckets · d) per head and round (one GEMM with R), as in trax/HF: with
      n_buckets = N/c that is N²d/c, whose FLOPs reach the chunked attention's only at N ≈ 8c² (32k for
      c = 64); its [B, H, N, R·n_buckets/2] temporary is freed before the scores exist, kept for no backward.
    - The merge is evaluated as Σ_r a_r·o_r / Σ_r a_r·z_r with a_r = softmax_r(lse_r) held constant and
      z_r the (unit) row sums of exp(S − lse_r): the same function and gradient as the paper's
      Σ_r exp(lse_r − logsumexp(lse))·o_r, with a hand-written backward for the chunk softmax (one score-sized
      tensor and a bool dropout mask kept for backward).
    - No causal mask (encoder use). Dropout (Bernoulli, scaled 1/(1−p)) on each round's attention weights
      before the merge, as trax.
    - Projections: one fused Linear for the shared QK and V (with bias), and an output Linear, as vanilla.
    """

    def __init__(self, cfg: ReformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 2 * cfg.dim)  # shared QK, then V
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n_in, _ = x.shape
        c = cfg.bucket_size
        n = -(-n_in // c) * c
        x, mask = pad_to_length(x, mask, n)  # [B, N, D], mask [B, N] (None only if unpadded and unmasked)
        qk, v = (split_heads(t, cfg.heads) for t in self.qkv(x).chunk(2, dim=-1))  # [B, H, N, d] each
        n_buckets = self.n_buckets_for(n)
        rotations = self.draw_rotations(n_buckets, x.device, qk.dtype)
        buckets = lsh_buckets(qk, rotations, cfg.n_hashes, n_buckets, mask)  # [B, H, R, N]
        y = lsh_attention(qk, v, buckets, n_buckets, c, padded=mask is not None,
                          dropout=cfg.dropout, training=self.training)  # [B, H, N, d]
        return self.out(merge_heads(y)[:, :n_in])

    def softmax_reference(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Full shared-QK attention, the function the hash rounds sample: every query scores every real key
        q·k/‖k‖ (no 1/√d, as forward), its own score replaced by the self-exclusion value, softmax, times V."""
        qk, v = (split_heads(t, self.cfg.heads) for t in self.qkv(x).chunk(2, dim=-1))  # [B, H, N, d] each
        scores = qk @ F.normalize(qk, dim=-1, eps=1e-6).transpose(-1, -2)  # [B, H, N, N]
        n = x.shape[1]
        eye = torch.eye(n, dtype=torch.bool, device=x.device)
        scores = scores.masked_fill(eye, self_score(scores.dtype))
        if mask is not None:
            scores = fill_masked(scores, mask[:, None, None, :])
        return self.out(merge_heads(scores.softmax(-1) @ v))


register_preset("reformer_h4", "reformer", n_hashes=4, description="Reformer LSH attention, 4 hash rounds.")
