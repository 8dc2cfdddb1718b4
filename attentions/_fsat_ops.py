"""FSAT's equations as functions (the paper: ``attentions.fsat``), tested one by one against direct references: the
pooled hidden-state cross by FFT (eq. 1–4), the Gaussian edge confidence (eq. 8, 10) and its truncated gradient
(§4.2.4), and the sparse attention of eq. 7 over predicted edges by CSR products, never an n×n tensor.
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .base import eager_only, no_autocast

# ----------------------------------------------------------------------------------------------------------
# Pure functions: the paper's equations, tested one by one against direct references.
# ----------------------------------------------------------------------------------------------------------


@functools.cache
def _fast_fft_len(n: int) -> int:
    """Smallest 2^a·3^b·5^c >= n: pocketfft/cuFFT are fastest on such sizes, whatever the input length."""
    best = 1 << max(n - 1, 0).bit_length()  # the power of two >= n is always a candidate
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            p = p35
            while p < n:
                p *= 2
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


class _PooledCross(torch.autograd.Function):
    """c = a ∗ b (linear convolution along dim −1) by FFT, with the backward written as two correlations.

    dL/da_i = Σ_k g_k b_{k−i}, i.e. irfft(G · conj(B)), and likewise for b, reusing the forward spectra: one
    rfft and two irffts, where autograd runs the rffts' backward as full-length complex FFTs, which made fwd+bwd
    slower on CPU (the measurement: docs/results/, "From the code: FSAT's and Nyströmformer's kernels").
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, a: Tensor, b: Tensor, n_fft: int
    ) -> Tensor:
        length = a.shape[-1]
        spec_a, spec_b = torch.fft.rfft(a, n=n_fft), torch.fft.rfft(b, n=n_fft)  # [..., n_fft//2 + 1]
        ctx.save_for_backward(spec_a, spec_b)
        ctx.n_fft, ctx.length = n_fft, length
        return torch.fft.irfft(spec_a * spec_b, n=n_fft)[..., : 2 * length - 1]  # [..., 2L−1]

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor, Tensor, None]:
        spec_a, spec_b = ctx.saved_tensors
        spec_g = torch.fft.rfft(grad, n=ctx.n_fft)  # [..., n_fft//2 + 1]
        # n_fft >= 2L−1, so the circular correlations below never wrap onto the first L entries.
        grad_a = torch.fft.irfft(spec_g * spec_b.conj(), n=ctx.n_fft)[..., : ctx.length]  # [..., L]
        grad_b = torch.fft.irfft(spec_g * spec_a.conj(), n=ctx.n_fft)[..., : ctx.length]  # [..., L]
        return grad_a, grad_b, None


def pooled_cross(a: Tensor, b: Tensor, pad_to: int = 0) -> Tensor:
    """Pooled hidden-state cross, eq. 2–3: c_k = Σ_{i+j=k} a_i ⊙ b_j for k = 0 … 2L−2.

    The anti-diagonal sums are a linear convolution along the sequence, so they are one product in the
    frequency domain. The FFT is zero-padded to at least 2L−1 points so the convolution is linear (the paper's
    output has 2L−1 rows), and ``irfft`` returns the real part directly (Hermitian spectrum, §3.2.1).

    Args:
        a: f₁(X), [B, L, D].
        b: f₂(X), [B, L, D].
        pad_to: size the FFT as for a sequence of max(L, pad_to) positions. The result is the same in exact
            arithmetic; with a fixed ``pad_to`` it is also bitwise the same for a sequence and its
            zero-padded copy, which keeps FSAT's discrete ⌊Ī⌋ from flipping with the amount of padding.

    Returns:
        C₀, [B, 2L−1, D], in the inputs' dtype.
    """
    length = a.shape[1]
    n_fft = _fast_fft_len(2 * max(length, pad_to) - 1)
    # No half/bfloat16 FFT kernels on CPU (and cuFFT's need power-of-two sizes): upcast, cast back.
    ft = torch.promote_types(a.dtype, torch.float32)
    # FFTs along the last (unit-stride) dim: faster on CPU than along dim 1 of [B, L, D].
    at, bt = a.to(ft).transpose(1, 2), b.to(ft).transpose(1, 2)  # [B, D, L] views
    c0 = _PooledCross.apply(at, bt, n_fft)  # [B, D, 2L−1]
    return c0.transpose(1, 2).to(a.dtype)  # [B, 2L−1, D]


