"""Reformer LSH attention (Kitaev, Kaiser, Levskaya 2020, https://arxiv.org/abs/2001.04451), §2.

Shared-QK attention restricted to the keys that land in the same angular-LSH bucket as the query: hash,
sort by bucket, cut the sorted sequence into chunks, attend within a chunk and one chunk back, repeat for
``n_hashes`` independent hash rounds and merge the rounds with logsumexp weights. Reference code: trax
``LSHSelfAttention`` (https://github.com/google/trax, ``trax/layers/research/efficient_attention.py``) and the
Hugging Face port (``transformers/models/reformer/modeling_reformer.py``).

The pure functions ``lsh_buckets`` and ``lsh_attention`` (:mod:`attentions._lsh`, shared with Scatterbrain) are the
whole algorithm (bidirectional or causal); ``ReformerAttention`` adds the projections, the padding to a whole number
of chunks, the per-call random rotations and decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._decode import KVCache, check_capacity
from ._lsh import LSHHashing, check_n_buckets, lsh_attention, lsh_buckets, self_score
from .base import fill_masked, merge_heads, pad_to_length, split_heads
from .registry import AttentionConfig, Capabilities, register, register_preset

__all__ = ["LSHState", "ReformerAttention", "ReformerConfig"]


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


@dataclass
class LSHState:
    """Decoding state of causal LSH attention.

    Attributes:
        cache: every token's unit-length shared key and its value (a :class:`~attentions._decode.KVCache`).
        buckets: [B, H, R, C] int64, every token's bucket in each round (``n_buckets`` for prompt padding).
        rotations: the random rotations the prompt was hashed with, kept so that every step hashes with the same
            draw ([H, d, R, n_buckets/2]; None with one bucket).
        n_buckets: the bucket count of a forward over the whole capacity.
    """

    cache: KVCache
    buckets: Tensor
    rotations: Tensor | None
    n_buckets: int


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("per hash round, each query reads the bucket_size latest earlier tokens of its own bucket (itself only "
               "when alone); the paper's rule (keys after the query masked in the sorted chunks) lets later tokens' "
               "buckets move the chunks, so the window is narrowed to the query's bucket")
DECODE_NOTE = ("every token's shared key and value and its bucket in each round (a KV cache), and the prompt's "
               "rotations")


@register(
    "reformer",
    ReformerConfig,
    Capabilities(approximates_softmax=True, complexity="n log n", seq_len_multiple_of=64, pads_to_multiple=True,
                 causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2001.04451", display="Reformer", group="hashing / learned",
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
    - Dropout (Bernoulli, scaled 1/(1−p)) on each round's attention weights before the merge, as trax.
    - Projections: one fused Linear for the shared QK and V (with bias), and an output Linear, as vanilla.

    Causal (``causal=True``): in every round, query i reads the keys of its own bucket at positions j <= i that
    are at most c = bucket_size slots before it in the sorted order, that is itself (the self score as above, so
    only when nothing else is there) and the c latest earlier tokens of its bucket; rounds merge as above.
    The paper (§2, "Causal masking for shared-QK attention") and trax (``LSHSelfAttention(causal=True)``,
    ``mask_self_attention``) keep the bidirectional chunks and mask the keys after the query by position; we
    checked trax's ``trax/layers/research/efficient_attention.py``, as lucidrains' ``reformer-pytorch`` does the
    same. That rule is not causal: the chunks are cut from the sort of the whole sequence, and a later token
    hashed to a smaller bucket shifts every slot after it by one, so which earlier keys a query's chunk holds
    depends on later tokens (their buckets leak into earlier outputs, and prefill + one-token steps cannot
    reproduce it). Restricting the window to the query's bucket (the paper's P_i = {j : h(q_i) = h(k_j)} of
    eq. 3 with j <= i, the ideal its chunks approximate) and counting it from the query back (c latest, the
    window that always fits in the query's chunk and the previous one, so the computation and its cost are the
    bidirectional form's) makes each query's keys a function of the tokens up to it. Deviations from the paper,
    then: a query does not read a previous-bucket token that happens to share its chunk, and reads at most c
    earlier tokens of its bucket (the paper's chunks give it c to 2c − 1 slots, of any bucket).
    Decoding (``prefill``/``step``): an :class:`LSHState`: a KV cache of the unit-length shared keys and values, each
    token's bucket per round, and the rotations the prompt was hashed with; a step hashes its token with them and
    reads, per round, the c latest cached tokens of its bucket and itself (O(C·R) per step, as a KV cache). The
    bucket count is that of a forward over ``capacity`` tokens (n_buckets_for of the capacity padded to chunks),
    and the rotations are drawn at prefill as a forward draws them: prefill + steps equal the causal forward over
    ``capacity`` tokens drawn from the same RNG state (or with ``hash_seed``).
    """

    def __init__(self, cfg: ReformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 2 * cfg.dim)  # shared QK, then V
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        c = self.cfg.bucket_size
        y, _ = self._heads(x, mask, self.n_buckets_for(-(-x.shape[1] // c) * c), causal=self.cfg.causal)
        return self.out(merge_heads(y))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, LSHState]:
        """The causal form over a prompt x [B, P, D], hashed as a forward over ``capacity`` tokens is, and the
        decoding state for ``capacity`` tokens (see ``_decode``)."""
        cfg = self.cfg
        b, n, _ = x.shape
        check_capacity(capacity, n)
        c = cfg.bucket_size
        n_buckets = self.n_buckets_for(-(-capacity // c) * c)
        y, (qk, v, buckets, rotations) = self._heads(x, mask, n_buckets, causal=True)  # [B, H, P, d], ...
        cache = KVCache.empty(qk, cfg.heads, capacity, cfg.head_dim)
        cache.append(F.normalize(qk, dim=-1, eps=1e-6), v, mask)  # past tokens are only ever keys: unit length
        all_buckets = buckets.new_full((b, cfg.heads, cfg.n_hashes, capacity), n_buckets)  # [B, H, R, C]
        all_buckets[..., :n] = buckets
        return self.out(merge_heads(y)), LSHState(cache, all_buckets, rotations, n_buckets)

    def step(self, x: Tensor, state: LSHState) -> tuple[Tensor, LSHState]:
        """One token x [B, 1, D]: hashed with the prompt's rotations; in each round it reads the c latest cached
        tokens of its bucket and itself; the rounds merge by their logsumexp."""
        cfg = self.cfg
        qk, v = (split_heads(t, cfg.heads) for t in self.qkv(x).chunk(2, dim=-1))  # [B, H, 1, d] each
        bucket = lsh_buckets(qk, state.rotations, cfg.n_hashes, state.n_buckets)  # [B, H, R, 1]
        cache = state.cache
        cache.append(F.normalize(qk, dim=-1, eps=1e-6), v)
        t = cache.length - 1  # the new token's position
        state.buckets[..., t] = bucket[..., 0]
        keys, values, real = cache.keys()  # [B, H, t+1, d] x2, [B, t+1]
        scores = (qk @ keys.transpose(-1, -2)).squeeze(2)  # [B, H, t+1]: q·k/‖k‖
        scores[..., t] = self_score(scores.dtype)  # the token's own score: read only when alone
        same = (state.buckets[..., : t + 1] == bucket) & real[:, None, None, :]  # [B, H, R, t+1]
        # itself and the c latest earlier tokens of its bucket: at most c + 1 of them from the end
        latest = same.flip(-1).cumsum(-1).flip(-1) <= cfg.bucket_size + 1  # [B, H, R, t+1]
        rounds = fill_masked(scores[:, :, None].expand_as(same), same & latest)  # [B, H, R, t+1]
        lse = rounds.logsumexp(dim=-1, keepdim=True)  # [B, H, R, 1]
        weights = F.dropout((rounds - lse).exp(), p=cfg.dropout, training=self.training)  # [B, H, R, t+1]
        y = (lse.softmax(dim=2) * (weights @ values)).sum(dim=2, keepdim=True)  # [B, H, 1, d]: rounds merged
        return self.out(merge_heads(y)), state

    def _heads(self, x: Tensor, mask: Tensor | None, n_buckets: int, *,
               causal: bool) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor, Tensor | None]]:
        """LSH attention of every head over x [B, N, D], hashed into ``n_buckets`` with rotations drawn for this
        call: y [B, H, N, d], and what decoding keeps: the shared QK and V ([B, H, N, d] each), the buckets
        [B, H, R, N] (``n_buckets`` where ``mask`` is False) and the rotations."""
        cfg = self.cfg
        b, n_in, _ = x.shape
        c = cfg.bucket_size
        n = -(-n_in // c) * c
        x, mask = pad_to_length(x, mask, n)  # [B, N, D], mask [B, N] (None only if unpadded and unmasked)
        qk, v = (split_heads(t, cfg.heads) for t in self.qkv(x).chunk(2, dim=-1))  # [B, H, N, d] each
        rotations = self.draw_rotations(n_buckets, x.device, qk.dtype)
        buckets = lsh_buckets(qk, rotations, cfg.n_hashes, n_buckets, mask)  # [B, H, R, N]
        y = lsh_attention(qk, v, buckets, n_buckets, c, padded=mask is not None, causal=causal,
                          dropout=cfg.dropout, training=self.training)  # [B, H, N, d]
        return y[:, :, :n_in], (qk[:, :, :n_in], v[:, :, :n_in], buckets[..., :n_in], rotations)

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


register_preset("reformer_h4", "reformer", display="Reformer (4 hashes)",
                n_hashes=4, description="Reformer LSH attention, 4 hash rounds.")
