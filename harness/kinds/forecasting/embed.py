"""The input embedding the Informer/Autoformer/FEDformer family and S3Attention's forecaster share (the released
code's ``DataEmbedding`` with ``embed=timeF``): a circular convolution of the values, sinusoidal positions and a
linear map of the time features, summed, then dropout. Without the time features (``time_features=False``) it is the
released ``DataEmbedding_onlypos`` (FEDformer's ``layers/Embed.py``, copied into S3Attention's release), the
embedding of the values alone that S3Attention's Algorithm 3 calls (``self.enc_embedding(x_in)``).

Informer: Zhou et al., AAAI 2021, https://arxiv.org/abs/2012.07436 (§3, "uniform input representation").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """[length, dim]: sin at even and cos at odd features, wavelengths 2π·10000^(2i/dim) (Vaswani et al. 2017)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]  # [L, 1]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))  # [ceil(dim/2)]
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: dim // 2])
    return table


class DataEmbedding(nn.Module):
    """[B, L, C] values and [B, L, F] time features -> [B, L, d_model].

    - Values: Conv1d(C, d_model, kernel 3, circular padding, no bias), Kaiming-normal (fan_in, leaky ReLU) as the
      released ``TokenEmbedding``.
    - Positions: the fixed sinusoidal table (``positional=False`` leaves it out, as Autoformer's and FEDformer's
      ``DataEmbedding_wo_pos``).
    - Time features: Linear(F, d_model, no bias) (``TimeFeatureEmbedding``; F = 4 for the hourly features);
      ``time_features=False`` leaves it out (``DataEmbedding_onlypos``): ``x_mark`` is then not read and may be None.
    """

    def __init__(self, c_in: int, d_model: int, marks: int = 4, dropout: float = 0.1, positional: bool = True,
                 max_len: int = 5000, time_features: bool = True) -> None:
        super().__init__()
        self.values = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.values.weight, mode="fan_in", nonlinearity="leaky_relu")
        self.time = nn.Linear(marks, d_model, bias=False) if time_features else None
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model) if positional else None,
                             persistent=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, x_mark: Tensor | None = None) -> Tensor:
        h = self.values(x.transpose(1, 2)).transpose(1, 2)  # [B, C, L] conv -> [B, L, d_model]
        if self.time is not None:
            if x_mark is None:
                raise ValueError("this embedding adds the time features: pass x_mark [B, L, F]")
            h = h + self.time(x_mark)
        if self.positions is not None:
            h = h + self.positions[: x.shape[1]].to(h.dtype)
        return self.drop(h)