def central_symmetry_merge(c0: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """The argument of LN in eq. 4: C₁ + C₂ − f₁(X)⊙f₂(X), [B, L, D].

    Row t merges the anti-diagonal centred on token t (k = 2t, C₂) with the next one, centred between t and
    t+1 (k = 2t+1, C₁), as in the paper's example (the 10th and 11th anti-diagonals are summed), and removes
    the self-combination t–t. C₁ has L−1 rows; the paper pads it with a zero row, which lands at the end
    because row t pairs k = 2t with k = 2t+1.
    """
    # Work along the sequence as the last dim: pooled_cross's C₀ is a [B, D, 2L−1] buffer seen transposed.
    ct = c0.transpose(1, 2)  # [B, D, 2L−1]
    c2, c1 = ct[..., 0::2], F.pad(ct[..., 1::2], (0, 1))  # [B, D, L] each: C₂ and C₁ with its zero row
    return (c2 + c1).transpose(1, 2) - a * b  # [B, L, D]: row t = c_{2t} + c_{2t+1} − f₁(x_t)⊙f₂(x_t)


class _TruncatePositiveGrad(torch.autograd.Function):
    """Identity forward; backward clamps the incoming gradient to (−∞, 0] (§4.2.4)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, s: Tensor) -> Tensor:  # type: ignore[override]
        return s.view_as(s)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad.clamp(max=0)


def truncate_positive_grad(s: Tensor) -> Tensor:
    """s unchanged; the gradient flowing back through it is clamped to (−∞, 0] (§4.2.4)."""
    return _TruncatePositiveGrad.apply(s)


def gaussian_confidence(index: Tensor, mean: Tensor, sigma2: float, normalized: bool = True) -> Tensor:
    """Edge confidence s = ρ(I | Ī, σ²), eq. 8/10: the Gaussian density at the integer query index.

    Args:
        index: integer query positions I, any shape (no gradient: indices are discrete).
        mean: predicted continuous positions Ī broadcastable to ``index`` (carries the gradient, §4.2.2).
        sigma2: variance σ².
        normalized: include the density's 1/√(2πσ²) factor (the paper's "probability density function");
            False gives exp(−(I−Ī)²/2σ²) ∈ (0, 1].
    """
    z = index.to(mean.dtype) - mean
    s = torch.exp(z * z * (-0.5 / sigma2))
    return s * (2.0 * math.pi * sigma2) ** -0.5 if normalized else s


def _csr(crow: Tensor, cols: Tensor, values: Tensor, n_cols: int) -> Tensor:
    """A sparse CSR matrix [len(crow) − 1, n_cols], used without autograd (see ``_EdgeAttention``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse CSR tensor support is in beta state"
        return torch.sparse_csr_tensor(
            crow, cols, values, size=(crow.numel() - 1, n_cols), check_invariants=False
        )


# The sparse products below run with autocast off, in their inputs' dtype (float32 at least, see ``sparse_attention``):
# autocast would lower the CSR matmul to bfloat16, which MKL's sparse kernels do not implement on CPU, and on CUDA it
# would round every edge's score and weighted sum to bfloat16 where the layer promises float32.


def _spmm(crow: Tensor, cols: Tensor, values: Tensor, dense: Tensor) -> Tensor:
    """CSR(crow, cols, values) @ dense, [len(crow) − 1, d]: per row, the value-weighted sum of dense rows."""
    with no_autocast(dense.device):
        return _csr(crow, cols, values, dense.shape[0]) @ dense


def _sddmm(crow: Tensor, cols: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """Per stored entry (r, c) of the CSR pattern, left[r] · right[c], in storage order: [nnz]."""
    pattern = _csr(crow, cols, left.new_zeros(cols.numel()), right.shape[0])
    with no_autocast(left.device):
        return torch.sparse.sampled_addmm(pattern, left, right.T, beta=0.0).values()


class _EdgeAttention(torch.autograd.Function):
    """Eq. 7 on flattened rows, forward and backward written out (see ``sparse_attention``).

    Edges are stored key-major, E per key row (the paper's index matrix): edge r·E + e goes from key row r to
    query row ``target[r, e]``; R (one past the last row) is a discard row. That layout is already a CSR
    matrix over key rows (E entries each); sorting the edges by query row gives the CSR over query rows.
    Every per-edge dot product is a sampled dense-dense product (SDDMM) on the key-row CSR, and every
    weighted sum over edges an SpMM — y and dL/dQ sum into query rows, dL/dK and dL/dV into key rows — so no
    [R·E, d] tensor is ever formed: memory is O(R·E + R·d), the paper's O(LMH + LD) (§4.3). On CPU these
    sparse kernels were faster than the equivalent gathers, batched dot products and ``index_add_`` (the
    measurement: docs/results/, "From the code: FSAT's and Nyströmformer's kernels").
    Autograd through sparse CSR tensors is incomplete, hence the written-out backward.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        conf: Tensor,
        target: Tensor,
        dropout_p: float,
    ) -> Tensor:
        rows, d = q.shape
        e = target.shape[1]
        scale = d**-0.5
        tflat = target.reshape(-1)  # [R·E]
        key_crow = torch.arange(0, rows * e + 1, e, device=q.device)  # [R + 1]: E edges per key row
        # CSR over query rows (+ the discard row): stable, so each row keeps its edges in key order.
        order = torch.argsort(tflat, stable=True)  # [R·E]
        crow = F.pad(torch.bincount(tflat, minlength=rows + 1).cumsum(0), (1, 0))  # [R + 2]
        cols = torch.div(order, e, rounding_mode="floor")  # [R·E] key row of each sorted edge
        q_pad = F.pad(q, (0, 0, 0, 1))  # [R + 1, d]; the discard row reads zeros
        scores = _sddmm(key_crow, tflat, k, q_pad) * scale  # [R·E]: q_i·k_j/√d per edge
        # Per-query softmax over incoming edges; the max only stabilises exp (y does not depend on it).
        smax = scores.new_full((rows + 1,), float("-inf")).scatter_reduce_(0, tflat, scores, "amax")
        w = torch.exp(scores - smax.index_select(0, tflat))  # [R·E]; each query's max edge has w = 1
        den = scores.new_zeros(rows + 1).index_add_(0, tflat, w)  # [R + 1]
        den.masked_fill_(den == 0, 1.0)  # queries without edges: num = 0, so y = 0 there
        keep = None
        wd = w
        if dropout_p > 0.0:
            # Dropping w_e/den_i after normalising = dropping w_e here, with den from all edges.
            keep = torch.empty_like(w).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p)  # [R·E]
            wd = w * keep
        a = wd * conf.reshape(-1)  # [R·E] softmax weight × confidence
        y = _spmm(crow, cols, a.index_select(0, order), v) / den.unsqueeze(-1)  # [R + 1, d]
        ctx.save_for_backward(q_pad, k, v, conf, tflat, key_crow, order, crow, cols, w, den, y, keep)
        return y[:rows]

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_y: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, None, None]:
        q_pad, k, v, conf, tflat, key_crow, order, crow, cols, w, den, y, keep = ctx.saved_tensors
        rows, d = k.shape
        e = conf.shape[1]
        scale = d**-0.5
        g_num = F.pad(grad_y, (0, 0, 0, 1)) / den.unsqueeze(-1)  # [R + 1, d]: dL/d(Σ a·v) per query
        g_den = -(g_num * y).sum(-1)  # [R + 1]: y = num/den
        g_a = _sddmm(key_crow, tflat, v, g_num)  # [R·E]: dL/da_e = g_num_i · v_j
        wd = w if keep is None else w * keep
        conf = conf.reshape(-1)
        g_v = _spmm(key_crow, tflat, wd * conf, g_num)  # [R, d]: Σ_e a_e g_num_i
        g_conf = (g_a * wd).view(rows, e)  # [R, E]
        g_w = g_a * conf
        if keep is not None:
            g_w = g_w * keep
        g_s = (g_w + g_den.index_select(0, tflat)) * w * scale  # [R·E]: dL/d(q·k) per edge
        g_q = _spmm(crow, cols, g_s.index_select(0, order), k)[:rows]  # [R, d]: Σ_e g_s k_j
        g_k = _spmm(key_crow, tflat, g_s, q_pad)  # [R, d]: Σ_e g_s q_i
        return g_q, g_k, g_v, g_conf, None, None


# Run eagerly under torch.compile (a graph break on either side; the projections and the predictor around it compile):
# Dynamo cannot trace sparse CSR tensors (torch 2.13: bincount's data-dependent size, then an IndexError on the CSR's
# strides and "as_strided on SparseCsrCPU" in Inductor), so a compiled FSAT failed in every cell. ``eager_only``, not
# the decorator itself, which imports torch._dynamo at import time (a slow import, in every process that imports the
# zoo; see ``eager_only``).
@eager_only
def sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, query_index: Tensor, confidence: Tensor, dropout_p: float = 0.0
) -> Tensor:
    """Eq. 7 before W_o: per query, softmax over its incoming edges, times the edge confidences, times V.

    The graph is given per key: edge (j, e) goes from key j to query ``query_index[b, j, h, e]`` (the paper's
    index matrix I, one row per key, in head h). Query i attends to every key with an edge to it; parallel
    edges (the same pair twice) are separate terms, each with its own confidence. Time O(N·E·d), memory
    O(N·E + N·d) — no n×n tensor: a scatter-softmax over the edges (per-query max by
    ``scatter_reduce(amax)``, exp, per-query sums by ``index_add``) between sparse (CSR) products.

    Args:
        q, k, v: [B, N, H, d] (token-major, as the projections produce them: no head transposes).
        query_index: [B, N, H, E] int64 in [0, N]; the value N means "no query" (a padded key's edges).
        confidence: [B, N, H, E] edge confidences s (multiplied after the softmax, not renormalised).
        dropout_p: dropout on the softmax weights (pass 0 in eval).

    Returns:
        [B, N, H, d]; a query with no incoming edge gets the zero vector.
    """
    bsz, n, heads, d = q.shape
    e = query_index.shape[-1]
    ft = torch.promote_types(q.dtype, torch.float32)  # no half/bfloat16 SpMM or SDDMM on CPU (MKL)
    # Flat row of (b, i, h) is (b·N + i)·H + h; "no query" (i = N) maps to the single discard row B·N·H.
    rows = bsz * n * heads
    offset = (torch.arange(bsz, device=q.device).view(bsz, 1, 1, 1) * n * heads
              + torch.arange(heads, device=q.device).view(1, 1, heads, 1))  # [B, 1, H, 1]
    target = torch.where(query_index >= n, rows, query_index * heads + offset)  # [B, N, H, E]
    y = _EdgeAttention.apply(
        q.reshape(rows, d).to(ft),  # [B·N·H, d]
        k.reshape(rows, d).to(ft),
        v.reshape(rows, d).to(ft),
        confidence.reshape(rows, e).to(ft),  # [B·N·H, E]
        target.reshape(rows, e),
        float(dropout_p),
    )
    return y.view(bsz, n, heads, d).to(q.dtype)  # [B, N, H, d]


def last_real_index(mask: Tensor | None, n: int, device: torch.device) -> Tensor:
    """Position of each sequence's last real token, [B, 1, 1, 1] (0 if none); a 0-dim N−1 without mask."""
    if mask is None:
        return torch.tensor(n - 1, device=device)
    pos = torch.arange(n, device=device).expand_as(mask)  # [B, N]
    return pos.masked_fill(~mask, 0).amax(-1).view(-1, 1, 1, 1)  # [B, 1, 1, 1]


# ----------------------------------------------------------------------------------------------------------
# Modules.
# ----------------------------------------------------------------------------------------------------------
