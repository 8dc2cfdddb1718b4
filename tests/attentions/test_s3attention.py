"""S3Attention against references written from the paper's equations (journal §III, Algorithms 1-2)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import attentions
from attentions.s3attention import S3Attention
from tests.attentions.reference import INDUCTOR_CPU_SKIP
from tests.tolerance import ErrorTrace, Precision, assert_all_within

CFG = {"dim": 32, "heads": 2, "max_seq_len": 48, "r": 4, "s1": 6, "s2": 5, "dropout": 0.0}


def _build(**overrides: object) -> S3Attention:
    torch.manual_seed(0)
    module = attentions.build("s3attention", **{**CFG, **overrides}).double().eval()
    return module  # type: ignore[return-value]


def _full_qkv(module: S3Attention, hs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Q, K, V of the whole smoothed sequence, [B, H, N, dh] each (what Algorithm 1 receives)."""
    b, n, d = hs.shape
    h = module.cfg.heads
    q, k, v = (hs @ module.qkv.weight.T + module.qkv.bias).chunk(3, dim=-1)
    return tuple(t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))  # [B, H, N, dh]


def _merge(t: torch.Tensor) -> torch.Tensor:
    b, h, n, dh = t.shape
    return t.transpose(1, 2).reshape(b, n, h * dh)  # [B, N, D]


def _row_reference(module: S3Attention, q, k, v) -> torch.Tensor:
    idx = module.index_set_left
    k1, v1 = k[:, :, idx], v[:, :, idx]
    attn = torch.softmax(q @ k1.transpose(-1, -2) / math.sqrt(module.cfg.head_dim), dim=-1)
    return module.ln_row(_merge(attn @ v1))


def _col_reference(module: S3Attention, q, k, v) -> torch.Tensor:
    idx = module.index_set_right
    k2, v2 = k[..., idx], v[..., idx]  # [B, H, N, s2]
    attn_r = torch.softmax(q.transpose(-1, -2) @ k2 / math.sqrt(module.cfg.max_seq_len), dim=-1).transpose(-1, -2)
    return module.ln_col(_merge(v2 @ attn_r))


@pytest.mark.parametrize(("row", "col"), [(True, False), (False, True), (True, True)])
def test_skeleton_attention_matches_algorithm_1(row: bool, col: bool) -> None:
    module = _build(row_attention=row, col_attention=col)
    x = torch.randn(2, 48, 32, dtype=torch.float64)
    hs = module.smoother(x, None)
    q, k, v = _full_qkv(module, hs)
    terms = ([_row_reference(module, q, k, v)] if row else []) + ([_col_reference(module, q, k, v)] if col else [])
    expected = module.out(sum(terms) / len(terms))
    torch.testing.assert_close(module(x), expected)


def test_fourier_convolution_equals_direct_circular_convolution() -> None:
    """irFFT(rFFT(X S) · L) = circular convolution of each segment mean with the kernel irFFT(L) (eq. 2-3)."""
    module = _build()
    n, d, r = 48, 32, 4
    x = torch.randn(2, n, d, dtype=torch.float64)
    w = torch.view_as_complex(module.smoother.weights_fft)  # [n/2+1, d]
    kernel = torch.fft.irfft(w, n=n, dim=0)  # [n, d] time-domain kernel L0
    seg = x.view(2, n, r, d // r).mean(-1).repeat_interleave(d // r, dim=-1)  # [2, n, d] = X S
    direct = torch.zeros_like(seg)
    for tau in range(n):  # m[t] = sum_tau L0[tau] * (XS)[(t - tau) mod n]
        direct += kernel[tau] * torch.roll(seg, shifts=tau, dims=1)
    torch.testing.assert_close(module.smoother.fourier(x), direct)


def test_smoother_stem_matches_algorithm_2() -> None:
    module = _build()
    sm = module.smoother
    x = torch.randn(2, 48, 32, dtype=torch.float64)
    m = sm.fourier(x)
    h = torch.nn.functional.conv1d(torch.cat((m, x), -1).transpose(1, 2), sm.conv.weight, sm.conv.bias, padding=1)
    h = sm.bn(h.transpose(1, 2))  # BatchNorm1d(seq_len): positions are channels
    torch.testing.assert_close(sm(x, None), torch.relu(h))
    assert sm.conv.kernel_size == (3,) and sm.bn.num_features == 48


def _param_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    ("switch", "removed"),
    [
        ("fourier_conv", lambda m: m.smoother.weights_fft.numel() + m.smoother.conv.weight[:, :32].numel()),
        ("conv_stem", lambda m: _param_count(m.smoother.conv) + _param_count(m.smoother.bn)),
        ("row_attention", lambda m: _param_count(m.ln_row)),
        ("col_attention", lambda m: _param_count(m.ln_col)),
    ],
)
def test_each_ablation_switch_removes_only_its_component(switch: str, removed) -> None:
    full, ablated = _build(), _build(**{switch: False})
    assert _param_count(full) - _param_count(ablated) == removed(full)
    x = torch.randn(2, 48, 32, dtype=torch.float64)
    assert not torch.allclose(full(x), ablated(x))


