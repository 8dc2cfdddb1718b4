"""The speed suites' compile axis (harness.measure.compile): what is compiled, and that a compiled timing is one.

Each test compiles a few small graphs (seconds on the 2-core CPU); the whole-suite run is at the end.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

import attentions
import harness.kinds.speed.cells
from harness.core.cell import Context
from harness.measure.compile import (
    CompiledMismatch,
    _rel_diff,
    checked_first_call,
    compile_module,
    compile_options,
    compile_scope,
    first_call,
    no_recompiles,
)
from harness.run.suitefile import load_suite
from tests.conftest import tiny_doc


def _sdpa_ops(fn: Callable[[], object]) -> list[str]:
    """Names of the scaled-dot-product-attention ops one call of ``fn`` runs."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if "scaled_dot_product" in e.name]


def _vanilla(backend: str = "math") -> nn.Module:
    torch.manual_seed(0)
    return attentions.build("vanilla", backend=backend, dim=16, heads=2, max_seq_len=32, dropout=0.0).eval()


def test_compiled_vanilla_stays_the_explicit_softmax_and_computes_the_same() -> None:
    assert compile_options("vanilla") == {"pattern_matcher": False}
    assert compile_options("vanilla_sdpa") == {} and compile_options("s3attention") == {}
    module, x = _vanilla(), torch.randn(2, 32, 16)
    with compile_scope(True):
        compiled = compile_module(module, "vanilla")
        out, metrics = first_call(lambda: compiled(x))
        assert not _sdpa_ops(lambda: compiled(x))
    torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-5)
    assert metrics["compile_s"] > 0 and metrics["compile_graphs"] == 1 and metrics["compile_graph_breaks"] == 0


@pytest.mark.slow
def test_with_the_pattern_matcher_on_inductor_turns_vanilla_into_sdpa() -> None:
    """The converse of the test above (so its check can fail): Inductor's default passes rewrite the explicit softmax
    into SDPA, which is why vanilla is compiled with them off (about 15 s: the patterns are traced once)."""
    module, x = _vanilla(), torch.randn(2, 32, 16)
    with compile_scope(True):
        compiled = torch.compile(module, backend="inductor", dynamic=False)
        compiled(x)
        assert _sdpa_ops(lambda: compiled(x))


class _Model(nn.Module):
    """A toy layer: every instance shares one class (and so ``forward``'s code object)."""

    def __init__(self, breaks: bool = False) -> None:
        super().__init__()
        self.lin, self.breaks = nn.Linear(8, 8), breaks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.breaks:
            torch._dynamo.graph_break()
        return torch.relu(y) * 2


def test_modules_of_one_class_keep_their_own_compiled_code() -> None:
    """Dynamo keeps compiled code per code object: each cell's wrapper has its own, holding exactly its module's
    entry (a module without a graph break adds nothing to the shared class's ``forward``); timed in turns, neither
    recompiles."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    x = torch.randn(4, 8)
    models = [_Model(breaks=True), _Model(breaks=False)]
    with compile_scope(True):
        fns = [compile_module(m, name) for m, name in zip(models, ["performer", "linformer"], strict=True)]
        for f in fns:
            f(x)
        codes = [f._torchdynamo_orig_callable.__code__ for f in fns]
        assert [c.co_name for c in codes] == ["compiled_performer", "compiled_linformer"]
        assert [len(_debug_get_cache_entry_list(c)) for c in codes] == [1, 1]
        # the graph break makes Dynamo compile the breaking module's own frame; the whole-graph one adds nothing
        assert len(_debug_get_cache_entry_list(_Model.forward.__code__)) == 1
        with no_recompiles(True):
            for _ in range(2):
                for f, m in zip(fns, models, strict=True):
                    torch.testing.assert_close(f(x), m(x))


class _Spectral(nn.Module):
    """Complex FFT ops for Inductor to warn about. Along the last axis of a contiguous tensor: along another axis, CPU
    (MKL) FFTs return a transposed layout, and torch 2.11's Inductor expected a contiguous one (``assert_size_stride``
    of ``aten._fft_r2c`` failed on the H200 machine's torch 2.11.0+cu130; torch 2.13 agrees with MKL)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * 2, n=x.shape[-1], dim=-1)


def test_the_compilers_warnings_are_kept_with_the_cell() -> None:
    """Warnings raised during the first call (Inductor's, e.g. that it runs complex FFT ops as they are) are a metric,
    each distinct one once, not printed lines. Raised here by the call itself: Inductor's own complex-op warning is
    issued once per process (``functools.cache``), so whether it appears depends on what compiled before."""
    x = torch.randn(2, 16, 4)
    compiled = compile_module(_Spectral(), "fnet")

    def call() -> torch.Tensor:
        for said in ("does not support code generation for complex operators", "other", "other"):
            warnings.warn(said, UserWarning, stacklevel=1)
        return compiled(x)

    with compile_scope(True), warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        out, metrics = first_call(call)
    torch.testing.assert_close(out, x * 2)
    kept = metrics["compile_warnings"].split(" | ")
    assert kept[:2] == ["UserWarning: does not support code generation for complex operators", "UserWarning: other"]
    assert not escaped


