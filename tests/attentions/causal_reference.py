"""The quadratic masked form of each causal variant, written out from the module's weights: the function its causal
form must compute, independently of how it computes it (chunks, blocks, prefix sums, caches).

Not a test module. Each variant's test module (``tests/attentions/test_<family>.py``) defines its reference as a
function ``causal_reference(module, x, mask)``; :func:`reference_of` finds it, and ``tests/attentions/test_causal.py``
checks every causal variant against it (a causal variant without one fails that test). A reference takes the module
(float64, eval) and x [B, N, D], mask [B, N] | None, and returns y [B, N, D] at the real positions (padded ones are
unspecified). The helpers below are what several references share.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from torch import Tensor

from tests.attentions.reference import masked_softmax_attention, merge_heads, projected_qkv, split_heads

Reference = Callable[[torch.nn.Module, Tensor, Tensor | None], Tensor]


def causal_allowed(n: int, mask: Tensor | None, device: torch.device) -> Tensor:
    """[B or 1, 1, N, N] bool: key j is real and j <= i."""
    tril = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]  # [1, 1, N, N]
    return tril if mask is None else tril & mask[:, None, None, :]


def causal_softmax(module: torch.nn.Module, x: Tensor, mask: Tensor | None, allowed: Tensor | None = None) -> Tensor:
    """out(softmax(QKᵀ/√d over the real keys j <= i, and ``allowed`` [.., N, N] where given)·V) with the module's
    fused projection ``proj.qkv`` and output ``out``: the causal softmax attention a causal pattern restricts."""
    cfg = module.cfg  # type: ignore[union-attr]
    q, k, v = projected_qkv(module, x)
    q, k, v = (split_heads(t, cfg.heads) for t in (q, k, v))  # [B, H, N, d]
    keep = causal_allowed(x.shape[1], mask, x.device)
    y = masked_softmax_attention(q, k, v, keep if allowed is None else keep & allowed)
    return module.out(merge_heads(y))  # type: ignore[union-attr]


#: Families whose tests share one module (the controls), by family.
_TESTED_IN = {"none": "test_controls", "mean_pool": "test_controls"}


def reference_of(family: str) -> Reference | None:
    """The ``causal_reference`` of ``tests/attentions/test_<family>.py`` (or of the module that tests the family, see
    :data:`_TESTED_IN`), or None where it has none."""
    try:
        module = importlib.import_module(f"tests.attentions.{_TESTED_IN.get(family, f'test_{family}')}")
    except ModuleNotFoundError:
        return None
    return getattr(module, "causal_reference", None)