def test_ablations_bypass_the_named_component() -> None:
    x = torch.randn(2, 48, 32, dtype=torch.float64)
    no_stem = _build(conv_stem=False)
    torch.testing.assert_close(no_stem.smoother(x, None), no_stem.smoother.fourier(x))
    neither = _build(conv_stem=False, fourier_conv=False)
    torch.testing.assert_close(neither.smoother(x, None), x)


def test_released_preset_is_the_released_smoother() -> None:
    torch.manual_seed(0)
    m = attentions.build("s3attention_released", dim=32, heads=2, max_seq_len=48)
    assert m.smoother.conv.kernel_size == (1,)
    assert isinstance(m.smoother.act, torch.nn.ELU)
    assert m.cfg.segments == 32  # no segment average: every hidden column is transformed


def test_sample_indices_are_buffers_fixed_by_the_seed() -> None:
    a, b = _build(), _build()
    assert torch.equal(a.index_set_left, b.index_set_left) and torch.equal(a.index_set_right, b.index_set_right)
    assert a.index_set_left.numel() == 6 and a.index_set_right.numel() == 5
    assert len(set(a.index_set_left.tolist())) == 6 and int(a.index_set_left.max()) < 48
    assert {"index_set_left", "index_set_right"} <= set(a.state_dict())
    c = attentions.build("s3attention", dim=32, heads=2, max_seq_len=48, s1=100, s2=100)
    assert c.index_set_left.numel() == 48 and c.index_set_right.numel() == 16  # more than exist -> all


@pytest.mark.parametrize("cpu_kernels", [True, False], ids=["cpu-layout", "gpu-layout"])
def test_padded_sampled_tokens_are_masked_out_of_row_attention(cpu_kernels: bool) -> None:
    module = _build(col_attention=False)
    module.cpu_kernels = cpu_kernels
    x = torch.randn(1, 48, 32, dtype=torch.float64)
    real = int(module.index_set_left.max())  # the last sampled token becomes padding
    mask = torch.ones(1, 48, dtype=torch.bool)
    mask[0, real:] = False
    x_masked = x.masked_fill(~mask[..., None], 0.0)
    hs = module.smoother(x_masked, mask)
    q, k, v = _full_qkv(module, hs)
    keep = mask[0, module.index_set_left]
    idx = module.index_set_left[keep]
    attn = torch.softmax(q @ k[:, :, idx].transpose(-1, -2) / math.sqrt(16), dim=-1)
    expected = module.out(module.ln_row(_merge(attn @ v[:, :, idx])))
    torch.testing.assert_close(module(x, mask)[:, :real], expected[:, :real])


