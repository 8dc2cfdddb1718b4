"""LogTrans for Table 2: Li, Jin, Xuan, Zhou, Chen, Wang, Yan, "Enhancing the Locality and Breaking the Memory
Bottleneck of Transformer on Time Series Forecasting", NeurIPS 2019, https://arxiv.org/abs/1907.00235.

The authors released no code; Table 2's LogTrans numbers come from Informer's and Autoformer's papers, which ran it
in their encoder-decoder. So here: :class:`~harness.kinds.forecasting.blocks.TransformerForecaster` with the zoo's
``logsparse`` attention (causal-convolution queries and keys, kernel 3 unless set, each cell attending to itself and
the cells 2^0, 2^1, … back) as the encoder's and decoder's self-attention, and full softmax cross-attention.

Choices and deviations:
- The LogSparse attention is causal everywhere, the encoder's too, as the paper's decoder-only model is.
- No distilling (that is Informer's).
"""

from __future__ import annotations

from torch import nn

from .blocks import ForecastConfig, SelfAttention, TransformerForecaster


def build(cfg: ForecastConfig, name: str = "logsparse") -> nn.Module:
    """LogTrans with ``cfg``'s sizes."""
    return TransformerForecaster(cfg, lambda n, causal: SelfAttention(name, cfg, n, causal))
