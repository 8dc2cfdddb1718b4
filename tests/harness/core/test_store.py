"""Tests of harness.core.store: round trip at full precision, status check, --fresh semantics, WAL, reopening."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from harness.core.cell import Cell
from harness.core.errors import UserError
from harness.core.store import STATUSES, Store
from harness.run.suitefile import load_suite
from tests.conftest import CliResult


@pytest.fixture
def cells(tiny_suite: Path) -> list[Cell]:
    return load_suite(tiny_suite).expand("cpu")


METRICS = {
    "time_ms_median": 0.1 + 0.2,  # 0.30000000000000004: any rounding would show
    "time_ms_iqr": 1 / 3,
    "peak_mem_bytes": 2**53 - 1,
    "gflops": 1e-12 * math.pi,
    "backend": "math",
}


def test_put_finished_keys_dataframe_round_trip(tmp_path: Path, cells: list[Cell]) -> None:
    with Store(tmp_path / "sub" / "results.db") as store:  # parent folders are created
        assert store.finished_keys() == set()
        assert store.dataframe().empty
        run = store.start_run("tiny", "quick", {"torch_version": "x"}, ["attnbench", "run"])
        store.put(run, cells[0], "ok", "", METRICS)
        store.put(run, cells[1], "oom", "OutOfMemoryError: CUDA out of memory")
        assert store.finished_keys() == {cells[0].key, cells[1].key}

        df = store.dataframe().set_index("key")
        assert len(df) == 2
        ok = df.loc[cells[0].key]
        for name, value in METRICS.items():
            assert ok[name] == value  # exact, not approx
        for axis, value in cells[0].params.items():
            assert ok[axis] == value
        assert (ok["status"], ok["message"], ok["suite"], ok["device"]) == ("ok", "", "tiny", "cpu")
        oom = df.loc[cells[1].key]
        assert oom["status"] == "oom" and "CUDA out of memory" in oom["message"]
        assert math.isnan(oom["time_ms_median"])

        only = store.dataframe([cells[1].key])
        assert list(only["key"]) == [cells[1].key]
        assert store.dataframe([]).empty
        assert store.latest_env() == {"torch_version": "x"}


def test_device_index_is_dropped_in_the_dataframe(tmp_path: Path, tiny_suite: Path) -> None:
    cell = load_suite(tiny_suite).expand("cuda:1")[0]
    with Store(tmp_path / "results.db") as store:
        store.put(store.start_run("tiny", "quick", {}, []), cell, "unsupported", "no GPU")
        assert store.dataframe()["device"].tolist() == ["cuda"]


@pytest.mark.parametrize("status", ["OK", "failed", "", "skipped"])
def test_status_outside_the_set_raises_and_writes_nothing(tmp_path: Path, cells: list[Cell],
                                                          status: str) -> None:
    assert status not in STATUSES
    with Store(tmp_path / "results.db") as store:
        run = store.start_run("tiny", "quick", {}, [])
        with pytest.raises(ValueError, match="status"):
            store.put(run, cells[0], status)
        assert store.finished_keys() == set()
        # the table itself refuses it too, should a caller bypass put()
        with pytest.raises(sqlite3.IntegrityError):
            store.db.execute(
                "INSERT INTO cells (key, run_id, suite, cell_json, status, finished_utc)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                ("k", run, "tiny", "{}", status, "now"),
            )


def test_every_status_is_accepted(tmp_path: Path, cells: list[Cell]) -> None:
    with Store(tmp_path / "results.db") as store:
        run = store.start_run("tiny", "quick", {}, [])
        for cell, status in zip(cells, STATUSES, strict=False):
            store.put(run, cell, status, status)
        assert sorted(store.dataframe()["status"]) == sorted(STATUSES)


def test_fresh_put_adds_a_row_and_the_latest_is_reported(tmp_path: Path, cells: list[Cell]) -> None:
    """--fresh measures again in a new run: the old row stays (history), the reports read the latest."""
    with Store(tmp_path / "results.db") as store:
        first = store.start_run("tiny", "quick", {"git_commit": "aaa"}, [])
        store.put(first, cells[0], "timeout", "too slow")
        second = store.start_run("tiny", "quick", {"git_commit": "bbb"}, ["--fresh"])
        assert second > first
        store.put(second, cells[0], "ok", "", {"time_ms_median": 1.5})
        rows = store.db.execute("SELECT run_id, status FROM cells WHERE key = ? ORDER BY run_id",
                                (cells[0].key,)).fetchall()
        assert rows == [(first, "timeout"), (second, "ok")]
        df = store.dataframe()
        assert len(df) == 1
        assert (df.loc[0, "status"], df.loc[0, "time_ms_median"], df.loc[0, "message"]) == ("ok", 1.5, "")
        assert (df.loc[0, "run_id"], df.loc[0, "commit"]) == (second, "bbb")
        old = store.dataframe(run_id=first)
        assert (old.loc[0, "status"], old.loc[0, "commit"]) == ("timeout", "aaa")
        store.finish_run(second, {"statuses": {"ok": 1}})
        runs = store.runs()
        assert list(runs["run_id"]) == [first, second] and runs.iloc[1]["summary"] == {"statuses": {"ok": 1}}
        assert pd.isna(runs.iloc[0]["finished_utc"]) and runs.iloc[1]["finished_utc"]


def test_samples_are_stored_with_their_timing_group(tmp_path: Path, cells: list[Cell]) -> None:
    with Store(tmp_path / "results.db") as store:
        run = store.start_run("tiny", "quick", {}, [])
        store.put(run, cells[0], "ok", "", {"time_ms_median": 2.0, "timing_group": "g1"}, samples=[1.0, 2.0, 3.0])
        store.put(run, cells[1], "ok", "", {"time_ms_median": 2.0, "timing_group": "g1"}, samples=[2.0, 2.5])
        store.put(run, cells[2], "error", "boom")
        assert store.samples(timing_groups=["g1"]) == {(cells[0].key, "g1"): [1.0, 2.0, 3.0],
                                                       (cells[1].key, "g1"): [2.0, 2.5]}
        assert store.samples([cells[2].key]) == {}


# The schema of stores written before the run history was kept (version 1); the oldest ones have no curves table.
V1_RUNS_AND_CELLS = """
    CREATE TABLE runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT, suite TEXT NOT NULL, profile TEXT NOT NULL,
        started_utc TEXT NOT NULL, argv TEXT NOT NULL, env_json TEXT NOT NULL);
    CREATE TABLE cells (key TEXT PRIMARY KEY, run_id INTEGER NOT NULL, suite TEXT NOT NULL,
        cell_json TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
        metrics_json TEXT NOT NULL DEFAULT '{}', finished_utc TEXT NOT NULL);
