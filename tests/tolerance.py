"""Error bounds for floating-point results, derived from the dtype, the reduction lengths and the magnitudes of what
is summed, against a float64 truth: never a number that passed on one machine.

Why not a fixed ``atol``: CPUs sum in different orders (AVX2, AVX-512, AMX kernels; oneDNN or not; a GPU), so a
float32 result moves by a few hundred ulps between machines, and a bound tuned on one of them fails on another.

**One reduction.** A sum or dot product of K terms computed in a precision with unit roundoff u = eps/2, in any order,
has a first-order error Σ_j δ_j·s_j over its partial sums s_j, with rounding errors |δ_j| <= u that are bounded and
mean-independent (the model of Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
Comput. 41(5), 2019). So it stays within λ·u·√K·max_j|s_j| but for a probability of 2·exp(−λ²/2): with
:data:`LAMBDA` = 8, 3e-14 per element, whatever order a machine sums in. A partial sum reaches at most |s| + √(Σ
terms²) (the full sum, plus the excursion of terms of either sign); both are computed from the float64 truth
(``a² @ b²`` for a product), so the bound scales with the data, not with a guess (:func:`reduction_bound`).

**A whole computation.** :class:`ErrorTrace` runs the float64 truth under a dispatch mode and carries, for every tensor,
an elementwise bound on its absolute error through each op (a running error analysis, first order): an op's output
error is

- what its inputs' errors become through it: the op is evaluated again in float64 on its inputs moved by their error
  bounds, with random signs (rounding errors have no sign to prefer; three patterns, the largest move kept per element),
  so the op's own conditioning, cancellation and normalisation included, is measured rather than assumed; plus
- its own rounding: for a reduction (matmul, convolution, sum, softmax, norms, FFT, ...) the bound above, with its own
  K and Σ|terms|; for an elementwise op two roundings of its output (correctly rounded results, transcendental functions
  within 1 ulp); for data movement (copies, views, concatenation, selection, ReLU) nothing.

The result is a bound per tensor (outputs and gradients alike) that holds for any summation order of the same dtype:
what these tests need. What it cannot bound: a discrete choice (an argmax, a hash bucket, a sort) that flips with
rounding; such variants are compared with their choices fixed, or on properties.

Every bound here is also checked the other way (``tests/test_tolerance.py``): an error of the size a test must catch
(a dropped term, a wrong scale, an intermediate rounded to bfloat16) exceeds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

#: λ of the probabilistic bound: a reduction exceeds λ·√K·u·Σ|terms| with probability below 2K·exp(−λ²/2).
LAMBDA = 8.0
#: Roundings charged to an elementwise op's output (the op's own, and one for a transcendental function's last ulp).
ELEMENTWISE_ROUNDINGS = 2.0

aten = torch.ops.aten


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps/2: the largest relative error of rounding a real number to ``dtype``."""
    return torch.finfo(dtype).eps / 2


def reduction_bound(dtype: torch.dtype, k: int, result: Tensor | float, rms_terms: Tensor | float) -> Tensor | float:
    """Error bound of a sum or dot product of ``k`` terms summed in ``dtype``: λ·u·√K·(|s| + √(Σ terms²)).

    ``result`` is the exact sum s, ``rms_terms`` is √(Σ terms²) (elementwise tensors or floats). Why this magnitude:
    the first-order error of any summation order is Σ_j δ_j·s_j over its partial sums s_j with |δ_j| <= u, so it stays
    within λ·u·√(Σ_j s_j²) but for a probability of 2·exp(−λ²/2) (Hoeffding; Higham & Mary 2019, §3), and
    √(Σ_j s_j²) <= √K·max_j|s_j|, where a partial sum reaches at most the full sum plus the excursion of terms of
    either sign, √(Σ terms²) (all of one sign: the full sum). Σ|terms| would bound every data set, but at √K times
    what random-sign data reaches: chained through a layer it buries a real error.
    """
    return LAMBDA * unit_roundoff(dtype) * math.sqrt(max(k, 1)) * (abs(result) + rms_terms)


