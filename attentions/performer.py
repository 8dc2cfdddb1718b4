"""Performer: FAVOR+ linear attention with positive (orthogonal) random features for the softmax kernel.

Paper: Choromanski et al., "Rethinking Attention with Performers", ICLR 2021, https://arxiv.org/abs/2009.14794
(§2.3-2.4 positive random features, §2.4 orthogonal features, Lemma 1; unidirectional (causal) attention through
prefix sums). Reference implementations: google-research ``performer/fast_attention`` (JAX;
``jax/fast_attention.py``: ``_numerator``/``_denominator`` scans for the unidirectional form) and lucidrains
``performer-pytorch`` (``performer_pytorch/performer_pytorch.py``: ``causal_linear_attention`` and
``causal_linear_attention_noncuda``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._decode import RecurrentState, check_capacity
from ._kernels import causal_kernel_attention_terms, causal_kernel_step
from .base import ProjectedAttention, eager_only, merge_heads, with_ones_columns, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset


@dataclass(frozen=True)
class PerformerConfig(AttentionConfig):
    """Config of Performer (FAVOR+; ``causal``: unidirectional); defaults follow the paper and the reference code.

    Attributes:
        nb_features: number of random features m (256: the JAX reference's ``nb_features`` default).
        redraw_interval: 0 keeps the features drawn at construction forever; k > 0 redraws them after every
            k training forward calls (counted in the ``calls_since_redraw`` buffer; eval calls neither count
            nor redraw). 1000 is performer-pytorch's ``feature_redraw_interval`` default.
        ortho: True draws positive *orthogonal* random features (paper §2.4: blocks of d QR-orthogonalised
            Gaussian rows, row norms resampled from chi(d)); False draws i.i.d. Gaussian rows.
        kernel_eps: the reference code's eps (1e-4) added to every feature after the max-stabilised exp, so
            the normaliser φ(Q)(φ(K)ᵀ1) never vanishes; 0 gives the paper's exact estimator (unbiased, but
            the normaliser can underflow in low precision).
        chunk_size: on the CPU, sequences longer than this are processed in chunks of this many positions (the
            same function, evaluated chunk by chunk so each [B, H, chunk, m] feature tensor is used while it is
            still in cache): faster than one pass at long n on the CPU, no slower at short n; the speed suite's
            long profile fits its time slope over 1K-16K. Other devices (CUDA) take one pass: a GPU has no such
            cache to fit, and each chunk costs its ops' kernel launches from the host, which at long n made the
            chunked call dispatch several times the ops of performer-pytorch's one pass. Timings and op counts:
            docs/gpu.md, "The zoo against the public implementations", and the results files it links.
    """

    nb_features: int = 256
    redraw_interval: int = 1000
    ortho: bool = True
    kernel_eps: float = 1e-4
    chunk_size: int = 2048

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("nb_features", "chunk_size")
        if int(self.redraw_interval) < 0:
            raise ValueError(f"redraw_interval must be >= 0 (0 = fixed), got {self.redraw_interval!r}")
        if not self.kernel_eps >= 0.0:
            raise ValueError(f"kernel_eps must be >= 0, got {self.kernel_eps!r}")


def gaussian_random_features(m: int, d: int, ortho: bool, dtype: torch.dtype = torch.float32) -> Tensor:
    """m random feature vectors ω_i ∈ R^d, each marginally N(0, I_d): [m, d], from torch's global RNG.

    ortho=True: ⌈m/d⌉ independent blocks of d exactly orthogonal directions (Gram-Schmidt of a Gaussian
    matrix, i.e. QR with R's diagonal made positive, which makes each block Haar-distributed), the last
    block truncated, each row then scaled by an independent chi(d) norm (the norm of a fresh Gaussian
    vector), as the paper's ORF construction. Drawn in float64 on the CPU so the draw does not depend on
    the device, then cast.
    """
    if not ortho:
        return torch.randn(m, d, dtype=torch.float64).to(dtype)
    blocks = math.ceil(m / d)
    g = torch.randn(blocks, d, d, dtype=torch.float64)
    q, r = torch.linalg.qr(g)  # [blocks, d, d]: orthonormal columns
    # LAPACK's Householder QR fixes no signs; flipping columns to a positive diag(R) gives Gram-Schmidt.
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
    directions = q.transpose(-1, -2).reshape(blocks * d, d)[:m]  # [m, d]: rows orthonormal within a block
    norms = torch.randn(m, d, dtype=torch.float64).norm(dim=-1, keepdim=True)  # [m, 1] ~ chi(d)
    return (directions * norms).to(dtype)


def _stabilised_exp(x: Tensor, features: Tensor, is_query: bool, mask: Tensor | None) -> Tensor:
    """exp(ωᵀx̂ − ‖x̂‖²/2 − c) / √m, the positive features without their eps: [B, H, N, m]."""
    return _exp_and_key_max(x, features, is_query, mask)[0]


def _projection(x: Tensor, features: Tensor) -> tuple[Tensor, Tensor]:
    """ωᵀx̂ [B, H, N, m] (x̂ = d^(-1/4) x) and the row terms −‖x̂‖²/2 − log √m [B, H, N, 1] of the exponent: the
    stabilising shift is folded into the latter, so the big tensor sees one add and one exp."""
    d, m = x.shape[-1], features.shape[0]
    normalizer = d**-0.25
    proj = torch.matmul(x, features.t() * normalizer)  # [B, H, N, m]: ωᵀx̂
    return proj, x.square().sum(-1, keepdim=True) * (-0.5 * normalizer**2) - 0.5 * math.log(m)  # [B, H, N, 1]


def _exp_and_key_max(x: Tensor, features: Tensor, is_query: bool, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The features of ``_stabilised_exp`` and, for keys, the max of ωᵀx̂ over their real rows ([B, H, 1, 1],
    −inf without a real row; the shift used is that max, or 0 where it is −inf). Queries: an empty tensor."""
    logits, raw = _logits_and_key_max(x, features, is_query, mask)
    return logits.exp_(), raw  # in place on the fresh product (its backward needs x and ω, not the product)


def _logits_and_key_max(x: Tensor, features: Tensor, is_query: bool, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The logarithms of the features of ``_exp_and_key_max`` [B, H, N, m], and the same max."""
    proj, shift = _projection(x, features)  # [B, H, N, m], [B, H, N, 1]: −‖x̂‖²/2 − log √m, the shift c to come
    if is_query:
        raw = proj.new_empty(0)
        shift = shift - proj.detach().amax(dim=-1, keepdim=True)  # [B, H, N, 1]
    else:
        raw = _real_key_max(proj, mask)  # [B, H, 1, 1]
        shift = shift - _finite_or_zero(raw)
        if mask is not None:
            # exp(−huge) = 0 exactly: padded rows can neither overflow nor give inf·0 = NaN gradients.
            shift = shift.masked_fill(~mask[:, None, :, None], -torch.finfo(x.dtype).max)
    # In place on the fresh product (its backward needs x and ω, not the product): one [B, H, N, m] buffer.
    return proj.add_(shift), raw


def _real_key_max(proj: Tensor, mask: Tensor | None) -> Tensor:
    """max of ωᵀx̂ over the features and real rows of keys [B, H, N, m]: [B, H, 1, 1], −inf without a real row."""
    row_max = proj.detach().amax(dim=-1, keepdim=True)  # [B, H, N, 1]
    if mask is not None:
        row_max = row_max.masked_fill(~mask[:, None, :, None], float("-inf"))
    return row_max.amax(dim=-2, keepdim=True)  # [B, H, 1, 1]


def _finite_or_zero(t: Tensor) -> Tensor:
    """The shift of a (batch row, head) without a real key: any finite value does; 0. (One op: ``isfinite`` is four.)"""
    return t.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def _no_key_shift(dtype: torch.dtype) -> float:
    """The running key shift of a (batch row, head) before its first real key: finite, so that differences of shifts
    stay finite and a rescaling factor exp(this − a real shift) is exactly 0, and below any real ωᵀk̂."""
    return torch.finfo(dtype).min / 4


def _running_key_logits(k: Tensor, features: Tensor, mask: Tensor | None,
                        start: Tensor | None) -> tuple[Tensor, Tensor]:
    """The logarithms of the key features at the running shift, for the causal form: ωᵀk̂_j − ‖k̂_j‖²/2 − c_j − log √m
    [B, H, N, m], and c [B, H, N], c_j = max(start, the max of ω_lᵀk̂_j' over the features l and the real keys
    j' <= j).

    c_j reads keys up to j only (a cumulative max), so no feature depends on a later key; every exponent is <= 0
    (no overflow). ``start``: the shift of the keys before these ([B, H, 1], a decoding state), or None (none
    before: ``_no_key_shift`` until the first real key). Padded rows get −(the dtype's max), features exactly 0
    (as the bidirectional form's), which leaves them out of every sum.
    """
    proj, rows = _projection(k, features)  # [B, H, N, m], [B, H, N, 1]: ωᵀk̂ and −‖k̂‖²/2 − log √m
    row_max = proj.detach().amax(dim=-1)  # [B, H, N]
    if mask is not None:
        row_max = row_max.masked_fill(~mask[:, None, :], float("-inf"))
    floor = start if start is not None else torch.tensor(_no_key_shift(k.dtype), dtype=k.dtype, device=k.device)
    shift = torch.maximum(row_max.cummax(dim=-1).values, floor)  # [B, H, N]: non-decreasing
    rows = rows - shift.unsqueeze(-1)  # [B, H, N, 1]
    if mask is not None:
        rows = rows.masked_fill(~mask[:, None, :, None], -torch.finfo(k.dtype).max)  # exp(−huge) = 0 exactly
    return proj.add_(rows), shift  # in place on the fresh product, as ``_logits_and_key_max``


@dataclass
class PerformerState:
    """Performer's decoding state (causal form, ``prefill``/``step``).

    Attributes:
        sums: over the real tokens so far, Σ_j e(k_j)·exp(c_j − c)[v_j, 1]ᵀ at the running key shift c (e: the key
            features without their eps), then Σ_j [v_j, 1] (what the keys' eps terms sum, unshifted): [B, H, m + 1,
            w], and the tokens so far.
        shift: c, [B, H, 1]: the largest ω_lᵀk̂_j of the real keys so far (``_no_key_shift`` before the first).
    """

    sums: RecurrentState
    shift: Tensor


def softmax_kernel_features(
    x: Tensor, features: Tensor, *, is_query: bool, eps: float = 1e-4, mask: Tensor | None = None
) -> Tensor:
    """Positive random features φ(x) of the softmax kernel, numerically stabilised: [..., N, m].

    φ(x) = (exp(ωᵀx̂ − ‖x̂‖²/2 − c) + eps) / √m with x̂ = d^(-1/4) x, so E[φ(q)ᵀφ(k)] = exp(qᵀk/√d)·e^(−c_q−c_k)
    up to eps (Lemma 1). The shift c is the max of ωᵀx̂ over the features of each row for queries and over
    every feature and every (real) position for keys, as the reference code; it is detached (as
    performer-pytorch), being a constant that cancels between numerator and denominator up to eps.

    Args:
        x: queries or keys, [B, H, N, d].
        features: ω, [m, d].
        is_query: per-row shift (queries) or one shift per (batch, head) (keys).
        eps: added to every feature after the exp (then scaled by 1/√m).
        mask: [B, N] bool, True = real; keys only: the shift is taken over real positions, and padded rows
            get exactly eps/√m, whatever their content (callers drop them from the sums).
    """
    return _stabilised_exp(x, features, is_query, mask) + eps / math.sqrt(features.shape[0])


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the paper's unidirectional FAVOR+ (prefix sums over j ≤ i); the key stabiliser is the running max "
               "over the keys so far (a choice: the reference code's max over all keys reads the future)")
DECODE_NOTE = "the recurrent sums Σ φ(k_j)[v_j, 1]ᵀ, [m, d+1] per head, at the running key max, and Σ [v_j, 1]"


@register("performer", PerformerConfig,
          Capabilities(approximates_softmax=True, complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE,
                       decode_note=DECODE_NOTE),
          paper="https://arxiv.org/abs/2009.14794", display="Performer", group="kernel")
class PerformerAttention(ProjectedAttention):
    """Performer (FAVOR+) attention with positive orthogonal random features; arxiv.org/abs/2009.14794.

    out = D⁻¹ φ(Q) (φ(K)ᵀ V) with D = diag(φ(Q) (φ(K)ᵀ 1)), φ the positive softmax-kernel features of
    ``softmax_kernel_features`` (d^(-1/4) data normaliser on Q and K, so φ(q)ᵀφ(k) estimates exp(qᵀk/√d)).
    Never builds an n×n matrix: O(n·m·d) time, O(n·m) memory.

    Choices and deviations (the paper leaves these open; the reference code decides where it can):
    - One feature matrix ω ∈ R^{m×d_head} per layer, shared by all heads and batch rows (reference code).
    - Orthogonal blocks use QR with a sign fix (= Gram-Schmidt, Haar-distributed), and chi(d) row norms
      (the paper's regular ORF; the reference code's ``scaling=0``).
    - Numerical stabilisation as the reference code: max subtracted per row for queries, globally (per
      batch row and head, over real keys only) for keys, detached; eps = 1e-4 added to each feature. As in
      the reference, eps is not negligible for keys whose ωᵀk̂ − ‖k̂‖²/2 lies far below the global key max
      (large ‖k‖): it then pulls the weights toward uniform; ``kernel_eps=0`` removes that bias.
    - Padding: X is zeroed at padded positions, padded keys are left out of the key-value and key sums
      (the rows of [V, 1] are masked, which equals zeroing φ(K) at padded rows) and out of the key shift.
      performer-pytorch masks only V, so its normaliser still counts padded keys.
    - Feature redraw: ``redraw_interval`` k > 0 redraws ω from torch's global RNG at the start of every
      (k+1)-th training forward since the last draw, so each draw serves exactly k training calls
      (performer-pytorch's ``ProjectionUpdater`` rule; the JAX code can redraw on every call). The count is
      a buffer (saved with the weights); a Python mirror of it avoids a host-device sync per step.
    - Dropout: there is no attention matrix to drop from; as performer-pytorch, ``dropout`` is applied to
      the layer output (after the output projection), in training only.
    - φ(K)ᵀ V and φ(K)ᵀ 1 are one product with a ones column appended to V (``with_ones_columns``; on CUDA an
      aligned row of more ones): one pass over φ(Q) and φ(K) instead of two; and the eps term is added to the
      small products rather than to the [N, m] features (exact algebra, two passes fewer); the exp is taken in
      place on the fresh ωᵀx̂ product.
    - Redraw bookkeeping runs outside ``torch.compile`` (``eager_only``), so a compiled layer
      does not recompile as the count changes.

    Causal (``causal=True``): the paper's unidirectional FAVOR+ (out_i = φ(Q_i)ᵀ Σ_{j≤i} φ(K_j) V_jᵀ / φ(Q_i)ᵀ Σ_{j≤i}
    φ(K_j), its prefix sums), chunked (``_kernels.causal_kernel_attention_terms``: quadratic within a
    chunk of 64, the [m, d+1] sums carried between chunks) rather than the JAX code's token-by-token scan, or
    performer-pytorch's fast-transformers CUDA product and, without it, per-token cumulative sums ([L, m, d] per chunk
    of L tokens): the same function up to rounding. Choices:
    - Key stabiliser. The reference code (JAX and performer-pytorch, bidirectional and unidirectional alike)
      subtracts one max of ωᵀk̂ over every key of the sequence: it cancels between numerator and normaliser only
      with eps = 0, it reads keys after i (in float32 a later key 88 above the others underflows every earlier
      feature to eps), and a decoder cannot know it. Here query i's keys are shifted by c_i, the max of ω_lᵀk̂_j over
      the features and the real keys j ≤ i (a running max): each query's output is then exactly the bidirectional
      form's (eps included) over the prefix it sees, x_1..x_i; with eps = 0 the shift cancels exactly. It is computed
      without an [N, N] or [N, N, m] tensor: key j's features are taken at its own c_j and rescaled by
      exp(c_j − c_i) <= 1 (within a chunk, a [C, C] factor; between chunks, the sums carried at each chunk's last
      shift), so nothing overflows and an underflow only drops a key 88 (float32) below a key the query sees.
      Queries keep their own per-row max (it reads nothing but the query).
    - eps: φ = e + eps/√m as above, on both sides, through the kernel's ``query_offset`` and ``key_offset`` (the
      keys' eps terms, which no shift scales, summed apart as Σ_{j≤i} [V_j, 1]): no [N, m] tensor of e + eps. The
      features go to the kernel as logarithms (``log_features``), so its backward takes the exp's in place.
    - Features are fixed while decoding: ``prefill`` and ``step`` never count a training call nor redraw ω, so a
      decode uses the draw of the causal forward of the same module.
    Decoding: a :class:`PerformerState`: the sums Σ_j e(k_j)[v_j, 1]ᵀ ([m, d+1] per head) at the running shift c,
    with Σ_j [v_j, 1] as one more row, and c; a step raises c to the new key's max if it is larger (rescaling the sums
    by exp(old − new)), adds the key, and reads the sums: O(m·d) per head, independent of the context.
    """

    cfg: PerformerConfig

    def __init__(self, cfg: PerformerConfig) -> None:
        super().__init__(cfg)
        self.register_buffer("features", gaussian_random_features(cfg.nb_features, cfg.head_dim, cfg.ortho))
        self.register_buffer("calls_since_redraw", torch.zeros((), dtype=torch.long))
        self._calls = 0  # mirror of calls_since_redraw, read without a device sync

    @torch.no_grad()
    def redraw_features(self) -> None:
        """Draw a fresh ω from torch's global RNG (same device and dtype as before) and reset the count."""
        new = gaussian_random_features(self.cfg.nb_features, self.cfg.head_dim, self.cfg.ortho)
        # A new tensor rather than copy_: a graph still holding the old ω for backward stays valid.
        self.features = new.to(device=self.features.device, dtype=self.features.dtype)
        self._calls = 0
        self.calls_since_redraw.fill_(0)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kw: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kw)
        self._calls = int(self.calls_since_redraw)

    @eager_only
    def _count_training_call(self) -> None:
        """Redraw ω once the current draw has served ``redraw_interval`` training calls; count this call."""
        if self._calls >= self.cfg.redraw_interval:
            self.redraw_features()
        self._calls += 1
        self.calls_since_redraw.fill_(self._calls)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        if self.training and cfg.redraw_interval > 0:
            self._count_training_call()
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, dh]
        if cfg.causal:
            return self._output(self._causal(q, k, v, mask, None)[0])
        w = self.features.to(q.dtype)
        # φ = e + eps/√m: the eps term is added to the [m, w] and [N, w] products, never to e itself
        # (exact: (e + c)ᵀ A = eᵀ A + c·1(1ᵀ A)), which saves two passes over the [B, H, N, m] tensors.
        c = cfg.kernel_eps / math.sqrt(cfg.nb_features)
        dh = v.shape[-1]
        v1 = with_ones_columns(v)  # [B, H, N, w]: [V, 1], w >= dh + 1
        if mask is not None:
            v1 = v1 * mask[:, None, :, None].to(v1.dtype)  # padded keys leave φ(K)ᵀV and φ(K)ᵀ1
        kv = self._key_value(k, v1, w, mask) + c * v1.sum(dim=-2, keepdim=True)  # [B, H, m, w]
        y1 = torch.cat([torch.matmul(_stabilised_exp(qc, w, True, None), kv)
                        for qc in q.split(self._chunk(q), dim=2)], dim=2)  # [B, H, N, w]
        y1 = y1 + c * kv.sum(dim=-2, keepdim=True)  # [numerator, D]
        return self._output(_normalised(y1[..., :dh], y1[..., dh : dh + 1]))

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, PerformerState]:
        """The causal form over a prompt x [B, P, D] and the state a step reads (see ``_decode``); ω is not redrawn."""
        check_capacity(capacity, x.shape[1])
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, P, dh]
        y, state = self._causal(q, k, v, mask, None)
        return self._output(y), state

    def step(self, x: Tensor, state: PerformerState) -> tuple[Tensor, PerformerState]:
        """One token x [B, 1, D]: the running shift rises to its key's max if larger (the sums rescaled in place),
        its key joins the sums, its query reads them; ω is not redrawn."""
        y, state = self._causal(*self.proj(x), None, state)  # q, k, v: [B, H, 1, dh] each
        return self._output(y), state

    def _causal(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                state: PerformerState | None) -> tuple[Tensor, PerformerState]:
        """The causal form of q, k, v [B, H, N, dh] after ``state`` (None: nothing before; else N = 1, a decoding step,
        which updates ``state`` in place): the attention [B, H, N, dh] and the state after the last token."""
        w = self.features.to(q.dtype)
        # φ = e + eps on both sides, eps the reference's per feature after the 1/√m; the features go in as logarithms
        eps = self.cfg.kernel_eps / math.sqrt(self.cfg.nb_features)
        offsets = {"query_offset": eps, "key_offset": eps, "log_features": True}
        log_q = _logits_and_key_max(q, w, True, None)[0]  # [B, H, N, m]: per-row max, as the bidirectional form
        start = None if state is None else state.shift
        log_k, shift = _running_key_logits(k, w, mask, start)  # [B, H, N, m], [B, H, N]
        if state is None:
            num, den, sums = causal_kernel_attention_terms(log_q, log_k, v, mask, shift=shift, **offsets)
            last = shift[..., -1:].clone() if shift.shape[-1] else shift.new_full((*shift.shape[:2], 1),
                                                                                  _no_key_shift(q.dtype))
            state = PerformerState(RecurrentState(sums, q.shape[2]), last)
        else:
            decay = (state.shift - shift).exp().unsqueeze(-1)  # [B, H, 1, 1]: exp(old − new) <= 1
            num, den = causal_kernel_step(log_q, log_k, v, state.sums.kv, decay=decay, **offsets)
            state.shift.copy_(shift)
            state.sums.length += 1
        return _normalised(num, den), state

    def _output(self, y: Tensor) -> Tensor:
        """The output projection of the attention y [B, H, N, dh], then dropout (in training): [B, N, D]."""
        return F.dropout(self.out(merge_heads(y)), p=self.cfg.dropout, training=self.training)

    def _chunk(self, x: Tensor) -> int:
        """Positions per chunk of x [B, H, N, d]: ``chunk_size`` on the CPU, all of N elsewhere (see the config)."""
        return self.cfg.chunk_size if x.device.type == "cpu" else max(x.shape[2], 1)

    def _key_value(self, k: Tensor, v1: Tensor, w: Tensor, mask: Tensor | None) -> Tensor:
        """Σ_j e(k_j)[V_j, 1]ᵀ at the global key shift (max over every real key), chunk by chunk: [B, H, m, w].

        The global max is known only after all keys are projected, so each chunk is exponentiated at its own
        max and its sum rescaled by exp(own max − global max) (a detached constant, as the shift itself): the
        same value as one pass at the global shift, up to rounding.
        """
        size = self._chunk(k)
        parts, maxima = [], []
        for start in range(0, k.shape[2], size):
            kc, mc = k[:, :, start : start + size], None if mask is None else mask[:, start : start + size]
            e, raw = _exp_and_key_max(kc, w, False, mc)  # [B, H, chunk, m] at the chunk's own shift
            parts.append(torch.matmul(e.transpose(-1, -2), v1[:, :, start : start + size]))  # [B, H, m, w]
            maxima.append(raw)  # [B, H, 1, 1]
        if len(parts) == 1:  # one chunk: its shift is the global one (the factor below would be exp(0) = 1, or 0 for
            return parts[0]  # a row without a real key, whose features are all 0 already): the one-pass value
        top = _finite_or_zero(torch.stack(maxima).amax(0))  # [B, H, 1, 1]: the global shift
        # A chunk without a real key has all-zero features; its factor is 0 rather than a possibly huge exp.
        factors = [torch.where(torch.isfinite(raw), (_finite_or_zero(raw) - top).exp(), 0.0) for raw in maxima]
        return sum(f * p for f, p in zip(factors, parts, strict=True))  # [B, H, m, w]


def _normalised(num: Tensor, den: Tensor) -> Tensor:
    """num / den, [B, H, N, dh] / [B, H, N, 1]. The normaliser is > 0 (≥ kernel_eps²·n_real) unless a query sees no
    real key at all: then 0/0, replaced by 0/1 so output and gradients stay finite."""
    return num / torch.where(den > 0, den, 1.0)


register_preset("performer_m64", "performer", display="Performer (m = 64)", nb_features=64,
                description="Performer (FAVOR+), m = 64.")
