"""Crash safety with real faults: the runner killed (SIGKILL, SIGSEGV, os._exit) at named points of a sweep, a cell's
worker dying under --isolate, time limits, out-of-memory and non-finite results raised from inside an attention,
and run-to-run determinism of training cells.

The kills use ``ATTNBENCH_FAULT`` (harness/faults.py) on a real ``python -m harness.cli run`` process. After each
kill the suite is rerun (in this process, through the same CLI entry point); the final store must equal that of an
uninterrupted run: the same keys and statuses, one row per cell, and every cell finished before the kill kept as
it was (same run id and finish time: not redone). A kill loses at most the cell in flight.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
import torch

import attentions
import harness.kinds.accuracy.cells
import harness.kinds.speed.cells
from harness.cli import main as cli_main
from harness.core.cell import Cell, Context
from harness.core.store import Store
from harness.kinds.accuracy.cells import run_accuracy_cell
from harness.kinds.speed.cells import measure_cell
from harness.measure.timing import GLIBC_TUNABLES_TIMING
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult, dump, tiny_doc
from tests.harness.kinds.accuracy.test_kind import ACC

SLOW = pytest.mark.slow

# The speed suite killed below: 8 cells (vanilla, s3attention) x (16, 32) x (fwd, fwd+bwd), time only, one cell
# skipped by a rule so that the store holds two statuses. The runner's order: vanilla 16 fwd, 16 fwd+bwd, 32 fwd,
# 32 fwd+bwd, then the same for s3attention, whose 32 fwd (the 7th cell) is the skipped one.
SPEED_DOC = tiny_doc(metrics=["time"],
                     skip=[{"when": {"attention": "s3*", "seq_len": 32, "mode": "fwd"}, "reason": "rule"}])
# The accuracy suite killed below: vanilla then s3attention on a generated Text task of 64 tokens, 4 steps each,
# evaluated and checkpointed every 2 steps, so that a kill after step 3 resumes from step 2.
ACC_DOC: dict[str, Any] = {
    **copy.deepcopy(ACC),
    "axes": {"attention": ["vanilla", "s3attention"], "task": ["text"], "seed": [0]},
    "tasks": {"text": {"seq_len": 64}},
}
N_CELLS = {"speed": 8, "accuracy": 2}
SUITE_NAME = {"speed": SPEED_DOC["name"], "accuracy": ACC_DOC["name"]}


def _store_dir(out: Path, kind: str) -> Path:
    return out / SUITE_NAME[kind] / "smoke"


def _rows(out: Path, kind: str) -> dict[str, tuple[str, int, str]]:
    """key -> (status, run id, finish time) of the latest row of every stored cell; checks that no key is stored
    twice in one run (a later run may store a key again: a baseline timed again beside a resumed group)."""
    path = _store_dir(out, kind) / "results.db"
    if not path.exists():
        return {}
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT key, status, run_id, finished_utc FROM cells ORDER BY run_id").fetchall()
        (distinct,) = db.execute("SELECT COUNT(*) FROM (SELECT DISTINCT key, run_id FROM cells)").fetchone()
    finally:
        db.close()
    assert distinct == len(rows), "a key is stored twice in one run"
    return {key: (status, run_id, finished) for key, status, run_id, finished in rows}


def _last_run_id(out: Path, kind: str) -> int:
    db = sqlite3.connect(_store_dir(out, kind) / "results.db")
    try:
        return int(db.execute("SELECT MAX(run_id) FROM runs").fetchone()[0])
    finally:
        db.close()


def _accuracy_results(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per cell: key, test_acc, best_dev_acc, best_step, resumed_from_step; every curve point)."""
    with Store(_store_dir(out, "accuracy") / "results.db") as store:
        df = store.dataframe()
        curves = store.curves()
    cells = df[["key", "attention", "test_acc", "best_dev_acc", "best_step", "resumed_from_step", "final_train_loss",
                "steps_per_s"]]
    return (cells.sort_values("key").reset_index(drop=True),
            curves.sort_values(["key", "step"]).reset_index(drop=True))


