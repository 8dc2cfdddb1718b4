"""FEDformer, both versions, for Table 2: Zhou, Ma, Wen, Wang, Sun, Jin, "FEDformer: Frequency Enhanced Decomposed
Transformer for Long-term Series Forecasting", ICML 2022, https://arxiv.org/abs/2201.12740. Authors' code:
``MAZiqing/FEDformer`` (``models/FEDformer.py``, ``layers/FourierCorrelation.py``,
``layers/MultiWaveletCorrelation.py``).

The progressive-decomposition encoder-decoder (:class:`~harness.kinds.forecasting.blocks.DecompositionForecaster`,
moving average 24 as the released ``--moving_avg [24]``) with, as the paper's two versions:

- FEDformer-f (``--version Fourier``, :func:`build`): the frequency enhanced block (the zoo's ``fedformer_fourier``,
  built for each layer's own length) as self-attention and the frequency enhanced attention
  (:class:`FourierCrossAttention`, FEA-f, §3.3) as cross-attention.
- FEDformer-w (``--version Wavelets``, :func:`build_wavelet`): the multiwavelet block (the zoo's
  ``fedformer_wavelet``, FEB-w) as self-attention and the multiwavelet cross-attention
  (:class:`WaveletCrossAttention`, FEA-w, the authors' ``MultiWaveletCross``) as cross-attention.

Choices and deviations:
- Modes: ``modes`` (default 64, the released default) drawn at random once per block from the ⌊L/2⌋ lowest
  frequencies of that block's length, with torch's RNG (the model seed fixes them; the authors use numpy's).
- The decomposition's learned mixture over windows (``series_decomp_multi``) is a plain moving average: with the one
  released window its softmax weight is 1.
- FEA-f writes each selected query mode back to its own frequency (the authors' cross-attention loop does; their
  self-attention block writes them to the first frequencies, which the zoo's block reproduces).
- Heads: ``heads`` weight blocks (the authors hard-code 8, equal to their ``n_heads``); the block's [B, H, E, L]
  output is transposed back to [B, L, H·E] (the authors' wrapper views it without a permute, which interleaves time
  and channels), as the zoo's block does.
- FEA-w: see :class:`WaveletCrossAttention`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attentions.base import merge_heads, split_heads
from attentions.fedformer_fourier import FEBConfig
from attentions.fedformer_wavelet import decompose, legendre_filters, levels, pad_to_power_of_two, reconstruct

from .blocks import DecompositionForecaster, ForecastConfig, SelfAttention

MOVING_AVG = 24
#: FEA-w's settings as ``models/FEDformer.py`` builds ``MultiWaveletCross``: the released ``--modes`` 64 (the lowest
#: modes of each level), the class's defaults k = 8 and L = 0 (``--L`` is not passed to it), tanh activation.
WAVELET_CROSS_MODES, WAVELET_K = 64, 8


def frequency_modes(length: int, modes: int) -> Tensor:
    """min(modes, ⌊L/2⌋) of the frequencies 0 … ⌊L/2⌋ − 1, drawn with torch's RNG, sorted (``get_frequency_modes``)."""
    return torch.randperm(max(length // 2, 1))[: min(modes, max(length // 2, 1))].sort().values


class FourierCrossAttention(nn.Module):
    """FEA-f (§3.3, eq. 8): Q̃, K̃ the selected modes of the rFFT of the decoder's queries and the encoder's keys;
    out = irFFT(padded(tanh(Q̃ K̃ᵀ) K̃ · W)) / D², the selected query modes at their frequencies, zero elsewhere."""

    def __init__(self, cfg: ForecastConfig, len_q: int, len_kv: int) -> None:
        super().__init__()
        d, h = cfg.d_model, cfg.heads
        modes = int(cfg.attention.get("modes", FEBConfig.modes))
        self.heads, self.len_q = h, len_q
        self.register_buffer("index_q", frequency_modes(len_q, modes))
        self.register_buffer("index_kv", frequency_modes(len_kv, modes))
        self.q, self.k, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        # [H, E, E, Mq] complex as (real, imaginary) pairs, uniform [0, 1) parts times 1/(D·D) as the authors'
        self.weights = nn.Parameter(torch.rand(h, d // h, d // h, len(self.index_q), 2) / (d * d))

    def forward(self, x: Tensor, cross: Tensor) -> Tensor:
        d = x.shape[-1]
        ft = torch.promote_types(x.dtype, torch.float32)
        q = split_heads(self.q(x), self.heads).to(ft)  # [B, H, Lq, E]
        k = split_heads(self.k(cross), self.heads).to(ft)  # [B, H, Lk, E]
        qf = torch.fft.rfft(q, dim=2)[:, :, self.index_q]  # [B, H, Mq, E]
        kf = torch.fft.rfft(k, dim=2)[:, :, self.index_kv]  # [B, H, Mk, E]
        scores = torch.einsum("bhxe,bhye->bhxy", qf, kf).tanh()  # [B, H, Mq, Mk]: no conjugate, as the authors'
        mixed = torch.einsum("bhxy,bhye->bhxe", scores, kf)  # [B, H, Mq, E]
        mixed = torch.einsum("bhxe,heox->bhxo", mixed, torch.view_as_complex(self.weights.to(ft)))  # [B, H, Mq, E]
        spectrum = torch.zeros(*q.shape[:2], self.len_q // 2 + 1, q.shape[-1], dtype=mixed.dtype, device=x.device)
        spectrum[:, :, self.index_q] = mixed / (d * d)
        y = torch.fft.irfft(spectrum, n=self.len_q, dim=2).to(x.dtype)  # [B, H, Lq, E]
        return self.out(merge_heads(y))  # [B, Lq, D]


def build(cfg: ForecastConfig, name: str = "fedformer_fourier") -> nn.Module:
    """FEDformer-f with ``cfg``'s sizes (its moving average 24 unless ``cfg`` gives another)."""
    cfg = dataclasses.replace(cfg, moving_avg=cfg.moving_avg or MOVING_AVG)
    return DecompositionForecaster(cfg, lambda n: SelfAttention(name, cfg, n),
                                   lambda lq, lk: FourierCrossAttention(cfg, lq, lk))


def _fourier_cross_w(q: Tensor, k: Tensor, modes: int, scale: float) -> Tensor:
    """The authors' ``FourierCrossAttentionW`` (no weights) on one level: q, k [B, n, c, kk] -> [B, n, c, kk].
    Per wavelet coefficient index, Q̃, K̃ = the lowest min(n/2, modes) rFFT modes along n of the c channels;
    out = irFFT(padded(tanh(Q̃ᵀ K̃) K̃)) · ``scale``, the modes at their own frequencies (no conjugate, as FEA-f)."""
    n = q.shape[1]
    m = min(n // 2, modes)
    ft = torch.promote_types(q.dtype, torch.float32)
    qf = torch.fft.rfft(q.to(ft), dim=1)[:, :m]  # [B, m, c, kk]
    kf = torch.fft.rfft(k.to(ft), dim=1)[:, :m]  # [B, m, c, kk]
    scores = torch.einsum("bxeh,byeh->bhxy", qf, kf).tanh()  # [B, kk, m, m]: summed over the c channels
    mixed = torch.einsum("bhxy,byeh->bxeh", scores, kf)  # [B, m, c, kk]
    rest = mixed.new_zeros(q.shape[0], n // 2 + 1 - m, *q.shape[2:])  # [B, n//2+1-m, c, kk]: modes not kept
    return (torch.fft.irfft(torch.cat([mixed, rest], dim=1), n=n, dim=1) * scale).to(q.dtype)  # [B, n, c, kk]


class WaveletCrossAttention(nn.Module):
    """FEA-w (the wavelet enhanced cross-attention; the authors' ``MultiWaveletCross``): queries from the decoder and
    keys from the encoder, each projected (the wrapper's projections) and lifted to c·k channels; the keys cut or
    zero-padded to the queries' length; both extended to a power of two and decomposed over every level (L = 0); at
    each level the weightless Fourier cross-attention F (:func:`_fourier_cross_w`) gives Ud = F(d_q, d_k) + F(s_q,
    s_k) and Us = F(d_q, d_k), at the coarsest v = F(s_q, s_k); then v is reconstructed as in FEB-w, lowered to D
    and projected out.

    Choices and deviations:
    - Width: c = D/k (the authors' default c = 64 is D/k at the released d_model 512), as the zoo's FEB-w scales its
      own c with D.
    - Values are left out: the authors' ``FourierCrossAttentionW`` reads only the values' length, so their value
      projection, lift and decomposition have no effect on the output. Their unused ``T0`` is left out too.
    - Scale: the spectrum is divided by D² (their ``in_channels · out_channels``); tanh only (the released
      ``--cross_activation``); the filters are the exact Legendre bank of :func:`~attentions.fedformer_wavelet.
      legendre_filters` (the authors' are not orthogonal at k = 8, see the zoo module).
    """

    def __init__(self, cfg: ForecastConfig, len_q: int, len_kv: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.c = max(d // WAVELET_K, 1)
        width = self.c * WAVELET_K
        self.len_q, self.scale = len_q, 1.0 / (d * d)
        self.q, self.k, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)  # the wrapper's projections
        self.lift_q, self.lift_k, self.lower = nn.Linear(d, width), nn.Linear(d, width), nn.Linear(width, d)
        self.register_buffer("filters", torch.tensor(legendre_filters(WAVELET_K), dtype=torch.float64),
                             persistent=False)

    def forward(self, x: Tensor, cross: Tensor) -> Tensor:
        b, n, _ = x.shape
        q = self.lift_q(self.q(x)).reshape(b, n, self.c, WAVELET_K)  # [B, Lq, c, k]
        k = self.lift_k(self.k(cross))[:, :n]  # [B, min(Lk, Lq), c·k]: cut to the queries' length
        k = F.pad(k, (0, 0, 0, n - k.shape[1])).reshape(b, n, self.c, WAVELET_K)  # [B, Lq, c, k]: zero-padded
        q, k = pad_to_power_of_two(q), pad_to_power_of_two(k)
        ud, us = [], []
        for _ in range(levels(n, 0)):
            dq, q = decompose(q, self.filters)
            dk, k = decompose(k, self.filters)
            detail = _fourier_cross_w(dq, dk, WAVELET_CROSS_MODES, self.scale)
            ud.append(detail + _fourier_cross_w(q, k, WAVELET_CROSS_MODES, self.scale))
            us.append(detail)  # the authors' attn1 and attn3 are the same weightless function of (d_q, d_k)
        v = _fourier_cross_w(q, k, WAVELET_CROSS_MODES, self.scale)
        for d_part, s_part in zip(reversed(ud), reversed(us), strict=True):
            v = reconstruct(v + s_part, d_part, self.filters)
        return self.out(self.lower(v[:, :n].reshape(b, n, -1)))  # [B, Lq, D]


def build_wavelet(cfg: ForecastConfig, name: str = "fedformer_wavelet") -> nn.Module:
    """FEDformer-w with ``cfg``'s sizes (its moving average 24 unless ``cfg`` gives another)."""
    cfg = dataclasses.replace(cfg, moving_avg=cfg.moving_avg or MOVING_AVG)
    return DecompositionForecaster(cfg, lambda n: SelfAttention(name, cfg, n),
                                   lambda lq, lk: WaveletCrossAttention(cfg, lq, lk))
