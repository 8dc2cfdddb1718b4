"""Pieces every variant uses: head reshapes, fused Q/K/V projection, padding-mask helpers, length checks."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def split_heads(x: Tensor, heads: int) -> Tensor:
    """[B, N, H*d] -> [B, H, N, d]."""
    b, n, width = x.shape
    return x.view(b, n, heads, width // heads).transpose(1, 2)  # [B, H, N, d] (d explicit: N may be 0)


def merge_heads(x: Tensor) -> Tensor:
    """[B, H, N, d] -> [B, N, H*d]."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)  # [B, N, H*d]


def eager_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compiler.disable(fn)``, applied at the first call rather than at import: applying it imports
    torch._dynamo, a slow import, in every process that imports the zoo (each ``--isolate`` worker, the CLI) whether
    or not it ever compiles (timed in docs/results, "Importing torch._dynamo"). Under
    torch.compile the call is a graph break and ``fn`` runs eagerly, as with the decorator."""
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not disabled:
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    return call


#: Row width multiple of [V, 1] per device type (``with_ones_columns``); a test sets it on the CPU.
ONES_COLUMNS_ALIGN: dict[str, int] = {"cuda": 8}


def with_ones_columns(v: Tensor) -> Tensor:
    """[V, 1]: v [..., d] with a column of ones appended, so that one product with key features gives both Σ φ(K)Vᵀ
    (columns [:d]) and the normaliser Σ φ(K) (column d).

    On CUDA the row is widened with more ones to a multiple of 8 elements (d = 64: 72, the normaliser repeated and
    read once). Why: a row of d + 1 = 65 is not 16-byte aligned, and cuBLAS's tensor-core GEMMs need 16-byte aligned
    rows (docs.nvidia.com/cuda/cublas, "Tensor Core Usage"), so the two products through [V, 1] would run a slower
    kernel; the extra columns cost (w - d - 1)/(d + 1) more of those two products' work and memory. The same
    function: only columns [:d] and d are read. What GPU timings show of it: docs/gpu.md, "The zoo against the public
    implementations".
    """
    d = v.shape[-1]
    align = ONES_COLUMNS_ALIGN.get(v.device.type, 1)
    return F.pad(v, (0, -(d + 1) % align + 1), value=1.0)  # [..., w], w = d + 1 rounded up to a multiple of align


def no_autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Autocast off on ``device`` for the block it opens (nothing to turn off where the device type has no autocast,
    e.g. the meta device an op-count test runs on)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def zero_padding(x: Tensor, mask: Tensor | None) -> Tensor:
    """Zero the padded positions of x [B, N, ...] so nothing downstream can read their content."""
    if mask is None:
        return x
    return x * mask.view(*mask.shape, *([1] * (x.dim() - 2))).to(x.dtype)


def per_real_length(x: Tensor, mask: Tensor | None, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``fn`` applied to each sequence over its real tokens only: x [B, N, D] -> [B, N, D'], padded positions 0.

    For mixers whose every output depends on the length they transform over (a DFT's frequencies are k/L, a
    circular lag wraps at L): zeroing the padding is not enough, since a padded sequence would still differ from
    the unpadded one. Each row's real tokens are gathered to the front in order (padding need not be a suffix),
    rows of one real length go through ``fn`` together as [R, L, D] (one call per distinct length; the lengths
    are read on the host), and the results are scattered back. Fully padded rows give 0 and stay in the graph.
    """
    if mask is None:
        return fn(x)
    b, n, d = x.shape
    lengths = mask.sum(dim=1)  # [B]: real length L of each sequence
    # A stable sort of the padding flags puts each row's real tokens first, in their order.
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # [B, N]
    compact = torch.gather(x, 1, order[..., None].expand(b, n, d))  # [B, N, D]: real tokens first
    pieces, rows = [], []
    for length in torch.unique(lengths).tolist():
        idx = torch.nonzero(lengths == length).squeeze(1)  # [R]: the rows of this length
        if length == 0:
            out = fn(compact[idx, :1]) * 0.0  # [R, 1, D']: for the output width; 0 whatever fn returns
            pieces.append(F.pad(out, (0, 0, 0, n - 1)))
        else:
            pieces.append(F.pad(fn(compact[idx, :length]), (0, 0, 0, n - length)))  # [R, N, D']: zeros past L
        rows.append(idx)
    grouped = torch.cat(pieces)  # [B, N, D'], rows in group order
    compact_out = grouped[torch.argsort(torch.cat(rows))]  # [B, N, D'], rows back in batch order
    inverse = torch.argsort(order, dim=1)  # [B, N]: where each original position went
    return torch.gather(compact_out, 1, inverse[..., None].expand(b, n, compact_out.shape[-1]))  # [B, N, D']


