"""cosFormer: ReLU linear attention with a cos-based re-weighting of distant tokens, decomposed to O(n).

Paper: Qin et al., "cosFormer: Rethinking Softmax in Attention", ICLR 2022, https://arxiv.org/abs/2202.08791
(§3.3-3.4, eq. 9-11). Authors' code: OpenNLPLab ``cosFormer`` (``cosformer.py``, ``CosformerAttention``, with its
``causal`` branch: cumulative sums over the cos/sin-weighted keys).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._decode import RecurrentState, check_capacity
from ._kernels import EpsConfig, causal_kernel_attention_terms, causal_kernel_step, kernel_attention_terms
from .base import ProjectedAttention, check_seq_len, merge_heads, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class CosformerConfig(EpsConfig):
    """Config of cosFormer attention (``causal``: the paper's causal form, its horizon M = ``max_seq_len``).

    Attributes:
        eps: the normaliser is clamped from below at eps (the authors' code: ``clamp_min(..., eps)``, 1e-6).
            The normaliser is ≥ 0 (ReLU features, cos/sin of angles in [0, π/2)), and is 0 when a query's
            ReLU features miss every real key's (or there is no real key): the output is then 0. Must be > 0.
        dropout: accepted for the common interface and unused (see the class docstring).
    """


def token_angles(mask: Tensor | None, batch: int, n: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """θ_i = π/2 · i / M per token: [B, N] (or [1, N] without a mask).

    i is the token's index among the real tokens of its sequence (0, 1, ...; padding need not be a suffix) and
    M the sequence's real length, so a padded sequence gets exactly the angles of its unpadded self; padded
    positions get i = 0 (their keys are dropped by the caller, their outputs are never read).
    """
    if mask is None:
        return (math.pi / 2 / n) * torch.arange(n, device=device, dtype=dtype).unsqueeze(0)  # [1, N]
    length = mask.sum(dim=1, keepdim=True).clamp_min(1)  # [B, 1]: M; 1 for a fully padded row (no 0/0)
    return (math.pi / 2) * _real_index(mask).to(dtype) / length.to(dtype)  # [B, N]


def causal_token_angles(mask: Tensor | None, n: int, start: Tensor | None, horizon: int, device: torch.device,
                        dtype: torch.dtype) -> Tensor:
    """θ_i = π/2 · i / M per token of the causal form: [B, N] (or [1, N] without a mask or a start).

    i is the token's index among the real tokens of its sequence, counted on from ``start`` ([B, 1]: the real tokens
    before these, in decoding; None = 0), so a padded sequence gets the angles of its unpadded self; M = ``horizon``,
    fixed (``max_seq_len``), since a causal query cannot know the sequence's length.
    """
    index = torch.arange(n, device=device).unsqueeze(0) if mask is None else _real_index(mask)  # [1 or B, N]
    if start is not None:
        index = index + start  # [B, N]
    return (math.pi / 2 / horizon) * index.to(dtype)


def _real_index(mask: Tensor) -> Tensor:
    """Each token's index among the real tokens of its sequence (0, 1, ...), 0 at padding before the first: [B, N]."""
    return (mask.long().cumsum(dim=1) - 1).clamp_min(0)


def reweighted_features(t: Tensor, theta: Tensor) -> Tensor:
    """[t cos θ, t sin θ]: t [B, H, N, d] (ReLU features) and θ broadcastable to [B, H, N, 1] -> [B, H, N, 2d], so
    that the dot product of two of them is tᵢᵀtⱼ·cos(θᵢ − θⱼ) (cos(a − b) = cos a cos b + sin a sin b, eq. 10-11).
    cos θ and sin θ are taken in θ's dtype and cast to t's."""
    return torch.cat([t * torch.cos(theta).to(t.dtype), t * torch.sin(theta).to(t.dtype)], dim=-1)


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the paper's causal form (cumulative sums of the cos/sin-weighted keys, as the authors' causal branch), "
               "with the horizon M = max_seq_len (a choice: the authors' M is the batch's length, which a causal query "
               "cannot know)")