"""
V1_CURVES = """
    CREATE TABLE curves (key TEXT NOT NULL, step INTEGER NOT NULL, train_loss REAL, train_acc REAL,
        dev_loss REAL, dev_acc REAL, PRIMARY KEY (key, step));
"""


def test_a_version_1_store_is_migrated_with_its_rows(tmp_path: Path, cells: list[Cell]) -> None:
    path = tmp_path / "results.db"
    with sqlite3.connect(path) as raw:  # the schema of stores written before history was kept
        raw.executescript(V1_RUNS_AND_CELLS + V1_CURVES)
        raw.execute("INSERT INTO runs VALUES (1, 'tiny', 'quick', 't', '[]', '{\"git_commit\": \"old\"}')")
        raw.execute("INSERT INTO cells VALUES (?, 1, 'tiny', ?, 'ok', '', '{\"time_ms_median\": 3.0}', 't')",
                    (cells[0].key, json.dumps(cells[0].to_json())))
        raw.execute("INSERT INTO curves VALUES (?, 10, 0.5, 0.6, 0.7, 0.8)", (cells[0].key,))
    with Store(path) as store:
        df = store.dataframe()
        assert (df.loc[0, "key"], df.loc[0, "time_ms_median"], df.loc[0, "run_id"], df.loc[0, "commit"]) == (
            cells[0].key, 3.0, 1, "old")
        assert store.curves()[["step", "dev_acc"]].values.tolist() == [[10, 0.8]]
        run = store.start_run("tiny", "quick", {}, ["--fresh"])
        store.put(run, cells[0], "ok", "", {"time_ms_median": 4.0})
        assert store.dataframe().loc[0, "time_ms_median"] == 4.0
    with Store(path) as store:  # opening again changes nothing
        assert len(store.db.execute("SELECT * FROM cells").fetchall()) == 2


def test_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    with Store(path) as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # WAL is a property of the file: a plain connection sees it too
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_file_survives_a_second_store(tmp_path: Path, cells: list[Cell]) -> None:
    path = tmp_path / "results.db"
    with Store(path) as store:
        run1 = store.start_run("tiny", "quick", {"n": 1}, [])
        store.put(run1, cells[0], "ok", "", METRICS)
        before = store.dataframe()
    with Store(path) as again:
        assert again.finished_keys() == {cells[0].key}
        assert again.dataframe().equals(before)
        run2 = again.start_run("tiny", "quick", {"n": 2}, [])
        assert run2 == run1 + 1
        again.put(run2, cells[1], "nan", "non-finite values")
        assert again.latest_env() == {"n": 2}
    with Store(path) as third:
        assert third.finished_keys() == {cells[0].key, cells[1].key}


def test_a_second_connection_sees_each_committed_cell(tmp_path: Path, cells: list[Cell]) -> None:
    """One transaction per cell: a reader (e.g. a report while a sweep runs) sees each row once put."""
    path = tmp_path / "results.db"
    with Store(path) as writer, Store(path) as reader:
        run = writer.start_run("tiny", "quick", {}, [])
        for i, cell in enumerate(cells[:3], 1):
            writer.put(run, cell, "ok")
            assert len(reader.finished_keys()) == i


def test_an_old_store_without_curves_or_kinds_is_migrated(tmp_path: Path, cells: list[Cell]) -> None:
    """Stores written before learning curves (no curves table) and before suite kinds (no "kind" in cells)."""
    path = tmp_path / "results.db"
    old_cell = {k: v for k, v in cells[0].to_json().items() if k != "kind"}
    with sqlite3.connect(path) as raw:
        raw.executescript(V1_RUNS_AND_CELLS)
        raw.execute("INSERT INTO runs VALUES (1, 'tiny', 'quick', 't', '[]', '{}')")
        raw.execute("INSERT INTO cells VALUES (?, 1, 'tiny', ?, 'ok', '', '{}', 't')",
                    (cells[0].key, json.dumps(old_cell)))
    with Store(path) as store:
        df = store.dataframe()
        assert list(df["kind"]) == ["speed"] and store.curves().empty


def test_one_row_per_cell_whatever_the_cuda_index(tmp_path: Path, cells: list[Cell]) -> None:
    """cuda:0 and cuda:1 are one column value in the tables: the newest result stands for the cell."""
    on = [Cell.from_json({**cells[0].to_json(), "device": d}) for d in ("cuda:0", "cuda:1")]
    with Store(tmp_path / "results.db") as store:
        for i, cell in enumerate(on):
            store.put(store.start_run("tiny", "quick", {}, []), cell, "ok", "", {"time_ms_median": float(i)})
        df = store.dataframe()
    assert len(df) == 1 and (df.loc[0, "device"], df.loc[0, "time_ms_median"]) == ("cuda", 1.0)


# ---------------------------------------------------------------------------------------------------------------------
# A store that cannot be used, or belongs to another suite: one line, exit 2, nothing written; the rerun resumes.


@pytest.mark.parametrize("damage", ["random-bytes", "truncated", "directory"])
def test_a_damaged_store_is_one_line(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
                                     damage: str) -> None:
    out = tmp_path / "out"
    first = cli("run", tiny_suite, "--profile", "smoke", "--out", out, "--device", "cpu", "--only", "vanilla")
    assert first.code == 0, first.err
    db = out / load_suite(tiny_suite, "smoke").name / "smoke" / "results.db"
    for extra in db.parent.glob("results.db-*"):  # the WAL files of the finished run
        extra.unlink()
    if damage == "random-bytes":
        db.write_bytes(bytes(range(256)) * 64)
    elif damage == "truncated":
        db.write_bytes(db.read_bytes()[:1000])
    else:
        db.unlink()
        db.mkdir()
    again = cli("run", tiny_suite, "--profile", "smoke", "--out", out, "--device", "cpu")
    assert again.code == 2 and len(again.err_lines) == 1, again.err
    assert str(db) in again.err and ("move it aside" in again.err)


def test_a_store_refuses_another_suite(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                       tiny_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("run", tiny_suite, "--profile", "smoke", "--out", out, "--device", "cpu", "--only", "vanilla").code == 0
    # another suite file with the same name: its rows would mix into the first one's table
    clone = write_yaml(tiny_suite.read_text(), "clone.yaml")
    other = cli("run", clone, "--profile", "smoke", "--out", out, "--device", "cpu", "--only", "vanilla")
    assert other.code == 2 and len(other.err_lines) == 1, other.err
    assert "holds the results of" in other.err and "another --out" in other.err
    # the same file resumes as before
    assert "already done" in cli("run", tiny_suite, "--profile", "smoke", "--out", out, "--device", "cpu",
                                 "--only", "vanilla").out


def test_an_old_store_without_its_suite_is_bound_by_its_cells(tmp_path: Path, cells: list[Cell]) -> None:
    with Store(tmp_path / "results.db") as store:  # written before stores knew their suite
        run = store.start_run("tiny", "smoke", {}, [])
        store.put(run, cells[0], "ok", metrics=METRICS)
    with Store(tmp_path / "results.db", suite="tiny", kind="speed", source="tiny.yaml"):
        pass
    with pytest.raises(UserError, match="holds the results of suite 'tiny'"):
        Store(tmp_path / "results.db", suite="other", kind="speed", source="tiny.yaml")
