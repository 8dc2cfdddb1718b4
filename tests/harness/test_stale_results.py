"""No stale number: a stored result is reused only for the same code, data and settings; the tables never mix
settings; exports cover every stored cell; checkpoints belong to their cell; a store copied without its log still
holds its rows, and one stored before keys covered all this says so."""

from __future__ import annotations

import contextlib
import json
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

import harness.core.provenance as provenance
import harness.kinds.accuracy.cells
from harness.core.cell import Cell, Context
from harness.core.store import Store
from harness.models.checkpoints import checkpoint_path
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import CliResult, kill_in_step, patch_kind, tiny_doc
from tests.harness.kinds.accuracy.test_kind import ACC

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_cells_of_two_thread_counts_never_share_a_table(write_yaml: Callable[..., Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A whole run on one thread, then one variant on two: the tables show the newest setting only, and say what
    they left out, instead of comparing a 2-thread figure with a 1-thread one. (Memory: a timed variant would have
    its baseline timed again beside it, under its own setting.)"""
    path = write_yaml(tiny_doc(metrics=["memory"], axes={"seq_len": [16], "mode": ["fwd"]}))
    run_suite(load_suite(path), out=tmp_path, progress=False)
    with _threads(2):
        run_suite(load_suite(path), out=tmp_path, progress=False, only=["s3attention"])
    directory = tmp_path / "tiny" / "quick"
    assert "1 cell measured with 1 thread (now 2) left out of the tables" in capsys.readouterr().err
    csv = pd.read_csv(directory / "results.csv")
    assert list(csv["attention"]) == ["s3attention"]  # vanilla's 1-thread result is not beside it
    with Store(directory / "results.db") as store:
        assert len(store.db.execute("SELECT DISTINCT key FROM cells").fetchall()) == 3  # history kept


def test_a_rerun_of_part_of_a_suite_reports_every_stored_cell(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    """``--set seq_len=16`` with nothing to run rewrote results.csv and the tables with half the cells."""
    path = write_yaml(tiny_doc(metrics=["memory"]))
    run_suite(load_suite(path), out=tmp_path, progress=False)
    summary = run_suite(load_suite(path, overrides={"seq_len": [16]}), out=tmp_path, progress=False)
    assert summary.skipped_done == 4 and not summary.statuses
    assert len(pd.read_csv(tmp_path / "tiny" / "quick" / "results.csv")) == 8


def test_a_store_from_before_keys_covered_the_software_is_stale_in_one_line(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    path = write_yaml(tiny_doc(metrics=["memory"], axes={"seq_len": [16]}))
    run_suite(load_suite(path), out=tmp_path, progress=False)
    db = tmp_path / "tiny" / "quick" / "results.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:  # as an earlier attnbench wrote its cells and keys
        for key, cell_json in conn.execute("SELECT key, cell_json FROM cells").fetchall():
            cell = json.loads(cell_json)
            del cell["setting"], cell["data"]
            conn.execute("UPDATE cells SET cell_json = ?, key = ? WHERE key = ?", (json.dumps(cell), f"old{key}", key))
    report = cli("report", tmp_path / "tiny" / "quick")
    assert report.code == 0
    assert [line for line in report.err_lines if "stale" in line] == [
        f"attnbench: note: {db}: 4 cells stored by an earlier attnbench, whose keys did not cover the code a variant "
        f"imports, the contents of its data or the software it ran with: stale, shown; rerun the suite to measure them "
        f"again"]
    again = cli("run", path, "--out", tmp_path, "--device", "cpu", "--threads", "1")
    assert again.code == 0, again.err
    assert sum("stale" in line for line in again.err_lines) == 1  # said once; the tables leave them out
    assert "4 cells, 0 already done" in again.out


# ---------------------------------------------------------------------------------------------------------------------
# Training cells: data, checkpoints


def _lra(folder: Path, label: Callable[[int], int]) -> Path:
    folder.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        rows = [{"input_ids_0": [1 + (i % 9)] * 20, "label": label(i)} for i in range(24)]
        (folder / f"listops.{split}.pickle").write_bytes(pickle.dumps(rows))
    return folder


def _one_cell(write_yaml: Callable[..., Path]) -> Path:
    return write_yaml({**ACC, "axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [0]}})


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the next ``attnbench run`` starts: nothing read by an earlier run is held in memory."""
    monkeypatch.setattr(harness.kinds.accuracy.cells, "_LOADED", {})


def _results(out: Path) -> pd.DataFrame:
    with Store(out / "acc" / "smoke" / "results.db") as store:
        return store.dataframe()


def test_new_contents_of_the_same_data_files_are_trained_on_again(write_yaml: Callable[..., Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    suite, out = _one_cell(write_yaml), tmp_path / "out"
    data = _lra(tmp_path / "lra", lambda i: i % 10)
    first = run_suite(load_suite(suite, "smoke", data_dir=data), out=out, progress=False)
    assert first.statuses == {"ok": 1}
    _lra(data, lambda i: 0)  # every label changed to 0, the same file names
    _new_process(monkeypatch)
    again = run_suite(load_suite(suite, "smoke", data_dir=data), out=out, progress=False)
    assert again.skipped_done == 0 and again.statuses == {"ok": 1}
    df = _results(out)
    assert len(df) == 1 and df["run_id"].iloc[0] == 2  # the new result, measured on the new files
    assert again.written and "sha256:" in df["data_source"].iloc[0]


def test_a_killed_cells_checkpoint_is_not_resumed_on_new_data(write_yaml: Callable[..., Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    suite, out = _one_cell(write_yaml), tmp_path / "out"
    data = _lra(tmp_path / "lra", lambda i: i % 10)
    with pytest.MonkeyPatch.context() as patch:
        kill_in_step(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            run_suite(load_suite(suite, "smoke", data_dir=data), out=out, progress=False)
    assert len(list((out / "acc" / "smoke" / "checkpoints").glob("*.pt"))) == 1  # written at step 2
    _lra(data, lambda i: 0)
    _new_process(monkeypatch)
    run_suite(load_suite(suite, "smoke", data_dir=data), out=out, progress=False)
    df = _results(out)
    assert df["resumed_from_step"].iloc[0] == 0  # trained on the new data from its first step
    assert not list((out / "acc" / "smoke" / "checkpoints").glob("*"))  # the old-data checkpoint is gone


def test_fresh_resumes_nothing(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    """A run killed after the last checkpoint: a plain rerun resumes it, ``--fresh`` trains from the first step."""
    suite, out = _one_cell(write_yaml), tmp_path / "out"
    with pytest.MonkeyPatch.context() as patch:
        kill_in_step(patch, 4)  # after the last step's checkpoint (checkpoint_every 2, 4 steps)
        with pytest.raises(KeyboardInterrupt):
            run_suite(load_suite(suite, "smoke"), out=out, progress=False)
    run_suite(load_suite(suite, "smoke"), out=out, progress=False, fresh=True)
    assert _results(out)["resumed_from_step"].iloc[0] == 0


def test_a_checkpoint_left_by_a_kill_after_its_row_is_removed(write_yaml: Callable[..., Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    suite, out = _one_cell(write_yaml), tmp_path / "out"
    (cell,) = load_suite(suite, "smoke").expand("cpu")

    def killed_after_its_row(cell: Cell, ctx: Context) -> None:
        raise KeyboardInterrupt  # between the cell's row and the removal of its checkpoint

    leftover = checkpoint_path(out / "acc" / "smoke", cell)
    with pytest.MonkeyPatch.context() as patch:
        patch_kind(patch, "accuracy", finished=killed_after_its_row)
        with pytest.raises(KeyboardInterrupt):
            run_suite(load_suite(suite, "smoke"), out=out, progress=False)
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"a checkpoint the kill left")  # the smoke cell's last step wrote none of its own
    assert run_suite(load_suite(suite, "smoke"), out=out, progress=False).skipped_done == 1
    assert not leftover.exists()


def test_a_checkpoint_of_another_cell_is_refused(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    """A checkpoint holds the name of the cell it was written for: copied under another cell's name, it is not
    resumed (a warning, then training from the first step)."""
    doc = {**ACC, "axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [0, 1]}}
    suite, out = write_yaml(doc), tmp_path / "out"
    with pytest.MonkeyPatch.context() as patch:
        kill_in_step(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            run_suite(load_suite(suite, "smoke"), out=out, progress=False)
    seed0, seed1 = load_suite(suite, "smoke").expand("cpu")
    directory = out / "acc" / "smoke"
    checkpoint_path(directory, seed0).rename(checkpoint_path(directory, seed1))
    run_suite(load_suite(suite, "smoke"), out=out, progress=False)
    df = _results(out).set_index("seed")
    assert df.loc[1, "resumed_from_step"] == 0 and "written for" in df.loc[1, "warnings"]


def test_editing_the_model_code_trains_every_cell_again(write_yaml: Callable[..., Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    suite, out = _one_cell(write_yaml), tmp_path / "out"
    run_suite(load_suite(suite, "smoke"), out=out, progress=False)
    real = provenance._source
    monkeypatch.setattr(provenance, "_source",
                        lambda name: real(name) + (b"\n# edited\n" if name == "harness.models.classifier" else b""))
    for cached in (provenance._imports, provenance.import_closure, provenance._code_identity):
        cached.cache_clear()
    try:
        assert run_suite(load_suite(suite, "smoke"), out=out, progress=False).skipped_done == 0
    finally:
        monkeypatch.undo()
        for cached in (provenance._imports, provenance.import_closure, provenance._code_identity):
            cached.cache_clear()
