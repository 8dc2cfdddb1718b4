"""Every suite in suites/ runs end to end in its smoke profile on the CPU; a second run measures 0 new cells.

This is the CI check that a suite file, the registry and the whole pipeline (measure -> store -> CSV, Table 4
in Markdown and LaTeX, plots) fit together. It measures for real, on tiny shapes; it asserts no speed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import harness.run.runner
from harness.core.store import STATUSES, Store
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult
from tests.latex import ENGINE, compile_tex

SUITES = sorted((REPO_ROOT / "suites").glob("*.yaml"))

BASE_COLUMNS = ["key", "attention", "backend", "seq_len", "batch_size", "heads", "dim", "mode", "dtype",
                "device", "status", "message"]
# accuracies in percent, and named so (the store keeps fractions)
ACCURACY_COLUMNS = ["key", "attention", "task", "seed", "device", "status", "message", "test_acc_pct",
                    "best_dev_acc_pct", "steps_per_s", "best_step", "steps"]
APPROXIMATION_COLUMNS = ["key", "attention", "budget", "input", "seq_len", "device", "status", "message", "rel_fro",
                         "max_abs", "cos_mean", "cos_min", "time_ms_median"]
FORECAST_COLUMNS = ["key", "attention", "dataset", "horizon", "seed", "device", "status", "message", "test_mse",
                    "test_mae", "best_val_mse", "best_step", "steps", "steps_per_s"]
METRIC_COLUMNS = {
    "time": ["time_ms_median", "time_ms_iqr"],
    "memory": ["peak_mem_bytes"],
    "flops": ["gflops"],
}

def _params() -> list:
    return [pytest.param(path, id=path.stem) for path in SUITES]


def test_there_are_suites() -> None:
    assert {"speed.yaml", "memory.yaml"} <= {p.name for p in SUITES}


@pytest.mark.usefixtures("fast_runner", "one_thread")
@pytest.mark.parametrize("path", _params())
def test_smoke_profile_runs_and_resumes(cli: Callable[..., CliResult], tmp_path: Path, path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    suite = load_suite(path, "smoke")
    total = len(suite.expand("cpu"))
    out = tmp_path / "results"

    first = cli("run", path, "--profile", "smoke", "--out", out, "--device", "cpu")
    assert first.code == 0, first.err
    directory = out / suite.name / "smoke"
    assert f"{total} cells, 0 already done" in first.out

    # results.csv: one row per cell, the columns the suite measures, only known statuses, no errors
    csv = pd.read_csv(directory / "results.csv")
    if suite.kind.name == "accuracy":
        required = list(ACCURACY_COLUMNS)
        n_base = required.index("test_acc_pct")
    elif suite.kind.name == "approximation":
        required = list(APPROXIMATION_COLUMNS)
        n_base = required.index("rel_fro")
    elif suite.kind.name == "forecasting":
        required = list(FORECAST_COLUMNS)
        n_base = required.index("test_mse")
    else:
        required, n_base = list(BASE_COLUMNS), len(BASE_COLUMNS)
        for metric in suite.settings.metrics:
            required += METRIC_COLUMNS[metric]
        if {"time", "flops"} <= set(suite.settings.metrics):
            required.append("gflops_per_s")
    assert not set(required) - set(csv.columns), f"missing columns {sorted(set(required) - set(csv.columns))}"
    assert len(csv) == total and csv["key"].is_unique
    assert set(csv["status"]) <= set(STATUSES)
    errors = csv[csv["status"] == "error"]
    assert errors.empty, errors[["attention", "seq_len", "mode", "message"]].to_string()
    ok = csv[csv["status"] == "ok"]
    assert not ok.empty
    for column in required[n_base:]:
        assert ok[column].notna().all(), column
    assert set(csv["device"]) == {"cpu"}
    assert (directory / "env.json").is_file()

    if suite.kind.name == "accuracy":
        # The suite's tables in every format, every evaluation point, learning curves per task; no checkpoints left
        for table in suite.report_options()["tables"]:
            for suffix in (".md", ".tex", ".csv"):
                assert (directory / f"{table}{suffix}").stat().st_size > 0, f"{table}{suffix}"
        study_columns = [axis for axis in ("noise", "noise_on", "variant") if axis in suite.axes]
        if suite.settings.incoherence is not None:
            study_columns += [f"mu_{m}_r{r}_{s}" for r in suite.settings.incoherence["ranks"] for m in ("x", "smooth")
                              for s in ("mean", "std")]
        assert ok[study_columns].notna().all().all(), study_columns
        curves = pd.read_csv(directory / "curves.csv")
        assert set(curves["key"]) == set(ok["key"])
        for task in suite.axes["task"]:
            assert (directory / f"curves_{task}.png").is_file() and (directory / f"curves_{task}.pdf").is_file()
        assert not list((directory / "checkpoints").glob("*.pt"))
    elif suite.kind.name == "approximation":
        for name in ("approximation.md", "approximation.tex", "approximation.csv"):
            assert (directory / name).stat().st_size > 0, name
        assert list(directory.glob("pareto_*.png")) and list(directory.glob("pareto_*.pdf"))
    elif suite.kind.name == "forecasting":
        # Table 2 in every format, a forecast figure per dataset, the claims, no checkpoints left
        for name in ("table2.md", "table2.tex", "table2.csv", "claims.md"):
            assert (directory / name).stat().st_size > 0, name
        for dataset in suite.axes["dataset"]:
            assert all((directory / f"forecast_{dataset}.{ext}").is_file() for ext in ("png", "pdf")), dataset
        assert not list((directory / "checkpoints").glob("*.pt"))
    else:
        assert list(directory.glob("table4_*.md")) and list(directory.glob("table4_*.tex"))
    if suite.kind.name == "speed" and "time" in suite.settings.metrics:
        assert list(directory.glob("time_*.png")) and list(directory.glob("time_*.pdf"))
    if suite.kind.name == "speed" and "memory" in suite.settings.metrics:
        assert list(directory.glob("memory_*.png")) and list(directory.glob("memory_*.pdf"))
    # every table is a complete float that compiles and fits its column or page (where LaTeX is installed)
    tex = sorted(directory.glob("*.tex"))
    assert tex and all(t.read_text().startswith("% Needs \\usepackage{booktabs}") for t in tex)
    assert all("\\caption{" in t.read_text() and "\\label{tab:" in t.read_text() for t in tex)
    if ENGINE is not None:
        pdf, problems = compile_tex(tex, tmp_path / "latex")
        assert pdf is not None and not problems, problems

    # a second identical run finds everything done and measures nothing (its reports, the same as the first run's,
    # are not drawn again: the speed suite's took half a minute of the test run)
    with Store(directory / "results.db") as store:
        before = store.dataframe()
    monkeypatch.setattr(harness.run.runner, "write_suite_reports", lambda *args, **kwargs: [])
    second = cli("run", path, "--profile", "smoke", "--out", out, "--device", "cpu")
    assert second.code == 0, second.err
    assert f"{total} cells, {total} already done, ran: nothing to run" in second.out
    with Store(directory / "results.db") as store:
        after = store.dataframe()
        (runs,) = store.db.execute("SELECT COUNT(*) FROM runs").fetchone()
    assert runs == 2
    pd.testing.assert_frame_equal(before, after)  # same rows, same finish times: nothing redone
