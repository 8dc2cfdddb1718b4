"""The encoder-decoder pieces Table 2's baselines share, as their authors' code builds them (``MAZiqing/FEDformer``:
``layers/Autoformer_EncDec.py`` and ``layers/Transformer_EncDec.py``, which Autoformer's and Informer's repositories
also carry):

- :func:`series_decomp`: the moving-average seasonal-trend decomposition (Autoformer §3.1, eq. 1).
- :class:`DecompositionForecaster`: Autoformer's progressive-decomposition encoder-decoder (Autoformer and
  FEDformer differ only in their two attentions and the averaging window).
- :class:`TransformerForecaster`: Informer's encoder-decoder (the "Transformer" of those repositories, with
  Informer's distilling as an option), for Informer, LogTrans, Reformer and any other zoo attention.

Both take the history ``x`` [B, L, C] with its time features and the horizon's time features, and feed the decoder
the last ``label_len`` steps of the history followed by ``horizon`` placeholders (zeros; the history's mean as the
initial trend in the decomposition models), returning the last ``horizon`` outputs [B, H, C].

A token mixer of the zoo takes one sequence (self-attention). The decoder's cross-attention (queries from the
decoder, keys and values from the encoder) is each model's own: full softmax attention (``nn.MultiheadAttention``)
unless the model module passes another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attentions

from .embed import DataEmbedding


@dataclass(frozen=True)
class ForecastConfig:
    """Sizes and settings of one forecaster; defaults are the released scripts' (FEDformer ``run.py``).

    Attributes:
        input_len, horizon: history and forecast lengths (L, H).
        variables: C, the series' variables (input and output).
        marks: time features per step (4 for the hourly ``timeF`` features).
        label_len: history steps the decoder starts from (None: L // 2, as the scripts' 48 for 96 and 18 for 36).
        d_model, heads, e_layers, d_layers, d_ff: model sizes.
        dropout: dropout of the embeddings, attention outputs and feed-forward blocks.
        activation: "gelu" or "relu" in the feed-forward blocks.
        moving_avg: the decomposition's averaging window (None: the model's own, Autoformer 25, FEDformer 24).
        attention: config overrides of the zoo attention (e.g. ``factor``, ``modes``, ``r``).
        n_harm: harmonics of S3Attention's Fourier extrapolation (its forecaster only).
        time_features: S3Attention's forecaster only: add the time features' linear map to its embedding, as the
            family's ``DataEmbedding`` with ``embed=timeF`` does (False: Algorithm 3, which embeds the values
            alone; see :mod:`~harness.kinds.forecasting.s3_forecaster`). The encoder-decoders always embed them.
    """

    input_len: int
    horizon: int
    variables: int
    marks: int = 4
    label_len: int | None = None
    d_model: int = 512
    heads: int = 8
    e_layers: int = 2
    d_layers: int = 1
    d_ff: int = 2048
    dropout: float = 0.05
    activation: str = "gelu"
    moving_avg: int | None = None
    attention: dict[str, Any] = field(default_factory=dict)
    n_harm: int = 8
    time_features: bool = False

    def __post_init__(self) -> None:
        def bad(name: str, valid: str) -> ValueError:
            return ValueError(f"{name} must be {valid}, got {getattr(self, name)!r}")

        for name in ("input_len", "horizon", "variables", "marks", "d_model", "heads", "e_layers", "d_layers", "d_ff",
                     "n_harm"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise bad(name, "a positive integer")
        for name in ("label_len", "moving_avg"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise bad(name, "a positive integer or null (the model's default)")
        if self.label_len is not None and self.label_len > self.input_len:
            raise bad("label_len", f"at most input_len = {self.input_len}")
        if not (isinstance(self.dropout, int | float) and not isinstance(self.dropout, bool) and 0 <= self.dropout < 1):
            raise bad("dropout", "a number in [0, 1)")
        if not isinstance(self.time_features, bool):
            raise bad("time_features", "true or false")
        if self.activation not in ("gelu", "relu"):
            raise bad("activation", "gelu or relu")
        if self.d_model % self.heads:
            raise bad("heads", f"a divisor of d_model = {self.d_model}")

    @property
    def start(self) -> int:
        """label_len, resolved."""
        return self.input_len // 2 if self.label_len is None else self.label_len

    @property
    def decoder_len(self) -> int:
        return self.start + self.horizon


#: (query length, key length) -> a module mapping (x [B, Lq, D], cross [B, Lk, D]) to [B, Lq, D]
CrossFactory = Callable[[int, int], nn.Module]


def series_decomp(x: Tensor, kernel: int) -> tuple[Tensor, Tensor]:
    """x [B, L, C] -> (seasonal, trend), trend the moving average of ``kernel`` steps with the ends repeated
    (k − 1 − ⌊(k − 1)/2⌋ copies of the first step before, ⌊(k − 1)/2⌋ of the last after, so an even window also
    keeps the length, as the authors' ``moving_avg``)."""
    front, back = kernel - 1 - (kernel - 1) // 2, (kernel - 1) // 2
    padded = torch.cat([x[:, :1].expand(-1, front, -1), x, x[:, -1:].expand(-1, back, -1)], dim=1)  # [B, L+k-1, C]
    trend = F.avg_pool1d(padded.transpose(1, 2), kernel, stride=1).transpose(1, 2)  # [B, L, C]
    return x - trend, trend


class SeasonalLayerNorm(nn.Module):
    """LayerNorm, then the time mean removed (the authors' ``my_Layernorm`` for the seasonal part)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(x)
        return x - x.mean(dim=1, keepdim=True)


class SelfAttention(nn.Module):
    """A zoo attention as a self-attention block: (x, cross) -> attention(x); ``cross`` is ignored.

    ``causal``: the decoder's masked self-attention, as the Transformer and Informer decoders mask it (their authors'
    ``mask_flag``): the variant's causal form where it has one (``attnbench list``), else its bidirectional form, which
    reads the decoder's zero-filled future too (the variant's own reason says why it has no other)."""

    def __init__(self, name: str, cfg: ForecastConfig, length: int, causal: bool = False) -> None:
        super().__init__()
        # the model's dropout unless the suite sets the attention's own (``config: {dropout: ...}``)
        masked = {"causal": True} if causal and attentions.spec(name).caps.causal else {}
        self.attention = attentions.build(name, dim=cfg.d_model, heads=cfg.heads, max_seq_len=length,
                                          **{"dropout": cfg.dropout, **cfg.attention, **masked})

    def forward(self, x: Tensor, cross: Tensor | None = None) -> Tensor:
        return self.attention(x)


class FullCrossAttention(nn.Module):
    """Softmax attention of the decoder's positions over the encoder's (the authors' ``FullAttention`` with
    ``AttentionLayer``; torch's ``nn.MultiheadAttention``, its attention dropout the model's)."""

    def __init__(self, cfg: ForecastConfig) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(cfg.d_model, cfg.heads, dropout=cfg.dropout, batch_first=True)

    def forward(self, x: Tensor, cross: Tensor) -> Tensor:
        return self.attention(x, cross, cross, need_weights=False)[0]


class FeedForward(nn.Module):
    """Two position-wise linear maps (the authors' kernel-1 convolutions) with the activation and dropout."""

    def __init__(self, cfg: ForecastConfig, bias: bool) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(cfg.d_model, cfg.d_ff, bias=bias), nn.Linear(cfg.d_ff, cfg.d_model, bias=bias)
        self.act = F.gelu if cfg.activation == "gelu" else F.relu
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.down(self.drop(self.act(self.up(x)))))


