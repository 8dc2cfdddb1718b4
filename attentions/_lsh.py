"""Angular-LSH attention, the algorithm Reformer (Kitaev, Kaiser, Levskaya 2020, https://arxiv.org/abs/2001.04451, §2)
and Scatterbrain's sparse part share: hash (``lsh_buckets``), attend within sorted chunks (``lsh_attention``,
bidirectional or causal), and the per-call random rotations (``LSHHashing``).

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one): :mod:`attentions.reformer`
adds the projections, the padding and decoding; :mod:`attentions.scatterbrain` its low-rank part. Reference code: trax
``LSHSelfAttention`` (``trax/layers/research/efficient_attention.py``) and the Hugging Face port.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import masked_fill_value, no_autocast

__all__ = ["LSHHashing", "check_n_buckets", "lsh_attention", "lsh_buckets", "self_score"]


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

    Forward: S = q kᵀ [M, c, kc]; the own-chunk diagonal (self) is set to ``self_value``, and the entries that
    ``allowed`` (broadcastable to [M, c, kc]) leaves out to ``fill``; p = exp(S − lse); o = dropout(p) v.
    Outputs o [M, c, d], z [M, c] (the row sums of p, 1 by construction, returned so the caller's merge can
    differentiate through them) and lse [M, c] (not differentiable). The lse is a constant in this function:
    p = exp(S − lse) and z = Σ p with lse held fixed are what the caller's merge Σ_r a_r o_r / Σ_r a_r z_r needs
    for exact gradients (see ``lsh_attention``).

    Written as one autograd Function so that backward is dS = p ∘ (dp + dz) with the self diagonal zeroed
    (its score is a constant) — one score-sized temporary — and forward keeps only p and a bool dropout mask
    (autograd through masked_fill_/diagonal().fill_/exp_/dropout kept or cloned three or four score-sized
    tensors and spent as many passes over them).
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, self_value: float, fill: float,
                dropout: float) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        s = torch.bmm(q, k.transpose(1, 2))  # [M, c, kc]
        # Self is on the diagonal of the chunk's own block (the first c keys): a position occurs once per
        # round and the look-back block is another chunk. The value replaces the score, as trax/HF.
        s.diagonal(dim1=1, dim2=2).fill_(self_value)
        if allowed is not None:
            s.masked_fill_(~allowed, fill)
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


def _causal_window(sorted_buckets: Tensor, nc: int, c: int) -> Tensor:
    """Which keys of each chunk's window a query reads causally: [B, H, R, nc, c, kc] bool (kc = 2c, or c with one
    chunk), True where the key is in the query's bucket and 0 to c sorted slots before it.

    Within a bucket the sorted order is by position, so these are the query itself and the c latest earlier tokens
    of its bucket: a set fixed by the tokens up to the query, whatever comes after it (a later token moves the
    sorted slots, not the order within a bucket). Padding has a bucket of its own, so no real query reads it.

    Args:
        sorted_buckets: the bucket of every sorted slot, [B, H, R, N], N = nc·c.
        nc: chunks per round.
        c: chunk length (and the window: c tokens back).
    """
    b, h, r, _ = sorted_buckets.shape
    q_bucket = sorted_buckets.view(b, h, r, nc, c)  # [B, H, R, nc, c]
    slot = torch.arange(nc * c, device=sorted_buckets.device).view(nc, c)  # [nc, c]: each query's sorted slot
    k_bucket, k_slot = q_bucket, slot
    if nc > 1:  # the keys of each chunk's window: its own chunk, then the previous one (as lsh_attention gathers)
        k_bucket = torch.cat((q_bucket, q_bucket.roll(1, dims=3)), dim=4)  # [B, H, R, nc, 2c]
        k_slot = torch.cat((slot, slot.roll(1, dims=0)), dim=1)  # [nc, 2c]
    back = slot[:, :, None] - k_slot[:, None, :]  # [nc, c, kc]: slots from the key up to the query
    recent = (back >= 0) & (back <= c)  # the wrapped look-back of chunk 0 is negative: never read
    return (q_bucket[..., :, None] == k_bucket[..., None, :]) & recent  # [B, H, R, nc, c, kc]


def lsh_attention(qk: Tensor, v: Tensor, buckets: Tensor, n_buckets: int, bucket_size: int, *,
                  padded: bool = True, causal: bool = False, dropout: float = 0.0, training: bool = False) -> Tensor:
    """Chunked LSH attention of every hash round, merged by logsumexp weights.

    Per round: stable order by (bucket, position); chunks of ``bucket_size`` consecutive sorted tokens;
    each chunk's queries attend to the chunk's keys and the previous chunk's keys (the first chunk looks
    back at the last chunk of the same round; with a single chunk there is nothing to look back at).
    ``causal``: a query attends instead to the keys of its own bucket that sit 0 to c slots before it in the
    sorted order: itself and the c latest earlier tokens of its bucket (the sorted order is by position within a
    bucket), all inside its chunk and the previous one, so the same chunked products compute it; which keys a
    query reads then depends on the tokens up to it only (see ``ReformerAttention``).
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
        causal: the causal window of each query's bucket, rather than the whole two chunks.
        dropout: dropout probability on the attention weights.
        training: apply dropout.

    Returns:
        [B, H, N, d]. Memory is O(R·N·c): the scores are [B·H·R·N/c, c, 2c] (causal: and a bool mask of that
        shape), never N×N.
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
        # (The causal window reads the query's own bucket only, so it never reaches padding.)
        kvalid = (sorted_key < n_buckets * n).view(b, h, r, nc, c) if padded and not causal else None
        widx = sidx.view(b, h, r, nc, c)  # positions of each chunk's keys
        if nc > 1:
            # Look one chunk back; roll wraps chunk 0 around to the last chunk of the same round.
            widx = torch.cat((widx, widx.roll(1, dims=3)), dim=4)  # [B, H, R, nc, 2c]
            if kvalid is not None:
                kvalid = torch.cat((kvalid, kvalid.roll(1, dims=3)), dim=4)  # [B, H, R, nc, 2c]
    kc = widx.shape[-1]
    if causal:
        allowed = _causal_window(sorted_key // n, nc, c).reshape(m, c, kc)  # [M, c, kc]
    else:
        allowed = None if kvalid is None else kvalid.reshape(m, 1, kc)  # [M, 1, kc]: real keys, every query
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
            allowed,
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