DECODE_NOTE = ("the recurrent sums of the cos and sin halves, Σ [relu(k_j) cos θ_j, relu(k_j) sin θ_j][v_j, 1]ᵀ, "
               "[2d, d+1] per head, and each row's real-token count")


@dataclass
class CosformerState:
    """cosFormer's decoding state.

    Attributes:
        sums: Σ_j K̃_j[V_j, 1]ᵀ over the real tokens so far (K̃ = [ReLU(K) cos θ, ReLU(K) sin θ]), [B, H, 2d, w],
            and the tokens so far.
        positions: [B, 1] long: the real tokens so far in each sequence (the next token's index i).
    """

    sums: RecurrentState
    positions: Tensor


@register(
    "cosformer", CosformerConfig,
    Capabilities(complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2202.08791",
    display="cosFormer",
    group="kernel",
)
class CosformerAttention(ProjectedAttention):
    """cosFormer: O_i = Σ_j s_ij V_j / Σ_j s_ij, s_ij = ReLU(Q_i)ᵀReLU(K_j)·cos(π/2·(i−j)/M); arxiv 2202.08791.

    With cos(a − b) = cos a cos b + sin a sin b (eq. 10-11), s_ij = Q̃_iᵀ K̃_j where Q̃_i = [ReLU(Q_i) cos θ_i,
    ReLU(Q_i) sin θ_i] and likewise K̃_j (θ_i = π/2 · i/M), so the sums over j are taken once per sequence:
    O(n·d²) time, O(n·d + d²) memory, no n×n matrix.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - M, the re-weighting horizon: the paper's M is the sequence length (the authors' code: max(source, target)
      length = N in self-attention). With padding, M is each sequence's real length and i its index among its
      real tokens, so a padded sequence gives at its real positions exactly what the unpadded sequence gives
      (using the padded length N would make the weights depend on how much padding the batch has). Since
      |i − j| ≤ M − 1 < M, every cos weight lies in (0, 1] and s_ij ≥ 0.
    - Indices start at 0 (the authors' code starts at 1): only i − j enters s_ij, so the outputs are the same.
    - No 1/√d temperature, ReLU on the raw projections (paper eq. 9, authors' code, ``act_fun="relu"``).
    - Normaliser clamped from below at eps = 1e-6 (authors' code), which makes a query whose ReLU features
      meet no real key (normaliser 0) output 0 rather than 0/0.
    - Padding: X is zeroed at padded positions and K̃ is zeroed at padded keys, so padded keys leave both sums
      (the authors' code has no key-padding mask).
    - The numerator and normaliser come from one product, with a ones column appended to V
      (``_kernels.kernel_attention_terms``, shared with the Linear Transformer).
    - Dropout: no attention matrix exists to drop from, and the authors' code applies none (its
      ``dropout_rate`` is stored and never used), so ``dropout`` is unused.

    Causal (``causal=True``): O_i = Σ_{j≤i} s_ij V_j / Σ_{j≤i} s_ij over the real keys j ≤ i, the same s_ij
    decomposed the same way (§3.3), the sums over j ≤ i taken in chunks (``_kernels.causal_kernel_attention_terms``)
    where the authors' causal branch takes a cumulative sum over an [N, 2d, d] tensor: the same function up to
    rounding.
    - M, the horizon: the authors' causal branch uses the length of the batch it is given (M = N), which makes every
      output depend on how many tokens follow it (a later token moves all angles) and is unknown while decoding.
      Here M = ``max_seq_len``, fixed at build time, for the causal forward and decoding alike, so prefill + steps
      equal the forward; inputs (and a decoding capacity) longer than ``max_seq_len`` are refused, which keeps
      |i − j| < M and every cos weight in (0, 1]. With M = N the two forms would agree at N = ``max_seq_len`` only.
    - i counts the real tokens (as in the bidirectional form), so a padded sequence gives its unpadded self's
      outputs; decoding keeps each row's count (prompt padding is not a token).
    - The normaliser is clamped at eps as the authors' causal branch (``clamp_min(..., eps)``).
    Decoding: a :class:`CosformerState`: Σ_j K̃_j[V_j, 1]ᵀ (the cos and sin halves, [2d, d+1] per head) and each
    row's real-token count; a step adds K̃_t[V_t, 1]ᵀ in place and reads Q̃_tᵀ of it. The bidirectional form is
    unchanged (M = each sequence's real length).
    """

    cfg: CosformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, n, _ = x.shape
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, d]
        q, k = F.relu(q), F.relu(k)
        if self.cfg.causal:
            return self._causal(q, k, v, mask, None)[0]
        theta = token_angles(mask, b, n, x.device, q.dtype)[:, None, :, None]  # [B or 1, 1, N, 1]
        q2, k2 = reweighted_features(q, theta), reweighted_features(k, theta)  # [B, H, N, 2d]: Q̃, K̃
        num, den = kernel_attention_terms(q2, k2, v, mask)  # [B, H, N, d], [B, H, N, 1]; padded keys left out
        return self._output(num, den)

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, CosformerState]:
        """The causal form over a prompt x [B, P, D] and the sums a step reads (see ``_decode``); ``capacity`` must not
        exceed ``max_seq_len`` (the horizon M)."""
        check_capacity(capacity, x.shape[1])
        check_seq_len(capacity, self.cfg.max_seq_len, "the causal form's horizon M")
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, P, d]
        return self._causal(F.relu(q), F.relu(k), v, mask, None)

    def step(self, x: Tensor, state: CosformerState) -> tuple[Tensor, CosformerState]:
        """One token x [B, 1, D] at index ``state.positions``: K̃[v, 1]ᵀ joins the sums in place, Q̃ reads them."""
        q, k, v = self.proj(x)  # each [B, H, 1, d]
        return self._causal(F.relu(q), F.relu(k), v, None, state)

    def _causal(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                state: CosformerState | None) -> tuple[Tensor, CosformerState]:
        """The causal form of ReLU(Q), ReLU(K), V [B, H, N, d] after ``state`` (None: nothing before; else N = 1, a
        decoding step, which updates ``state`` in place): the layer's output [B, N, D] and the state after."""
        b, _, n, _ = q.shape
        horizon = self.cfg.max_seq_len
        check_seq_len(n, horizon, "the causal form's horizon M")
        start = None if state is None else state.positions
        # The angles at least in float32: a bf16 index is not exact past 256 tokens.
        precision = torch.promote_types(q.dtype, torch.float32)
        theta = causal_token_angles(mask, n, start, horizon, q.device, precision)[:, None, :, None]  # [B|1, 1, N, 1]
        q2, k2 = reweighted_features(q, theta), reweighted_features(k, theta)  # [B, H, N, 2d]: Q̃, K̃
        if state is None:
            num, den, sums = causal_kernel_attention_terms(q2, k2, v, mask)  # [B, H, N, d | 1], [B, H, 2d, w]
            real = torch.full((b, 1), n, device=q.device) if mask is None else mask.sum(dim=1, keepdim=True)
            state = CosformerState(RecurrentState(sums, n), real)  # [B, 1]: the real tokens seen
        else:
            num, den = causal_kernel_step(q2, k2, v, state.sums.kv)  # [B, H, 1, d | 1]
            state.positions.add_(1)
            state.sums.length += 1
        return self._output(num, den), state

    def _output(self, num: Tensor, den: Tensor) -> Tensor:
        """out(numerator / max(normaliser, eps)): [B, H, N, d] and [B, H, N, 1] -> [B, N, D]."""
        return self.out(merge_heads(num / den.clamp_min(self.cfg.eps)))
