"""How far an approximating layer's output (and attention matrix) is from exact softmax attention on the same input.

The reference is the layer's own ``softmax_reference(x, mask)`` (registry capability ``approximates_softmax``): exact
softmax attention through the layer's own projections, so the error measures the approximation alone, not a
difference of weights.

Output errors, over the real (unpadded) positions of y (the layer's output) and e (the reference), both [B, N, D]:

* ``rel_fro``: ‖y − e‖_F / ‖e‖_F;
* ``max_abs``: max |y − e|;
* ``cos_mean``, ``cos_min``: the cosine similarity of y_i and e_i per token, averaged and at its worst.

Attention-matrix errors, where the layer's matrix can be read (see :func:`attention_matrix`), between its rows a_i and
the exact rows p_i = softmax(q_i Kᵀ/√d), [B, H, N, N], over real query rows:

* ``attn_rel_fro``: ‖A − P‖_F / ‖P‖_F;
* ``attn_max_abs``: max |A − P|;
* ``attn_tv``: the mean over rows of ½ Σ_j |a_ij − p_ij| (total variation when both rows are distributions; an
  approximation whose rows do not sum to 1, as Linformer's or Performer's can, shows it here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from attentions.base import QKVProjection, merge_heads


def output_errors(y: Tensor, e: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """Error metrics of output ``y`` against reference ``e`` ([B, N, D] each), over positions where ``mask`` [B, N] is
    True (all positions when None). Computed in float64."""
    y, e = y.double(), e.double()
    if mask is not None:
        y, e = y[mask], e[mask]  # [real tokens, D]
    y, e = y.reshape(-1, y.shape[-1]), e.reshape(-1, e.shape[-1])  # [tokens, D]
    diff = y - e
    cos = nn.functional.cosine_similarity(y, e, dim=-1, eps=1e-30)  # [tokens]
    return {"rel_fro": float(diff.norm() / e.norm().clamp_min(1e-300)), "max_abs": float(diff.abs().max()),
            "cos_mean": float(cos.mean()), "cos_min": float(cos.min())}


def matrix_errors(a: Tensor, p: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """Error metrics of attention matrix ``a`` against the exact ``p`` ([B, H, N, N] each), over real query rows."""
    a, p = a.double(), p.double()
    if mask is not None:
        rows = mask[:, None, :].expand(a.shape[:3])  # [B, H, N]
        a, p = a[rows], p[rows]  # [real rows, N]
    diff = a - p
    return {"attn_rel_fro": float(diff.norm() / p.norm().clamp_min(1e-300)), "attn_max_abs": float(diff.abs().max()),
            "attn_tv": float(0.5 * diff.abs().sum(-1).mean())}


class _IdentityValues(nn.Module):
    """Stands in for a layer's ``proj``: the same Q and K, and as V the columns ``start .. start + d`` of the identity
    I_n per batch row and head ([B, H, n, d], zero past n), n being the length the layer projects (padded or not)."""

    def __init__(self, proj: QKVProjection, start: int) -> None:
        super().__init__()
        self.inner, self.heads, self.start = proj, proj.heads, start
        self.seen_len = 0

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, _ = self.inner(x)  # [B, H, n, d] each
        b, h, n, d = q.shape
        self.seen_len = n
        cols = torch.arange(self.start, self.start + d, device=q.device)  # [d]
        v = (torch.arange(n, device=q.device)[:, None] == cols).to(q.dtype)  # [n, d]: e_start .. e_start+d-1
        return q, k, v.expand(b, h, n, d)


@contextlib.contextmanager
def _identity_values(layer: nn.Module, start: int) -> Iterator[_IdentityValues]:
    proj, out = layer.proj, layer.out
    layer.proj, layer.out = _IdentityValues(proj, start), nn.Identity()
    try:
        yield layer.proj
    finally:
        layer.proj, layer.out = proj, out


@torch.no_grad()
def attention_matrix(layer: nn.Module, x: Tensor, mask: Tensor | None = None, *, reference: bool = False,
                     seed: int = 0) -> Tensor | None:
    """The [B, H, N, N] matrix A with which ``layer`` mixes its values (its output before ``out`` is A·V per head), or
    with ``reference=True`` the exact softmax matrix of its ``softmax_reference``; None where it cannot be read.

    Read by running the layer with V replaced by d columns of the identity at a time (one value per position): an
    attention whose output is linear in V, as every approximation here is, then outputs those d columns of its
    matrix; n/d passes give all of them (n: the length the layer projects, padded ones included, whose columns get
    no weight). Every pass starts from ``torch.manual_seed(seed)`` (every device's generator), so a layer that draws
    (features, rotations) draws the same; the caller's RNG state is restored afterwards. This needs the layer to
    take Q, K, V from ``layer.proj`` (a :class:`QKVProjection`) and to end with ``layer.out``; layers that read the
    projection weights themselves (Linformer, Nyströmformer) or share Q and K (Reformer) give None, and so does a
    layer whose matrix times its real V does not give its output (checked: values from a second projection, as
    Longformer's global rows, or an output not linear in V).
    """
    if not (isinstance(getattr(layer, "proj", None), QKVProjection) and isinstance(getattr(layer, "out", None),
                                                                                  nn.Linear)):
        return None
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return _read_matrix(layer, x, mask, reference, seed)


def _read_matrix(layer: nn.Module, x: Tensor, mask: Tensor | None, reference: bool, seed: int) -> Tensor | None:
    b, n, dim = x.shape
    heads = layer.proj.heads
    d = dim // heads
    blocks: list[Tensor] = []
    start, total = 0, None
    while total is None or start < total:
        torch.manual_seed(seed)
        with _identity_values(layer, start) as stand_in:
            # A layer that reads ``proj.qkv`` itself fails on the stand-in (AttributeError): no readable matrix.
            try:
                y = layer.softmax_reference(x, mask) if reference else layer(x, mask)
            except AttributeError:
                return None
        total = stand_in.seen_len
        blocks.append(y.view(b, n, heads, d).transpose(1, 2))  # [B, N, H, d] -> [B, H, N, d]: columns start..+d
        start += d
    a = torch.cat(blocks, dim=-1)[..., :n]  # [B, H, N, >= n] -> [B, H, N, N]: padded key columns dropped
    # Check the premise: A times the layer's real V must give its real output. A layer that takes values from
    # another projection too (Longformer's global rows) or is not linear in V fails it, and has no such matrix.
    torch.manual_seed(seed)
    y = layer.softmax_reference(x, mask) if reference else layer(x, mask)
    _, _, v = layer.proj(x if mask is None else x * mask[..., None].to(x.dtype))  # [B, H, N, d]
    rebuilt = layer.out(merge_heads(a @ v))  # [B, N, D]
    if mask is not None:
        y, rebuilt = y[mask], rebuilt[mask]
    if not torch.allclose(rebuilt, y, rtol=1e-3, atol=1e-4 * float(y.abs().max().clamp_min(1e-30))):
        return None
    return a
