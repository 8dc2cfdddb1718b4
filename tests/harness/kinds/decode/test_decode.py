"""The decode kind: validation (exit 2 before anything is written), unsupported cells with their reasons, the state
measured by the allocator, the step timed at a fixed context, and the reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import attentions
from harness.core.cell import Context
from harness.kinds.decode.cells import measure_group, rewind
from harness.kinds.decode.report import ONETIME_BLOCKS, RATE_BLOCKS, blocks_table, decode_table, with_bounds
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import TINY_TIMING, CliResult

DECODE: dict[str, Any] = {
    "name": "dec", "kind": "decode",
    "axes": {"attention": ["vanilla", "vanilla_sdpa", "linformer"], "context": [16, 32], "batch_size": [2],
             "heads": [2], "head_dim": [8], "dtype": ["float32"]},
    "config": {"dropout": 0.0}, "timing": dict(TINY_TIMING),
    "profiles": {"smoke": {}, "quick": {}, "paper": {}},
}


def _doc(**axes: Any) -> dict[str, Any]:
    return {**DECODE, "axes": {**DECODE["axes"], **axes}}


@pytest.mark.parametrize(("axes", "needle"), [
    ({"kv_heads": [3]}, "axes.kv_heads: 3 does not divide heads 2"),
    ({"context": [0]}, "axes.context: bad value 0"),
    ({"context": [-5]}, "axes.context: bad value -5"),
])
def test_bad_shapes_are_exit_2_before_anything_is_written(cli: Callable[..., CliResult],
                                                          write_yaml: Callable[..., Path], tmp_path: Path,
                                                          axes: dict[str, Any], needle: str) -> None:
    result = cli("run", write_yaml(_doc(**axes)), "--out", tmp_path / "out", "--device", "cpu")
    assert result.code == 2 and len(result.err_lines) == 1 and needle in result.err, result.err
    assert not (tmp_path / "out").exists()


def test_a_variant_that_does_not_decode_is_unsupported_with_its_reason(write_yaml: Callable[..., Path]) -> None:
    cells = load_suite(write_yaml(_doc(kv_heads=[1, 2])), "smoke").expand("cpu")
    linformer = [c for c in cells if c.params["attention"] == "linformer"]
    assert {c.skip_reason for c in linformer} == {
        f"unsupported by linformer: linformer has no causal form: {attentions.spec('linformer').caps.causal_note}"}
    vanilla = [c for c in cells if c.params["attention"] == "vanilla"]
    assert all(c.skip_reason is None and c.config["causal"] for c in vanilla)
    assert {c.config.get("kv_heads") for c in vanilla} == {None, 1}  # kv_heads = heads is multi-head attention


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_a_decode_run_measures_the_state_and_the_step(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    summary = run_suite(load_suite(write_yaml(_doc(kv_heads=[1, 2])), "smoke"), out=tmp_path, progress=False)
    assert summary.statuses == {"ok": 8, "unsupported": 4}
    directory = tmp_path / "dec" / "smoke"
    csv = pd.read_csv(directory / "results.csv")
    ok = csv[csv["status"] == "ok"]
    # the allocator's count of what the state holds is the sum of its tensors: a KV cache of context + 1 tokens
    assert (ok["state_bytes"] == ok["state_bytes_tensors"]).all()
    kv = ok["kv_heads"].fillna(2).astype(int)
    expected = 2 * 2 * kv * (ok["context"] + 1) * 8 * 4 + 2 * (ok["context"] + 1)  # K and V, and the real-token mask
    assert (ok["state_bytes"] == expected).all()
    assert (ok["ms_per_token"] > 0).all() and (ok["tokens_per_s"] > 0).all() and (ok["prefill_ms"] > 0).all()
    assert (ok["bandwidth_bound_ms"] > 0).all() and ok["bound_ratio"].notna().all()
    for stem in ("decode_cpu_float32_b2_h2_d8_kv1", "decode_cpu_float32_b2_h2_d8_kv2"):
        table = (directory / f"{stem}.md").read_text()
        assert "Transformer (SDPA)" in table and "faster from" in table
        assert (directory / f"{stem}.tex").is_file() and (directory / f"{stem}.png").is_file()
    assert "ms per token" in (directory / "slopes.md").read_text()
    # a step's FLOPs and bytes, counted on a step, and the rates and the first step apart from the timed steps
    assert (ok["gflops"] > 0).all() and (ok["gbytes_moved"] > 0).all() and (ok["first_call_ms"] > 0).all()
    assert (ok["tflops_per_s"] == ok["gflops"] / ok["time_ms_median"]).all()
    assert (ok["peak_against"] == "bandwidth").all() and (ok["peak_fraction"] > 0).all()
    assert "plan_ms" not in csv.columns and "warm_cache" not in csv.columns  # no plan here; no L2 flag on the CPU
    for stem in ("throughput_cpu_float32_b2_h2_d8_kv1", "onetime_cpu_float32_b2_h2_d8_kv2"):
        assert (directory / f"{stem}.md").is_file() and (directory / f"{stem}.tex").is_file()
    assert "% of copy BW" in (directory / "throughput_cpu_float32_b2_h2_d8_kv1.md").read_text()


@pytest.mark.usefixtures("one_thread")
def test_the_plan_is_built_once_for_the_prompt_before_the_prefill(write_yaml: Callable[..., Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A module with ``build_plan`` builds it once per cell, for the prompt's shape, before its prefill: plan_ms."""
    cls = type(attentions.build("vanilla"))
    log: list[object] = []
    prefill = cls.prefill
    monkeypatch.setattr(cls, "build_plan", lambda self, n, b: log.append(("plan", n, b)), raising=False)
    monkeypatch.setattr(cls, "prefill", lambda self, *a, **k: log.append("prefill") or prefill(self, *a, **k))
    cells = [c for c in load_suite(write_yaml(_doc(context=[16])), "smoke").expand("cpu")
             if c.params["attention"] == "vanilla"]
    (result,) = measure_group(cells, Context(tmp_path))
    assert result.status == "ok" and result.metrics["plan_ms"] >= 0
    assert log[0] == ("plan", 16, 2) and log.count(("plan", 16, 2)) == 1 and "prefill" in log


