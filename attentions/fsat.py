"""FSAT (Fourier Sparse Attention for Transformer) and its FAT ablation.

Paper: Yimeng Zhuang, Jing Zhang, Mei Tu, "Long-range Sequence Modeling with Predictable Sparse Attention",
ACL 2022 (Volume 1: Long Papers), pp. 234–243, https://aclanthology.org/2022.acl-long.19
(doi:10.18653/v1/2022.acl-long.19; the paper has no arXiv version and no public code: this is the first
implementation, so every choice the paper leaves open is listed, with ours, in ``FSATAttention``'s docstring).

- ``fsat`` (the paper's default M = 4; preset ``fsat_m8``): pooled hidden-state cross by FFT
  (eq. 1–4), Q from X and K, V from the cross C (eq. 6), M predicted dominant query indices per key (eq. 9),
  Gaussian edge confidences (eq. 8, 10) with truncated gradients (§4.2.4), and the sparse attention of eq. 7
  over O(n·M) edges (gathers, a scatter-softmax and CSR products) — never an n×n tensor.
- ``fat``: the paper's ablation "Fourier Attention for Transformer" (§5.6, eq. 5): the same cross, full
  softmax attention with K, V from C. O(n²).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .base import check_seq_len, masked_fill_value, merge_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

FeatureMap = Literal["fc", "dconv"]
Activation = Literal["gelu", "relu", "tanh"]
IndexScale = Literal["max_seq_len", "length"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh}


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
    rfft and two irffts, where autograd runs the rffts' backward as full-length complex FFTs (measured 1.5x
    slower fwd+bwd on CPU at B=4, L=4096, D=64).
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
    with torch.autocast(dense.device.type, enabled=False):
        return _csr(crow, cols, values, dense.shape[0]) @ dense


def _sddmm(crow: Tensor, cols: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """Per stored entry (r, c) of the CSR pattern, left[r] · right[c], in storage order: [nnz]."""
    pattern = _csr(crow, cols, left.new_zeros(cols.numel()), right.shape[0])
    with torch.autocast(left.device.type, enabled=False):
        return torch.sparse.sampled_addmm(pattern, left, right.T, beta=0.0).values()


class _EdgeAttention(torch.autograd.Function):
    """Eq. 7 on flattened rows, forward and backward written out (see ``sparse_attention``).

    Edges are stored key-major, E per key row (the paper's index matrix): edge r·E + e goes from key row r to
    query row ``target[r, e]``; R (one past the last row) is a discard row. That layout is already a CSR
    matrix over key rows (E entries each); sorting the edges by query row gives the CSR over query rows.
    Every per-edge dot product is a sampled dense-dense product (SDDMM) on the key-row CSR, and every
    weighted sum over edges an SpMM — y and dL/dQ sum into query rows, dL/dK and dL/dV into key rows — so no
    [R·E, d] tensor is ever formed: memory is O(R·E + R·d), the paper's O(LMH + LD) (§4.3). On CPU these
    sparse kernels were 2–7x faster than the equivalent gathers, batched dot products and ``index_add_``.
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


def _last_real_index(mask: Tensor | None, n: int, device: torch.device) -> Tensor:
    """Position of each sequence's last real token, [B, 1, 1, 1] (0 if none); a 0-dim N−1 without mask."""
    if mask is None:
        return torch.tensor(n - 1, device=device)
    pos = torch.arange(n, device=device).expand_as(mask)  # [B, N]
    return pos.masked_fill(~mask, 0).amax(-1).view(-1, 1, 1, 1)  # [B, 1, 1, 1]


# ----------------------------------------------------------------------------------------------------------
# Modules.
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FATConfig(AttentionConfig):
    """Config of the pooled hidden-state cross and of FAT (eq. 1–6); FSAT's config extends it.

    Attributes:
        feature_map: the non-linear feature maps f₁, f₂ of eq. 1. "fc" (the paper's default "fully-connected
            structure"): f(x) = act(x W + b), one D→D layer each. "dconv" (the paper's "+DConv-5", used for
            its Text result): f(x) = act(pointwise(depthwise_conv(x))) with kernel ``dconv_kernel``.
        feature_activation: the non-linearity of f₁, f₂ ("gelu", "relu" or "tanh"; the paper names none).
        dconv_kernel: depthwise kernel size for ``feature_map="dconv"`` (paper: 5); odd, same-length padding.
    """

    feature_map: FeatureMap = "fc"
    feature_activation: Activation = "gelu"
    dconv_kernel: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.feature_map not in ("fc", "dconv"):
            raise ValueError(f"feature_map must be fc or dconv, got {self.feature_map!r}")
        if self.feature_activation not in _ACTIVATIONS:
            raise ValueError(f"feature_activation must be one of {', '.join(_ACTIVATIONS)}, "
                             f"got {self.feature_activation!r}")
        if int(self.dconv_kernel) <= 0 or self.dconv_kernel % 2 == 0:
            raise ValueError(f"dconv_kernel must be a positive odd integer, got {self.dconv_kernel!r}")


class HiddenStateCross(nn.Module):
    """C = LN(C₁ + C₂ − f₁(X)⊙f₂(X)) (eq. 1–4): pooled anti-diagonal crosses merged around central tokens.

    Padding: f₁(X), f₂(X) are zeroed at padded positions (f(0) ≠ 0 because of the biases), and X is zeroed
    before a depthwise convolution, so the anti-diagonals of real rows only reach real tokens. With the FFT
    sized by ``max_seq_len`` and the anti-diagonals past the last real token set to their exact value 0, every
    real row of C is bitwise that of the unpadded sequence.

    A property of eq. 4 as written, kept: the last real row is identically 0 before LN (its anti-diagonals
    2t and 2t+1 hold only the t–t pair, which is subtracted), so C there is LN's bias β.
    """

    def __init__(self, cfg: FATConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        if cfg.feature_map == "fc":
            self.fc = nn.Linear(d, 2 * d)  # f₁ and f₂ in one GEMM
        else:
            k = cfg.dconv_kernel
            self.depthwise = nn.ModuleList(nn.Conv1d(d, d, k, padding=k // 2, groups=d) for _ in range(2))
            self.pointwise = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.act = _ACTIVATIONS[cfg.feature_activation]()
        self.norm = nn.LayerNorm(d)

    def features(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """f₁(X), f₂(X), each [B, N, D], zero at padded positions."""
        if self.cfg.feature_map == "fc":
            f1, f2 = self.act(self.fc(x)).chunk(2, dim=-1)  # 2 x [B, N, D]
        else:
            xt = zero_padding(x, mask).transpose(1, 2)  # [B, D, N]: padded tokens read as the conv's zeros
            f1, f2 = (
                self.act(pw(dw(xt).transpose(1, 2)))  # [B, N, D]
                for dw, pw in zip(self.depthwise, self.pointwise, strict=True)
            )
        return zero_padding(f1, mask), zero_padding(f2, mask)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        f1, f2 = self.features(x, mask)
        n = x.shape[1]
        # FFT sized by max_seq_len: a sequence and its padded copy get bitwise the same C₀ (see pooled_cross).
        c0 = pooled_cross(f1, f2, pad_to=self.cfg.max_seq_len)  # [B, 2N−1, D]
        if mask is not None:
            # Anti-diagonals past 2·last only pair padded (zeroed) features: exactly 0, but the FFT leaves
            # roundoff there. It reaches the last real row t (c_2t + c_2t+1 − f₁⊙f₂ = 0 + ε, which LN maps
            # to β + ε/√eps); zeroing keeps that row what the unpadded sequence gives.
            last = _last_real_index(mask, n, x.device).view(-1, 1, 1)  # [B, 1, 1]
            beyond = torch.arange(2 * n - 1, device=x.device).view(1, -1, 1) > 2 * last  # [B, 2N−1, 1]
            c0 = c0.masked_fill(beyond, 0.0)
        return self.norm(central_symmetry_merge(c0, f1, f2))  # [B, N, D]


class _CrossAttentionBase(nn.Module):
    """Shared parts of FAT and FSAT: the cross, Q = X W_Q, [K | V | extra] = C W (eq. 6), W_o."""

    #: Whether C and its GEMM run in float32 with autocast off (FSAT: a bf16 Ī flips ⌊Ī⌋; see its docstring).
    float32_cross = False

    def __init__(self, cfg: FATConfig, extra_out: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.cross = HiddenStateCross(cfg)
        self.q = nn.Linear(d, d)
        # K, V (and FSAT's index logits, eq. 9) all read C: one GEMM.
        self.ckv = nn.Linear(d, 2 * d + extra_out)
        self.out = nn.Linear(d, d)

    def _project(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Q, K, V token-major [B, N, H, d] (views of the GEMM outputs); C's extra outputs [B, N, extra].

        With ``float32_cross``, C and its GEMM run with autocast off, in the weights' dtype (see FSAT's docstring).
        """
        b, n, _ = x.shape
        d, h = self.cfg.dim, self.cfg.heads
        if self.float32_cross:
            with torch.autocast(x.device.type, enabled=False):
                ckv = self.ckv(self.cross(x.to(self.ckv.weight.dtype), mask))  # [B, N, 2D + extra]
        else:
            ckv = self.ckv(self.cross(x, mask))  # [B, N, 2D + extra]
        # split, not slicing: its backward is one concatenation, not a zero-filled gradient per slice.
        k, v, extra = ckv.split([d, d, ckv.shape[-1] - 2 * d], dim=-1)  # [B, N, D] x 2, [B, N, extra]
        q = self.q(x).view(b, n, h, -1)  # [B, N, H, d]
        return q, k.unflatten(-1, (h, -1)), v.unflatten(-1, (h, -1)), extra  # K, V [B, N, H, d]


@register("fat", FATConfig, Capabilities(complexity="n^2"), paper="https://aclanthology.org/2022.acl-long.19")
class FATAttention(_CrossAttentionBase):
    """FAT: softmax attention with K, V projected from the pooled hidden-state cross (FSAT paper eq. 5).

    Paper: Zhuang et al., ACL 2022, https://aclanthology.org/2022.acl-long.19, §3 and the §5.6 ablation
    ("Fourier Attention for Transformer", FSAT without the sparse attention module). Q = X W_Q, K = C W_K,
    V = C W_V with C from ``HiddenStateCross``; full softmax(QKᵀ/√d)V via torch SDPA, O(n²).
    Padded keys get the dtype's most negative finite score (an additive float mask, as ``vanilla``), so a
    sequence with no real token stays finite. See ``FSATAttention`` for the choices shared with FSAT.
    """

    def __init__(self, cfg: FATConfig) -> None:
        super().__init__(cfg)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v, _ = self._project(x, mask)  # each [B, N, H, d]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # each [B, H, N, d], SDPA's layout
        bias = None
        if mask is not None:
            bias = torch.zeros(mask.shape[0], 1, 1, mask.shape[1], dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(~mask[:, None, None, :], masked_fill_value(q.dtype))  # [B, 1, 1, N]
        p = self.cfg.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)  # [B, H, N, d]
        return self.out(merge_heads(y))


@dataclass(frozen=True)
class FSATConfig(FATConfig):
    """Config of FSAT; defaults are the paper's (M = 4, σ² = L_max, predicted ∪ random indices in training).

    Attributes:
        m_per_key: M, predicted dominant query indices per key and head (eq. 9; paper default 4, Table 3
            also 2 and 8).
        n_random: random query indices per key and head drawn in training (exploration, §4.2.3);
            None = M, i.e. I_r has the shape of I_p. Random index r takes its confidence mean from predicted
            column r mod M. 0 = the "Only I_p" ablation of Table 3.
        sigma2: variance σ² of the confidence (eq. 8); None = L_max = ``max_seq_len`` (paper §5.3).
        index_scale: what σ(·) is multiplied by in eq. 9: "max_seq_len" (the paper's L_max; inputs longer
            than max_seq_len are rejected) or "length" (each sequence's real length, so predictions span
            exactly the real tokens whatever max_seq_len is).
        normalized_confidence: ρ is the Gaussian density with its 1/√(2πσ²) factor (paper); False drops it.
        truncate_grad: clamp the confidence gradient to (−∞, 0] (§4.2.4); False = Table 3 "No Trunc.".
    """

    m_per_key: int = 4
    n_random: int | None = None
    sigma2: float | None = None
    index_scale: IndexScale = "max_seq_len"
    normalized_confidence: bool = True
    truncate_grad: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("m_per_key")
        if self.n_random is not None and int(self.n_random) < 0:
            raise ValueError(f"n_random must be >= 0 or None (= m_per_key), got {self.n_random!r}")
        if self.sigma2 is not None and not self.sigma2 > 0:
            raise ValueError(f"sigma2 must be positive or None (= max_seq_len), got {self.sigma2!r}")
        if self.index_scale not in ("max_seq_len", "length"):
            raise ValueError(f"index_scale must be max_seq_len or length, got {self.index_scale!r}")

    @property
    def randoms(self) -> int:
        """Random indices per key and head in training."""
        return self.m_per_key if self.n_random is None else int(self.n_random)

    @property
    def variance(self) -> float:
        """σ² of eq. 8."""
        return float(self.max_seq_len if self.sigma2 is None else self.sigma2)


class FSATEdges(NamedTuple):
    """FSAT's sparse graph for one input (per key j, head h: E = M predicted [+ R random] edges).

    Attributes:
        query_index: [B, N, H, E] int64: for key j in head h, the queries its edges point from (eq. 10's
            I_jm; columns :M are the predicted ⌊Ī⌋, columns M: the random ones in training); the value N
            marks a padded key's dropped edge.
        confidence: [B, N, H, E] s = ρ(I | Ī, σ²), carrying the (truncated) gradient to Ī.
        predicted: [B, N, H, M] the continuous predictions Ī of eq. 9.
    """

    query_index: Tensor
    confidence: Tensor
    predicted: Tensor


@register("fsat", FSATConfig, Capabilities(complexity="n log n"), paper="https://aclanthology.org/2022.acl-long.19")
class FSATAttention(_CrossAttentionBase):
    """FSAT: sparse attention over predicted dominant query→key edges, K and V from the hidden-state cross.

    Paper: Zhuang, Zhang, Tu, "Long-range Sequence Modeling with Predictable Sparse Attention", ACL 2022,
    https://aclanthology.org/2022.acl-long.19 (no arXiv version, no public code) — §3 (eq. 1–6),
    §4 (eq. 7–10), §5.3 (M = 4, σ² = L_max), §5.6 (ablations).

    forward: X → C = LN(C₁ + C₂ − f₁(X)⊙f₂(X)) by FFT (eq. 1–4) → Q = X W_Q, K = C W_K, V = C W_V (eq. 6),
    Ī = σ(C W_I + b_I)·L_max (eq. 9) → edges I_jm → j with confidence ρ(I_jm | Ī_jm, σ²) (eq. 10) → per query,
    softmax over its incoming edges ⊙ confidences, times V (eq. 7) → W_o. Training: I = I_p ∪ I_r; eval: I_p.
    Time O(N·D² + N·D·log N + N·M·D), memory O(N·M·H + N·D) (§4.3). ``edges(x, mask)`` returns the graph.

    Choices where the paper is silent or ambiguous (ours first, then why):
    - f₁, f₂ (eq. 1): one Linear D→D + GELU each (fused into one GEMM); the paper says only "parameterized
      non-linear", "fully-connected structure". ``feature_map="dconv"``: depthwise conv (k = 5) + pointwise
      Linear + activation, the paper's "+DConv-5".
    - Eq. 3 as a linear convolution: FFTs zero-padded to a fast (5-smooth) size >= 2·max(L, max_seq_len)−1,
      ``irfft`` for the real part, float32 at least. Sizing by max_seq_len makes a sequence and its padded
      copy give bitwise the same C — ⌊Ī⌋ is discontinuous, so roundoff must not depend on the padding — and
      anti-diagonals past the last real token are set to their exact value 0 instead of FFT roundoff.
    - Eq. 4 merge: row t = c_{2t} + c_{2t+1} − f₁(x_t)⊙f₂(x_t), C₁'s zero row appended at the end (the
      paper's example sums anti-diagonals 10 and 11 around token 5). LN = nn.LayerNorm(D), affine. Kept as
      written although it makes the last real row 0 before LN (C = LN's bias β there).
    - One graph per head (§4.1: "each head has a graph computed independently"; eq. 7's N_i^h): W_I is
      D×(H·M), not eq. 9's D×M, i.e. M predicted queries per key per head.
    - Biases on all projections (Q, K, V, W_I, W_o); W_K, W_V, W_I share one GEMM over C. PyTorch default
      initialisation everywhere (the paper gives none).
    - L_max = ``max_seq_len`` (a scale, no parameter: no fixed-length requirement); longer inputs raise.
      ``index_scale="length"`` scales by each sequence's real length instead. σ² = L_max (§5.3), ``sigma2``.
    - ρ is the Gaussian density including 1/√(2πσ²), as written ("probability density function");
      ``normalized_confidence=False`` (preset ``fsat_unnormalized``) drops that constant factor, giving
      ρ = exp(−(I − Ī)²/2σ²) ∈ (0, 1], 1 at the predicted index. The paper motivates ρ only by its shape (queries
      far from Ī "have decreasing probabilities of attending"); the factor is a side effect of the literal
      reading, and it scales every attention output by at most 1/√(2πσ²): 0.025 at σ² = L_max = 256, 0.006 at
      the LRA Text length 4096. Measured on the ListOps stand-in (quick settings: 512 tokens, 400 steps, seeds
      0 and 1, the harness's training, 2026-11-24): test accuracy 16.75 / 15.5% with the factor (majority class
      16%: nothing learned), 28.75 / 26.0% without it, vanilla 31.5 / 15.25%, the `none` control 17.5 / 15.25%.
      So at short budgets the literal factor keeps FSAT at chance, while the kernel-shaped confidence learns
      like vanilla; with Adam, W_o can grow to undo a constant scale over long training, which the paper's
      LRA runs have. The default stays the paper's text (a reader reproducing the paper gets what it says);
      ``fsat_unnormalized`` is the reading we would recommend, and both are registered.
    - Rounding: I_p = ⌊Ī⌋ (§4.2.3), clamped to [0, last real position] (Ī can reach L_max, and exceeds the
      real length of shorter or padded sequences). Indices carry no gradient; Ī learns only through the
      confidences.
    - Random indices (training): ``n_random`` per key and head (default M: I_r shaped like I_p), uniform
      over [0, real length − 1], drawn fresh each training forward from torch's global RNG. Random column r
      is scored with the mean of predicted column r mod M (eq. 10 pairs I_jm with Ī_jm), so exploring edges
      near Ī pull it.
    - "Union" = concatenation: an edge present twice (two predictions rounding to the same query, or a
      random index hitting a predicted one) is kept as parallel edges, each with its own confidence — eq. 10
      defines a confidence per index-matrix entry and gives no rule to merge two.
    - Eq. 7 order: softmax(q_i·k_j/√d) over query i's incoming edges, then ⊙ confidence, no renormalisation.
      Dropout (``dropout``) acts on the softmax weights, before the confidence.
    - Gradient truncation: a custom autograd Function (identity forward, ``grad.clamp(max=0)`` backward) on
      the confidence tensor right after eq. 10, so dL/ds is truncated to (−∞, 0] and then flows through ρ to
      Ī, W_I, b_I and C. ``truncate_grad=False`` is Table 3's "No Trunc.".
    - A query with no incoming edge outputs the zero vector before W_o (the layer outputs W_o's bias there).
    - Implementation (no effect on the function): eq. 7 runs as CSR sparse products in float32 at least —
      SDDMM for the edge scores, SpMM for the weighted sums — with a scatter-softmax between them and a
      written-out backward (``_EdgeAttention``); the FFT cross also has a written-out backward.
    - Numerical deviation under autocast: the cross C and the one GEMM on it (K, V and the index logits) run in
      float32 with autocast off (the input cast to the weights' dtype), so only W_Q, W_o follow autocast. Why: ⌊Ī⌋
      is discontinuous, and with C and the logits in bf16 Ī moved by up to 0.4 positions (L_max = 128), 7% of
      the predicted indices flipped and the bf16 forward differed from the float32 one by 25% (relative, on real
      positions; ``fsat_unnormalized``, dim 32, n = 128; ``fsat``'s 1/√(2πσ²) factor hides the same flips under
      W_o's bias). With them in float32 no index flips and the difference is 0.3%. Eq. 7's sparse products run
      with autocast off too (MKL has no bf16 sparse kernels; see ``_spmm``). A module cast to bf16 as a whole
      (``.to(torch.bfloat16)``, the speed suite's ``dtype: bfloat16`` cells) has bf16 weights, so its cross runs in
      bf16 and its indices flip as above: such a cell times the layer in bf16, not a bf16 copy of the float32 one.
    - Padding: f₁(X), f₂(X) zeroed at padded positions (real rows of C equal the unpadded sequence's); padded
      keys emit no edges (they go to a discarded slot); predicted and random indices are clamped to the last
      real position. Real outputs never read padded content.
    - Not here: §5.3 halves the FFN width for FSAT (a model choice, outside the token mixer); Table 3's "Only
      I_r" (the paper does not say what inference uses then).
    """

    float32_cross = True  # the cross and the index logits read from it in float32 also under autocast

    def __init__(self, cfg: FSATConfig) -> None:
        super().__init__(cfg, extra_out=cfg.heads * cfg.m_per_key)
        self.cfg: FSATConfig = cfg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, n, _ = x.shape
        q, k, v, logits = self._project(x, mask)  # q, k, v [B, N, H, d]; logits [B, N, H·M]
        graph = self._graph(logits, mask)
        p = self.cfg.dropout if self.training else 0.0
        y = sparse_attention(q, k, v, graph.query_index, graph.confidence, p)  # [B, N, H, d]
        return self.out(y.reshape(b, n, -1))  # [B, N, D]

    def edges(self, x: Tensor, mask: Tensor | None = None) -> FSATEdges:
        """The sparse graph forward would use for x (train mode: predicted ∪ random, a fresh random draw)."""
        return self._graph(self._project(x, mask)[3], mask)

    def _graph(self, logits: Tensor, mask: Tensor | None) -> FSATEdges:
        cfg = self.cfg
        bsz, n, _ = logits.shape
        if cfg.index_scale == "max_seq_len":
            check_seq_len(n, cfg.max_seq_len, "the paper's L_max")
        m, r = cfg.m_per_key, cfg.randoms if self.training else 0
        last = _last_real_index(mask, n, logits.device)  # [B, 1, 1, 1] (or [] without a mask)
        # Index math in float32 at least: positions up to L_max must be resolved well below 1.
        ft = torch.promote_types(logits.dtype, torch.float32)
        z = logits.to(ft).view(bsz, n, cfg.heads, m)  # [B, N, H, M]
        scale = float(cfg.max_seq_len) if cfg.index_scale == "max_seq_len" else (last + 1).to(ft)
        ibar = torch.sigmoid(z) * scale  # [B, N, H, M], eq. 9
        index = torch.minimum(ibar.detach().floor().long().clamp_(min=0), last)  # I_p = ⌊Ī⌋ in the real range
        mean = ibar
        if r > 0:
            # I_r ~ U[0, n_b − 1]; the modulo of a 62-bit draw is uniform to within n/2^62.
            rand = torch.randint(0, 2**62, (bsz, n, cfg.heads, r), device=logits.device) % (last + 1)
            index = torch.cat((index, rand), dim=-1)  # [B, N, H, M + R]
            paired = ibar[..., torch.arange(r, device=ibar.device) % m]  # [B, N, H, R]: Ī_{j, r mod M}
            mean = torch.cat((ibar, paired), dim=-1)  # [B, N, H, M + R]
        conf = gaussian_confidence(index, mean, cfg.variance, cfg.normalized_confidence)  # eq. 10
        if cfg.truncate_grad:
            conf = truncate_positive_grad(conf)
        if mask is not None:
            index = index.masked_fill(~mask[:, :, None, None], n)  # padded keys emit no edge (discard row)
        return FSATEdges(index, conf, ibar)


register_preset("fsat_m8", "fsat", m_per_key=8, description="FSAT with M = 8 predicted queries per key.")
register_preset(
    "fsat_unnormalized", "fsat", normalized_confidence=False,
    description="FSAT with ρ's 1/√(2πσ²) factor dropped (confidence in (0, 1]); see the FSAT docstring.",
)