@pytest.mark.parametrize("cpu_kernels", [True, False], ids=["cpu-layout", "gpu-layout"])
def test_a_row_whose_sampled_tokens_are_all_padding_averages_their_values(cpu_kernels: bool) -> None:
    """The documented choice: with every sampled token masked the row term is the plain mean of V₁ (finite, no NaN),
    in the fused SDPA call of the GPU layout as in the CPU layout's explicit softmax."""
    module = _build(col_attention=False)
    module.cpu_kernels = cpu_kernels
    x = torch.randn(1, 48, 32, dtype=torch.float64)
    first = int(module.index_set_left.min())
    mask = torch.ones(1, 48, dtype=torch.bool)
    mask[0, first:] = False  # every sampled token is padding
    hs = module.smoother(x.masked_fill(~mask[..., None], 0.0), mask)
    _, _, v = _full_qkv(module, hs)
    mean_v = v[:, :, module.index_set_left].mean(dim=2, keepdim=True).expand(-1, -1, 48, -1)  # [B, H, N, dh]
    expected = module.out(module.ln_row(_merge(mean_v)))
    got = module(x, mask)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[:, :first], expected[:, :first])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_runs_with_float32_ffts(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    m = attentions.build("s3attention", dim=32, heads=2, max_seq_len=64).to(dtype)
    y = m(torch.randn(2, 64, 32, dtype=dtype))
    assert y.dtype == dtype and torch.isfinite(y).all()


def test_fourier_convolution_runs_in_float32_under_autocast() -> None:
    """Under bf16 autocast the Fourier convolution, segment-mean GEMM included, is the float32 one exactly: autocast
    must not lower the GEMM to bf16 (on CUDA its bf16 output then reached an rFFT that has no bf16 kernel)."""
    torch.manual_seed(0)
    sm = attentions.build("s3attention", **CFG).smoother  # float32, r = 4 < dim: the GEMM runs
    x = torch.randn(2, 48, 32)
    with torch.no_grad():
        want = sm.fourier(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = sm.fourier(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# The tuned layer (issue 16) computes the function of the layer before tuning, kept in s3attention_before.py.

TUNED_CASES = {
    "paper": {},
    "released": {"segment_average": False, "conv_kernel": 1, "activation": "elu"},
    "kernel-5": {"conv_kernel": 5},
    "norm-channels": {"norm": "channels"},
    "no-fourier": {"fourier_conv": False},
    "no-stem": {"conv_stem": False},
    "row-only": {"col_attention": False},
    "col-only": {"row_attention": False},
    "all-tokens-all-columns": {"s1": 100, "s2": 100},
}


def _fwd_bwd(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
    """Output, input gradient and every parameter gradient of one forward+backward in the module's dtype, with a
    fixed cosine loss weight."""
    xi = x.clone().to(next(module.parameters()).dtype).requires_grad_(True)
    y = module(xi, mask)
    y.backward(torch.cos(torch.arange(y.numel(), dtype=y.dtype)).view_as(y))
    return {"output": y.detach(), "x": xi.grad, **{n: p.grad for n, p in module.named_parameters()}}


def _traced(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
            precision: Precision) -> tuple[dict[str, torch.Tensor | None], dict[str, torch.Tensor]]:
    """The float64 ``module``'s forward+backward and, per result, its error bound in ``precision``."""
    with ErrorTrace(precision) as trace:
        results = _fwd_bwd(module, x, mask)
    return results, {k: trace.bound(t) for k, t in results.items() if t is not None}


def _tuned_pair(case: str, train: bool, padded: bool) -> tuple[S3Attention, torch.nn.Module, torch.Tensor,
                                                                torch.Tensor | None]:
    """The tuned layer and the layer before tuning on the same weights and indices (dropout off, so neither draws),
    in ``train`` mode, and an input (padded from token 25 of row 0 when ``padded``)."""
    from tests.attentions.s3attention_before import S3AttentionBefore

    torch.manual_seed(0)
    new = attentions.build("s3attention", **{**CFG, "smoother_dropout": 0.0, **TUNED_CASES[case]})
    old = S3AttentionBefore(new.cfg)
    old.load_state_dict(new.state_dict())
    x = torch.randn(3, 40 if padded else 48, 32)
    mask = torch.ones(3, x.shape[1], dtype=torch.bool) if padded else None
    if mask is not None:
        mask[0, 25:] = False
    return new.train(train), old.train(train), x, mask  # type: ignore[return-value]


# Every case in every mode in the CPU layout; in the GPU layout, every case trained on padded input and the paper
# case in every mode (the layouts differ only in the code paths both run there).
EQUALITY_CASES = [
    pytest.param(case, train, padded, cpu, id=f"{case}-{'train' if train else 'eval'}-{'padded' if padded else 'full'}"
                 f"-{'cpu' if cpu else 'gpu'}-layout")
    for cpu in (True, False) for case in TUNED_CASES for train in (False, True) for padded in (False, True)
    if cpu or case == "paper" or (train and padded)
]


@pytest.mark.parametrize(("case", "train", "padded", "cpu_kernels"), EQUALITY_CASES)
def test_tuned_layer_equals_the_layer_before_tuning(case: str, train: bool, padded: bool, cpu_kernels: bool) -> None:
    """The same function, in both layouts (the CPU kernels, and the GPU layout run on the CPU): in float64 the two
    layers' outputs and every gradient (input and parameters) differ by no more than the sum of their own float64
    rounding bounds (tests/tolerance.py), in training mode too (BatchNorm on batch statistics)."""
    new, old, x, mask = _tuned_pair(case, train, padded)
    new.cpu_kernels = cpu_kernels
    got, got_bound = _traced(copy.deepcopy(new).double(), x, mask, Precision.of(torch.float64))
    want, want_bound = _traced(copy.deepcopy(old).double(), x, mask, Precision.of(torch.float64))
    assert_all_within(got, want, {k: got_bound[k] + want_bound[k] for k in got_bound})


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("case", ["paper", "released", "norm-channels", "col-only"])
def test_tuned_layer_in_float32_is_within_its_rounding_bound(case: str, train: bool, padded: bool) -> None:
    """The tuned layer loses no accuracy: in float32 its outputs and gradients stay within the float32 rounding bound
    traced through its own float64 computation (tests/tolerance.py), on any machine's summation order, in both
    layouts; and so does the layer before tuning, the model's check on a second implementation."""
    new, old, x, mask = _tuned_pair(case, train, padded)
    generic = copy.deepcopy(new)
    generic.cpu_kernels = False
    for module in (new, generic, old):
        truth, bounds = _traced(copy.deepcopy(module).double(), x, mask, Precision.of(torch.float32))
        assert_all_within(_fwd_bwd(module, x, mask), truth, bounds)


def test_the_float32_bound_catches_a_bfloat16_intermediate() -> None:
    """The bound above is tight enough to matter: the same layer with its smoothed input rounded to bfloat16 once (a
    precision loss a tuning could introduce) fails it; and in float64 a change of 1e-9 of the output's scale (far
    below any real bug) exceeds the float64 bound of the equality test."""
    new, _, x, mask = _tuned_pair("paper", True, True)
    truth, bounds = _traced(copy.deepcopy(new).double(), x, mask, Precision.of(torch.float32))
    _, bounds64 = _traced(copy.deepcopy(new).double(), x, mask, Precision.of(torch.float64))
    for name, bound in bounds64.items():
        assert float(bound.max()) < 1e-9 * float(truth[name].abs().max()), name  # type: ignore[union-attr]
    smooth = new.smoother.forward
    new.smoother.forward = lambda *a: smooth(*a).bfloat16().float()  # type: ignore[method-assign]
    with pytest.raises(AssertionError, match="exceeds its derived bound"):
        assert_all_within(_fwd_bwd(new, x, mask), truth, bounds)


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param(
    "inductor", marks=pytest.mark.skipif(INDUCTOR_CPU_SKIP is not None, reason=str(INDUCTOR_CPU_SKIP)))])
def test_compiled_layer_has_eager_values_and_the_opaque_stem_relu(backend: str) -> None:
    """Compiled on the CPU, the layer's output and every gradient are within the float32 rounding bound of the layer
    in float64 (tests/tolerance.py), as eager's are, and the stem's ReLU is the opaque op; eager never calls it.
    The stem convolution's backward (``_StemConv``) is the same in both.

    Why the gradients are checked: Inductor (torch 2.13) once computed a wrong Fourier-weight gradient here (error
    2.2 on a scale of 1.5) for a layout of the FFTs that eager computes exactly; the compiled path avoids it.
    """
    from torch.profiler import profile

    torch.manual_seed(0)
    eager = attentions.build("s3attention", **{**CFG, "smoother_dropout": 0.0}).train()
    truth = copy.deepcopy(eager).double()
    modules = {
        "eager": eager,
        "compiled": torch.compile(copy.deepcopy(eager), backend=backend, fullgraph=True, dynamic=False),
    }
    x = torch.randn(2, CFG["max_seq_len"], CFG["dim"])
    grad_out = torch.randn(2, CFG["max_seq_len"], CFG["dim"])
    results, ops = {}, {}
    for name, module in modules.items():
        xi = x.clone().to(next(module.parameters()).dtype).requires_grad_()
        with profile() as prof:
            y = module(xi)
            y.backward(grad_out.to(y.dtype))
        ops[name] = {event.name for event in prof.events()}
        grads = {k.removeprefix("_orig_mod."): p.grad for k, p in module.named_parameters()}
        results[name] = {"output": y.detach(), "input": xi.grad, **grads}
    assert "attnbench::s3_stem_relu" in ops["compiled"]
    assert "attnbench::s3_stem_relu" not in ops["eager"]
    # the blocked transposed copy stays one opaque op in both (Inductor's own transpose kernel was 6x slower)
    assert "attnbench::s3_transpose12" in ops["compiled"] and "attnbench::s3_transpose12" in ops["eager"]
    with ErrorTrace(Precision.of(torch.float32)) as trace:
        xi = x.double().requires_grad_()
        y = truth(xi)
        y.backward(grad_out.double())
        want = {"output": y.detach(), "input": xi.grad, **{k: p.grad for k, p in truth.named_parameters()}}
    bounds = {k: trace.bound(t) for k, t in want.items()}
    assert_all_within(results["eager"], want, bounds)
    assert_all_within(results["compiled"], want, bounds)