def test_the_rates_and_one_time_tables_of_a_group() -> None:
    """4 ms per step of 0.002 GFLOP over 0.04 GB: 0.0005 TFLOP/s, 10 GB/s, 50% of a 20 GB/s copy bandwidth; ‡ marks
    a step timed with a warm L2 (CUDA), in the decode table too."""
    row = {"attention": "vanilla", "context": 1024, "status": "ok", "run_id": 1, "time_ms_median": 4.0,
           "ms_per_token": 4.0, "state_bytes": 2**20, "prefill_ms": 1.0, "gflops": 0.002, "gbytes_moved": 0.04,
           "first_call_ms": 7.0, "warm_cache": True}
    sub = with_bounds(pd.DataFrame([row, {**row, "context": 2048, "warm_cache": False}]), {1: 20.0})
    md = blocks_table(sub, RATE_BLOCKS, baseline="vanilla", fmt="md")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if "Transformer" in line]
    assert cells == [["Transformer", "0.000500‡", "0.000500"], ["Transformer", "50.0", "50.0"],
                     ["Transformer", "10.0‡", "10.0"]]
    times = decode_table(sub, {}, baseline="vanilla", fmt="md").split("\n\n")[0].splitlines()[2]
    assert [c.strip() for c in times.strip("|").split("|")][1:3] == ["4.00‡", "4.00"]
    onetime = blocks_table(sub, ONETIME_BLOCKS, baseline="vanilla", fmt="tex")
    assert "First step (ms)" in onetime and "Plan" not in onetime and "7.00" in onetime
    assert blocks_table(sub.drop(columns="first_call_ms"), ONETIME_BLOCKS, baseline="vanilla", fmt="md") == ""


def test_every_timed_step_decodes_the_same_position() -> None:
    """The state is set back to the context before each step: its length stays, its allocation does not grow."""
    module = attentions.build("vanilla", dim=16, heads=2, max_seq_len=9, dropout=0.0, causal=True).eval()
    with torch.no_grad():
        _, state = module.prefill(torch.randn(1, 8, 16), None, capacity=9)
        for _ in range(3):
            rewind(state, 8)
            module.step(torch.randn(1, 1, 16), state)
    assert state.length == 9


