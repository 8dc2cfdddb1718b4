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