@dataclass(frozen=True)
class Precision:
    """How the traced computation is carried out: ``storage`` is the dtype every result is rounded to, ``accumulate``
    the dtype reductions sum in, and ``low_inputs`` whether matrix products round their inputs to ``storage`` first
    (autocast: bf16 GEMMs read bf16 operands and accumulate in float32)."""

    storage: torch.dtype
    accumulate: torch.dtype
    low_inputs: bool = False

    @classmethod
    def of(cls, dtype: torch.dtype) -> Precision:
        """Plain arithmetic in ``dtype``."""
        return cls(dtype, dtype)

    @classmethod
    def autocast(cls, dtype: torch.dtype = torch.bfloat16) -> Precision:
        """Autocast to ``dtype``, charged as if every op ran in it (autocast keeps some in float32: an
        over-estimate)."""
        return cls(dtype, torch.float32, low_inputs=True)


# Ops that round nothing: they move, select or compare values, or draw them.
_EXACT = {
    aten.clone, aten._to_copy, aten.copy_, aten.copy, aten.cat, aten.stack, aten.index, aten.index_select, aten.gather,
    aten.constant_pad_nd, aten.slice_backward, aten.select_backward, aten.diagonal_backward, aten.new_zeros,
    aten.new_empty, aten.new_ones, aten.new_full, aten.zeros_like, aten.ones_like, aten.empty_like, aten.full_like,
    aten.empty, aten.zeros, aten.ones, aten.full, aten.fill_, aten.fill, aten.zero_, aten.arange, aten.eye,
    aten.masked_fill, aten.masked_fill_, aten.where, aten.relu, aten.relu_, aten.threshold_backward, aten.neg,
    aten.abs, aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge, aten.logical_not, aten.logical_and,
    aten.logical_or, aten.bitwise_and, aten.bitwise_or, aten.bitwise_not, aten.max, aten.min, aten.amax, aten.amin,
    aten.argmax, aten.argmin, aten.sort, aten.topk, aten.clamp, aten.clamp_min, aten.clamp_max, aten.maximum,
    aten.minimum, aten.floor_divide, aten.remainder, aten.repeat, aten.roll, aten.flip, aten.scatter, aten.scatter_,
    aten.index_put, aten.index_put_, aten._index_put_impl_, aten.lift_fresh, aten.isfinite, aten.isnan, aten.isinf,
    aten.any, aten.all, aten.sign, aten.floor, aten.ceil, aten.round, aten.trunc, aten.bernoulli_, aten.bernoulli,
    aten.randperm, aten.rand, aten.randn, aten.randint, aten.normal_, aten.uniform_, aten.rand_like,
    aten.randn_like, aten.tril, aten.triu, aten.masked_scatter, aten.masked_select, aten.nonzero, aten.unbind,
    aten.split, aten.split_with_sizes, aten.chunk, aten.narrow, aten.detach, aten.alias, aten.lift_fresh_copy,
    aten._local_scalar_dense, aten.item, aten.is_nonzero, aten.sym_size, aten.sym_stride, aten.sym_numel,
    aten.sym_storage_offset, aten.sparse_compressed_tensor, aten.values, aten.view_as_real, aten.view_as_complex,
    aten._conj, aten.conj_physical,
    aten.resolve_conj, aten.resolve_neg, aten.unique_consecutive, aten._unique2, aten.searchsorted, aten.bucketize,
    aten.cummax, aten.cummin, aten.embedding, aten.expand_copy, aten.permute_copy, aten.transpose_copy,
    aten.unsqueeze_copy, aten.squeeze_copy, aten.view_copy, aten.select_scatter, aten.slice_scatter,
    aten.diagonal_scatter, aten.as_strided_scatter, aten.promote_types, aten.result_type, aten.hardtanh,
    aten.hardtanh_backward, aten.unfold, aten.im2col, aten.col2im, aten.pad, aten.reflection_pad1d,
    aten.replication_pad1d, aten.max_pool1d_with_indices, aten.max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward, aten.set_, aten.resize_,
    aten.logical_xor, aten._unsafe_view, aten.expand, aten.t, aten.transpose, aten.permute, aten.squeeze,
    aten.unsqueeze, aten.view, aten.reshape, aten.select, aten.slice, aten.diagonal, aten.as_strided,
    aten.new_empty_strided, aten.empty_strided, aten.scalar_tensor, aten.zeros_like, aten.squeeze_,
    aten.unsqueeze_, aten.t_, aten.transpose_, aten.detach_, aten.index_fill, aten.index_fill_, aten.index_copy,
    aten.masked_scatter_, aten.expand_as, aten.view_as, aten.reshape_as, aten.type_as,
}
#: Ops of this project that only move values or apply ReLU (data movement, no rounding), by name.
EXACT_OPS = {"attnbench.s3_transpose12", "attnbench.s3_stem_relu", "attnbench.s3_stem_relu_backward"}
# Ops whose result is uninitialised memory (evaluated again, they would give other garbage).
_UNINITIALISED = {aten.empty, aten.empty_like, aten.new_empty, aten.new_empty_strided, aten.empty_strided}
# Random draws cannot be evaluated twice; they round nothing (their values are the same in the truth).
_RANDOM = {aten.bernoulli_, aten.bernoulli, aten.randperm, aten.rand, aten.randn, aten.randint, aten.normal_,
           aten.uniform_, aten.rand_like, aten.randn_like}


