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

#: Columns that name a cell rather than measure it: every other required column holds a value in every ok cell.
NAMING = {"key", "attention", "backend", "device", "status", "message"}


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

    # results.csv: one row per cell, the columns its kind says every ok cell has, only known statuses, no errors
    csv = pd.read_csv(directory / "results.csv")
    required = list(suite.kind.result_columns(suite))
    assert not set(required) - set(csv.columns), f"missing columns {sorted(set(required) - set(csv.columns))}"
    assert len(csv) == total and csv["key"].is_unique
    assert set(csv["status"]) <= set(STATUSES)
    errors = csv[csv["status"] == "error"]
    assert errors.empty, errors[["attention", "message"]].to_string()
    ok = csv[csv["status"] == "ok"]
    assert not ok.empty
    measured = [c for c in required if c not in NAMING and c not in suite.axes]
    for column in measured:
        assert ok[column].notna().all(), column
    assert set(csv["device"]) == {"cpu"}
    # every file its kind says a run writes; no checkpoint left; learning curves only of stored cells
    for pattern in suite.kind.outputs(suite):
        assert list(directory.glob(pattern)), f"{suite.name}: no {pattern}"
    assert not list((directory / "checkpoints").glob("*.pt"))
    if (directory / "curves.csv").is_file():
        assert set(pd.read_csv(directory / "curves.csv")["key"]) <= set(ok["key"])
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