@pytest.mark.usefixtures("one_thread")
def test_a_failing_step_is_the_cells_status(write_yaml: Callable[..., Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cells = [c for c in load_suite(write_yaml(_doc(context=[16])), "smoke").expand("cpu")
             if c.params["attention"] == "vanilla"]
    monkeypatch.setattr(type(attentions.build("vanilla")), "step",
                        lambda self, x, state: (torch.full_like(x, float("nan")), state))
    (result,) = measure_group(cells, Context(tmp_path))
    assert result.status == "nan" and "step" in result.message


def test_the_decode_figure_ticks_the_measured_contexts_and_shares_one_legend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log-10 context axis set 10000 beside 20000, between the contexts measured; the KV cache baseline was in
    every panel's legend. The contexts are the ticks, and the baseline is in one legend shared by the panels."""
    import harness.kinds.decode.report
    from harness.kinds.decode.report import _figure
    from tests.harness.figures import spy_axes

    names = ["vanilla", "vanilla_sdpa", "luna", "transformer_ls", "performer", "linear_transformer", "cosformer",
             "local", "longformer", "reformer", "synthesizer"]
    contexts = (1024, 4096, 16384, 32768)
    df = pd.DataFrame([{"attention": a, "context": n, "status": "ok", "ms_per_token": 0.1 * (i + 1) * n / 1024,
                        "state_bytes": 2**20 * (i + 1)} for i, a in enumerate(names) for n in contexts])
    seen = spy_axes(monkeypatch, harness.kinds.decode.report)
    _figure(df, tmp_path, "decode_g", "Decoding", "vanilla")
    axes = [ax for ax in seen[0] if ax.get_visible()]
    assert len(axes) > 1
    bottom = axes[-1]
    assert [t.get_text() for t in bottom.get_xticklabels() if t.get_text()] == ["1K", "4K", "16K", "32K"]
    for ax in axes:
        assert "Transformer" not in [t.get_text() for t in ax.get_legend().get_texts()]
        assert "vanilla" in {line.get_gid() for line in ax.get_lines()}  # the baseline drawn in every panel
    shared = [t.get_text() for legend in bottom.get_figure().legends for t in legend.get_texts()]
    assert shared == ["Transformer"]


def test_the_decode_figure_marks_where_a_variant_ran_out_of_memory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The KV cache out of memory at 32K ended its line without a word: a ✕ at the top edge and a key say why, and the
    title reads the suite's name as words."""
    import harness.kinds.decode.report
    from harness.kinds.decode.report import _figure, _title
    from tests.harness.figures import spy_axes

    group = {"device": "cpu", "dtype": "float32", "batch_size": 1, "heads": 4, "head_dim": 64}
    assert _title(group, "decode-long").startswith("Decoding — Decode long: CPU")
    names = ["vanilla", "vanilla_sdpa", "luna", "transformer_ls", "performer", "linear_transformer", "cosformer",
             "local", "longformer", "reformer", "synthesizer", "s3attention", "linformer", "fnet"]
    rows = [{"attention": a, "context": n, "status": "ok", "ms_per_token": 0.1 * n / 1024, "state_bytes": 2**20}
            for a in names for n in (1024, 4096, 16384, 32768) if (a, n) != ("vanilla", 32768)]
    rows.append({"attention": "vanilla", "context": 32768, "status": "oom"})
    seen = spy_axes(monkeypatch, harness.kinds.decode.report)
    _figure(pd.DataFrame(rows), tmp_path, "decode_g", "Decoding — Decode: CPU", "vanilla")
    for axes in seen:
        ooms = [line for ax in axes for line in ax.get_lines() if line.get_gid() == "vanilla oom"]
        assert len(ooms) == len(axes)  # the baseline, and its mark, in every panel
        assert all(list(m.get_xdata()) == [32768] and list(m.get_ydata()) == [1.0] for m in ooms)
        texts = [t.get_text() for ax in axes for legend in [ax.get_legend(), *ax.get_figure().legends] if legend
                 for t in legend.get_texts()]
        assert "OOM (top edge)" in texts
        figure = axes[0].get_figure()
        legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
        assert len(legends) > 1  # small multiples, a legend beside each panel
        for legend in legends:  # the marks stay out of the layout: they squeezed the panels and cut the legends off
            assert legend.get_window_extent().x1 <= figure.bbox.x1 + 1
