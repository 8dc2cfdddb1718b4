"""Which forecaster a zoo attention runs in for Table 2, by its family: S3Attention in its own forecaster
(Algorithms 3–4), FEB-f in FEDformer-f, FEB-w in FEDformer-w (FEDformer's two versions), Auto-Correlation in
Autoformer, ProbSparse in Informer, LogSparse in LogTrans, LSH in Reformer; any other attention as the
self-attention of Informer's encoder-decoder without distilling (the repositories' "Transformer"), so every variant
of the zoo can be put in the table (``vanilla`` is that Transformer).

Every model maps (x [B, L, C], x_mark [B, L, F], y_mark [B, H, F]) to the forecast [B, H, C].
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

import attentions

from . import autoformer, blocks, fedformer, informer, logtrans, reformer, s3_forecaster
from .blocks import ForecastConfig, SelfAttention, TransformerForecaster
from .s3_forecaster import S3Forecaster

#: attention family -> (model name, its module, its builder (cfg, attention name) -> model)
ARCHITECTURES: dict[str, tuple[str, str, Callable[[ForecastConfig, str], nn.Module]]] = {
    "s3attention": ("S3Attention", s3_forecaster.__name__, S3Forecaster),
    "fedformer_fourier": ("FEDformer-f", fedformer.__name__, fedformer.build),
    "fedformer_wavelet": ("FEDformer-w", fedformer.__name__, fedformer.build_wavelet),
    "autocorrelation": ("Autoformer", autoformer.__name__, autoformer.build),
    "probsparse": ("Informer", informer.__name__, informer.build),
    "logsparse": ("LogTrans", logtrans.__name__, logtrans.build),
    "reformer": ("Reformer", reformer.__name__, reformer.build),
}


def _transformer(cfg: ForecastConfig, name: str) -> nn.Module:
    return TransformerForecaster(cfg, lambda n, causal: SelfAttention(name, cfg, n, causal))


TRANSFORMER = ("Transformer", blocks.__name__, _transformer)


def architecture(attention: str) -> tuple[str, str, Callable[[ForecastConfig, str], nn.Module]]:
    """(model name, module, builder) of the forecaster that runs ``attention`` (a preset runs in its family's)."""
    return ARCHITECTURES.get(attentions.spec(attention).family, TRANSFORMER)


def build_forecaster(attention: str, cfg: ForecastConfig) -> nn.Module:
    """The forecaster of ``attention`` (a registered zoo name) with ``cfg``'s sizes and its attention overrides."""
    return architecture(attention)[2](cfg, attention)
