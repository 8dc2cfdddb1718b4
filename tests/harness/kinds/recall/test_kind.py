"""The recall suite kind (harness.kinds.recall.kind): its cells, and bad input refused in one line before anything
is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult

SUITE = REPO_ROOT / "suites" / "recall.yaml"


def _doc(**top: Any) -> dict[str, Any]:
    doc = {"name": "rec", "kind": "recall",
           "axes": {"attention": ["vanilla", "none"], "seq_len": [16], "d_model": [16], "lr": [3e-3], "seed": [0]},
           "data": {"train_examples": 32, "test_examples": 16}, "train": {"epochs": 1, "batch_size": 16},
           "profiles": {"smoke": {}, "quick": {}, "paper": {}}}
    return {**doc, **top}


def test_the_profiles_cells() -> None:
    quick = load_suite(SUITE, "quick").expand("cpu")
    assert {c.params["seq_len"] for c in quick} == {64} and {c.params["num_kv_pairs"] for c in quick} == {4}
    assert len({c.params["attention"] for c in quick}) >= 8 and {c.params["seed"] for c in quick} == {0, 1, 2}
    paper = load_suite(SUITE, "paper").expand("cpu")
    pairs = {(c.params["seq_len"], c.params["num_kv_pairs"]) for c in paper}
    assert pairs == {(64, 4), (128, 8), (256, 16)}
    assert {c.fixed["train"]["batch_size"] for c in paper if c.params["seq_len"] == 256} == {256}
    assert {c.fixed["train"]["batch_size"] for c in paper if c.params["seq_len"] == 64} == {512}


def test_a_variant_without_a_causal_form_is_unsupported_with_its_reason(write_yaml: Callable[..., Path]) -> None:
    doc = _doc(axes={**_doc()["axes"], "attention": ["linformer"]})
    (cell,) = load_suite(write_yaml(doc), "smoke").expand("cpu")
    assert cell.skip_reason and "linformer" in cell.skip_reason and "causal" in cell.skip_reason


@pytest.mark.parametrize(("change", "says"), [
    ({"axes": {"attention": ["vanilla"], "seq_len": [16], "d_model": [16], "lr": [3e-3], "seed": [0],
               "num_kv_pairs": [5]}}, "axes.num_kv_pairs"),
    ({"data": {"vocab_size": 8, "pairs_every": 4}}, "vocabulary"),
    ({"data": {"pairs_every": 1}}, "data.pairs_every"),
    ({"axes": {"attention": ["vanilla"], "seq_len": [15], "d_model": [16], "lr": [3e-3], "seed": [0]}}, "seq_len"),
    ({"train": {"epochs": 0}}, "epochs"),
    ({"data": {"power_a": 5}}, "data.power_a"),
    ({"train": {"epochs": 2, "run_epochs": 3}}, "run_epochs"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(cli: Callable[..., CliResult],
                                                                     write_yaml: Callable[..., Path], tmp_path: Path,
                                                                     change: dict[str, Any], says: str) -> None:
    out = tmp_path / "out"
    result = cli("run", write_yaml(_doc(**change)), "--profile", "smoke", "--out", out, "--device", "cpu")
    assert result.code == 2 and len(result.err_lines) == 1 and says in result.err, result.err
    assert not out.exists() or not any(out.rglob("results.db"))


def test_too_many_pairs_from_the_command_line_is_exit_2(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                                        tmp_path: Path) -> None:
    result = cli("run", write_yaml(_doc()), "--profile", "smoke", "--out", tmp_path / "o", "--device", "cpu",
                 "--set", "num_kv_pairs=40")
    assert result.code == 2 and len(result.err_lines) == 1 and "num_kv_pairs" in result.err, result.err


def test_a_failed_state_measurement_keeps_the_trained_recall(monkeypatch: pytest.MonkeyPatch,
                                                             write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    import harness.kinds.recall.cells as cells
    from harness.core.cell import Context

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("prefill failed")

    monkeypatch.setattr(cells, "state_bytes", broken)
    (cell, _) = load_suite(write_yaml(_doc()), "smoke").expand("cpu")
    result = cells.run(cell, Context(tmp_path))
    assert result.status == "ok" and 0.0 <= result.metrics["recall"] <= 1.0
    assert result.metrics["state_bytes"] != result.metrics["state_bytes"]  # NaN
    assert "prefill failed" in result.metrics["state_note"]
