"""FMMformer: banded (near-field) softmax attention plus low-rank (far-field) kernelised linear attention.

Paper: Nguyen, Suliafu, Osher, Chen, Wang, "FMMformer: Efficient and Flexible Transformer via Decomposed
Near-field and Far-field Attention", NeurIPS 2021, https://arxiv.org/abs/2108.02347 (§3: V̂ = (w₁ D + w₂ L) V).
Authors' code: ``minhtannguyen/fmmformer-code-submission`` (fast-transformers ``CausalFMMAttention`` for language
modelling; LRA run scripts with ``--diag_size 5 --kernels elu [elu_flip]``).

The near field is the shared banded primitive ``attentions._blocks.sliding_window_attention`` (blocks of k − 1
queries gather their own and both neighbouring key blocks, a band mask keeps |i − j| < k), so no n×n matrix is
built; the far field is linear attention, φ(Q) (φ(K)ᵀ V), O(n·d²).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._blocks import dense_rows, sliding_window_attention
from ._decode import RecurrentState, WindowCache, check_capacity
from ._kernels import causal_kernel_attention_terms, causal_kernel_step, elu_feature_map, kernel_attention_terms
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

__all__ = ["FEATURE_MAPS", "FMMformerAttention", "FMMformerConfig", "FMMformerState", "linear_attention"]


def _elu_flip_feature(x: Tensor) -> Tensor:
    """elu(−x) + 1 (the paper's second kernel, ``elu_flip`` in the authors' LRA scripts): positive as well."""
    return F.elu(-x) + 1.0


# Only positive feature maps: the far field is normalised row-wise by φ(q)ᵀ Σ_j φ(k_j), which must not vanish.
FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {"elu": elu_feature_map, "elu_flip": _elu_flip_feature}


@dataclass(frozen=True)
class FMMformerConfig(AttentionConfig):
    """Config of FMMformer; defaults are the authors' LRA setting (``--diag_size 5 --kernels elu``); ``causal``: the
    authors' causal (language-modelling) form.

    Attributes:
        bandwidth: k, the near-field band: query i attends to keys j with |i − j| < k (k − 1 neighbours on each
            side and itself, 2k − 1 diagonals), the bidirectional form of the authors' causal code, which keeps
            the k diagonals j ∈ (i − k, i]. 5 = the LRA ``diag_size``.
        kernels: comma-separated far-field feature maps φ_l (names in ``FEATURE_MAPS``); the far field is
            Σ_l w₂,l L_l with L_l = rownorm(φ_l(Q) φ_l(K)ᵀ), so its rank is at most len(kernels) · head_dim:
            the number of kernels is the paper's rank knob. "elu" = the LRA 1-kernel model, "elu,elu_flip" the
            2-kernel one.
    """

    bandwidth: int = 5
    kernels: str = "elu"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("bandwidth")
        names = self.kernel_names
        unknown = [k for k in names if k not in FEATURE_MAPS]
        if not names or unknown:
            raise ValueError(
                f"kernels must name one or more of {', '.join(FEATURE_MAPS)} (comma-separated), got {self.kernels!r}"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"kernels lists a feature map twice: {self.kernels!r}")

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(k.strip() for k in self.kernels.split(",") if k.strip())


def linear_attention(q: Tensor, k: Tensor, v: Tensor, feature: Callable[[Tensor], Tensor],
                     mask: Tensor | None) -> Tensor:
    """Row-normalised kernel attention φ(Q) (φ(K)ᵀ V) / (φ(Q) φ(K)ᵀ 1): [B, H, N, d], O(N·d²).

    Padded keys are left out of both sums (``_kernels.kernel_attention_terms``). A query with no real key at all
    gets 0/0, replaced by 0/1 so outputs and gradients stay finite.
    """
    return _normalised(*kernel_attention_terms(feature(q), feature(k), v, mask))  # [B, H, N, d]


def _normalised(num: Tensor, den: Tensor) -> Tensor:
    """num / den ([B, H, N, d] / [B, H, N, 1]), 0/0 (no real key) replaced by 0/1: [B, H, N, d]."""
    return num / torch.where(den > 0, den, torch.ones_like(den))


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the authors' causal code (CausalFMMAttention): softmax over the band j ∈ (i − k, i] plus causal "
               "linear attention (sums over j ≤ i) as the far field, blended")
DECODE_NOTE = ("a ring buffer of the last k keys and values (the band) and, per far-field kernel, the recurrent sums "
               "Σ φ(k_j)[v_j, 1]ᵀ, [d, d+1] per head")


@dataclass
class FMMformerState:
    """FMMformer's decoding state.

    Attributes:
        band: the keys and values of the last k tokens (the near field's band j ∈ (i − k, i]), a ring buffer.
        far: per far-field kernel φ_l, Σ_j φ_l(k_j)[v_j, 1]ᵀ over the real tokens so far, [B, H, d, w].
    """

    band: WindowCache
    far: tuple[RecurrentState, ...]


@register(
    "fmmformer",
    FMMformerConfig,
    Capabilities(complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2108.02347",
    display="FMMformer",
    group="low rank",
)
class FMMformerAttention(ProjectedAttention):
    """FMMformer: V̂ = w₁ D V + Σ_l w₂,l L_l V (banded softmax + kernel low rank); arxiv.org/abs/2108.02347.

    D = softmax(Q Kᵀ/√d) restricted to the band |i − j| < k and renormalised within it (the near field);
    L_l = diag(φ_l(Q) φ_l(K)ᵀ 1)⁻¹ φ_l(Q) φ_l(K)ᵀ (the far field, linear attention with feature map φ_l);
    w₁ and w₂,l are learnable, one per head.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Band: |i − j| < k, the bidirectional version of the authors' causal band (k diagonals j ∈ (i − k, i]).
      Computed by ``_blocks.sliding_window_attention`` with radius k − 1 (blocks of k − 1 positions, each reading
      its own and both neighbouring key blocks under a band mask): O(n·k) memory, no n×n matrix; it pads
      internally to a whole number of blocks and masks the padding, so any length runs.
    - D is renormalised over the band (a softmax over the band's keys, as the authors' code: scores outside the
      band are −inf before the softmax), not the band of the full softmax matrix.
    - Far-field kernels: elu(x)+1 and elu(−x)+1, both positive (the authors' code also has a tanh feature map,
      left out because a sign-changing φ can make the normaliser vanish). Each L_l is row-normalised as linear attention
      (Katharopoulos et al.); the authors' causal code additionally divides φ(q) and φ(k) by their own sums,
      which changes L only by a per-key factor and is not in the paper; it is not done here. No 1/√d scaling
      in the far field (the paper's L has none).
    - Blending weights: one learnable scalar per head for D and per head and kernel for each L_l (the paper
      writes scalars w₁, w₂; the authors' causal code has one per head and channel), unconstrained, initialised
      to w₁ = 1/2 and w₂,l = 1/(2·#kernels) so the blended matrix starts row-stochastic (the causal code starts
      with w₁ = 0, i.e. no near field, which would make the band train from zero).
    - Dropout (cfg.dropout) is applied to the near-field weights D in training; the far field has no explicit
      weight matrix to drop from.
    - Padding: padded keys get no weight in D (masked) nor in L (left out of both sums); x is zeroed at padded
      positions first, so padded content reaches nothing.

    Causal (``causal=True``), the authors' ``CausalFMMAttention`` (``fast_transformers/attention/
    causal_fmm_attention.py``): D is the softmax over the band j ∈ (i − k, i] (the k diagonals its ``bandwidth``
    keeps, the query itself included; ``_blocks.sliding_window_attention`` with ``causal``), each L_l causal linear
    attention, rownorm over j ≤ i (``_kernels.causal_kernel_attention_terms``, chunked, where the authors call a CUDA
    causal product), blended as above. The choices of the bidirectional form hold (no division of φ(q), φ(k) by their
    sums, the authors' eps replaced by the 0/0 rule, blend weights per head initialised to 1/2 and 1/(2·#kernels);
    the authors' ``sparse=True`` model, which has the band, initialises its weight W1 to 0).
    Decoding: an :class:`FMMformerState`: a :class:`~attentions._decode.WindowCache` of the last k keys and values
    (exactly the band; unwritten and prompt-padding slots carry no weight) and one
    :class:`~attentions._decode.RecurrentState` per kernel; a step writes its key and value into both and reads
    them: O(k·d + #kernels·d²) per head, independent of the context.
    """

    cfg: FMMformerConfig

    def __init__(self, cfg: FMMformerConfig) -> None:
        super().__init__(cfg)
        n_kernels = len(cfg.kernel_names)
        self.near_weight = nn.Parameter(torch.full((cfg.heads,), 0.5))  # w₁ per head
        self.far_weight = nn.Parameter(torch.full((n_kernels, cfg.heads), 0.5 / n_kernels))  # w₂,l per head
        self._features = [FEATURE_MAPS[name] for name in cfg.kernel_names]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, dh]
        near, far, _ = self._fields(q, k, v, mask, causal=self.cfg.causal)
        return self._blend(near, far)

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, FMMformerState]:
        """The causal form over a prompt x [B, P, D] and the band and sums a step reads (see ``_decode``)."""
        cfg = self.cfg
        check_capacity(capacity, x.shape[1])
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, P, dh]
        near, far, sums = self._fields(q, k, v, mask, causal=True)
        band = WindowCache.empty(k, cfg.heads, min(cfg.bandwidth, capacity), cfg.head_dim)
        band.append(k, v, mask)
        state = FMMformerState(band, tuple(RecurrentState(kv, x.shape[1]) for kv in sums))
        return self._blend(near, far), state

    def _fields(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *,
                causal: bool) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The near field D V and each kernel's far field L_l V of q, k, v [B, H, N, dh] ([B, H, N, dh] each), and,
        ``causal``, each kernel's sums Σ_j φ_l(k_j)[v_j, 1]ᵀ over all the tokens ([B, H, dh, w]; none otherwise)."""
        cfg = self.cfg
        # |i − j| < k is a band of radius k − 1 (causal: its left half, 0 <= i − j < k).
        near = sliding_window_attention(
            q, k, v, cfg.bandwidth - 1, causal=causal, key_mask=mask, dropout_p=cfg.dropout, training=self.training
        )  # [B, H, N, dh]
        if not causal:
            return near, [linear_attention(q, k, v, phi, mask) for phi in self._features], []
        terms = [causal_kernel_attention_terms(phi(q), phi(k), v, mask) for phi in self._features]
        return near, [_normalised(num, den) for num, den, _ in terms], [kv for _, _, kv in terms]

    def step(self, x: Tensor, state: FMMformerState) -> tuple[Tensor, FMMformerState]:
        """One token x [B, 1, D]: its key and value join the band's ring buffer and each kernel's sums; its query
        attends over the band (the ring buffer holds exactly the last k tokens) and reads the sums."""
        q, k, v = self.proj(x)  # each [B, H, 1, dh]
        band = state.band
        band.append(k, v)
        p = self.cfg.dropout if self.training else 0.0
        near = dense_rows(q, band.k, band.v, key_mask=band.real, dropout_p=p, training=self.training)  # [B, H, 1, dh]
        far = []
        for phi, sums in zip(self._features, state.far, strict=True):
            far.append(_normalised(*causal_kernel_step(phi(q), phi(k), v, sums.kv)))  # [B, H, 1, dh]
            sums.length += 1
        return self._blend(near, far), state

    def _blend(self, near: Tensor, far: list[Tensor]) -> Tensor:
        """w₁ D V + Σ_l w₂,l L_l V from the near field and each kernel's far field ([B, H, N, dh] each): [B, N, D]."""
        y = near * self.near_weight.to(near.dtype)[:, None, None]
        for term, weight in zip(far, self.far_weight, strict=True):
            y = y + term * weight.to(near.dtype)[:, None, None]
        return self.out(merge_heads(y))  # [B, N, D]


register_preset(
    "fmmformer_2kernels",
    "fmmformer",
    display="FMMformer (2 kernels)",
    kernels="elu,elu_flip",
    description="FMMformer with two far-field kernels, elu(x)+1 and elu(−x)+1 (the paper's 2-kernel LRA model).",
)