def decoder_marks(x_mark: Tensor, y_mark: Tensor, start: int) -> Tensor:
    """Time features of the decoder's steps: the history's last ``start`` and the horizon's. [B, start + H, F]"""
    return torch.cat([x_mark[:, x_mark.shape[1] - start:], y_mark], dim=1)


# ---------------------------------------------------------------------------------------------------------------------
# Autoformer's progressive decomposition (Autoformer and FEDformer)


def _window(cfg: ForecastConfig) -> int:
    if cfg.moving_avg is None:
        raise ValueError("a decomposition model needs moving_avg (its module sets its own default)")
    return cfg.moving_avg


class _DecompEncoderLayer(nn.Module):
    def __init__(self, cfg: ForecastConfig, attention: nn.Module) -> None:
        super().__init__()
        self.attention, self.ff, self.kernel = attention, FeedForward(cfg, bias=False), _window(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x, _ = series_decomp(x + self.drop(self.attention(x)), self.kernel)
        return series_decomp(x + self.ff(x), self.kernel)[0]


class _DecompDecoderLayer(nn.Module):
    """Seasonal part through self-attention, cross-attention and the feed-forward block, each followed by a
    decomposition; the three trends removed are summed and projected to the variables (kernel-3 circular conv)."""

    def __init__(self, cfg: ForecastConfig, self_attention: nn.Module, cross_attention: nn.Module) -> None:
        super().__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.ff, self.kernel, self.drop = FeedForward(cfg, bias=False), _window(cfg), nn.Dropout(cfg.dropout)
        self.trend = nn.Conv1d(cfg.d_model, cfg.variables, 3, padding=1, padding_mode="circular", bias=False)

    def forward(self, x: Tensor, cross: Tensor) -> tuple[Tensor, Tensor]:
        x, trend1 = series_decomp(x + self.drop(self.self_attention(x)), self.kernel)
        x, trend2 = series_decomp(x + self.drop(self.cross_attention(x, cross)), self.kernel)
        x, trend3 = series_decomp(x + self.ff(x), self.kernel)
        trend = self.trend((trend1 + trend2 + trend3).transpose(1, 2)).transpose(1, 2)  # [B, Ld, C]
        return x, trend


class DecompositionForecaster(nn.Module):
    """Autoformer's architecture (Autoformer §3.1, Figure 1): the history decomposed; the encoder models the
    seasonal part; the decoder accumulates the trend from the history's last ``label_len`` trend steps followed by
    the history's mean, and refines the seasonal part (the last ``label_len`` seasonal steps followed by zeros).

    ``self_attention(length)`` builds the encoder's (length L) and the decoder's (label_len + H) self-attention;
    ``cross_attention(Lq, Lk)`` the decoder's cross-attention. Embeddings without positions (``DataEmbedding_wo_pos``).
    """

    def __init__(self, cfg: ForecastConfig, self_attention: Callable[[int], nn.Module],
                 cross_attention: CrossFactory) -> None:
        super().__init__()
        self.cfg = cfg
        self.enc_embed = DataEmbedding(cfg.variables, cfg.d_model, cfg.marks, cfg.dropout, positional=False)
        self.dec_embed = DataEmbedding(cfg.variables, cfg.d_model, cfg.marks, cfg.dropout, positional=False)
        self.encoder = nn.ModuleList(_DecompEncoderLayer(cfg, self_attention(cfg.input_len))
                                     for _ in range(cfg.e_layers))
        self.decoder = nn.ModuleList(
            _DecompDecoderLayer(cfg, self_attention(cfg.decoder_len), cross_attention(cfg.decoder_len, cfg.input_len))
            for _ in range(cfg.d_layers))
        self.enc_norm, self.dec_norm = SeasonalLayerNorm(cfg.d_model), SeasonalLayerNorm(cfg.d_model)
        self.project = nn.Linear(cfg.d_model, cfg.variables)

    def forward(self, x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
        cfg = self.cfg
        seasonal, trend = series_decomp(x, _window(cfg))  # [B, L, C] each
        mean = x.mean(dim=1, keepdim=True).expand(-1, cfg.horizon, -1)  # [B, H, C]
        trend = torch.cat([trend[:, cfg.input_len - cfg.start:], mean], dim=1)  # [B, Ld, C]
        seasonal = F.pad(seasonal[:, cfg.input_len - cfg.start:], (0, 0, 0, cfg.horizon))  # [B, Ld, C]
        enc = self.enc_embed(x, x_mark)
        for layer in self.encoder:
            enc = layer(enc)
        enc = self.enc_norm(enc)
        dec = self.dec_embed(seasonal, decoder_marks(x_mark, y_mark, cfg.start))
        for layer in self.decoder:
            dec, residual_trend = layer(dec, enc)
            trend = trend + residual_trend
        return (trend + self.project(self.dec_norm(dec)))[:, -cfg.horizon:]


# ---------------------------------------------------------------------------------------------------------------------
# Informer's encoder-decoder (Informer, LogTrans, Reformer, any other zoo attention)


class _EncoderLayer(nn.Module):
    def __init__(self, cfg: ForecastConfig, attention: nn.Module) -> None:
        super().__init__()
        self.attention, self.ff = attention, FeedForward(cfg, bias=True)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm1(x + self.drop(self.attention(x)))
        return self.norm2(x + self.ff(x))


class _DecoderLayer(nn.Module):
    def __init__(self, cfg: ForecastConfig, self_attention: nn.Module, cross_attention: nn.Module) -> None:
        super().__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.ff, self.drop = FeedForward(cfg, bias=True), nn.Dropout(cfg.dropout)
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(3))

    def forward(self, x: Tensor, cross: Tensor) -> Tensor:
        x = self.norms[0](x + self.drop(self.self_attention(x)))
        x = self.norms[1](x + self.drop(self.cross_attention(x, cross)))
        return self.norms[2](x + self.ff(x))


class DistillingLayer(nn.Module):
    """Informer's self-attention distilling between encoder layers (§3.2, eq. 5): kernel-3 circular convolution,
    BatchNorm, ELU, max-pooling with stride 2: [B, L, D] -> [B, ⌊(L − 1)/2⌋ + 1, D]."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, 3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(d_model)

    def forward(self, x: Tensor) -> Tensor:
        y = F.elu(self.norm(self.conv(x.transpose(1, 2))))  # [B, D, L]
        return F.max_pool1d(y, 3, stride=2, padding=1).transpose(1, 2)


def distilled_lengths(input_len: int, e_layers: int) -> list[int]:
    """The encoder layers' input lengths when each but the last is followed by a distilling layer."""
    lengths = [input_len]
    for _ in range(e_layers - 1):
        lengths.append((lengths[-1] - 1) // 2 + 1)
    return lengths


class TransformerForecaster(nn.Module):
    """Informer's encoder-decoder (Informer §3, Figure 2; the "Transformer" of the Autoformer/FEDformer repositories):
    embeddings with positions, post-norm encoder layers (with ``distil``, a :class:`DistillingLayer` after each but
    the last), post-norm decoder layers (self-attention, cross-attention, feed-forward), LayerNorm, a linear map to the
    variables. The decoder's input is the history's last ``label_len`` steps followed by zeros. ``self_attention(length,
    causal)`` builds each self-attention: the encoder's bidirectional, the decoder's masked (:class:`SelfAttention`)."""

    def __init__(self, cfg: ForecastConfig, self_attention: Callable[[int, bool], nn.Module],
                 cross_attention: CrossFactory | None = None, distil: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        cross_attention = cross_attention or (lambda lq, lk: FullCrossAttention(cfg))
        lengths = distilled_lengths(cfg.input_len, cfg.e_layers) if distil else [cfg.input_len] * cfg.e_layers
        self.enc_embed = DataEmbedding(cfg.variables, cfg.d_model, cfg.marks, cfg.dropout)
        self.dec_embed = DataEmbedding(cfg.variables, cfg.d_model, cfg.marks, cfg.dropout)
        self.encoder = nn.ModuleList(_EncoderLayer(cfg, self_attention(n, False)) for n in lengths)
        self.distil = nn.ModuleList(DistillingLayer(cfg.d_model) for _ in lengths[1:]) if distil else None
        # the decoder's self-attention is masked (causal), as the authors' decoders mask it
        self.decoder = nn.ModuleList(
            _DecoderLayer(cfg, self_attention(cfg.decoder_len, True), cross_attention(cfg.decoder_len, lengths[-1]))
            for _ in range(cfg.d_layers))
        self.enc_norm, self.dec_norm = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.project = nn.Linear(cfg.d_model, cfg.variables)

    def forward(self, x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
        cfg = self.cfg
        enc = self.enc_embed(x, x_mark)
        for i, layer in enumerate(self.encoder):
            enc = layer(enc)
            if self.distil is not None and i < len(self.distil):
                enc = self.distil[i](enc)
        enc = self.enc_norm(enc)
        start = F.pad(x[:, cfg.input_len - cfg.start:], (0, 0, 0, cfg.horizon))  # [B, Ld, C]: history, then zeros
        dec = self.dec_embed(start, decoder_marks(x_mark, y_mark, cfg.start))
        for layer in self.decoder:
            dec = layer(dec, enc)
        return self.project(self.dec_norm(dec))[:, -cfg.horizon:]