def test_a_recompilation_while_timed_raises() -> None:
    model = _Model(breaks=False)
    x = torch.randn(4, 8)
    with compile_scope(True):
        f = compile_module(model, "linformer")
        f(x)
        model.breaks = True  # a guarded attribute changes: the next call must compile again
        with no_recompiles(True), pytest.raises(Exception, match="[Rr]ecompil"):
            f(x)


def test_a_variant_that_fails_to_compile_is_that_cells_error_and_the_group_goes_on(
        monkeypatch: pytest.MonkeyPatch, write_yaml: Callable[..., Path]) -> None:
    real = harness.measure.compile.compile_options

    def broken(attention: str) -> dict[str, object]:  # an option Inductor refuses, for s3attention only
        return {"no_such_inductor_option": 1} if attention == "s3attention" else real(attention)

    monkeypatch.setattr(harness.measure.compile, "compile_options", broken)
    doc = tiny_doc(axes={"seq_len": [16], "mode": ["fwd"], "compile": ["inductor"]})
    cells = load_suite(write_yaml(doc), "quick").expand("cpu")
    results = harness.kinds.speed.cells.measure_group(cells, Context(Path(".")))
    by_name = {c.params["attention"]: r for c, r in zip(cells, results, strict=True)}
    assert by_name["s3attention"].status == "error" and "no_such_inductor_option" in by_name["s3attention"].message
    ok = by_name["vanilla"]
    assert ok.status == "ok" and ok.metrics["time_ms_median"] > 0 and ok.metrics["compile_s"] > 0


def test_the_compile_axis_runs_end_to_end_and_reports_eager_beside_compiled(
        cli: Callable[..., object], write_yaml: Callable[..., Path], tmp_path: Path, fast_runner: None,
        one_thread: None) -> None:
    # one length: compiling S3Attention is most of this test's time, and a second length proves nothing more
    doc = tiny_doc(axes={"seq_len": [16], "mode": ["fwd+bwd"], "compile": ["eager", "inductor"]},
                   config={"dropout": 0.0}, attention_config={"s3attention*": {"smoother_dropout": 0.0}})
    # --device cpu: the tables below are the CPU's (a CUDA machine's default device is cuda)
    result = cli("run", write_yaml(doc), "--profile", "smoke", "--out", tmp_path / "out", "--device", "cpu")
    assert result.code == 0, result.err
    out = tmp_path / "out" / "tiny" / "smoke"
    df = pd.read_csv(out / "results.csv")
    failed = df[df["status"] != "ok"]
    assert failed.empty, failed[["attention", "seq_len", "compile", "status", "message"]].to_string()
    assert sorted(set(df["compile"])) == ["eager", "inductor"]
    compiled = df[df["compile"] == "inductor"]
    assert (compiled["compile_s"] > 0).all() and df.loc[df["compile"] == "eager", "compile_s"].isna().all()
    # the first call is a one-time cost of every cell: a compiled cell's is its compilation, the same call
    assert (df["first_call_ms"] > 0).all() and (compiled["first_call_ms"] == compiled["compile_s"] * 1e3).all()
    assert "torch.compile, first call (s)" in (out / "onetime_cpu_float32_fwdpbwd_inductor_b1_h2_d16.md").read_text()
    assert "First call (ms)" in (out / "onetime_cpu_float32_fwdpbwd_b1_h2_d16.md").read_text()
    # eager keeps the file names of suites without the axis; compiled groups get their own tables
    assert (out / "table4_cpu_float32_fwdpbwd_b1_h2_d16.md").exists()
    assert "torch.compile (Inductor)" in (out / "table4_cpu_float32_fwdpbwd_inductor_b1_h2_d16.md").read_text()
    cmp = pd.read_csv(out / "compile.csv")
    assert len(cmp) == 2 and (cmp["compile_speedup"] > 0).all()
    assert (cmp["compile_check"] == "matches eager").all() and (cmp["compile_rel_err"] < 1e-4).all()
    assert (out / "compile_cpu_float32_fwdpbwd_b1_h2_d16.md").exists()
    roofline = pd.read_csv(out / "roofline.csv")
    assert len(roofline) == 4 and (roofline["attainable_gflops_per_s"] <= 100.0).all()
    assert (out / "roofline_cpu_float32_fwdpbwd_b1_h2_d16.png").exists()