def pad_to_length(x: Tensor, mask: Tensor | None, length: int) -> tuple[Tensor, Tensor | None]:
    """Right-pad x [B, N, D] (and its mask) with zeros/False up to ``length`` positions.

    Returns the mask unchanged (None) when no padding was needed and no mask was given.
    """
    b, n, _ = x.shape
    if n == length:
        return x, mask
    check_seq_len(n, length)
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
    x = nn.functional.pad(x, (0, 0, 0, length - n))  # [B, length, D]
    mask = nn.functional.pad(mask, (0, length - n), value=False)  # [B, length]
    return x, mask


def check_seq_len(n: int, max_seq_len: int, why: str | None = None) -> None:
    """Raise ValueError when a sequence of n positions is longer than ``max_seq_len`` (``why``: what is sized by it)."""
    if n > max_seq_len:
        reason = "" if why is None else f" ({why})"
        raise ValueError(f"sequence length {n} exceeds max_seq_len={max_seq_len}{reason}")


def masked_fill_value(dtype: torch.dtype) -> float:
    """A large finite negative score: masked keys get ~0 weight, and a row with no real key stays finite."""
    return torch.finfo(dtype).min


def fill_masked(scores: Tensor, keep: Tensor) -> Tensor:
    """``scores`` with :func:`masked_fill_value` of its own dtype where ``keep`` (broadcastable) is False.

    The fill is taken from the tensor it goes into, not from an operand: under autocast a product of float32
    operands is bf16, and float32's minimum does not fit in bf16 (H-Transformer-1D overflowed so).
    """
    return scores.masked_fill(~keep, masked_fill_value(scores.dtype))


def key_bias_value(dtype: torch.dtype) -> float:
    """The additive bias of a masked key when masks ride in the scores (a bias key column, an ``attn_mask``).

    A quarter of the most negative finite value: two such biases on one score cannot overflow to -inf (which
    would make a fully masked row NaN in fused kernels), and exp(bias - row max) is exactly 0 beside any real key.
    """
    return masked_fill_value(dtype) / 4


def key_bias_column(
    valid: Tensor | None, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> Tensor:
    """An extra key column that carries a key mask into fused attention: 0 where ``valid`` (broadcastable to
    ``shape``; None = all valid), ``key_bias_value(dtype)`` elsewhere. Matched by a column of ones in the queries.
    ``device`` is where the attention runs (given, not read from ``valid``, which may be None)."""
    bias = torch.zeros(shape, dtype=dtype, device=device)
    if valid is None:
        return bias
    return bias.masked_fill(~valid.expand(shape), key_bias_value(dtype))


class QKVProjection(nn.Module):
    """One fused Linear producing Q, K, V split into heads (one GEMM instead of three).

    ``kv_heads`` (grouped-query attention, Ainslie et al. 2023): K and V get that many heads of the same width, each
    shared by ``heads / kv_heads`` query heads; None = as many as the queries (the weight is then [3D, D], as
    without the option).
    """

    def __init__(self, dim: int, heads: int, bias: bool = True, kv_heads: int | None = None) -> None:
        super().__init__()
        self.heads = heads
        self.kv_heads = heads if kv_heads is None else kv_heads
        self.kv_dim = dim // heads * self.kv_heads
        self.qkv = nn.Linear(dim, dim + 2 * self.kv_dim, bias=bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        dim = self.qkv.in_features
        q, k, v = self.qkv(x).split((dim, self.kv_dim, self.kv_dim), dim=-1)  # [B, N, D], 2 x [B, N, H_kv·d]
        return split_heads(q, self.heads), split_heads(k, self.kv_heads), split_heads(v, self.kv_heads)


def softmax_reference(proj: QKVProjection, out: nn.Linear, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Exact softmax attention out(softmax(QKᵀ/√d)V) with Q, K, V from ``proj``: the function an approximating
    variant built on these projections stands in for. Padded keys (``mask`` False) get no weight; padded
    positions of x are zeroed first, as the variants do."""
    x = zero_padding(x, mask)
    q, k, v = proj(x)  # each [B, H, N, d]
    bias = None
    if mask is not None:
        bias = key_bias_column(mask[:, None, None, :], (x.shape[0], 1, 1, x.shape[1]), q.dtype, q.device)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # [B, H, N, d]
    return out(merge_heads(y))


class ProjectedAttention(nn.Module):
    """Base of the variants built as: fused Q/K/V projection ``proj``, attention per head, output Linear ``out``.

    Creates ``self.cfg``, ``self.proj = QKVProjection(dim, heads)`` and ``self.out = nn.Linear(dim, dim)``, in this
    order (so a subclass that adds parameters after ``super().__init__(cfg)`` draws them after these, as before).
    ``cfg`` is any config with ``dim`` and ``heads`` (an ``AttentionConfig``); subclasses annotate ``cfg`` with
    their own config class.
    """

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj = QKVProjection(cfg.dim, cfg.heads)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def softmax_reference(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """The exact softmax attention through this layer's projections (see :func:`softmax_reference`)."""
        return softmax_reference(self.proj, self.out, x, mask)
