"""The commands that only read (``report``, ``compare``, ``report --rank``) open a store read-only: they never change
a file that is not ours, a store of a newer schema, or a store on a read-only disk; a damaged store is one line
naming it (and, among several, the others are still reported); ``compare`` pairs cells on every axis."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.core.store import SCHEMA_VERSION, Store
from harness.run.suitefile import load_suite
from tests.conftest import CliResult, tiny_doc
from tests.harness.test_trust import _store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store_dir(write_yaml: Callable[..., Path], tmp_path: Path) -> Path:
    """A speed store with timed cells (two variants, two modes)."""
    _store(tmp_path / "good", load_suite(write_yaml(tiny_doc())).expand("cpu"), {}, 0)
    return tmp_path / "good"


def _exit_2(result: CliResult, *parts: str) -> None:
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    for part in parts:
        assert part in result.err, result.err


def test_another_applications_sqlite_file_is_refused_untouched(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    db = tmp_path / "theirs" / "results.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER, amount REAL)")
    before = _digest(db)
    for args in (("report", db.parent), ("compare", db.parent, db.parent)):
        _exit_2(cli(*args), str(db), "another application", "nothing was changed")
    assert _digest(db) == before
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["invoices"]
    with pytest.raises(Exception, match="another application"):  # nor does a run write into it
        Store(db, suite="tiny", kind="speed", source="x.yaml")
    assert _digest(db) == before


def test_an_empty_file_is_not_a_store(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    db = tmp_path / "empty" / "results.db"
    db.parent.mkdir()
    db.touch()
    _exit_2(cli("report", db.parent), str(db), "an empty file, not a results store")
    assert db.stat().st_size == 0 and sorted(p.name for p in db.parent.iterdir()) == ["results.db"]


def test_a_store_of_a_newer_schema_is_refused(cli: Callable[..., CliResult], store_dir: Path) -> None:
    db = store_dir / "results.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    before = _digest(db)
    for args in (("report", store_dir), ("compare", store_dir, store_dir)):
        _exit_2(cli(*args), str(db), f"store schema {SCHEMA_VERSION + 1}", "upgrade attnbench")
    with pytest.raises(Exception, match="newer attnbench"):  # a run does not re-mark it as ours either
        Store(db)
    assert _digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == "3"


def test_a_read_only_store_is_never_written(cli: Callable[..., CliResult], store_dir: Path) -> None:
    db = store_dir / "results.db"
    before = _digest(db)
    with Store(db, read_only=True) as store:
        assert len(store.dataframe()) == 8
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.db.execute("DELETE FROM cells")
    assert cli("report", store_dir).code == 0
    assert cli("compare", store_dir, store_dir).code == 0
    assert _digest(db) == before


def test_a_version_1_store_reads_without_being_migrated_on_disk(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    cell = {"suite": "tiny", "kind": "speed", "params": {"attention": "vanilla", "seq_len": 16}, "device": "cpu"}
    with sqlite3.connect(db) as conn:  # the version-1 layout: cells keyed by key alone, no meta table
        conn.execute("CREATE TABLE runs (run_id INTEGER PRIMARY KEY, suite TEXT, profile TEXT, started_utc TEXT, "
                     "argv TEXT, env_json TEXT)")
        conn.execute("CREATE TABLE cells (key TEXT PRIMARY KEY, run_id INTEGER, suite TEXT, cell_json TEXT, "
                     "status TEXT, message TEXT, metrics_json TEXT, finished_utc TEXT)")
        conn.execute("INSERT INTO runs VALUES (1, 'tiny', 'quick', 't', '[]', '{}')")
        conn.execute("INSERT INTO cells VALUES ('k', 1, 'tiny', ?, 'ok', '', '{\"time_ms_median\": 2.0}', 't')",
                     (json.dumps(cell),))
    before = _digest(db)
    with Store(db, read_only=True) as store:
        df = store.dataframe()
    assert df[["attention", "time_ms_median"]].values.tolist() == [["vanilla", 2.0]]
    assert _digest(db) == before


@pytest.mark.parametrize(("column", "value", "message"), [
    ("metrics_json", "{not json", "metrics_json is not valid JSON"),
    ("cell_json", "[1, 2]", "cell_json is not valid JSON"),
    ("cell_json", '{"params": 3}', "cell_json lacks its params or device"),
])
def test_a_damaged_row_is_one_line_naming_the_store(cli: Callable[..., CliResult], store_dir: Path, column: str,
                                                    value: str, message: str) -> None:
    db = store_dir / "results.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE cells SET {column} = ? WHERE rowid = 1", (value,))  # noqa: S608 (a fixed column)
    for args in (("report", store_dir), ("compare", store_dir, store_dir)):
        _exit_2(cli(*args), str(db), message, "the store is damaged")


def test_a_damaged_run_environment_is_one_line(cli: Callable[..., CliResult], store_dir: Path) -> None:
    with sqlite3.connect(store_dir / "results.db") as conn:
        conn.execute("UPDATE runs SET env_json = '{'")
    _exit_2(cli("report", store_dir), "env_json is not valid JSON")


def test_cells_of_an_unknown_kind_are_one_line(cli: Callable[..., CliResult], store_dir: Path) -> None:
    with sqlite3.connect(store_dir / "results.db") as conn:
        rows = conn.execute("SELECT rowid, cell_json FROM cells").fetchall()
        for rowid, text in rows:
            conn.execute("UPDATE cells SET cell_json = ? WHERE rowid = ?",
                         (json.dumps({**json.loads(text), "kind": "nosuch"}), rowid))
    _exit_2(cli("report", store_dir), "suite kind 'nosuch'", "report them with the attnbench that wrote them")


def test_report_on_a_parent_reports_every_good_store_and_names_the_damaged_one(
        cli: Callable[..., CliResult], store_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    result = cli("report", tmp_path)
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert "1 of 2 stores not reported" in result.err and str(bad / "results.db") in result.err
    assert f"results: {store_dir} — wrote" in result.out and (store_dir / "results.csv").is_file()


def test_report_files_follow_the_umask(cli: Callable[..., CliResult], store_dir: Path) -> None:
    import os

    old = os.umask(0o022)
    os.umask(old)
    assert cli("report", store_dir).code == 0
    assert (store_dir / "results.csv").stat().st_mode & 0o777 == 0o666 & ~old


# ---------------------------------------------------------------------------------------------------------------------
# compare pairs cells on every axis


def test_compare_never_pairs_an_eager_cell_with_a_compiled_one(cli: Callable[..., CliResult],
                                                               write_yaml: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    cells = load_suite(write_yaml(tiny_doc(axes={"compile": ["eager", "inductor"]}))).expand("cpu")
    # in B the compiled cells run 2x slower than A's compiled ones (their eager cells are unchanged); in both, a
    # compiled cell is 3x faster than its eager one, so pairing eager with compiled would show 3x changes
    fast = {c.key: (1.0 if c.params["compile"] == "eager" else 1 / 3) for c in cells}
    a, b = tmp_path / "a", tmp_path / "b"
    for directory, seed, slow in ((a, 0, 1.0), (b, 1, 2.0)):
        for cell in cells:
            scale = fast[cell.key] * (slow if cell.params["compile"] == "inductor" else 1.0)
            _store(directory, [cell], {cell.params["attention"]: scale}, seed)
    rows = json.loads(cli("compare", a, b, "--absolute", "--format", "json").out)["cells"]
    assert len(rows) == len(cells)  # one row per cell, not one per pair of modes
    for row in rows:
        want = 2.0 if row["compile"] == "inductor" else 1.0
        assert abs(row["ratio"] - want) < 0.1, row


def test_compare_of_two_suites_is_exit_2(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                         store_dir: Path, tmp_path: Path) -> None:
    other = load_suite(write_yaml(tiny_doc(name="other"), "other.yaml")).expand("cpu")
    _store(tmp_path / "other", other, {}, 1)
    _exit_2(cli("compare", store_dir, tmp_path / "other"), "holds suite tiny", "suite other",
            "compare two results directories of one suite")


def test_compare_reads_a_directory_whose_name_holds_an_at(cli: Callable[..., CliResult], store_dir: Path,
                                                          tmp_path: Path) -> None:
    odd = tmp_path / "run@home"
    store_dir.rename(odd)
    assert cli("compare", odd, odd).code == 0
    assert cli("compare", f"{odd}@1", f"{odd}@1").code == 0  # and a run of it