class _Miscompiled(nn.Module):
    """Computes x W when compiled and x W / 2 eager: a stand-in for a compiler that is fast because it is wrong."""

    def __init__(self, wrong_by: float = 2.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.lin, self.wrong_by, self.drop = nn.Linear(8, 8), wrong_by, nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(self.lin(x))
        return y if torch.compiler.is_compiling() else y / self.wrong_by


def _checked(module: nn.Module) -> tuple[torch.Tensor, dict[str, object]]:
    """``checked_first_call`` on a fwd+bwd call of ``module`` (its weights must be what it started from after)."""
    x, g = torch.randn(4, 8), torch.randn(4, 8)
    start = {k: v.clone() for k, v in module.state_dict().items()}

    def step(forward: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            module.zero_grad(set_to_none=True)
            y = forward(x)
            y.backward(g)
            return y

        return call

    with compile_scope(True):
        out = checked_first_call(step(compile_module(module, "linformer")), step(module), module, "float32")
    assert all(torch.equal(v, start[k]) for k, v in module.state_dict().items())
    return out


@pytest.mark.parametrize("wrong_by", [2.0, 1.01])
def test_a_compiled_call_that_differs_from_eager_is_an_error(wrong_by: float) -> None:
    with pytest.raises(CompiledMismatch, match="differs from eager"):
        _checked(_Miscompiled(wrong_by))


def test_a_compiled_call_that_agrees_is_timed_with_its_error() -> None:
    torch.manual_seed(0)
    _, metrics = _checked(_Miscompiled(wrong_by=1.0))
    assert metrics["compile_check"] == "matches eager" and 0 <= metrics["compile_rel_err"] < 1e-5


def test_a_forward_with_random_draws_is_not_compared() -> None:
    """Dropout draws differently compiled and eager; two eager calls already differ, so the values say nothing."""
    torch.manual_seed(0)
    _, metrics = _checked(_Miscompiled(wrong_by=2.0, dropout=0.5).train())
    assert metrics["compile_check"].startswith("not compared") and "compile_rel_err" not in metrics


def test_an_eager_call_out_of_memory_leaves_the_compiled_cell_unchecked_not_failed() -> None:
    module = _Miscompiled(wrong_by=1.0)
    x = torch.randn(4, 8)

    def eager_oom() -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")

    with compile_scope(True):
        _, metrics = checked_first_call(lambda: compile_module(module, "linformer")(x), eager_oom, module, "float32")
    assert metrics["compile_check"] == "not compared: the eager call ran out of memory"


def test_a_miscompiled_variant_is_that_cells_error_in_a_sweep(monkeypatch: pytest.MonkeyPatch,
                                                              write_yaml: Callable[..., Path]) -> None:
    from attentions.linear_transformer import LinearTransformerAttention

    real = LinearTransformerAttention.forward

    def halved_when_compiled(self: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = real(self, x, mask)
        return y * 0.5 if torch.compiler.is_compiling() else y

    monkeypatch.setattr(LinearTransformerAttention, "forward", halved_when_compiled)
    doc = tiny_doc(axes={"attention": ["vanilla", "linear_transformer"], "seq_len": [16], "mode": ["fwd+bwd"],
                         "compile": ["inductor"]}, config={"dropout": 0.0})
    cells = load_suite(write_yaml(doc), "quick").expand("cpu")
    results = harness.kinds.speed.cells.measure_group(cells, Context(Path(".")))
    by_name = {c.params["attention"]: r for c, r in zip(cells, results, strict=True)}
    bad = by_name["linear_transformer"]
    assert bad.status == "error" and "differs from eager" in bad.message and "time_ms_median" not in bad.metrics
    assert by_name["vanilla"].status == "ok" and by_name["vanilla"].metrics["compile_check"] == "matches eager"


def test_the_difference_is_relative_with_a_floor_under_each_tensors_scale() -> None:
    """A gradient that is mathematically zero differs by its rounding noise only, which the floor absorbs; a real
    error in a small tensor (5% of the largest scale) still counts in full."""
    big = torch.tensor([100.0, -50.0])
    noise_a, noise_b = torch.tensor([1e-5, -2e-5]), torch.tensor([-1e-5, 1e-5])  # "zero" gradients, two roundings
    assert _rel_diff([big, noise_a], [big, noise_b]) == pytest.approx(3e-5)  # 3e-5 / (1% of 100)
    small = torch.tensor([5.0, 1.0])
    assert _rel_diff([big, small * 1.5], [big, small]) == pytest.approx(0.5)
    assert _rel_diff([big + 1.0, small], [big, small]) == pytest.approx(0.01)
    assert _rel_diff([big], [big, small]) == float("inf")


def test_a_failed_compile_prints_no_kept_cache_line() -> None:
    """Inductor logs "on error, temporary cache dir kept at ..." when the first call fails inside its fresh cache;
    between the progress lines that is noise (the failure is the cell's status): first_call keeps it unsaid. The
    records are caught by a handler on Inductor's own logger, whatever torch's logging configuration is."""
    import logging

    import torch._inductor.utils

    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("torch._inductor.utils")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)

    def fails() -> torch.Tensor:
        raise RuntimeError("compile failed")

    try:
        with pytest.raises(RuntimeError), torch._inductor.utils.fresh_cache():
            fails()
        assert any("temporary cache dir kept" in m for m in said)  # torch says it without the filter
        said.clear()
        with pytest.raises(RuntimeError, match="compile failed"):
            first_call(fails)
        assert not any("temporary cache dir kept" in m for m in said)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
