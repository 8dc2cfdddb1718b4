"""S3Attention's forecaster (journal Algorithms 3–4, §IV-B; arxiv.org/abs/2408.08567): standardise each series over
its window, embed, S3Attention layers with residual connections, project back to the variables, and continue the
result with Fourier extrapolation (:mod:`harness.kinds.forecasting.fourier`).

Choices and deviations (the pseudo-code is the only specification; the released repository has no forecaster file):
- Layers. The journal's Algorithm 3 embeds the input again inside its loop over layers, so only the last layer's
  output would reach the decoder; the conference version indents the decoder and ``return`` into the first
  iteration, so only the first layer would. Neither uses a stack, which is what ``e_layers 2`` in the released run
  script asks for, so the layers here run one after another on the embedding, each as ``layer(h) + h``. With one
  layer every reading is the same model (a test compares it with Algorithm 3 transcribed).
- A layer is the zoo's ``s3attention`` (smoother, skeleton attention, output projection) with the residual around
  it, as ``attn_layer(enc_out1) + enc_out1``: no feed-forward block or normalisation, which the pseudo-code does not
  have. Its ``max_seq_len`` is the input length; its smoother dropout is the model's dropout (the paper gives none
  for forecasting; 0.5 is its LRA default).
- Standardisation as printed: mean over the window and sqrt(var + 1) with torch's default unbiased variance. The
  +1 keeps near-constant windows finite; it also makes the model shift- but not scale-equivariant.
- ``post`` is a linear map d_model -> variables; the forecast is the last ``horizon`` steps of the extrapolation
  (the first ``input_len`` reconstruct the window), as the released training loop slices ``[:, -pred_len:]``.
- Sizes from :class:`~harness.kinds.forecasting.blocks.ForecastConfig` (``e_layers`` layers); the released run
  script's S3 (``SKTFORMER``) lines use d_model 32 and 2 layers (the forecasting suite's ``model_config``); n_harm 8:
  Algorithm 4.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

import attentions

from .blocks import ForecastConfig
from .embed import DataEmbedding
from .fourier import FourierExtrapolation


class S3Forecaster(nn.Module):
    """x [B, L, C] and its time features x_mark [B, L, F] -> the forecast [B, horizon, C] (Algorithms 3–4). The
    horizon's time features ``y_mark``, which the encoder-decoder baselines read, are not used."""

    def __init__(self, cfg: ForecastConfig, name: str = "s3attention") -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = DataEmbedding(cfg.variables, cfg.d_model, cfg.marks, cfg.dropout)
        overrides = {"dropout": cfg.dropout, "smoother_dropout": cfg.dropout, **cfg.attention}
        self.layers = nn.ModuleList(
            attentions.build(name, dim=cfg.d_model, heads=cfg.heads, max_seq_len=cfg.input_len, **overrides)
            for _ in range(cfg.e_layers))
        self.post = nn.Linear(cfg.d_model, cfg.variables)
        self.extrapolate = FourierExtrapolation(cfg.input_len, cfg.n_harm, cfg.horizon)

    def forward(self, x: Tensor, x_mark: Tensor, y_mark: Tensor | None = None) -> Tensor:
        mean = x.mean(dim=1, keepdim=True)  # [B, 1, C]
        std = torch.sqrt(x.var(dim=1, keepdim=True) + 1.0)  # [B, 1, C]
        h = self.embed((x - mean) / std, x_mark)  # [B, L, d_model]
        for layer in self.layers:
            h = layer(h) + h
        restored = self.extrapolate(self.post(h))  # [B, L + horizon, C]
        return restored[:, -self.cfg.horizon:] * std + mean
