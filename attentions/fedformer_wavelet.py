"""FEDformer's multiwavelet enhanced block (FEB-w): the sequence's Legendre multiwavelet decomposition, a learned
sparse Fourier-space kernel on every level's coefficients, and the reconstruction, in place of self-attention.

Paper: Zhou, Ma, Wen, Wang, Sun, Jin, "FEDformer: Frequency Enhanced Decomposed Transformer for Long-term Series
Forecasting", ICML 2022, https://arxiv.org/abs/2201.12740 (the wavelet enhanced structure, FEB-w), after the
multiwavelet neural operator of Gupta, Xiao, Bogdan, NeurIPS 2021 (https://arxiv.org/abs/2109.13459). Authors' code:
``MAZiqing/FEDformer`` (``layers/MultiWaveletCorrelation.py``: ``MultiWaveletTransform``, ``MWT_CZ1d``,
``sparseKernelFT1d``; ``layers/utils.py``: ``get_filter``).

The pure pieces (:func:`legendre_filters`, :func:`decompose`, :func:`reconstruct`, :func:`pad_to_power_of_two`)
are public: FEDformer-w's cross-attention (FEA-w, in the forecasting kind) uses the same filter bank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from .base import pad_to_length, zero_padding
from .registry import AttentionConfig, Capabilities, register


def legendre_filters(k: int) -> np.ndarray:
    """The orthogonal two-scale filter bank of the Legendre multiwavelets of order ``k`` (Alpert's), float64 [2k, 2k].

    Scaling functions φ_i(x) = √(2i+1)·P_i(2x − 1) on [0, 1], i < k (orthonormal); the fine space V₁ has the
    orthonormal basis {√2 φ_j(2x), √2 φ_j(2x − 1)}. Returns M = [[H0, H1], [G0, G1]] with
    φ_i = Σ_j H0[i, j] √2 φ_j(2x) + H1[i, j] √2 φ_j(2x − 1), and likewise ψ_i with G0, G1: the multiwavelets,
    orthonormal, orthogonal to every φ (so they annihilate polynomials of degree < k). ψ_i is √2 φ_i(2x) on the left
    half made orthogonal to the φ's and to ψ_0 … ψ_{i−1} (Gram–Schmidt, positive norm), the construction of the
    authors' ``get_phi_psi``, so the same ψ's. M is orthogonal: analysis is M, synthesis Mᵀ.
    """
    nodes, weights = np.polynomial.legendre.leggauss(k)  # Gauss–Legendre on [-1, 1]: exact to degree 2k − 1
    x, w = (nodes + 1) / 2, weights / 2  # on [0, 1]
    scale = np.sqrt(2 * np.arange(k) + 1)

    def phi(t: np.ndarray) -> np.ndarray:  # φ_i(t) for every i: [len(t), k], by the recurrence (no power basis)
        return np.polynomial.legendre.legvander(2 * t - 1, k - 1) * scale

    # H0[i, j] = ∫_0^½ φ_i(y) √2 φ_j(2y) dy = (1/√2) ∫_0^1 φ_i(x/2) φ_j(x) dx (degree 2k − 2: exact); H1 likewise
    h0 = (phi(x / 2) * w[:, None]).T @ phi(x) / np.sqrt(2)  # [k, k]
    h1 = (phi((x + 1) / 2) * w[:, None]).T @ phi(x) / np.sqrt(2)  # [k, k]
    rows = np.concatenate([h0, h1], axis=1)  # [k, 2k]: the φ's coordinates in V₁'s orthonormal basis
    for i in range(k):
        v = np.zeros(2 * k)
        v[i] = 1.0  # √2 φ_i(2x) on [0, ½]
        for _ in range(2):  # Gram–Schmidt twice: orthogonal to working precision
            v -= rows.T @ (rows @ v)
        rows = np.concatenate([rows, (v / np.linalg.norm(v))[None]], axis=0)
    return rows  # [2k, 2k]: [[H0, H1], [G0, G1]]


def decompose(x: Tensor, filters: Tensor) -> tuple[Tensor, Tensor]:
    """One analysis step along dim 1: x [B, N, c, k] (N even) -> (details d, smooth s), each [B, N/2, c, k].
    [s, d] = [x_even, x_odd] Mᵀ (``filters`` = M of :func:`legendre_filters`), the authors' ``wavelet_transform``."""
    k = x.shape[-1]
    pairs = torch.cat([x[:, 0::2], x[:, 1::2]], dim=-1)  # [B, N/2, c, 2k]
    sd = pairs @ filters.to(pairs.dtype).T  # [B, N/2, c, 2k]
    return sd[..., k:], sd[..., :k]


def reconstruct(s: Tensor, d: Tensor, filters: Tensor) -> Tensor:
    """One synthesis step, the inverse of :func:`decompose`: s, d [B, n, c, k] -> x [B, 2n, c, k] with
    [x_even, x_odd] = [s, d] M, interleaved (the authors' ``evenOdd``)."""
    b, n, c, k = s.shape
    eo = torch.cat([s, d], dim=-1) @ filters.to(s.dtype)  # [B, n, c, 2k]: even steps, then odd steps
    return torch.stack([eo[..., :k], eo[..., k:]], dim=2).reshape(b, 2 * n, c, k)  # [B, 2n, c, k]


def pad_to_power_of_two(x: Tensor) -> Tensor:
    """x [B, N, ...] extended along dim 1 to the next power of two by repeating its first steps (the authors' wrap)."""
    n = x.shape[1]
    target = 1 << (n - 1).bit_length()
    return x if target == n else torch.cat([x, x[:, : target - n]], dim=1)  # [B, 2^⌈log2 N⌉, ...]


def levels(n: int, skip: int) -> int:
    """Analysis steps of a length-``n`` sequence: ⌊log2 n⌋ − ``skip`` (none below 0), the authors' ``ns − L``."""
    return max(n.bit_length() - 1 - skip, 0)


@dataclass(frozen=True)
class MWTConfig(AttentionConfig):
    """Config of FEB-w; ``heads`` is accepted and unused (the block has no heads), so is ``dropout`` (none).

    Attributes:
        k: order of the Legendre multiwavelets (polynomials of degree < k per cell; the authors' default 8).
        skip_levels: the released ``--L`` (its help: "ignore level"; default 3): the decomposition stops that many
            levels before the coarsest, after ⌊log2 N⌋ − L steps.
        modes: Fourier modes of the sparse kernel (the lowest ``modes`` of each level; the authors' ``alpha``, 16:
            ``models/FEDformer.py`` does not pass ``--modes`` to the self-attention block).
        channels: c, the multiwavelet channels: the block lifts D to c·k. None: 2D/k, which is the authors' fixed
            c = 128 at the released d_model 512 (see the class docstring).
    """

    k: int = 8
    skip_levels: int = 3
    modes: int = 16
    channels: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("k", "modes")
        if not (isinstance(self.skip_levels, int) and not isinstance(self.skip_levels, bool) and self.skip_levels >= 0):
            raise ValueError(f"skip_levels must be a non-negative integer, got {self.skip_levels!r}")
        if self.channels is not None:
            self._require_positive_ints("channels")

    @property
    def c(self) -> int:
        """c, resolved."""
        return self.channels if self.channels is not None else max(2 * self.dim // self.k, 1)


class SparseKernel(nn.Module):
    """The authors' ``sparseKernelFT1d``: x [B, n, c, k] -> irFFT(W · rFFT(x)) along n, W a learned complex
    (c·k)×(c·k) matrix per mode on the lowest min(modes, n/2 + 1) modes, the others zeroed."""

    def __init__(self, width: int, modes: int) -> None:
        super().__init__()
        # uniform [0, 1) real and imaginary parts times 1/(c·k)², as the authors'; [ck, ck, modes] complex as pairs
        self.weights = nn.Parameter(torch.rand(width, width, modes, 2) / width**2)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c, k = x.shape
        mixed = torch.einsum("bmi,iom->bmo", low_modes(x, self.modes(n)), self.kernel(x.dtype, n))  # [B, m, ck]
        return from_low_modes(mixed, n).to(x.dtype).reshape(b, n, c, k)  # [B, n, c, k]

    def modes(self, n: int) -> int:
        """The modes kept for a length-``n`` signal: min(modes, n/2 + 1)."""
        return min(self.weights.shape[2], n // 2 + 1)

    def kernel(self, dtype: torch.dtype, n: int) -> Tensor:
        """W on the kept modes, complex, in float32 at least: [ck, ck, m]."""
        ft = torch.promote_types(dtype, torch.float32)
        return torch.view_as_complex(self.weights.to(ft))[:, :, : self.modes(n)]


def low_modes(x: Tensor, m: int) -> Tensor:
    """rFFT along dim 1 of x [B, n, c, k] in float32 at least, its lowest ``m`` modes: [B, m, c·k] complex."""
    b, n, c, k = x.shape
    return torch.fft.rfft(x.reshape(b, n, c * k).to(torch.promote_types(x.dtype, torch.float32)), dim=1)[:, :m]


def from_low_modes(mixed: Tensor, n: int) -> Tensor:
    """The inverse rFFT of a spectrum given on its lowest modes (the others zero): [B, m, W] -> [B, n, W] real."""
    b, m, width = mixed.shape
    rest = mixed.new_zeros(b, n // 2 + 1 - m, width)  # [B, n//2+1-m, W]: the modes not kept
    return torch.fft.irfft(torch.cat([mixed, rest], dim=1), n=n, dim=1)  # [B, n, W]


class MultiwaveletBlock(nn.Module):
    """The authors' ``MWT_CZ1d`` on x [B, N, c, k]: pad to a power of two; at each of ⌊log2 N⌋ − L levels split into
    details d and smooth s (:func:`decompose`), keep Ud = A(d) + B(s) and Us = C(d), go on with s; the coarsest s
    through a linear map T0 on k; then back up, s ← reconstruct(s + Us, Ud); the first N steps."""

    def __init__(self, cfg: MWTConfig) -> None:
        super().__init__()
        width = cfg.c * cfg.k
        self.skip = cfg.skip_levels
        self.a, self.b, self.c = (SparseKernel(width, cfg.modes) for _ in range(3))
        self.t0 = nn.Linear(cfg.k, cfg.k)
        # a constant of k, rebuilt at construction, so not saved with the weights; float64 (cast where used), so a
        # float64 copy of the layer gets the exact filters, not float32-rounded ones
        self.register_buffer("filters", torch.tensor(legendre_filters(cfg.k), dtype=torch.float64), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[1]
        s = pad_to_power_of_two(x)  # [B, 2^⌈log2 N⌉, c, k]
        ud, us = [], []
        for _ in range(levels(n, self.skip)):
            d, s = decompose(s, self.filters)
            ud_level, us_level = self.level_kernels(d, s)
            ud.append(ud_level)
            us.append(us_level)
        s = self.t0(s)  # the coarsest scale
        for d_part, s_part in zip(reversed(ud), reversed(us), strict=True):
            s = reconstruct(s + s_part, d_part, self.filters)
        return s[:, :n]


    def level_kernels(self, d: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
        """Ud = A(d) + B(s) and Us = C(d) of one level, [B, n, c, k] each, with the FFTs shared: d's spectrum is taken
        once for A and C (one product with [A | C]), and A(d) + B(s) is summed before its inverse FFT (linear), so a
        level takes two rFFTs and one inverse instead of three of each. The same function as the three kernels
        applied apart (a test checks in float64); it made FEB-w the slowest row of the forecasting suite."""
        b, n, c, k = d.shape
        width, m = c * k, self.a.modes(n)
        d_hat, s_hat = low_modes(d, m), low_modes(s, m)  # [B, m, ck] each
        ac = torch.cat([self.a.kernel(d.dtype, n), self.c.kernel(d.dtype, n)], dim=1)  # [ck, 2ck, m]
        mixed = torch.einsum("bmi,iom->bmo", d_hat, ac)  # [B, m, 2ck]: A d̂, C d̂
        ud_hat = mixed[..., :width] + torch.einsum("bmi,iom->bmo", s_hat, self.b.kernel(d.dtype, n))  # [B, m, ck]
        y = from_low_modes(torch.cat([ud_hat, mixed[..., width:]], dim=-1), n).to(d.dtype)  # [B, n, 2ck]
        ud, us = y.split(width, dim=-1)
        return ud.reshape(b, n, c, k), us.reshape(b, n, c, k)  # [B, n, c, k] each


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "it mixes in the wavelet domain over the whole sequence; FEDformer's decoder uses it without a mask"


@register(
    "fedformer_wavelet",
    MWTConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n", needs_fixed_length=True),
    paper="https://arxiv.org/abs/2201.12740", display="FEDformer-w", group="Fourier / mixing",
)
class FEBWavelet(nn.Module):
    """FEB-w of FEDformer; arxiv 2201.12740: v = X W_v, lifted to c·k channels, the multiwavelet block
    (:class:`MultiwaveletBlock`: Legendre multiwavelets of order k = 8, ⌊log2 N⌋ − L levels with L = 3, the sparse
    kernel on 16 modes), lowered back to D, output projection.

    Choices and deviations:
    - Width: the authors fix c = 128 channels (c·k = 1024 for any d_model) and their kernels hold (c·k)²·16 complex
      weights each, 100M parameters per block; here c = 2D/k by default (``channels``), which is 128 at the released
      d_model 512 and keeps a small model small. Set ``channels=128`` for the authors' width at any D.
    - Only values are projected: the authors' wrapper also projects queries and keys, which the block never reads.
      The value projection, the lift (D → c·k), the lowering (c·k → D) and the output projection are kept as four
      maps, as the authors have them, although they compose to two.
    - Base: Legendre only (the released ``--base legendre``); the authors' Chebyshev base is not offered.
    - Filters: exact to rounding (Gauss–Legendre quadrature and Gram–Schmidt in coordinates, numpy), so analysis
      followed by synthesis is the identity. The authors' ``get_filter`` (sympy power-basis polynomials, products
      and coefficients below 1e-8 zeroed) loses accuracy as k grows: against these, its filters differ by 8e-10
      at k = 4, 1e-3 at k = 7 and 0.61 at k = 8 (the last two multiwavelets' rows), where its bank is no longer
      orthogonal (max |M Mᵀ − I| = 0.46), so their block's decomposition and reconstruction do not invert each
      other. This layer computes the multiwavelet transform the paper describes, not that rounding.
    - Padding: the sequence is padded to ``max_seq_len`` (the levels and kernels run on that length, as the
      forecasters build each block for its own length) and the lifted signal is zero at padded steps, so real
      outputs depend on real tokens only; then, as the authors, extended to a power of two by repeating its first
      steps. FFTs in float32 at least.
    """

    def __init__(self, cfg: MWTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, width = cfg.dim, cfg.c * cfg.k
        self.value = nn.Linear(d, d)
        self.lift, self.lower = nn.Linear(d, width), nn.Linear(width, d)
        self.block = MultiwaveletBlock(cfg)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n_in = x.shape[1]
        x, mask = pad_to_length(x, mask, cfg.max_seq_len)
        b, n, _ = x.shape
        u = zero_padding(self.lift(self.value(x)), mask)  # [B, N, c·k]: padded steps are zeros of the signal
        y = self.block(u.reshape(b, n, cfg.c, cfg.k))  # [B, N, c, k]
        return self.out(self.lower(y.reshape(b, n, cfg.c * cfg.k)))[:, :n_in]  # [B, N, D]
