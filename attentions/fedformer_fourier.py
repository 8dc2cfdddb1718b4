"""FEDformer's frequency enhanced block (FEB-f): a learned linear map on a few randomly chosen Fourier modes of the
queries, in place of self-attention.

Paper: Zhou, Ma, Wen, Wang, Sun, Jin, "FEDformer: Frequency Enhanced Decomposed Transformer for Long-term Series
Forecasting", ICML 2022, https://arxiv.org/abs/2201.12740 (§3.2, FEB-f, Figure 3). Authors' code:
``MAZiqing/FEDformer`` (``layers/FourierCorrelation.py``, ``FourierBlock``; ``get_frequency_modes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .base import merge_heads, pad_to_length, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class FEBConfig(AttentionConfig):
    """Config of FEB-f; ``dropout`` is accepted and unused (the block has none).

    Attributes:
        modes: M, Fourier modes kept (the authors' default 64; at most ⌊L/2⌋).
        random_modes: choose the M modes at random from the ⌊L/2⌋ lowest once at construction (the authors'
            ``mode_select='random'``, FEDformer-f's default); False keeps the M lowest.
    """

    modes: int = 64
    random_modes: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("modes")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "it mixes in the frequency domain over the whole sequence; FEDformer's decoder uses it without a mask"


@register(
    "fedformer_fourier",
    FEBConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n", needs_fixed_length=True),
    paper="https://arxiv.org/abs/2201.12740", display="FEDformer-f", group="Fourier / mixing",
)
class FEBFourier(nn.Module):
    """FEB-f of FEDformer; arxiv 2201.12740: q = X W_q split into heads, Q = rFFT(q) along time, M selected modes each
    mapped by a learned complex E×E matrix per head, the results placed in the first M frequencies of an otherwise
    zero spectrum, inverse rFFT, heads merged, output projection.

    Choices and deviations:
    - Modes drawn once at construction from torch's global RNG (the model seed fixes them; the authors use numpy's)
      among 0 … ⌊L/2⌋ − 1 with L = ``max_seq_len``, sorted; a buffer saved with the weights.
    - Where the selected modes' outputs go: to frequencies 0 … M − 1, as the authors' loop writes
      ``out_ft[..., wi] = …`` for the wi-th selected mode i. The paper's "Padding" does not say where; the numbers
      its tables report come from this code.
    - Heads: a weight block per head, [H, E, E, M] (the authors hard-code 8 heads); initialised as theirs,
      uniform [0, 1) real and imaginary parts times 1/(D·D).
    - Only queries are projected: the authors' wrapper also projects keys and values, which FEB-f never reads.
    - The authors' wrapper reshapes the block's [B, H, E, L] output straight to [B, L, H·E] (``.view``, no
      permute), which interleaves time and channels; this layer transposes it back, the paper's function.
    - Padding: the sequence is padded to ``max_seq_len`` (the modes are sized by it) with zeros, so real outputs
      depend on real tokens only; FFTs in float32 at least.
    """

    def __init__(self, cfg: FEBConfig) -> None:
        super().__init__()
        self.cfg = cfg
        n, d, h = cfg.max_seq_len, cfg.dim, cfg.heads
        m = min(cfg.modes, max(n // 2, 1))
        index = torch.randperm(max(n // 2, 1))[:m] if cfg.random_modes else torch.arange(m)
        self.register_buffer("index", index.sort().values)
        self.q = nn.Linear(d, d)
        self.weights = nn.Parameter(torch.rand(h, d // h, d // h, m, 2) / (d * d))  # [H, E, E, M] complex as pairs
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n_in = x.shape[1]
        x, mask = pad_to_length(x, mask, cfg.max_seq_len)
        x = zero_padding(x, mask)
        q = split_heads(self.q(x), cfg.heads)  # [B, H, N, E]
        ft = torch.promote_types(q.dtype, torch.float32)
        spectrum = torch.fft.rfft(q.to(ft), dim=2)  # [B, H, N//2+1, E]
        selected = spectrum[:, :, self.index]  # [B, H, M, E]
        mixed = torch.einsum("bhme,heom->bhmo", selected, torch.view_as_complex(self.weights.to(ft)))  # [B, H, M, E]
        out_ft = torch.zeros_like(spectrum)
        out_ft[:, :, : mixed.shape[2]] = mixed  # the wi-th selected mode goes to frequency wi (see the docstring)
        y = torch.fft.irfft(out_ft, n=cfg.max_seq_len, dim=2).to(x.dtype)  # [B, H, N, E]
        return self.out(merge_heads(y))[:, :n_in]  # [B, N, D]
