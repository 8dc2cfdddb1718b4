"""S3Attention's CPU kernels: the layouts and backward passes that make its eager layer fast on a CPU, kept apart
from the layer (``attentions.s3attention``) that picks them on the CPU. Same functions as the framework's ops they
replace; each says what it replaces and why. The profiles and timings behind each choice are in docs/results/
(the AMD EPYC and Intel Xeon pages, "From the code: S3Attention's CPU kernels").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["StemConv", "conv_tokens_major", "opaque_relu", "transpose12"]


@torch.library.custom_op("attnbench::s3_transpose12", mutates_args=())
def _transposed_copy(t: Tensor) -> Tensor:
    """[B, P, Q] -> [B, Q, P] contiguous, one 2-D copy per batch element; an op torch.compile cannot see into.

    Why per element: ATen copies a contiguous 2-D matrix into its transpose with a cache-blocked kernel, but a 3-D
    transposed copy goes element by element, several times slower. Why opaque: Inductor's own kernel for this
    transpose (torch 2.13, CPU) was slower still, a visible share of a compiled fwd+bwd step.
    """
    t = t.contiguous()
    out = t.new_empty(t.shape[0], t.shape[2], t.shape[1])
    for i in range(t.shape[0]):
        out[i].copy_(t[i].t())
    return out


@_transposed_copy.register_fake
def _(t: Tensor) -> Tensor:
    return t.new_empty(t.shape[0], t.shape[2], t.shape[1])


_transposed_copy.register_autograd(lambda ctx, grad: _transposed_copy(grad))


def transpose12(t: Tensor) -> Tensor:
    """[B, P, Q] -> [B, Q, P] contiguous: by ``_transposed_copy`` on the CPU; on CUDA by the framework's copy, which
    its copy kernel tiles and a compiler fuses into the kernel that reads it."""
    if t.device.type == "cpu":
        return _transposed_copy(t)
    return t.transpose(1, 2).contiguous()


@torch.library.custom_op("attnbench::s3_stem_relu", mutates_args=())
def opaque_relu(x: Tensor) -> Tensor:
    """ReLU that torch.compile cannot see into; S3's stem uses it when compiled for the CPU (``Smoother.activate`` in
    attentions.s3attention)."""
    return torch.relu(x)


@opaque_relu.register_fake
def _(x: Tensor) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("attnbench::s3_stem_relu_backward", mutates_args=())
def _opaque_relu_backward(grad: Tensor, out: Tensor) -> Tensor:
    """Eager ReLU's own backward: the gradient where the output is positive, read from the saved float output."""
    return torch.ops.aten.threshold_backward(grad, out, 0)


@_opaque_relu_backward.register_fake
def _(grad: Tensor, out: Tensor) -> Tensor:
    return torch.empty_like(grad)


def _opaque_relu_setup(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[Tensor], output: Tensor) -> None:
    ctx.save_for_backward(output)


def _opaque_relu_grad(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> Tensor:
    (out,) = ctx.saved_tensors
    return _opaque_relu_backward(grad, out)


opaque_relu.register_autograd(_opaque_relu_grad, setup_context=_opaque_relu_setup)


def conv_tokens_major(s: Tensor, weight: Tensor, bias: Tensor | None, transposed: bool = False) -> Tensor:
    """A stride-1 "same" Conv1d (``transposed``: its transpose, i.e. its gradient with respect to the input) on
    s [B, N, C] -> [B, N, D], weight [D, C, k] ([C, D, k] when transposed), as oneDNN's 1 x k 2-D convolution.

    [B, N, C] seen as [B, C, 1, N] is exactly the channels-last layout of a 2-D convolution with a 1 x k kernel,
    which oneDNN convolves as it lies and answers in the same layout, i.e. [B, N, D] contiguous, in backward too.
    ``conv(s.transpose(1, 2))`` instead reads a strided input and leaves a channels-first output whose transpose made
    the BatchNorm over positions that follows read a strided tensor (in a profile, convolution and BatchNorm with
    their copies took a large share of S3's eager fwd+bwd; this path's convolution is much faster). Same weights, same
    function.
    """
    k = weight.shape[-1]
    x = s.transpose(1, 2).unsqueeze(2)  # [B, C, 1, N], channels-last strides
    conv = F.conv_transpose2d if transposed else F.conv2d
    h = conv(x, weight.unsqueeze(2), bias, padding=(0, k // 2))  # [B, D, 1, N], channels-last
    return h.squeeze(2).transpose(1, 2)  # [B, N, D]


class StemConv(torch.autograd.Function):
    """``conv_tokens_major`` whose backward takes the weight gradient as k batched GEMMs, one per kernel tap.

    Why: oneDNN's backward-weights kernel for this 1 x k channels-last convolution ran far below the GEMM rate on an
    Intel Xeon, much slower than the forward's kernel for the same FLOPs; these GEMMs take about the forward's time,
    and beat that kernel at one thread and at two. Tap j's gradient is the sum over tokens of
    grad[t] ⊗ s[t + j - k//2] over the tokens t whose input t + j - k//2 lies inside the sequence (zero padding adds
    nothing). The input gradient is the transposed convolution, as the framework's backward computes it.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, s: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(s, weight)
        return conv_tokens_major(s, weight, bias)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        s_in, weight = ctx.saved_tensors
        # In the weight's dtype: under autocast the forward's convolution ran in bf16/fp16, so its gradient arrives in
        # that dtype while s and the weight are float32 (the transposed convolution refuses mixed dtypes). Without
        # autocast all three share one dtype and these casts are no-ops.
        grad = grad.to(weight.dtype).contiguous()  # [B, N, D]
        s = s_in.to(weight.dtype)  # [B, N, C]
        n, k = s.shape[1], weight.shape[-1]
        grad_s = None
        if ctx.needs_input_grad[0]:
            grad_s = conv_tokens_major(grad, weight, None, transposed=True).to(s_in.dtype)
        grad_w = grad_b = None
        if ctx.needs_input_grad[1]:
            taps = []
            for j in range(k):
                o = j - k // 2  # tap j reads token t + o for output token t
                lo, hi = max(0, -o), n - max(0, o)  # the output tokens whose input lies inside the sequence
                taps.append(torch.bmm(grad[:, lo:hi].transpose(1, 2), s[:, lo + o:hi + o]).sum(0))  # [D, C]
            grad_w = torch.stack(taps, dim=-1)  # [D, C, k]
        if ctx.needs_input_grad[2]:  # False when there is no bias
            grad_b = grad.sum((0, 1))
        return grad_s, grad_w, grad_b
