"""FEDformer (the Fourier version, FEDformer-f) for Table 2: Zhou, Ma, Wen, Wang, Sun, Jin, "FEDformer: Frequency
Enhanced Decomposed Transformer for Long-term Series Forecasting", ICML 2022, https://arxiv.org/abs/2201.12740.
Authors' code: ``MAZiqing/FEDformer`` (``models/FEDformer.py``, ``layers/FourierCorrelation.py``).

The progressive-decomposition encoder-decoder (:class:`~harness.kinds.forecasting.blocks.DecompositionForecaster`,
moving average 24 as the released ``--moving_avg [24]``) with the frequency enhanced block as self-attention (the zoo's
``fedformer_fourier``, built for each layer's own length) and the frequency enhanced attention
(:class:`FourierCrossAttention`, FEA-f, §3.3) as cross-attention.

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
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attentions.base import merge_heads, split_heads
from attentions.fedformer_fourier import FEBConfig

from .blocks import DecompositionForecaster, ForecastConfig, SelfAttention

MOVING_AVG = 24


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