def _floats(out: Any) -> list[Tensor | None]:
    """The tensors of an op's result in order, None for a non-floating, empty or unsupported-layout one."""
    return [t if isinstance(t, Tensor) and _is_float(t) and t.layout in _LAYOUTS and _vals(t).numel() else None
            for t in tree_flatten(out)[0]]


#: Layouts whose values the trace follows: dense, and sparse CSR (its stored values; FSAT's sparse products).
_LAYOUTS = (torch.strided, torch.sparse_csr)


def _vals(t: Tensor) -> Tensor:
    """The values an error bound is shaped like: the tensor itself, or a sparse CSR tensor's stored values."""
    return t.values() if t.layout == torch.sparse_csr else t


def _with_values(t: Tensor, values: Tensor) -> Tensor:
    """``values`` in the place of ``t``'s: themselves, or a sparse CSR tensor of ``t``'s pattern holding them."""
    if t.layout != torch.sparse_csr:
        return values
    return torch.sparse_csr_tensor(t.crow_indices(), t.col_indices(), values, size=t.shape, check_invariants=False)


#: Magnitudes above this are fill values (finfo.min masks, −inf), not data: √(float64 max), far above any value a
#: test computes and far below the fills the variants use (finfo(dtype).min and fractions of it).
_FILL = math.sqrt(torch.finfo(torch.float64).max)


def _no_fills(a: Tensor) -> Tensor:
    """``a`` with its fill-value elements (non-finite, or above :data:`_FILL`) as 0: set, not computed."""
    return torch.where(torch.isfinite(a) & (a.abs() < _FILL), a, torch.zeros_like(a))


def _finite_abs(t: Tensor) -> Tensor:
    """|t| in float64 with fill values (masks such as finfo.min or −inf) as 0."""
    return _no_fills(_vals(t).detach().abs().to(torch.float64))