@pytest.fixture(scope="module", autouse=True)
def _timing_malloc_settings() -> Iterator[None]:
    """This module's runs in this process name the malloc settings :func:`_harness_process` gives its runs (the CLI's
    own re-execution): a cell's key holds them, so that a killed process's cells and the reruns here are the same."""
    with mock.patch.dict(os.environ, {"GLIBC_TUNABLES": GLIBC_TUNABLES_TIMING}):
        yield


def _cli_in_process(suite: Path, out: Path) -> int:
    return cli_main(["run", str(suite), "--profile", "smoke", "--out", str(out), "--device", "cpu"])


def _cli_process(suite: Path, out: Path, fault: str) -> subprocess.CompletedProcess[str]:
    """``python -m harness.cli run SUITE`` in its own process with ATTNBENCH_FAULT set, on one thread."""
    return _harness_process(["run", str(suite), "--profile", "smoke", "--out", str(out), "--device", "cpu",
                             "--threads", "1"], fault)


def _harness_process(args: list[str], fault: str) -> subprocess.CompletedProcess[str]:
    """``python -m harness.cli ARGS`` in its own process with ATTNBENCH_FAULT set."""
    env = {
        **os.environ,
        "ATTNBENCH_FAULT": fault,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
        "OMP_NUM_THREADS": "1",
        # the malloc settings the CLI would otherwise re-exec itself to get: one interpreter start, not two
        "GLIBC_TUNABLES": GLIBC_TUNABLES_TIMING,
    }
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("suites")
    paths = {"speed": directory / "tiny.yaml", "accuracy": directory / "acc.yaml"}
    paths["speed"].write_text(dump(SPEED_DOC))
    paths["accuracy"].write_text(dump(ACC_DOC))
    return paths


