"""Kernelised (linear) attention: the φ(K)ᵀ[V, 1] product shared by the linear-attention variants.

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one). For a positive
feature map φ, softmax(QKᵀ) is replaced by φ(Q)φ(K)ᵀ, and the row-normalised product
φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1) is computed right to left in O(N·d·d_φ), never an N×N matrix. Used by
``linear_transformer`` (φ = elu + 1), ``fmmformer``'s far field (elu + 1, elu(−x) + 1) and ``cosformer``
(ReLU features re-weighted by cos/sin of the token angles). Each variant keeps its own rule for a vanishing
normaliser (eps added, clamped, or 0/0 replaced), so this module returns numerator and normaliser separately.

The causal forms (Katharopoulos et al. 2020, §3.4: the sums run over j ≤ i) go through
:func:`causal_kernel_attention_terms` (chunked; Performer's causal form too, with its running key shift), and a
decoding step through :func:`causal_kernel_step`, which adds one token to the [f, w] sums in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import no_autocast, with_ones_columns
from .registry import AttentionConfig

__all__ = [
    "CAUSAL_CHUNK",
    "EpsConfig",
    "causal_kernel_attention_terms",
    "causal_kernel_step",
    "elu_feature_map",
    "kernel_attention_terms",
]

#: Tokens per chunk of the causal form: the products within a chunk are quadratic in it, the state between chunks is
#: one [f, w] sum per head. With head widths and feature counts of about 64, a chunk of 64 makes the [C, C] products
#: within a chunk cost about what the [f, w] ones between chunks do.
CAUSAL_CHUNK = 64


@dataclass(frozen=True)
class EpsConfig(AttentionConfig):
    """Config with a positive ``eps`` guarding the normaliser of kernelised attention (subclasses say how).

    Attributes:
        eps: must be > 0 (1e-6, the authors' code of the Linear Transformer and of cosFormer).
    """

    eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.eps > 0.0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, §3.2.1): positive everywhere, so every normaliser term is > 0."""
    return F.elu(x) + 1.0


def kernel_attention_terms(phi_q: Tensor, phi_k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Numerator φ(Q)(φ(K)ᵀV) and normaliser φ(Q)(φ(K)ᵀ1) of kernelised attention, without dividing.

    Args:
        phi_q: query features [B, H, N, f].
        phi_k: key features [B, H, N, f].
        v: values [B, H, N, d].
        mask: [B, N] bool, True = real key, or None; padded keys are left out of both sums.

    Returns:
        numerator [B, H, N, d] and normaliser [B, H, N, 1]. Both come out of one product: a ones column is
        appended to V (``with_ones_columns``), so Σ_j φ(K_j)[V_j, 1]ᵀ is one [f, d+1] matrix per head.
    """
    if mask is not None:
        phi_k = phi_k * mask[:, None, :, None].to(phi_k.dtype)  # padded keys leave both sums
    d = v.shape[-1]
    v1 = with_ones_columns(v)  # [B, H, N, w]: [V, 1], w >= d + 1
    kv = phi_k.transpose(-1, -2) @ v1  # [B, H, f, w]: [Σ φ(K_j) V_jᵀ, Σ φ(K_j)]
    y1 = phi_q @ kv  # [B, H, N, w]: [numerator, normaliser]
    return y1[..., :d], y1[..., d : d + 1]


def causal_kernel_attention_terms(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, mask: Tensor | None, *, state: Tensor | None = None,
    chunk: int = CAUSAL_CHUNK, shift: Tensor | None = None, state_shift: Tensor | None = None,
    query_offset: float = 0.0, key_offset: float = 0.0, log_features: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """The causal numerator Σ_{j≤i} φ(Q_i)ᵀφ(K_j) V_j and normaliser Σ_{j≤i} φ(Q_i)ᵀφ(K_j), chunked.

    The sequence is cut into chunks of ``chunk`` tokens. Within a chunk the masked products are quadratic
    (φ(Q_c)φ(K_c)ᵀ with its upper triangle zeroed, times [V_c, 1]); between chunks, each chunk's queries read the sum
    Σ φ(K_j)[V_j, 1]ᵀ over every earlier chunk, an [f, w] matrix per head, from an exclusive prefix sum over the chunks'
    own sums. Time O(N·C·(f + w) + N·f·w): never a prefix sum over [N, f, w] (what a token-by-token cumulative sum
    would hold), never an N×N matrix. Memory: the backward is written out (:class:`_CausalProduct`): autograd keeps
    the inputs and the state before each of ``GROUPS`` groups of chunks, and the backward recomputes the [C, C]
    products and the states before each chunk group by group.

    Args:
        phi_q: query features [B, H, N, f] (their logarithms with ``log_features``).
        phi_k: key features [B, H, N, f] (finite at padded keys too: those are dropped through their values).
        v: values [B, H, N, d].
        mask: [B, N] bool, True = real key, or None; padded keys are left out of every sum (their [V, 1] rows are
            zeroed: the same as zeroing their features, on the narrower of the two when f > w).
        state: the sums of the tokens before these (a decoding state), or None: Σ φ(K_j)[V_j, 1]ᵀ [B, H, f, w], and
            with ``key_offset`` one more row, Σ [V_j, 1] (the state of the features [φ(K_j), 1]).
        chunk: tokens per chunk.
        shift: a stabilising shift per position, [B, H, N], non-decreasing along N, no gradient (Performer's running
            key maximum), or None (no shift). Key j's features are given at its own shift, i.e. scaled by
            exp(−shift_j), and query i reads every key at its shift: the terms are φ(Q_i)ᵀφ(K_j)·exp(shift_j −
            shift_i), every factor at most 1 (nothing overflows), equal to the unshifted terms times exp(−shift_i),
            which numerator and normaliser share. The sums between chunks are carried at each chunk's last shift and
            rescaled from chunk to chunk by a log-depth scan (Hillis & Steele), not a cumulative sum.
        state_shift: [B, H, 1], the shift ``state`` is at (given with ``shift`` and ``state``; at most shift[..., 0]).
        query_offset: a constant o_q added to every query feature, without building that [N, f] tensor.
        key_offset: a constant o_k added to every key feature after its shift factor: the terms become
            (φ(Q_i) + o_q)ᵀ(φ(K_j)·exp(shift_j − shift_i) + o_k), the offsets' part summed apart as
            o_k·(Σφ(Q_i) + f·o_q)·Σ_{j≤i} [V_j, 1] (Performer's eps, o_q = o_k).
        log_features: ``phi_q`` and ``phi_k`` are the logarithms of the features, exponentiated here, in place where
            autograd allows (the caller's tensors are then consumed: they hold the features after the call), and the
            backward turns the features' gradients into their logarithms' in place: one [N, f] buffer per side fewer,
            forward and backward, than an exp before this call (Performer's features).

    Returns:
        numerator [B, H, N, d], normaliser [B, H, N, 1] and the state after the last token (a new tensor, shaped as
        ``state``; with ``shift``, at shift[..., -1], or at ``state_shift`` when N is 0). They come in the promoted
        dtype of the features and values, computed with autocast off (the states are sums over the whole sequence).
    """
    b, h, n, f = phi_q.shape
    d = v.shape[-1]
    dtype = torch.promote_types(torch.promote_types(phi_q.dtype, phi_k.dtype), v.dtype)
    v1 = with_ones_columns(v.to(dtype))  # [B, H, N, w]: [V, 1], w >= d + 1
    if mask is not None:
        v1 = v1 * mask[:, None, :, None].to(dtype)  # padded keys leave every sum
    rows = f + 1 if key_offset else f  # the state's rows: with key_offset, Σ [V_j, 1] last
    initial = v1.new_zeros(b, h, rows, v1.shape[-1]) if state is None else state.to(dtype)  # [B, H, rows, w]
    if shift is not None:
        shift = shift.detach().to(dtype)
        # the state before the first token: given, or none (zeros) at the first shift, below every later one
        start = shift[..., :1] if state is None else state_shift.detach().to(dtype)  # [B, H, 1] ([B, H, 0] if N = 0)
    else:
        start = None
    chunk = max(min(chunk, n), 1)  # one chunk when N is shorter
    above = torch.ones(chunk, chunk, dtype=torch.bool, device=v.device).triu(1)  # [C, C]: j > i, masked
    terms = _Terms(chunk, float(query_offset), float(key_offset), above)
    phi_q, phi_k = phi_q.to(dtype), phi_k.to(dtype)
    # The exp in place where autograd allows it: not on a leaf that requires grad, nor on a view (nor under
    # torch.compile, whose graphs hold views); elsewhere an exp into new tensors (the logarithms then live on
    # through the call).
    in_place = log_features and not torch.compiler.is_compiling() and not any(
        t._base is not None or (t.is_leaf and t.requires_grad) for t in (phi_q, phi_k))
    exp = "in place" if in_place else "new" if log_features else ""
    with no_autocast(phi_q.device):
        y, last, *_ = _CausalProduct.apply(phi_q, phi_k, v1, initial, shift, start, terms, exp)
    return y[..., :d], y[..., d : d + 1], last


#: Groups of whole chunks the backward of :class:`_CausalProduct` goes through, last to first. A group's temporaries
#: ([f, w] states, one before each of its chunks; [C, C] products; copies of its features and their gradients) then
#: take about 1/GROUPS of what one pass would, whatever N (a fixed group size would make them grow with N), for a
#: Python loop of at most GROUPS iterations; the forward keeps one [f, w] state per group for it.
GROUPS = 16
#: Chunks a group has at least (a shorter sequence is one group): below that, a group's few dozen small ops cost
#: more than its products (a short sequence would be cut into groups of one chunk).
MIN_GROUP_CHUNKS = 2


@dataclass(frozen=True)
class _Terms:
    """What one causal product computes besides its tensors: tokens per chunk, the two feature offsets, and the mask
    of a chunk's [C, C] products (made once per call)."""

    chunk: int
    query_offset: float
    key_offset: float
    above: Tensor  # [C, C] bool: j > i, the products a causal query does not read

    def group_tokens(self, n: int) -> int:
        """Tokens per group of a sequence of n: whole chunks, at most ``GROUPS`` groups of ``MIN_GROUP_CHUNKS`` or
        more."""
        return self.chunk * max(MIN_GROUP_CHUNKS, math.ceil(math.ceil(n / self.chunk) / GROUPS))


class _CausalProduct(torch.autograd.Function):
    """y = the causal product of :func:`causal_kernel_attention_terms` ([B, H, N, w], both columns of [V, 1]) and the
    state after the last token, with the backward written out, in ``GROUPS`` groups of chunks.

    Autograd would keep, besides the inputs, every chunk's [C, C] products and every chunk's [f, w] state (a
    [N/C, f, w] tensor per head, as large as the features when f = 256 and C = 64), and build more of those in the
    backward. Here the forward (one pass) keeps the inputs and the state at the start of each group; the backward
    runs the groups last to first, recomputes a group's products and states from its starting state, and carries the
    gradient of the state back to the group before: transposed products within a chunk, and between chunks the
    transposed scan (a reverse prefix sum of the gradients of the states, rescaled by the same factors).

    Per chunk c (queries Q, keys K [C, f], values V [C, w], M the causal mask or the shift factors exp(s_j − s_i),
    r_i = exp(opening shift − s_i), u_j = exp(s_j − closing shift), S_c the state before the chunk, o_q, o_k the
    offsets, Σ_c V the sum of [V_j, 1] over the tokens up to i): Y = ((Q + o_q)Kᵀ ⊙ M)V + r ⊙ (Q + o_q)S_c
    + o_k·((Q + o_q)1) ⊙ Σ_c V, and the chunk adds Kᵀ(u ⊙ V) to the state.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, phi_q: Tensor, phi_k: Tensor, v1: Tensor,
                initial: Tensor, shift: Tensor | None, start: Tensor | None, terms: _Terms,
                exp: str) -> tuple[Tensor, ...]:
        """``exp``: "" (features given), "new" (their logarithms, exponentiated into new tensors) or "in place" (the
        features, saved below, take the logarithms' memory; autograd then asks for them among the outputs)."""
        ctx.set_materialize_grads(False)
        if exp == "in place":
            phi_q.exp_()
            phi_k.exp_()
            ctx.mark_dirty(phi_q, phi_k)
        elif exp:
            phi_q, phi_k = phi_q.exp(), phi_k.exp()
        n, f = phi_q.shape[2:]
        y, last, grp = _forward_pass(phi_q, phi_k, v1, initial, start, shift, terms)
        # For the backward, which goes group by group: the state before each group (every ``per``-th chunk's), with
        # its Σ [V_j, 1] row (after the tokens before the group) and its shift.
        span = terms.group_tokens(n)
        per, groups = span // terms.chunk, math.ceil(n / span)
        starts = grp.states[:, :, :-1:per]  # [B, H, G, f, w]
        if grp.ones is not None:
            ones = torch.cat([initial[:, :, f:], grp.ones[:, :, span - 1 :: span]], dim=2)[:, :, :groups]
            starts = torch.cat([starts, ones.unsqueeze(-2)], dim=-2)  # [B, H, G, f + 1, w]: Σ [V_j, 1] before each
        levels = None if grp.level is None else grp.level[..., :-1:per].movedim(-1, 0).unsqueeze(-1)  # [G, B, H, 1]
        ctx.terms, ctx.span, ctx.groups, ctx.log_features = terms, span, groups, bool(exp)
        ctx.save_for_backward(phi_q, phi_k, v1, shift, starts.movedim(2, 0).contiguous(), levels)
        return (y, last, phi_q, phi_k) if exp == "in place" else (y, last)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, dy: Tensor | None, dlast: Tensor | None,
                 *d_features: Tensor | None) -> tuple[Tensor | None, ...]:
        phi_q, phi_k, v1, shift, starts, levels = ctx.saved_tensors
        n, span = phi_q.shape[2], ctx.span
        dq, dk, dv = torch.empty_like(phi_q), torch.empty_like(phi_k), torch.empty_like(v1)
        dy = torch.zeros_like(v1) if dy is None else dy
        d_state = torch.zeros_like(starts[0]) if dlast is None and ctx.groups else dlast
        with torch.no_grad(), no_autocast(phi_q.device):
            for g in reversed(range(ctx.groups)):
                lo, hi = g * span, min((g + 1) * span, n)
                part = None if shift is None else shift[..., lo:hi]
                dq[:, :, lo:hi], dk[:, :, lo:hi], dv[:, :, lo:hi], d_state = _group_backward(
                    phi_q[:, :, lo:hi], phi_k[:, :, lo:hi], v1[:, :, lo:hi], starts[g],
                    None if levels is None else levels[g], part, dy[:, :, lo:hi], d_state, ctx.terms,
                )
            if ctx.log_features:  # d/d log φ = φ ⊙ (d/dφ, with that of the features returned), in place
                extras = d_features or (None, None)  # the features are outputs only when exponentiated in place
                for grad, extra, features in ((dq, extras[0], phi_q), (dk, extras[1], phi_k)):
                    if extra is not None:
                        grad += extra
                    grad.mul_(features)
        return dq, dk, dv, d_state, None, None, None, None


def _chunked(t: Tensor, chunk: int, pad: int) -> Tensor:
    """[B, H, L, x] -> [B, H, L/C, C, x], zero rows appended to a whole number of chunks (they add to no sum).

    One contiguous copy of a group's slice: the batched products flatten (B, H, C#) into one batch axis, which a
    slice of a longer sequence cannot give as a view, so each product would copy its operand again."""
    t = F.pad(t, (0, 0, 0, pad)) if pad else t.contiguous()
    b, h, length, x = t.shape
    return t.view(b, h, length // chunk, chunk, x)  # [B, H, C#, C, x]


@dataclass
class _Group:
    """What a group's forward and backward share (see :func:`_group_parts`)."""

    qc: Tensor  # [B, H, C#, C, f]: the group's queries, in chunks
    kc: Tensor  # [B, H, C#, C, f]
    vc: Tensor  # [B, H, C#, C, w]
    scores: Tensor  # [B, H, C#, C, C]: P = (Q + o_q)Kᵀ ⊙ M within each chunk
    weights: Tensor | None  # M, with a shift: its factors [B, H, C#, C, C] (0 where j > i); None: the triangle
    reads: Tensor | None  # r [B, H, C#, C, 1]: a query reading the state before its chunk; None without a shift
    writes: Tensor | None  # u [B, H, C#, C, 1]: a key written to its chunk's sum
    written: Tensor  # u ⊙ V [B, H, C#, C, w]
    states: Tensor  # X [B, H, C# + 1, f, w]: the state before each chunk and after the last
    level: Tensor | None  # [B, H, C# + 1]: the shift of each state in X
    ones: Tensor | None  # with key_offset: Σ [V_j, 1] over the tokens before the group and up to each, [B, H, L, w]


def _group_parts(q: Tensor, k: Tensor, v1: Tensor, state: Tensor, level: Tensor | None, shift: Tensor | None,
                 terms: _Terms) -> _Group:
    """A group of chunks (q, k [B, H, L, f], v1 [B, H, L, w]) after ``state`` [B, H, f (+ 1), w] at shift
    ``level`` [B, H, 1]: its products within chunks and its states (see :class:`_Group`)."""
    chunk, f = terms.chunk, q.shape[-1]
    pad = -q.shape[2] % chunk
    qc, kc, vc = _chunked(q, chunk, pad), _chunked(k, chunk, pad), _chunked(v1, chunk, pad)
    scores = qc @ kc.transpose(-1, -2)  # [B, H, C#, C, C]: φ(Q_i)ᵀφ(K_j) within each chunk
    if terms.query_offset:
        scores += terms.query_offset * kc.sum(-1).unsqueeze(-2)  # (φ(Q_i) + o)ᵀφ(K_j) = φ(Q_i)ᵀφ(K_j) + o·Σφ(K_j)
    if shift is None:
        weights, reads, writes, written = None, None, None, vc
        scores.masked_fill_(terms.above, 0.0)
    else:
        if pad:  # the padded tail keeps the last shift
            shift = torch.cat([shift, shift[..., -1:].expand(*shift.shape[:2], pad)], dim=-1)
        sc = shift.view(*shift.shape[:2], -1, chunk)  # [B, H, C#, C]
        ends = sc[..., -1]  # [B, H, C#]: the shift at each chunk's last token
        level = torch.cat([level, ends], dim=-1)  # [B, H, C# + 1]: the shift of each state in X
        # exp(s_j − s_i) for j <= i (0 above the diagonal, where the difference may be huge): [B, H, C#, C, C]
        weights = (sc.unsqueeze(-2) - sc.unsqueeze(-1)).masked_fill(terms.above, float("-inf")).exp()
        scores *= weights
        reads = (level[..., :-1].unsqueeze(-1) - sc).exp().unsqueeze(-1)  # [B, H, C#, C, 1]: to each query's shift
        writes = (sc - ends.unsqueeze(-1)).exp().unsqueeze(-1)  # [B, H, C#, C, 1]: to the chunk's last shift
        written = vc * writes  # the factors go on the values (w < f where there is a shift)
    # X: the state before the group, then each chunk's own sum Kᵀ(u ⊙ V), scanned into the state after each chunk.
    states = torch.cat([state[:, :, None, :f], kc.transpose(-1, -2) @ written], dim=2)  # [B, H, C# + 1, f, w]
    if shift is None:
        states.cumsum_(dim=2)
    else:
        _rescaled_scan_(states, level)
    ones = v1.cumsum(dim=2).add_(state[:, :, f:]) if terms.key_offset else None  # [B, H, L, w]
    return _Group(qc, kc, vc, scores, weights, reads, writes, written, states, level, ones)


def _forward_pass(q: Tensor, k: Tensor, v1: Tensor, state: Tensor, level: Tensor | None, shift: Tensor | None,
                  terms: _Terms) -> tuple[Tensor, Tensor, _Group]:
    """The forward over the whole sequence (q, k [B, H, N, f], v1 [B, H, N, w]) after ``state`` [B, H, f (+ 1), w]
    at shift ``level``, in one pass (its temporaries are the [C, C] products and one state per chunk, what the
    backward keeps of them is one state per group): the outputs [B, H, N, w], the state after, and the parts."""
    b, h, n, f = q.shape
    grp = _group_parts(q, k, v1, state, level, shift, terms)
    y = grp.scores @ grp.vc  # [B, H, C#, C, w]: within each chunk
    before = grp.states[:, :, :-1]  # [B, H, C#, f, w]
    inter = grp.qc @ before  # [B, H, C#, C, w]: from the chunks before
    if terms.query_offset:
        inter += terms.query_offset * before.sum(dim=-2, keepdim=True)  # [B, H, C#, 1, w] broadcast over C
    if grp.reads is not None:
        inter *= grp.reads
    y += inter
    y = y.view(b, h, -1, y.shape[-1])[:, :, :n]  # [B, H, N, w]
    after = grp.states[:, :, -1]  # [B, H, f, w]
    if grp.ones is not None:  # o_k·(Σφ(Q_i) + f·o_q)·Σ_{j≤i} [V_j, 1]
        y += (terms.key_offset * (q.sum(dim=-1, keepdim=True) + f * terms.query_offset)) * grp.ones
        after = torch.cat([after, grp.ones[:, :, -1:] if n else state[:, :, f:]], dim=2)  # [B, H, f + 1, w]
    return y, after.clone(), grp


def _group_backward(q: Tensor, k: Tensor, v1: Tensor, state: Tensor, level: Tensor | None, shift: Tensor | None,
                    dy: Tensor, d_state: Tensor, terms: _Terms) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients of one group's q, k, v1 and of the state before it, from those of its outputs ``dy``
    [B, H, L, w] and of the state after it ``d_state`` [B, H, f (+ 1), w] (see :class:`_CausalProduct`)."""
    b, h, n, f = q.shape
    o_q = terms.query_offset
    grp = _group_parts(q, k, v1, state, level, shift, terms)
    qc, kc, states = grp.qc, grp.kc, grp.states
    dyc = _chunked(dy, terms.chunk, -n % terms.chunk)  # [B, H, C#, C, w]
    # Within chunks: Y = P V with P = (Q + o_q)Kᵀ ⊙ M.
    dv = grp.scores.transpose(-1, -2) @ dyc  # [B, H, C#, C, w]
    dp = dyc @ grp.vc.transpose(-1, -2)  # [B, H, C#, C, C]
    if grp.weights is None:
        dp.masked_fill_(terms.above, 0.0)
    else:
        dp *= grp.weights
    dq = dp @ kc  # [B, H, C#, C, f]
    dk = dp.transpose(-1, -2) @ qc  # [B, H, C#, C, f]
    if o_q:
        dk += o_q * dp.sum(dim=-2).unsqueeze(-1)  # Σ_i dP_ij·o_q, the same for every feature
    # Between chunks: Y += r ⊙ (Q + o_q)S_c, S_c the state before chunk c (X[c]). The [C, f] products accumulate
    # in place (baddbmm on the flattened batch), so no temporary as large as the group's features is made.
    g = dyc if grp.reads is None else dyc * grp.reads  # [B, H, C#, C, w]
    _flat(dq).baddbmm_(_flat(g), states[:, :, :-1].reshape(-1, f, states.shape[-1]).transpose(1, 2))
    d_states = torch.cat([qc.transpose(-1, -2) @ g, d_state[:, :, None, :f]], dim=2)  # [B, H, C# + 1, f, w]: ∂/∂X
    if o_q:
        d_states[:, :, :-1] += o_q * g.sum(dim=-2, keepdim=True)
    # The scan X_k = Σ_{k' <= k} x_k'·(factor) transposed: a reverse scan with the same factors.
    if grp.reads is None:
        d_states.copy_(d_states.flip(2).cumsum(2).flip(2))  # a reverse cumulative sum
    else:
        _rescaled_scan_(d_states, grp.level, reverse=True)
    d_sums = d_states[:, :, 1:]  # [B, H, C#, f, w]: of each chunk's own sum Kᵀ(u ⊙ V)
    _flat(dk).baddbmm_(_flat(grp.written), d_sums.reshape(-1, f, d_sums.shape[-1]).transpose(1, 2))
    dw = kc @ d_sums  # [B, H, C#, C, w]
    dv += dw if grp.writes is None else dw * grp.writes
    dq, dk, dv = (t.view(b, h, -1, t.shape[-1])[:, :, :n] for t in (dq, dk, dv))  # [B, H, L, f | w]
    if grp.ones is not None:  # Y += t ⊙ Σ_{j≤i} [V_j, 1], t_i = o_k·(Σφ(Q_i) + f·o_q)
        t = terms.key_offset * (q.sum(dim=-1, keepdim=True) + f * o_q)  # [B, H, L, 1]
        dq += terms.key_offset * (dy * grp.ones).sum(dim=-1, keepdim=True)  # the same for every feature
        ty = t * dy  # [B, H, L, w]
        # Σ_{i >= j} t_i dY_i, plus what the state after the group passes back: the gradient of each Σ [V_j, 1]
        d_ones = ty.flip(2).cumsum(2).flip(2).add_(d_state[:, :, f:])  # [B, H, L, w]
        dv += d_ones
        d_before = torch.cat([d_states[:, :, 0], ty.sum(dim=2, keepdim=True).add_(d_state[:, :, f:])], dim=2)
    else:
        d_before = d_states[:, :, 0].clone()
    return dq, dk, dv, d_before  # d_before: of the state before the group, [B, H, f (+ 1), w]


def _flat(t: Tensor) -> Tensor:
    """[B, H, C#, C, x] (contiguous) -> [B·H·C#, C, x], a view: what the in-place batched products take."""
    return t.view(-1, *t.shape[-2:])


def _rescaled_scan_(sums: Tensor, shifts: Tensor, *, reverse: bool = False) -> Tensor:
    """In place: the inclusive scan of sums [B, H, L, f, w], element k at shift ``shifts`` [B, H, L]
    (non-decreasing): element k becomes Σ_{k' <= k} sums_k'·exp(shifts_k' − shifts_k); ``reverse``: its transpose,
    Σ_{k' >= k} sums_k'·exp(shifts_k − shifts_k'). Hillis & Steele's log-depth scan: ⌈log₂ L⌉ steps, each adding
    the element ``step`` away, rescaled by a factor <= 1 (nothing overflows)."""
    step, length = 1, sums.shape[2]
    while step < length:
        factor = (shifts[..., :-step] - shifts[..., step:]).exp()[..., None, None]  # [B, H, L − step, 1, 1]
        if reverse:
            sums[:, :, :-step] += sums[:, :, step:] * factor
        else:
            sums[:, :, step:] += sums[:, :, :-step] * factor
        step *= 2
    return sums


def causal_kernel_step(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, state: Tensor, *, decay: Tensor | None = None,
    query_offset: float = 0.0, key_offset: float = 0.0, log_features: bool = False,
) -> tuple[Tensor, Tensor]:
    """One more token of :func:`causal_kernel_attention_terms`, written into ``state`` in place (a decoding step).

    The state becomes decay·state + φ(K_t)[V_t, 1]ᵀ (the token is real: a step adds no padding), then the query
    reads it, itself included (j <= t). O(f·w) per head: it reads the [f, w] sums and nothing else.

    Args:
        phi_q: the query's features [B, H, 1, f] (their logarithms with ``log_features``).
        phi_k: the key's features [B, H, 1, f] (with ``decay``, at the new shift).
        v: the value [B, H, 1, d].
        state: the sums of the tokens before, [B, H, f, w] (with ``key_offset``, [B, H, f + 1, w], Σ [V_j, 1] last,
            which ``decay`` does not scale); updated in place.
        decay: [B, H, 1, 1] factor the sums are rescaled by first (a shift moving up: exp(old − new)), or None.
        query_offset, key_offset, log_features: as in :func:`causal_kernel_attention_terms`.

    Returns:
        numerator [B, H, 1, d] and normaliser [B, H, 1, 1].
    """
    d, f = v.shape[-1], phi_q.shape[-1]
    if log_features:
        phi_q, phi_k = phi_q.exp(), phi_k.exp()
    v1 = with_ones_columns(v)  # [B, H, 1, w]
    sums = state[:, :, :f]  # [B, H, f, w]: a view, written in place
    if decay is not None:
        sums.mul_(decay)
    sums.addcmul_(phi_k.transpose(-1, -2), v1)  # [B, H, f, 1]·[B, H, 1, w]: the outer product
    y = phi_q @ sums  # [B, H, 1, w]
    if query_offset:
        y = y + query_offset * sums.sum(dim=-2, keepdim=True)
    if key_offset:
        ones = state[:, :, f:].add_(v1)  # [B, H, 1, w]: Σ [V_j, 1]
        y = y + key_offset * (phi_q.sum(dim=-1, keepdim=True) + f * query_offset) * ones
    return y[..., :d], y[..., d : d + 1]
