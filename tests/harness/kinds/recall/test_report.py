"""The recall reports (harness.kinds.recall.report): the learning rate chosen per cell, the Pareto front, and the
files a run writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import harness.kinds.recall.report
from harness.kinds.recall.report import pareto_front, write_recall_reports
from harness.kinds.recall.summary import summarise
from tests.harness.figures import spy_axes


def _runs() -> pd.DataFrame:
    rows = []
    for name, state in (("vanilla", 4096.0), ("performer", 512.0), ("local", 1024.0)):
        for lr, base in ((1e-3, 0.5), (1e-2, 0.8)):
            for seed in range(3):
                rows.append({"attention": name, "seq_len": 64, "num_kv_pairs": 4, "d_model": 64, "lr": lr,
                             "seed": seed, "status": "ok", "recall": base + 0.01 * seed - (name != "vanilla") * 0.3,
                             "state_bytes": state, "step_ms": 10.0, "vocab_size": 8192})
    return pd.DataFrame(rows)


def test_the_learning_rate_with_the_best_mean_is_reported_with_its_seeds() -> None:
    summary = summarise(_runs())
    row = summary[summary["attention"] == "vanilla"].iloc[0]
    assert row["lr"] == 1e-2 and row["n"] == 3 and np.isclose(row["mean"], 0.81)
    assert row["lo"] < row["mean"] < row["hi"] and row["lrs"] == 2


def test_the_pareto_front_keeps_only_undominated_points() -> None:
    points = pd.DataFrame({"state_bytes": [1, 2, 3, 4, 5], "mean": [0.1, 0.05, 0.5, 0.4, 0.9]})
    front = pareto_front(points, "state_bytes")
    assert list(front["state_bytes"]) == [1, 3, 5]
    # the property: no point outside the front has a smaller state and a higher recall than a point on it
    rest = points.drop(front.index)
    for _, f in front.iterrows():
        assert not ((rest["state_bytes"] <= f["state_bytes"]) & (rest["mean"] > f["mean"])).any()


def test_a_run_writes_its_tables_figures_and_claims(tmp_path: Path) -> None:
    env = {"device": "cpu", "device_name": "Test CPU", "torch_version": "2.13.0"}
    df = _runs().assign(key=lambda d: [f"k{i}" for i in range(len(d))], run_id=1, device="cpu", message="")
    written = write_recall_reports(df, tmp_path, env=env, suite="recall", options={"smoke": False})
    names = {p.name for p in written}
    for stem in ("recall_by_width", "recall_by_state", "recall_by_step_time"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert {"recall.md", "recall.tex", "recall.csv", "claims.md", "results.csv"} <= names
    md = (tmp_path / "recall.md").read_text()
    assert "81.0 ± " in md and "Performer" in md


def test_a_rate_that_one_seed_survived_is_not_chosen_over_one_all_did() -> None:
    runs = _runs()
    diverged = (runs["attention"] == "vanilla") & (runs["lr"] == 1e-3)
    runs.loc[diverged, "recall"] = [0.99, np.nan, np.nan]  # the better rate's other seeds diverged
    runs.loc[diverged, "status"] = ["ok", "nan", "nan"]
    runs.loc[(runs["attention"] == "vanilla") & (runs["lr"] == 1e-2), "recall"] = [0.94, 0.95, 0.96]
    row = summarise(runs).set_index("attention").loc["vanilla"]
    assert row["lr"] == 1e-2 and row["n"] == 3 and row["failed"] == 0


def test_no_ok_cell_is_an_empty_summary() -> None:
    failed = pd.DataFrame({"attention": ["vanilla"], "seq_len": [64], "num_kv_pairs": [4], "d_model": [64],
                           "lr": [1e-3], "seed": [0], "status": ["oom"]})
    assert summarise(failed).empty


def test_one_width_is_a_dot_per_variant_with_its_interval_inside_the_panel(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick profile runs one width: recall against width stood every variant's point and interval on one x,
    over each other; a t-interval of three seeds reached past 0 and 100 %, beyond the panel. One width: a row per
    variant; every interval within [0, 100]; the titles name the suite as the other kinds do."""
    runs = _runs()
    runs.loc[runs["attention"] == "local", "recall"] = [0.0, 0.5, 1.0] * 2  # a wide interval around 50 %
    df = runs.assign(key=lambda d: [f"k{i}" for i in range(len(d))], run_id=1, device="cpu", message="")
    seen = spy_axes(monkeypatch, harness.kinds.recall.report)
    write_recall_reports(df, tmp_path, env={"device": "cpu"}, suite="recall", options={"smoke": False})
    by_width = seen[0][0]
    assert [t.get_text() for t in by_width.get_yticklabels()] == ["Transformer", "Performer", "Local Attention"]
    assert by_width.get_figure().get_suptitle() == "MQAR recall — Recall, d = 64"
    for axes in seen:
        for ax in axes:
            for collection in ax.collections:  # the error bars
                for segment in collection.get_segments():
                    coords = np.asarray(segment)[:, 0 if ax is by_width else 1]
                    assert coords.min() >= -1e-9 and coords.max() <= 100 + 1e-9