def _is_float(t: Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _squared_eval(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Tensor | None]:
    """√(Σ terms²) of every output element of a sum-of-products op: the op itself on squared operands (scalars alpha
    and beta squared too), square-rooted."""
    sq = tree_map(lambda a: _with_values(a, _vals(a).abs().square()) if isinstance(a, Tensor) and _is_float(a) else
                  a * a if isinstance(a, float) else a, list(args))
    sqkw = {k: v * v if k in ("alpha", "beta") else v for k, v in kwargs.items()}
    return [None if t is None else _vals(t).abs().sqrt() for t in _floats(func(*sq, **sqkw))]


_PRODUCTS = {aten.mm, aten.bmm, aten.matmul, aten.dot, aten.mv, aten.vdot, aten.addmm, aten.baddbmm, aten.addbmm,
             aten.addmv, aten.convolution, aten.convolution_backward}
_SUMS = {aten.sum, aten.mean, aten.nansum, aten.cumsum}
_NORMALISING = {aten._softmax, aten._safe_softmax, aten._log_softmax, aten.logsumexp, aten.native_layer_norm,
                aten.native_batch_norm, aten.cudnn_batch_norm, aten.cudnn_batch_norm_backward,
                aten.miopen_batch_norm, aten.miopen_batch_norm_backward,
                aten._native_batch_norm_legit, aten._native_batch_norm_legit_no_training,
                aten._native_batch_norm_legit_functional, aten._softmax_backward_data,
                aten._scaled_dot_product_flash_attention_for_cpu_backward, aten._log_softmax_backward_data,
                aten.native_layer_norm_backward, aten.native_batch_norm_backward, aten.var, aten.var_mean, aten.std,
                aten.std_mean, aten.linalg_vector_norm, aten.norm, aten.prod, aten.cumprod,
                aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_attention_math}
_SCATTERS = {aten.unfold_backward, aten.scatter_add, aten.scatter_add_, aten.index_add, aten.index_add_,
             aten.scatter_reduce,
             aten.scatter_reduce_,
             aten.embedding_dense_backward, aten.index_put, aten.index_put_, aten._index_put_impl_}
_ELEMENTWISE_BACKWARD = {aten.elu_backward, aten.gelu_backward, aten.sigmoid_backward, aten.tanh_backward,
                         aten.silu_backward, aten.softplus_backward, aten.leaky_relu_backward}
_FFTS = {aten._fft_r2c, aten._fft_c2r, aten._fft_c2c}


def _reduction_length(func: Any, args: Sequence[Any], out: Any) -> int | None:
    """K, the number of terms an output element of a reduction op sums (the largest, where outputs differ), or None
    when ``func`` is not a reduction."""
    op = func.overloadpacket
    if op in (aten.mm, aten.bmm, aten.matmul, aten.dot, aten.mv, aten.vdot):
        return int(args[0].shape[-1])
    if op in (aten.addmm, aten.baddbmm, aten.addbmm, aten.addmv):
        return int(args[1].shape[-1]) + 1
    if op is aten.convolution:
        return int(args[1].shape[1] * math.prod(args[1].shape[2:])) + 1
    if op is aten.convolution_backward:
        grad, w = args[0], args[2]
        # input gradient: C_out·k terms; weight and bias gradients: batch × positions terms
        return max(int(w.shape[0] * math.prod(w.shape[2:])), int(grad.shape[0] * math.prod(grad.shape[2:])))
    if op in (aten.cumsum, aten.cumprod, aten._softmax, aten._safe_softmax, aten._log_softmax, aten.logsumexp):
        dim = args[1][0] if isinstance(args[1], (list, tuple)) else args[1]
        return int(args[0].shape[dim]) if args[0].dim() else 1
    if op in (aten._softmax_backward_data, aten._log_softmax_backward_data):
        return int(args[0].shape[args[2]])
    if op in (aten.native_layer_norm, aten.native_layer_norm_backward):
        return int(math.prod(args[1] if op is aten.native_layer_norm else args[2]))
    if op in (aten.native_batch_norm_backward, aten.cudnn_batch_norm_backward, aten.miopen_batch_norm_backward):
        return max(args[1].numel() // max(int(args[1].shape[1]), 1), 1)  # (grad_out, input, ...) / (input, grad, ...)
    if op in (aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_no_training,
              aten._native_batch_norm_legit_functional, aten.cudnn_batch_norm, aten.miopen_batch_norm):
        return max(args[0].numel() // max(int(args[0].shape[1]), 1), 1)
    if op in (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_attention_math,
              aten._scaled_dot_product_flash_attention_for_cpu_backward):
        # forward: softmax over the keys and a sum over them; backward: sums over keys and over queries
        n_q, n_k = int(args[0].shape[-2]), int(args[1].shape[-2])
        return max(n_k, n_q) if op is aten._scaled_dot_product_flash_attention_for_cpu_backward else n_k
    if op is aten.sparse_sampled_addmm:
        return int(args[1].shape[-1]) + 1
    if op in _SUMS or op in _NORMALISING:  # sums, means, variances, norms, products over some axes
        return max(args[0].numel() // max(_floats(out)[0].numel(), 1), 1)  # type: ignore[union-attr]
    if op in _FFTS:
        return 2 * max(math.ceil(math.log2(max(_fft_length(func, args), 2))), 1)  # butterflies and twiddles
    if op in _SCATTERS:
        if op in (aten.index_put, aten.index_put_, aten._index_put_impl_) and not (len(args) > 3 and args[3]):
            return None  # a plain assignment
        src = args[-1] if op in (aten.index_put, aten.index_put_, aten._index_put_impl_) else args[-1]
        src = src if isinstance(src, Tensor) else args[0]
        return max(src.numel() // max(_floats(out)[0].numel(), 1), 1) + 1  # type: ignore[union-attr]
    return None


def _fft_length(func: Any, args: Sequence[Any]) -> int:
    """The transform length of an FFT op (the product of its transformed axes)."""
    if func.overloadpacket is aten._fft_c2r:
        return int(math.prod(int(args[0].shape[d]) for d in args[1][:-1]) * int(args[3]))
    return int(math.prod(int(args[0].shape[d]) for d in args[1]))


def _term_rms(func: Any, args: Sequence[Any], kwargs: dict[str, Any], outs: list[Tensor | None],
              k: int) -> list[Tensor | float]:
    """√(Σ terms²) per output element of a reduction op with K = ``k`` (a tensor, or a float for every element)."""
    op = func.overloadpacket
    if op in _PRODUCTS or op in _SUMS or op is aten.sparse_sampled_addmm:
        return [0.0 if t is None else t for t in _squared_eval(func, args, kwargs)]
    mags = [0.0 if t is None else float(_finite_abs(t).max()) for t in outs]
    if op in _FFTS:  # |twiddle| = 1: an output sums n terms of the size of its row's inputs: ‖row‖₂
        x, dims, norm = args[0], list(args[1]), args[2]
        n = _fft_length(func, args)
        scale = {0: 1.0, 1: n**-0.5, 2: 1.0 / n}[norm] * (math.sqrt(2) if op is aten._fft_c2r else 1.0)
        return [scale * float(x.abs().square().sum(dims).sqrt().max())] * len(outs)
    # normalised outputs (softmax, norms and their backward): sums of K terms at the output's own scale each, relative
    # to their result; scatters: K terms of at most the output's size
    return [m * (1.0 if op in _NORMALISING else math.sqrt(k)) for m in mags]


class ErrorTrace(TorchDispatchMode):
    """Run a float64 computation and estimate, for every floating tensor it makes, how far the same computation in
    ``precision`` can be from it (see the module docstring): Monte Carlo arithmetic with each op's own bound.

    Beside the float64 run, :data:`SHADOWS` shadow runs execute every op on their own copies of its inputs and add to
    each result a noise drawn uniformly within that op's own rounding bound (:meth:`_own`). A shadow carries its
    errors through the rest of the computation as the low-precision run carries its own: correlated errors cancel
    where they cancel there (a normalisation removes a common shift, an iteration contracts), a discrete choice
    flips where a rounding can flip it. ``bound(t)`` is :data:`SAFETY` times the largest deviation of a shadow of
    ``t`` from ``t``.

    Use::

        with ErrorTrace(Precision.of(torch.float32)) as trace:
            y = module64(x64); y.backward(g64)
        trace.bound(y), trace.bound(x64.grad)   # elementwise, shaped as y and as the gradient

    Leaves (inputs, parameters) start exact: the tests build the float64 truth from the very values the low-precision
    run uses. An op it has no rule for makes :meth:`bound` raise, naming it (never a silent zero).
    """

    #: Independent shadow runs.
    SHADOWS = 3
    #: Multiple of the largest shadow deviation that is the bound. Each shadow's noise is drawn uniformly within the
    #: op's worst-case bound (λ-scaled, above what a rounding reaches), so a shadow already over-states the error;
    #: the factor covers a shadow whose draws happened to cancel where the real errors do not.
    SAFETY = 2.0

    def __init__(self, precision: Precision, *, seed: int = 0) -> None:
        super().__init__()
        self.precision = precision
        self.shadows: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.unknown: set[str] = set()
        self._gen = torch.Generator().manual_seed(seed)

    def bound(self, t: Tensor) -> Tensor:
        """The error estimate of ``t``, elementwise (zeros for a tensor the trace did not make: a leaf)."""
        if self.unknown:
            raise KeyError(f"ErrorTrace has no rule for {sorted(self.unknown)}: add one in tests/tolerance.py")
        shadows = self.shadows.get(t)
        v = _vals(t).detach()
        if shadows is None:
            return torch.zeros(v.shape, dtype=torch.float64, device=v.device)
        devs = [torch.where(_vals(s) == v, 0.0, (_vals(s) - v).abs()).to(torch.float64) for s in shadows]
        return self.SAFETY * torch.stack(devs).amax(0).nan_to_num(nan=math.inf)

    def _noise(self, t: Tensor, scale: Tensor | float) -> Tensor:
        """Uniform noise in ±``scale`` shaped like ``t``'s values (complex: within a disc of that radius)."""
        v = _vals(t)

        def draw() -> Tensor:
            return torch.rand(v.shape, generator=self._gen, dtype=torch.float64).mul_(2).sub_(1)

        u = torch.complex(draw(), draw()) / math.sqrt(2) if v.is_complex() else draw()
        return (u.to(v.device) * torch.as_tensor(scale, dtype=torch.float64, device=v.device)).to(v.dtype)

    def _own(self, func: Any, args: Any, kwargs: Any, outs: list[Tensor | None]) -> list[Tensor | float]:
        """The op's own rounding error bound per output (elementwise tensors, or floats for every element)."""
        p, op = self.precision, func.overloadpacket
        mags = [0.0 if t is None else _finite_abs(t) for t in outs]
        if op in _EXACT or func.is_view or str(op) in EXACT_OPS:
            return [0.0] * len(outs)
        if op in (aten.scatter_reduce, aten.scatter_reduce_) and args[3] in ("amax", "amin"):
            return [0.0] * len(outs)  # a selection
        k = _reduction_length(func, args, outs)
        if k is not None:
            rms = _term_rms(func, args, kwargs, outs, k)
            low = p.low_inputs and op in _PRODUCTS  # autocast: both operands rounded to storage before the product
            return [_no_fills(torch.as_tensor(reduction_bound(p.accumulate, k, m, r) + unit_roundoff(p.storage) * m
                                              + (2 * unit_roundoff(p.storage) * math.sqrt(k) * r if low else 0.0),
                                              dtype=torch.float64)) for m, r in zip(mags, rms, strict=True)]
        if torch.Tag.pointwise in func.tags or op in _ELEMENTWISE_BACKWARD:
            return [ELEMENTWISE_ROUNDINGS * unit_roundoff(p.storage) * m for m in mags]
        self.unknown.add(str(op))
        return [0.0] * len(outs)

    def _shadow_args(self, i: int, args: Any, before: Any, mutable: bool) -> Any:
        """Shadow ``i`` of every tensor argument (mutated in place where the op mutates, as the float64 run's are), or,
        where a tensor has none, the tensor as the op found it (``before``: a copy where the op mutates)."""
        def pick(a: Any, b: Any) -> Any:
            if not isinstance(a, Tensor):
                return a
            shadows = self.shadows.get(a)
            if shadows is not None:
                return shadows[i]
            return b.clone() if mutable and isinstance(b, Tensor) and b.layout == torch.strided else a

        flat, spec = tree_flatten(args)
        return spec.unflatten([pick(a, b) for a, b in zip(flat, tree_flatten(before)[0], strict=True)])

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        op = func.overloadpacket
        if op in _RANDOM or op in _UNINITIALISED:  # drawn once (the shadows see the same draws), or garbage to be
            out = func(*args, **kwargs)  # overwritten: exact either way, and a drawn-into tensor is exact again
            if func._schema.is_mutable and isinstance(args[0], Tensor) and args[0] in self.shadows:
                del self.shadows[args[0]]
            return out
        mutable = func._schema.is_mutable
        traced = any(isinstance(a, Tensor) and a in self.shadows for a in tree_flatten((args, kwargs))[0])
        before = (args, kwargs)
        if mutable:  # the inputs as the op found them, before it changed them
            before = tree_map(lambda a: a.detach().clone() if isinstance(a, Tensor) and a.layout == torch.strided
                              else a, (args, kwargs))
        out = func(*args, **kwargs)
        leaves = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
        outs = _floats(leaves)
        if not any(t is not None for t in outs):
            return out
        if op is aten.native_dropout:  # x·mask/(1−p): each shadow keeps the same elements as the float64 run
            noise = ELEMENTWISE_ROUNDINGS * unit_roundoff(self.precision.storage) * _finite_abs(leaves[0])
            scale = 1.0 / (1.0 - args[1]) if args[1] < 1 else 0.0
            shadow_x = self.shadows.get(args[0], [args[0]] * self.SHADOWS)
            self.shadows[leaves[0]] = [s * leaves[1] * scale + self._noise(leaves[0], noise) for s in shadow_x]
            return out
        own = self._own(func, *before, outs)
        if not traced and all(isinstance(o, float) and o == 0.0 for o in own):
            return out  # an exact op on exact inputs: its outputs are exact
        shadows: list[list[Tensor]] = [[] for _ in leaves]
        for i in range(self.SHADOWS):
            s_args, s_kwargs = self._shadow_args(i, (args, kwargs), before, mutable)
            s_leaves = [t for t in tree_flatten(func(*s_args, **s_kwargs))[0] if isinstance(t, Tensor)]
            for j, (t, st) in enumerate(zip(outs, s_leaves, strict=True)):
                if t is not None and not (isinstance(own[j], float) and own[j] == 0.0):
                    if mutable:  # in place, so that views of the shadow see it as views of the float64 tensor do
                        _vals(st).add_(self._noise(st, own[j]))
                    else:
                        st = _with_values(st, _vals(st) + self._noise(st, own[j]))
                shadows[j].append(st)
        for t, sh in zip(outs, shadows, strict=True):
            if t is not None:
                self.shadows[t] = sh
        return out


def max_error(got: Tensor, truth: Tensor) -> float:
    """max|got − truth|, compared in float64."""
    return float((got.detach().double() - truth.detach().double()).abs().max()) if truth.numel() else 0.0


def assert_within(got: Tensor, truth: Tensor, bound: Tensor | float, what: str = "") -> None:
    """max|got − truth| <= max(bound) over the tensor, compared in float64.

    Tensorwise rather than element by element: the elementwise bound carried by :class:`ErrorTrace` is estimated
    from a few sign patterns, and at one element of thousands the patterns can cancel by chance; its largest value,
    set by the tensor's large elements, cannot. Small elements are held to the exact float64 tests.
    """
    err = max_error(got, truth)
    limit = float(torch.as_tensor(bound).max()) if torch.as_tensor(bound).numel() else 0.0
    ratio = err / max(limit, 1e-300)
    assert err <= limit, f"{what}: error {err:.3g} exceeds its derived bound {limit:.3g} ({ratio:.3g}x)"


def assert_within_norm(got: Tensor, truth: Tensor, bound: Tensor, what: str = "") -> None:
    """‖got − truth‖ <= ‖bound‖ (Frobenius, in float64): for a result whose discrete choices (hash buckets, top-k)
    can flip with rounding, where the largest error sits at whichever element flipped, the norm of the error stays
    comparable to the shadows', which flip alike; ‖bound‖ is at least :attr:`ErrorTrace.SAFETY` times every shadow's
    own deviation norm."""
    err = float((got.detach().double() - truth.detach().double()).norm())
    limit = float(bound.double().norm())
    ratio = err / max(limit, 1e-300)
    assert err <= limit, f"{what}: error norm {err:.3g} exceeds its derived bound {limit:.3g} ({ratio:.3g}x)"


def assert_all_within(results: dict[str, Tensor | None], truths: dict[str, Tensor | None],
                      bounds: dict[str, Tensor | float]) -> None:
    """:func:`assert_within` for every named tensor (None on both sides = not produced, e.g. an unused gradient)."""
    assert results.keys() == truths.keys(), (results.keys(), truths.keys())
    for name, truth in truths.items():
        assert (results[name] is None) == (truth is None), name
        if truth is not None:
            assert_within(results[name], truth, bounds[name], name)  # type: ignore[arg-type]


def grads_of(module: torch.nn.Module, x: Tensor) -> dict[str, Tensor | None]:
    """The input gradient and every named parameter's gradient after a backward."""
    return {"x": x.grad, **{n: p.grad for n, p in module.named_parameters()}}