@pytest.fixture(scope="module")
def reference(suites: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Output root of an uninterrupted run of both suites (on one thread, like every run here)."""
    out = tmp_path_factory.mktemp("reference")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for path in suites.values():
            assert _cli_in_process(path, out) == 0
    finally:
        torch.set_num_threads(before)
    for kind, n in N_CELLS.items():
        assert len(_rows(out, kind)) == n
    return out


# ---------------------------------------------------------------------------------------------------
# Kill the runner at a point of the sweep, rerun, compare with the uninterrupted run.


@dataclass(frozen=True)
class Kill:
    fault: str  # ATTNBENCH_FAULT
    stored: int  # cells the killed run leaves in the store: every finished one, never the one in flight
    kind: str = "speed"
    code: int = -signal.SIGKILL  # the killed process's return code
    checkpoints: tuple[str, ...] = ()  # suffixes of the files the kill leaves in <store>/checkpoints
    resumed_from: int = 0  # accuracy: the step the cell in flight resumes from on the rerun


KILLS = [
    # between cells
    pytest.param(Kill("runner.before_cell:3", 2), id="before-cell-3", marks=SLOW),
    pytest.param(Kill("runner.after_put:1", 1), id="after-put-1", marks=SLOW),
    pytest.param(Kill("runner.before_reports", 8), id="before-reports"),
    # inside a cell
    # cells that differ only by attention are measured (interleaved) and stored as a group: a kill inside a group
    # loses the group's cells measured before it, and the resumed run measures the whole group again
    pytest.param(Kill("measure.cell:2", 0), id="measure-cell-2"),
    pytest.param(Kill("measure.cell:1:segv:s3attention n=16 b=1 fwd+bwd", 2, code=-signal.SIGSEGV),
                 id="segv-in-cell-6"),
    pytest.param(Kill("runner.before_put:2", 1), id="measured-not-stored", marks=SLOW),
    # during a store write: the cell's rows are written but not committed
    pytest.param(Kill("store.in_transaction:3", 2), id="store-write-3", marks=SLOW),
    # a training cell's rows (result and learning curve) written but not committed
    pytest.param(Kill("store.in_transaction:1", 0, "accuracy", checkpoints=(".pt",), resumed_from=4),
                 id="accuracy-store-write-1"),
    # inside a training cell: after an optimiser step, and between a checkpoint's temp file and its rename
    pytest.param(Kill("training.step:3", 0, "accuracy", checkpoints=(".pt",), resumed_from=2), id="train-step-3"),
    pytest.param(Kill("training.checkpoint_write:1", 0, "accuracy", checkpoints=(".tmp",), resumed_from=0),
                 id="checkpoint-write-1", marks=SLOW),
    # trained to the last step and checkpointed there, not yet stored: the rerun resumes at the end and must store
    # the same final loss and a real throughput
    pytest.param(Kill("runner.before_put:1", 0, "accuracy", checkpoints=(".pt",), resumed_from=4),
                 id="accuracy-trained-not-stored", marks=SLOW),
    # more of the same kinds (`make test-slow`)
    pytest.param(Kill("runner.before_cell:1", 0), id="before-first-cell", marks=SLOW),
    pytest.param(Kill("runner.after_put:8", 8), id="after-last-put", marks=SLOW),
    pytest.param(Kill("store.in_transaction:1", 0), id="store-write-1", marks=SLOW),
    pytest.param(Kill("runner.after_put:4:exit", 4, code=3), id="exit-after-put-4", marks=SLOW),
    pytest.param(Kill("training.step:7", 1, "accuracy", checkpoints=(".pt",), resumed_from=2),
                 id="train-step-3-of-cell-2", marks=SLOW),
    pytest.param(Kill("training.checkpoint_write:2", 0, "accuracy", checkpoints=(".pt", ".tmp"), resumed_from=2),
                 id="checkpoint-write-2", marks=SLOW),

]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("kill", KILLS)
def test_killed_sweep_resumes_to_the_uninterrupted_result(
    kill: Kill, suites: dict[str, Path], reference: Path, tmp_path: Path
) -> None:
    kind, out = kill.kind, tmp_path / "out"
    directory = _store_dir(out, kind)
    expected = {key: row[0] for key, row in _rows(reference, kind).items()}

    proc = _cli_process(suites[kind], out, kill.fault)
    assert proc.returncode == kill.code, proc.stderr[-3000:]
    before = _rows(out, kind)
    assert len(before) == kill.stored, f"{len(before)} cells stored, expected {kill.stored} (the cell in flight " \
                                       "must not be stored, every finished one must)"
    assert {key: row[0] for key, row in before.items()} == {key: expected[key] for key in before}
    assert not (directory / "results.csv").exists()  # reports come after the last cell
    leftovers = sorted(p.suffix for p in (directory / "checkpoints").glob("*")) if kind == "accuracy" else []
    assert leftovers == sorted(kill.checkpoints)
    killed_run = _last_run_id(out, kind)

    assert _cli_in_process(suites[kind], out) == 0
    after = _rows(out, kind)
    assert len(after) == N_CELLS[kind]
    assert {key: row[0] for key, row in after.items()} == expected
    # Stored cells are not redone, except a baseline cell of a speed group that the kill cut: it is timed again
    # beside the rest of its group, so that their speed-ups stay paired (a new row in the rerun).
    baseline = {c.key for c in load_suite(suites[kind], "smoke").expand("cpu") if c.params["attention"] == "vanilla"
                and kind == "speed"}
    for key, row in before.items():
        assert after[key] == row or (key in baseline and after[key][1] == killed_run + 1)
    assert all(after[key][1] == killed_run + 1 for key in set(after) - set(before))  # the rest: by the rerun
    assert (directory / "results.csv").is_file()

    if kind == "accuracy":
        assert not list((directory / "checkpoints").glob("*"))  # stored cells need no checkpoint
        got, got_curves = _accuracy_results(out)
        want, want_curves = _accuracy_results(reference)
        in_flight = next(k for k in [c.key for c in load_suite(suites[kind], "smoke").expand("cpu")]
                         if k not in before)
        assert got.set_index("key").loc[in_flight, "resumed_from_step"] == kill.resumed_from
        cols = ["key", "test_acc", "best_dev_acc", "best_step", "final_train_loss"]
        pd.testing.assert_frame_equal(got[cols], want[cols])  # resuming from a checkpoint is exact
        pd.testing.assert_frame_equal(got_curves, want_curves)
        assert (got["steps_per_s"] > 0).all() and got["steps_per_s"].map(math.isfinite).all()


# ---------------------------------------------------------------------------------------------------
# Reports: a kill while a figure is written leaves the old file or none, never a truncated one.

_SIGNATURES = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}


def _report_files(directory: Path) -> dict[str, bytes]:
    """The figures and tables of a suite directory by name, each checked to be whole (non-empty, its format's
    signature at the start, a PDF's end-of-file mark at the end)."""
    files = {}
    for path in sorted(directory.iterdir()):
        if path.suffix not in {".png", ".pdf", ".md", ".tex", ".csv", ".json"} or path.name.startswith("."):
            continue
        data = path.read_bytes()
        assert data, f"{path.name} is empty"
        assert data.startswith(_SIGNATURES.get(path.suffix, b"")), f"{path.name} is not a whole {path.suffix}"
        assert path.suffix != ".pdf" or data.rstrip().endswith(b"%%EOF"), f"{path.name} is truncated"
        files[path.name] = data
    return files


def test_a_run_killed_while_writing_a_figure_leaves_no_partial_file(suites: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    directory = _store_dir(out, "speed")
    proc = _cli_process(suites["speed"], out, "files.before_rename:1:kill:.png")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    stale = list(directory.glob(".*.png.*.tmp"))
    assert len(stale) == 1 and stale[0].stat().st_size > 0  # killed with the figure written, not yet renamed
    figure = stale[0].name[1:].rsplit(".", 2)[0]  # .<name>.<random>.tmp
    assert not (directory / figure).exists()  # the final name never held a partial file
    _report_files(directory)

    rerun = _cli_process(suites["speed"], out, "")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "nothing to run" in rerun.stdout
    assert figure in _report_files(directory)
    assert not list(directory.glob(".*.tmp"))  # the killed writer's temporary file is gone


def test_a_report_killed_while_writing_a_figure_keeps_the_old_one(reference: Path, tmp_path: Path) -> None:
    directory = tmp_path / "speed"
    shutil.copytree(_store_dir(reference, "speed"), directory)
    before = _report_files(directory)
    figure = next(name for name in before if name.endswith(".pdf"))
    proc = _harness_process(["report", str(directory)], f"files.before_rename:1:kill:{figure}")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    after = _report_files(directory)
    assert after[figure] == before[figure]  # the old figure, whole


def test_a_copy_of_a_killed_runs_store_without_its_log_holds_the_finished_groups(
        suites: dict[str, Path], tmp_path: Path) -> None:
    """The store's log is copied into ``results.db`` after each group, so that the file alone, copied after a kill,
    holds every group stored; a copy that holds no table at all is one line naming the file, not a traceback."""
    out = tmp_path / "out"
    assert _cli_process(suites["speed"], out, "runner.before_cell:3").returncode == -signal.SIGKILL
    alone = tmp_path / "copy" / "results.db"
    alone.parent.mkdir()
    shutil.copyfile(_store_dir(out, "speed") / "results.db", alone)  # without results.db-wal
    with Store(alone, read_only=True) as store:
        assert len(store.dataframe()) == 2  # the first group: vanilla and s3attention at one shape
    empty = tmp_path / "empty" / "results.db"
    empty.parent.mkdir()
    with contextlib.closing(sqlite3.connect(empty)) as conn:  # an SQLite file without tables, as such a copy was
        conn.execute("PRAGMA journal_mode=WAL")
    proc = _harness_process(["show", str(empty.parent)], "")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith(f"attnbench: error: {empty}: a results store with no tables")


# ---------------------------------------------------------------------------------------------------
# A disk that fills while a cell is stored: a real write error (a file-size limit), not a mocked one.


def _limited(nbytes: int) -> Callable[[], None]:
    """A ``preexec_fn`` capping every file the process writes at ``nbytes``: past it, write() fails with EFBIG
    (Python ignores SIGXFSZ), which sqlite reports as a disk I/O error, as it does a full or failing disk."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


def test_a_store_write_failing_on_disk_is_one_line_and_the_rerun_resumes(
        suites: dict[str, Path], reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # How far the store's files grow by the end of the second cell: a run killed before the third. The rows are in
    # the write-ahead log until a group ends, then copied into results.db: whichever is larger is the limit.
    probe = tmp_path / "probe"
    assert _cli_process(suites["speed"], probe, "runner.before_cell:3").returncode == -signal.SIGKILL
    files = [_store_dir(probe, "speed") / name for name in ("results.db", "results.db-wal")]
    limit = max(f.stat().st_size for f in files if f.exists()) + 1024  # less than one more page: a later write fails

    out = tmp_path / "out"
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: real_run(*a, **k, preexec_fn=_limited(limit)))
    proc = _cli_process(suites["speed"], out, "")
    monkeypatch.undo()
    errors = [line for line in proc.stderr.splitlines() if line.startswith("attnbench: error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr[-3000:]
    assert "results.db" in errors[0] and "disk I/O error" in errors[0] and "rerun" in errors[0]
    before = _rows(out, "speed")
    # the cells stored before the disk failed (a row's commit, or the copy of the log into the file, is what fails),
    # each whole: _rows reads every stored row with its curve and samples
    assert 2 <= len(before) < N_CELLS["speed"]

    assert _cli_in_process(suites["speed"], out) == 0
    after = _rows(out, "speed")
    assert {k: r[0] for k, r in after.items()} == {k: r[0] for k, r in _rows(reference, "speed").items()}


# ---------------------------------------------------------------------------------------------------
# --isolate: a cell whose worker dies is that cell's status; the others are measured.


@pytest.fixture
def worker_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``python -m harness.worker`` importable whatever the working directory."""
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


@pytest.mark.usefixtures("one_thread", "worker_path")
@pytest.mark.parametrize(
    ("action", "status", "needle", "others"),
    [
        pytest.param("exit", "error", "exit code 3", ["s3attention"], id="exit"),
        pytest.param("segv", "error", "SIGSEGV", [], id="segv"),  # a worker start costs seconds: one cell here
        pytest.param("kill", "oom", "SIGKILL", ["s3attention"], id="kill", marks=SLOW),
    ],
)
def test_a_dying_worker_fails_only_its_cell(monkeypatch: pytest.MonkeyPatch, write_yaml: Callable[..., Path],
                                            tmp_path: Path, action: str, status: str, needle: str,
                                            others: list[str]) -> None:
    # Inherited by the workers; under --isolate the runner itself passes no `measure.cell` point.
    monkeypatch.setenv("ATTNBENCH_FAULT", f"measure.cell:1:{action}:vanilla n=16")
    doc = tiny_doc(metrics=["time"], axes={"attention": ["vanilla", *others], "seq_len": [16], "mode": ["fwd"]})
    summary = run_suite(load_suite(write_yaml(doc), "smoke"), out=tmp_path, isolate=True, timeout_s=300,
                        progress=False)
    with Store(summary.out_dir / "results.db") as store:
        rows = {r["attention"]: r for r in store.dataframe().to_dict("records")}
    assert set(rows) == {"vanilla", *others}
    assert rows["vanilla"]["status"] == status
    assert needle in rows["vanilla"]["message"] and "\n" not in rows["vanilla"]["message"]
    for name in others:
        assert rows[name]["status"] == "ok", rows[name]["message"]  # the sweep went on


# ---------------------------------------------------------------------------------------------------
# --timeout through the command line, in-process and with --isolate.

ONE_LENGTH = {"seq_len": [16], "mode": ["fwd"]}


@pytest.mark.usefixtures("one_thread")
def test_timeout_flag_in_process(cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch,
                                 write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    real = harness.kinds.speed.cells.build_workload

    def hangs_for_vanilla(cell: Cell, device: torch.device) -> Any:
        if cell.params["attention"] == "vanilla":
            time.sleep(60)
            raise AssertionError("the time limit did not fire")
        return real(cell, device)

    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", hangs_for_vanilla)
    path = write_yaml(tiny_doc(metrics=["time"], axes=ONE_LENGTH))
    start = time.perf_counter()
    result = cli("run", path, "--profile", "smoke", "--out", tmp_path, "--device", "cpu", "--timeout", "2")
    assert result.code == 0, result.err
    assert time.perf_counter() - start < 30
    with Store(tmp_path / "tiny" / "smoke" / "results.db") as store:
        rows = {r["attention"]: r for r in store.dataframe().to_dict("records")}
    assert rows["vanilla"]["status"] == "timeout" and "2 s time limit" in rows["vanilla"]["message"]
    assert rows["s3attention"]["status"] == "ok"  # measured after the timeout: the sweep went on


@pytest.mark.usefixtures("one_thread", "worker_path")
def test_timeout_flag_with_isolate(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                   tmp_path: Path) -> None:
    # A real worker: starting Python and importing torch alone takes longer than 0.3 s, so the cell cannot finish.
    path = write_yaml(tiny_doc(metrics=["time"], axes={**ONE_LENGTH, "attention": ["vanilla"]}))
    start = time.perf_counter()
    result = cli("run", path, "--profile", "smoke", "--out", tmp_path, "--device", "cpu", "--isolate",
                 "--timeout", "0.3")
    assert result.code == 1, result.err  # no cell of the run finished ok: an honest exit says so
    assert "no cell of this run finished ok (timeout)" in result.err
    assert time.perf_counter() - start < 30
    with Store(tmp_path / "tiny" / "smoke" / "results.db") as store:
        (row,) = store.dataframe().to_dict("records")
    assert row["status"] == "timeout"
    assert "0.3 s time limit" in row["message"] and "worker killed" in row["message"]


# ---------------------------------------------------------------------------------------------------
# Out-of-memory and non-finite results raised from inside an attention's forward.

FORWARD_FAULTS = {
    "cuda-oom": (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom",
                 "OutOfMemoryError: CUDA out of memory"),
    "cpu-allocator": (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
                                   "memory: you tried to allocate 68719476736 bytes. Error code 12"), "oom",
                      "DefaultCPUAllocator: can't allocate memory"),
    "memory-error": (MemoryError(), "oom", "MemoryError"),
    "nan-output": (float("nan"), "nan", "non-finite"),
    "inf-output": (float("inf"), "nan", "non-finite"),
}


@pytest.fixture
def faulty_vanilla(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[BaseException | float], None]]:
    """``faulty_vanilla(exc)`` makes vanilla's forward raise exc; ``faulty_vanilla(value)`` scales its output."""
    cls = attentions.spec("vanilla").module_cls

    def install(fault: BaseException | float) -> None:
        def forward(self: Any, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            if isinstance(fault, BaseException):
                raise fault
            return x * fault

        monkeypatch.setattr(cls, "forward", forward)

    yield install


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("where", ["fwd", "fwd+bwd", "train_step", "accuracy"])
@pytest.mark.parametrize("fault", list(FORWARD_FAULTS))
def test_fault_raised_in_forward_becomes_a_status(
    faulty_vanilla: Callable[[BaseException | float], None], suites: dict[str, Path], write_yaml: Callable[..., Path],
    tmp_path: Path, fault: str, where: str,
) -> None:
    error, status, needle = FORWARD_FAULTS[fault]
    if where == "accuracy":
        cell = load_suite(suites["accuracy"], "smoke").expand("cpu")[0]
    else:
        doc = tiny_doc(metrics=["time"], axes={"attention": ["vanilla"], "seq_len": [16], "mode": [where]})
        cell = load_suite(write_yaml(doc), "smoke").expand("cpu")[0]
    assert cell.params["attention"] == "vanilla"
    faulty_vanilla(error)
    if where == "accuracy":
        result = run_accuracy_cell(cell, Context(tmp_path))
    else:
        result = measure_cell(cell, Context(tmp_path))
    assert (result.status, needle in result.message) == (status, True), result.message
    assert "\n" not in result.message


# ---------------------------------------------------------------------------------------------------
# Determinism: the same training suite twice on the CPU gives the same numbers.


@pytest.mark.usefixtures("one_thread")
def test_accuracy_suite_is_deterministic(monkeypatch: pytest.MonkeyPatch, suites: dict[str, Path], reference: Path,
                                         tmp_path: Path) -> None:
    """The reference run (2 attentions, seed 0) and a second run into another directory, data regenerated."""
    monkeypatch.setattr(harness.kinds.accuracy.cells, "_LOADED", {})
    assert _cli_in_process(suites["accuracy"], tmp_path) == 0
    (first, first_curves), (second, second_curves) = _accuracy_results(reference), _accuracy_results(tmp_path)
    assert sorted(first["attention"]) == ["s3attention", "vanilla"]
    cols = ["key", "test_acc", "best_dev_acc", "best_step"]
    pd.testing.assert_frame_equal(first[cols], second[cols])
    assert len(first_curves) == 4  # evaluations at steps 2 and 4 of each cell
    pd.testing.assert_frame_equal(first_curves, second_curves)


# ---------------------------------------------------------------------------------------------------
# A killed runner takes its --isolate worker with it; one output directory, one run at a time; a full disk.


def _children(pid: int) -> list[int]:
    """Every descendant process of ``pid`` (Linux /proc), so a worker in its own session is found too."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()  # a zombie has finished; its reaping is the new parent's business
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    """A process's command line, or "" once it has exited (a short-lived child can between listing and reading)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_runner_takes_its_isolated_worker_with_it(tmp_path: Path) -> None:
    doc = copy.deepcopy(ACC_DOC)
    doc["train"] = {**doc["train"], "steps": 200_000, "checkpoint_every": 1000}  # trains far longer than the test
    suite = tmp_path / "long.yaml"
    suite.write_text(dump(doc))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1", "GLIBC_TUNABLES": GLIBC_TUNABLES_TIMING}
    runner = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(suite), "--profile", "smoke", "--out",
                               str(tmp_path / "out"), "--device", "cpu", "--threads", "1", "--isolate"],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, workers = time.monotonic() + 120, []
        while not workers and time.monotonic() < deadline:
            time.sleep(0.5)
            workers = [p for p in _children(runner.pid) if "harness.run.worker" in _cmdline(p)]
        assert workers, "no worker started"
        time.sleep(2.0)  # the worker is past its start (its death signal is set as it reads its job)
        runner.kill()  # SIGKILL: no handler of the runner runs
        runner.wait()
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "the worker outlived its runner"
    finally:
        for pid in _children(runner.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        runner.kill()
    # the next run into the directory (the suite shortened) clears what the killed one's worker left
    suite.write_text(dump(ACC_DOC))
    assert _cli_in_process(suite, tmp_path / "out") == 0
    assert not list((tmp_path / "out" / ACC_DOC["name"] / "smoke" / ".workers").glob("*"))


def test_a_second_run_into_one_directory_is_refused(cli: Callable[..., CliResult], tiny_suite: Path,
                                                    tmp_path: Path) -> None:
    from harness.core.files import directory_lock

    suite = load_suite(tiny_suite, "smoke")
    with directory_lock(tmp_path / "out" / suite.name / "smoke"):
        second = cli("run", tiny_suite, "--profile", "smoke", "--out", tmp_path / "out", "--device", "cpu")
    assert second.code == 2 and len(second.err_lines) == 1, second.err
    assert f"pid {os.getpid()}" in second.err and "another --out" in second.err


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_a_full_disk_while_writing_reports_is_one_line_and_the_rerun_resumes(
        cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.run.runner as runner

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "results.csv"))

    monkeypatch.setattr(runner, "write_suite_reports", full)
    first = cli("run", tiny_suite, "--profile", "smoke", "--out", tmp_path / "out", "--device", "cpu")
    errors = [line for line in first.err_lines if line.startswith("attnbench: error:")]
    assert first.code == 1 and len(errors) == 1 and first.err_lines[-1] == errors[0], first.err  # no traceback
    assert "No space left on device" in errors[0] and "results.csv" in errors[0] and "rerun" in errors[0]
    monkeypatch.undo()
    again = cli("run", tiny_suite, "--profile", "smoke", "--out", tmp_path / "out", "--device", "cpu")
    assert again.code == 0 and "already done, ran: nothing to run" in again.out
