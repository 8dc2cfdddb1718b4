"""Informer for Table 2: Zhou, Zhang, Peng, Zhang, Li, Xiong, Zhang, "Informer: Beyond Efficient Transformer for Long
Sequence Time-Series Forecasting", AAAI 2021, https://arxiv.org/abs/2012.07436. Authors' code:
``zhouhaoyi/Informer2020`` (as carried in ``MAZiqing/FEDformer``: ``models/Informer.py``,
``layers/SelfAttention_Family.py``).

Informer's encoder-decoder (:class:`~harness.kinds.forecasting.blocks.TransformerForecaster`) with the zoo's
``probsparse`` self-attention in the encoder and decoder, self-attention distilling between the encoder layers (§3.2),
and full softmax cross-attention, as the authors build it.

Choices and deviations:
- The decoder's ProbSparse self-attention is masked, as the authors mask it (``mask_flag``): the zoo's causal
  ProbSparse, whose choice of active queries reads each query's own past only (the authors' top-u over the whole
  sequence lets a later position change which earlier queries are active; ``attentions/probsparse.py`` says how).
- ``factor`` 3, the forecasting scripts' value (the module default is 5).
"""

from __future__ import annotations

from torch import nn

from .blocks import ForecastConfig, SelfAttention, TransformerForecaster


def build(cfg: ForecastConfig, name: str = "probsparse") -> nn.Module:
    """Informer with ``cfg``'s sizes."""
    return TransformerForecaster(cfg, lambda n, causal: SelfAttention(name, cfg, n, causal), distil=True)
