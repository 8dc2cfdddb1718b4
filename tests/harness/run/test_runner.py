"""Tests of harness.run (runner, execute, worker) and harness.kinds.speed.cells: resume after a kill, failures as
statuses, --isolate, a busy machine and emulated bfloat16 said early."""

from __future__ import annotations

import os
import resource
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import harness.core.envinfo
import harness.kinds.speed.cells
import harness.measure.group
import harness.run.execute
import harness.run.progress
import harness.run.runner
from harness.core.cell import Cell, CellResult, CellTimeout, Context, NonFinite, classify_exception
from harness.core.store import STATUSES, Store
from harness.core.suite import Suite
from harness.kinds.speed.cells import measure_cell
from harness.run.runner import run_suite, suite_dir
from harness.run.suitefile import load_suite, parse_set
from harness.run.worker import run_isolated
from tests.conftest import REPO_ROOT, patch_kind, tiny_doc

CTX = Context(Path("."))  # a speed cell writes nothing: no working directory needed

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


# ---------------------------------------------------------------------------------------------------
# Resume: a sweep killed after k-1 cells measures exactly the rest when rerun.


def _fake_result(cell: Cell) -> CellResult:
    """A deterministic stand-in for a measurement, with more than one status."""
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    p = cell.params
    if p["attention"] == "vanilla" and p["seq_len"] == 32 and p["mode"] == "fwd+bwd":
        return CellResult("oom", "OutOfMemoryError: CUDA out of memory", {"backend": "math"})
    n = cell.params["seq_len"]
    return CellResult("ok", "", {"time_ms_median": n / 7, "time_ms_iqr": n / 70, "peak_mem_bytes": 1024})


class Recorder:
    """Stand-in for ``harness.kinds.speed.kind.measure_cell``: records calls; raises KeyboardInterrupt on call k."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.interrupt_at = interrupt_at
        self.keys: list[str] = []

    def __call__(self, cell: Cell, ctx: Any = None, **kwargs: Any) -> CellResult:
        if self.interrupt_at is not None and len(self.keys) + 1 == self.interrupt_at:
            raise KeyboardInterrupt  # what a Ctrl-C (or SIGINT from a scheduler) looks like mid-cell
        self.keys.append(cell.key)
        return _fake_result(cell)


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[list[str] | None]:
    """Replace report writing (tested elsewhere) by a stub that records which keys it was asked for."""
    calls: list[list[str] | None] = []

    def stub(store: Store, name: str | None = None, options: Any = None, *,
             keys: list[str] | None = None) -> list[Path]:
        calls.append(keys)
        return []

    monkeypatch.setattr(harness.run.runner, "write_suite_reports", stub)
    return calls


@pytest.fixture
def resume_suite(write_yaml: Callable[..., Path]) -> Suite:
    doc = tiny_doc(skip=[{"when": {"attention": "s3*", "seq_len": 32, "mode": "fwd"}, "reason": "rule"}])
    return load_suite(write_yaml(doc, "resume.yaml"))


def _rows(directory: Path) -> dict[str, str]:
    with Store(directory / "results.db") as store:
        df = store.dataframe()
    if df.empty:
        return {}
    assert df["key"].is_unique
    return dict(zip(df["key"], df["status"], strict=True))


@pytest.mark.parametrize("k", [1, 4, 8])
def test_resume_after_interrupt_measures_only_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, resume_suite: Suite, reports: list[Any], k: int
) -> None:
    all_keys = [c.key for c in resume_suite.expand("cpu")]
    assert len(all_keys) == 8

    reference = Recorder()
    patch_kind(monkeypatch, "speed", run=reference)
    run_suite(resume_suite, out=tmp_path / "ref", progress=False)
    expected = _rows(suite_dir(tmp_path / "ref", resume_suite))
    assert set(expected) == set(all_keys)
    assert sorted(set(expected.values())) == ["ok", "oom", "unsupported"]

    out = tmp_path / "out"
    killed = Recorder(interrupt_at=k)
    patch_kind(monkeypatch, "speed", run=killed)
    with pytest.raises(KeyboardInterrupt):
        run_suite(resume_suite, out=out, progress=False)
    done = killed.keys
    assert len(done) == k - 1
    assert set(_rows(suite_dir(out, resume_suite))) == set(done)  # each finished cell, nothing half-written

    rerun = Recorder()
    patch_kind(monkeypatch, "speed", run=rerun)
    summary = run_suite(resume_suite, out=out, progress=False)
    assert sorted(rerun.keys) == sorted(set(all_keys) - set(done))  # exactly the rest, none redone
    assert summary.total == 8 and summary.skipped_done == k - 1
    assert sum(summary.statuses.values()) == 8 - (k - 1)
    assert _rows(suite_dir(out, resume_suite)) == expected
    assert reports[-1] is None  # the tables cover every stored cell of the suite, not just this run's

    again = Recorder()
    patch_kind(monkeypatch, "speed", run=again)
    summary = run_suite(resume_suite, out=out, progress=False)
    assert again.keys == [] and summary.skipped_done == 8 and summary.statuses == {}

    fresh = Recorder()
    patch_kind(monkeypatch, "speed", run=fresh)
    summary = run_suite(resume_suite, out=out, fresh=True, progress=False)
    assert sorted(fresh.keys) == sorted(all_keys)
    assert summary.skipped_done == 0
    assert _rows(suite_dir(out, resume_suite)) == expected  # still one row per key


def test_only_and_profile_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_suite: Path,
                                      reports: list[Any]) -> None:
    rec = Recorder()
    patch_kind(monkeypatch, "speed", run=rec)
    suite = load_suite(tiny_suite, "smoke")
    summary = run_suite(suite, out=tmp_path, only=["s3*"], progress=False)
    assert summary.out_dir == tmp_path / "tiny" / "smoke"
    assert (tmp_path / "tiny" / "smoke" / "results.db").is_file()
    assert summary.total == 4
    cells = {c.key: c for c in suite.expand("cpu")}
    assert {cells[k].params["attention"] for k in rec.keys} == {"s3attention"}
    # a different profile is a different directory: nothing is shared or skipped
    rec2 = Recorder()
    patch_kind(monkeypatch, "speed", run=rec2)
    run_suite(load_suite(tiny_suite, "quick"), out=tmp_path, progress=False)
    assert len(rec2.keys) == 8 and (tmp_path / "tiny" / "quick" / "results.db").is_file()


# ---------------------------------------------------------------------------------------------------
# Injected failures become statuses, and the sweep goes on.


def _cuda_oom(cell: Cell, device: torch.device) -> Any:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def _cpu_oom_on_call(cell: Cell, device: torch.device) -> Any:
    def fn() -> torch.Tensor:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)"
        )

    return fn, fn, nn.Linear(4, 4)


def _nan(cell: Cell, device: torch.device) -> Any:
    nan = lambda: torch.full((1, 16, 16), float("nan"))  # noqa: E731
    return nan, nan, nn.Linear(4, 4)


def _value_error(cell: Cell, device: torch.device) -> Any:
    raise ValueError("head_dim must be even for rotary features\nsecond line is dropped")


def _sleep(cell: Cell, device: torch.device) -> Any:
    time.sleep(5)
    raise AssertionError("the time limit did not fire")


FAULTS: dict[tuple[str, int], Callable[[Cell, torch.device], Any]] = {
    ("vanilla", 16): _cuda_oom,
    ("vanilla", 32): _cpu_oom_on_call,
    ("vanilla_sdpa", 16): _nan,
    ("vanilla_sdpa", 32): _value_error,
    ("s3attention_released", 16): _sleep,
}


def test_failures_become_statuses_and_the_sweep_continues(
    monkeypatch: pytest.MonkeyPatch, write_yaml: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = harness.kinds.speed.cells.build_workload

    def faulty(cell: Cell, device: torch.device) -> Any:
        fault = FAULTS.get((cell.params["attention"], cell.params["seq_len"]))
        return real(cell, device) if fault is None else fault(cell, device)

    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", faulty)
    names = ["vanilla", "vanilla_sdpa", "s3attention", "s3attention_released", "vanilla_xformers"]
    suite = load_suite(write_yaml(tiny_doc(axes={"attention": names, "mode": ["fwd"]})))
    # The first measurement in a process pays one-off initialisation (profiler, FLOP counter); keep that
    # outside the time limit below, which only has to be long against a warm tiny cell.
    assert measure_cell(suite.expand("cpu")[4], CTX).status == "ok"
    alarm_before = signal.getsignal(signal.SIGALRM)
    limit_before = resource.getrlimit(resource.RLIMIT_AS)

    summary = run_suite(suite, out=tmp_path, timeout_s=1.5, progress=False)

    assert signal.getsignal(signal.SIGALRM) == alarm_before  # the time limit cleans up after itself
    assert resource.getrlimit(resource.RLIMIT_AS) == limit_before  # and so does the CPU memory cap
    with Store(suite_dir(tmp_path, suite) / "results.db") as store:
        df = store.dataframe()
    got = {(r["attention"], r["seq_len"]): r for r in df.to_dict("records")}
    assert len(got) == 10
    status = {k: r["status"] for k, r in got.items()}
    assert status == {
        ("vanilla", 16): "oom",
        ("vanilla", 32): "oom",
        ("vanilla_sdpa", 16): "nan",
        ("vanilla_sdpa", 32): "error",
        ("s3attention_released", 16): "timeout",
        ("s3attention", 16): "ok",
        ("s3attention", 32): "ok",
        ("s3attention_released", 32): "ok",  # measured after the timeout: the sweep went on
        ("vanilla_xformers", 16): "unsupported",
        ("vanilla_xformers", 32): "unsupported",
    } if not torch.cuda.is_available() else status  # on a GPU machine xformers is judged by its package
    assert summary.statuses.get("ok") == 3 and summary.statuses.get("oom") == 2

    assert "CUDA out of memory" in got[("vanilla", 16)]["message"]
    assert "OutOfMemoryError" in got[("vanilla", 16)]["message"]
    assert "can't allocate memory" in got[("vanilla", 32)]["message"]
    assert "non-finite" in got[("vanilla_sdpa", 16)]["message"]
    assert got[("vanilla_sdpa", 32)]["message"] == "ValueError: head_dim must be even for rotary features"
    assert "1.5 s time limit" in got[("s3attention_released", 16)]["message"]
    if not torch.cuda.is_available():
        assert "cuda" in got[("vanilla_xformers", 16)]["message"]
    for key in (("s3attention", 16), ("s3attention", 32), ("s3attention_released", 32)):
        row = got[key]
        assert row["message"] == ""
        assert row["time_ms_median"] > 0 and row["time_ms_iqr"] >= 0 and row["n_calls"] >= 2
        assert row["peak_mem_bytes"] > 0 and row["gflops"] > 0
        assert row["gemm_peak_fraction"] == pytest.approx(row["gflops_per_s"] / 100.0)
    # a failed cell keeps what was known before it failed
    assert got[("vanilla_sdpa", 16)]["backend"] == "sdpa"

    err = capsys.readouterr().err
    assert "[10/10]" in err and "timeout" in err
    # the reports were written from a sweep with failures: OOM cells are marked in the table
    tables = list(summary.out_dir.glob("table4_*.md"))
    assert len(tables) == 1 and "OOM" in tables[0].read_text()
    assert (summary.out_dir / "results.csv").is_file()


def test_time_limit_in_measure_cell(monkeypatch: pytest.MonkeyPatch, tiny_suite: Path) -> None:
    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", _sleep)
    cell = load_suite(tiny_suite).expand("cpu")[0]
    start = time.perf_counter()
    result = measure_cell(cell, Context(Path("."), timeout_s=0.5))
    assert time.perf_counter() - start < 4
    assert result.status == "timeout" and "0.5 s" in result.message


def test_measure_cell_lets_keyboard_interrupt_through(monkeypatch: pytest.MonkeyPatch,
                                                       tiny_suite: Path) -> None:
    def interrupted(cell: Cell, device: torch.device) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", interrupted)
    with pytest.raises(KeyboardInterrupt):
        measure_cell(load_suite(tiny_suite).expand("cpu")[0], CTX)


def test_measure_cell_skip_and_unknown_attention(tiny_suite: Path) -> None:
    cell = load_suite(tiny_suite).expand("cpu")[0]
    skipped = Cell(**{**cell.to_json(), "skip_reason": "skipped by suite rule: big"})
    result = measure_cell(skipped, CTX)
    assert (result.status, result.message) == ("unsupported", "skipped by suite rule: big")
    assert "time_ms_median" not in result.metrics
    unknown = Cell(**{**cell.to_json(), "params": {**cell.params, "attention": "nosuch"}})
    result = measure_cell(unknown, CTX)
    assert result.status == "error" and "nosuch" in result.message


def test_real_cell_in_process(tiny_suite: Path) -> None:
    cell = next(c for c in load_suite(tiny_suite).expand("cpu") if c.params["mode"] == "fwd+bwd")
    result = measure_cell(cell, Context(Path("."), gemm_peak_gflops=50.0, timeout_s=60))
    assert result.status == "ok", result.message
    m = result.metrics
    assert m["backend"] == "math" and m["complexity"] == "n^2" and m["params"] > 0
    assert m["time_ms_median"] > 0 and m["peak_mem_bytes"] > 0 and m["gflops"] > 0
    assert m["gemm_peak_fraction"] == pytest.approx(m["gflops_per_s"] / 50.0)


# ---------------------------------------------------------------------------------------------------
# classify_exception


@pytest.mark.parametrize(
    ("exc", "status", "message"),
    [
        (CellTimeout("cell exceeded its 1 s time limit"), "timeout", "cell exceeded its 1 s time limit"),
        (NonFinite("non-finite values in fwd output/loss"), "nan", "non-finite values in fwd output/loss"),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 MiB"), "oom",
         "OutOfMemoryError: CUDA out of memory. Tried to allocate 20 MiB"),
        (MemoryError(), "oom", "MemoryError: "),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"), "oom",
         "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"),
        (RuntimeError("[enforce fail] DefaultCPUAllocator: not enough memory: you tried to allocate 1 GB"),
         "oom", None),
        (RuntimeError("HIP error: Failed to allocate workspace"), "oom", None),
        (RuntimeError("CUDA error: OUT OF MEMORY"), "oom", None),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), "error",
         "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
        (ValueError("out of memory"), "error", "ValueError: out of memory"),  # only runtime errors are OOMs
        (TypeError("bad\n  traceback detail"), "error", "TypeError: bad"),
        (KeyError("x"), "error", "KeyError: 'x'"),
    ],
)
def test_classify_exception(exc: BaseException, status: str, message: str | None) -> None:
    result = classify_exception(exc)
    assert result.status == status
    assert result.status in STATUSES
    assert "\n" not in result.message
    if message is not None:
        assert result.message == message


def test_classify_exception_truncates_long_messages() -> None:
    result = classify_exception(RuntimeError("x" * 5000))
    assert result.status == "error" and len(result.message) <= 600


# ---------------------------------------------------------------------------------------------------
# --isolate


@pytest.fixture
def one_cell(tiny_suite: Path) -> Suite:
    return load_suite(tiny_suite, overrides=parse_set(["attention=vanilla", "seq_len=16", "mode=fwd"]))


def test_isolated_cell_end_to_end(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_cell: Suite) -> None:
    # the worker runs `python -m harness.run.worker`; make the package importable whatever the working directory
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    summary = run_suite(one_cell, out=tmp_path, isolate=True, timeout_s=120, progress=False)
    assert summary.statuses == {"ok": 1}
    with Store(summary.out_dir / "results.db") as store:
        row = store.dataframe().iloc[0]
        assert store.latest_env()["executor"] == "isolate"
    assert row["status"] == "ok", row["message"]
    assert row["time_ms_median"] > 0 and row["peak_mem_bytes"] > 0 and row["gflops"] > 0
    assert row["backend"] == "math"
    # allocator-exact memory and counted FLOPs do not depend on the executor
    in_process = measure_cell(one_cell.expand("cpu")[0], CTX).metrics
    assert row["peak_mem_bytes"] == in_process["peak_mem_bytes"]
    assert row["gflops"] == in_process["gflops"]


def test_isolate_does_not_spawn_for_skipped_cells(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, write_yaml: Callable[..., Path], reports: list[Any]
) -> None:
    def no_popen(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a skipped cell started a worker")

    monkeypatch.setattr(harness.run.worker.subprocess, "Popen", no_popen)
    suite = load_suite(write_yaml(tiny_doc(skip=[{"when": {"seq_len": {"ge": 1}}, "reason": "all"}])))
    summary = run_suite(suite, out=tmp_path, isolate=True, progress=False)
    assert summary.statuses == {"unsupported": 8}


def _fake_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> None:
    """Make the runner start ``body`` (a shell script ignoring its arguments) instead of the worker."""
    script = tmp_path / "fake_python.sh"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(script))


def _cell(one_cell: Suite) -> Cell:
    return one_cell.expand("cpu")[0]


@pytest.mark.parametrize(("script", "status", "fragments"), [
    pytest.param('echo "first line" >&2\necho "worker: boom" >&2\nexit 3', "error", ("exit code 3", "worker: boom"),
                 id="exit-code"),
    pytest.param("kill -TERM $$", "error", ("SIGTERM",), id="signal"),
    pytest.param("kill -9 $$", "oom", ("SIGKILL", "OOM killer"), id="sigkill-taken-for-the-oom-killer"),
])
def test_a_worker_that_dies_is_its_cells_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_cell: Suite,
                                                script: str, status: str, fragments: tuple[str, ...]) -> None:
    _fake_python(monkeypatch, tmp_path, script)
    result = run_isolated(_cell(one_cell), Context(tmp_path))
    assert result.status == status
    assert all(f in result.message for f in fragments) and "\n" not in result.message, result.message


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] in ("Z", "X")  # a zombie is dead, only not reaped
    except FileNotFoundError:
        return True


def test_hung_worker_and_its_children_are_killed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 one_cell: Suite) -> None:
    pidfile = tmp_path / "child.pid"
    _fake_python(monkeypatch, tmp_path, f"echo ready\nsleep 30 &\necho $! > {pidfile}\nwait")
    start = time.perf_counter()
    result = run_isolated(_cell(one_cell), Context(tmp_path, timeout_s=1))
    assert time.perf_counter() - start < 10
    assert result.status == "timeout" and "1 s" in result.message
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the worker's own child outlived the timeout"


def test_only_runs_a_subset_but_reports_the_whole_suite(tiny_suite: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    monkeypatch.setattr(harness.measure.group, "measure_gemm_peak_gflops", lambda device: 100.0)
    suite = load_suite(tiny_suite, "quick")
    run_suite(suite, out=tmp_path, progress=False)
    summary = run_suite(suite, out=tmp_path, only=["s3*"], fresh=True, progress=False)
    # the s3attention cells, and beside each group the baseline again, so that their speed-ups stay paired
    assert sum(summary.statuses.values()) == 8 and summary.references == 4 and summary.total == 4
    csv = pd.read_csv(suite_dir(tmp_path, suite) / "results.csv")
    assert set(csv["attention"]) == {"vanilla", "s3attention"} and len(csv) == 8


def test_the_time_limit_starts_when_the_worker_is_ready(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         one_cell: Suite) -> None:
    """A worker that takes 6 s to start (a loaded machine importing torch) and a cell well within its 4 s: ok, not a
    timeout; the clock starts when the worker says it is ready."""
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    _fake_python(monkeypatch, tmp_path, f'sleep 6\nexec {sys.executable} "$@"')
    result = run_isolated(_cell(one_cell), Context(tmp_path, timeout_s=4))
    assert result.status == "ok", result.message


def test_a_worker_that_never_gets_ready_is_killed_after_the_start_up_limit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_cell: Suite) -> None:
    monkeypatch.setattr(harness.run.worker, "STARTUP_LIMIT_S", 1.0)
    _fake_python(monkeypatch, tmp_path, "sleep 30")
    start = time.perf_counter()
    result = run_isolated(_cell(one_cell), Context(tmp_path, timeout_s=1))
    assert time.perf_counter() - start < 10
    assert result.status == "timeout" and "not ready after 1 s" in result.message


# ---------------------------------------------------------------------------------------------------
# sys.exit() inside a cell, --retry-failed


def _exits(cell: Cell, ctx: Any = None) -> CellResult:
    if cell.params["seq_len"] == 32 and not cell.skip_reason:
        sys.exit(0)  # what a variant's code or a library may do
    return _fake_result(cell)


@pytest.mark.parametrize("grouped", [False, True])
def test_sys_exit_inside_a_cell_is_that_cells_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    resume_suite: Suite, reports: list[Any], grouped: bool) -> None:
    """SystemExit passes the kinds' ``except Exception``: it would end the run with exit code 0 and nothing stored. A
    group that raised it is measured again one cell at a time, so the error stays in its cell."""
    def group(cells: list[Cell], ctx: Any) -> list[CellResult]:
        return [_exits(cell) for cell in cells]

    patch_kind(monkeypatch, "speed", run=_exits, **({"run_group": group} if grouped else {}))
    summary = run_suite(resume_suite, out=tmp_path, progress=False)
    rows = _rows(suite_dir(tmp_path, resume_suite))
    assert len(rows) == 8 and summary.statuses["error"] == 3  # the n=32 cells a skip rule leaves run
    with Store(suite_dir(tmp_path, resume_suite) / "results.db") as store:
        messages = set(store.dataframe().query("status == 'error'")["message"])
    assert messages == {"SystemExit: the cell called sys.exit(0)"}


def test_retry_failed_measures_only_the_failed_cells_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           resume_suite: Suite, reports: list[Any]) -> None:
    patch_kind(monkeypatch, "speed", run=Recorder())
    run_suite(resume_suite, out=tmp_path, progress=False)
    rows = _rows(suite_dir(tmp_path, resume_suite))
    failed = sorted(k for k, status in rows.items() if status == "oom")
    assert failed and len(failed) < len(rows)
    again = Recorder()
    patch_kind(monkeypatch, "speed", run=again)
    summary = run_suite(resume_suite, out=tmp_path, progress=False, retry_failed=True)
    assert sorted(again.keys) == failed and summary.skipped_done == len(rows) - len(failed)
    nothing = Recorder()
    patch_kind(monkeypatch, "speed", run=nothing)
    run_suite(resume_suite, out=tmp_path, progress=False)
    assert nothing.keys == []  # a plain resume keeps a failure as final


def test_retry_failed_and_fresh_are_one_or_the_other(cli: Callable[..., Any], tiny_suite: Path,
                                                     tmp_path: Path) -> None:
    result = cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cpu", "--fresh", "--retry-failed")
    assert result.code == 2 and "not allowed with argument" in result.err and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------------
# What a run says early: a busy machine (once, from the first timed group's measured load), bfloat16 emulated.


def _busy_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, float]]:
    """Each call of the console's busy warning: (cells done, cells being measured, load)."""
    calls: list[tuple[int, int, float]] = []
    original = harness.run.progress.Console.busy

    def spy(self: Any, load: float, cores: int) -> None:
        calls.append((self.done, len(self.running), load))
        original(self, load, cores)

    monkeypatch.setattr(harness.run.progress.Console, "busy", spy)
    return calls


def test_a_busy_machine_is_said_after_the_first_group_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            write_yaml: Callable[..., Path], reports: list[Any],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The warning came at the end of a 40-minute run, though the first timed group had measured the load."""
    monkeypatch.setattr(harness.measure.group, "load_between",
                        lambda a, b: {"load_other_cores": 1.3, "steal_fraction": 0.0})
    calls = _busy_calls(monkeypatch)
    run_suite(load_suite(write_yaml(tiny_doc(metrics=["time"]))), out=tmp_path, progress=False)
    assert calls[0][:2] == (0, 2)  # while the first group's first cell was being recorded
    warnings = [line for line in capsys.readouterr().err.splitlines() if "the machine is busy" in line]
    assert len(warnings) == 1 and f"1.30 of its {os.cpu_count()} cores" in warnings[0]


def test_a_long_group_says_a_busy_machine_while_it_is_timed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             write_yaml: Callable[..., Path],
                                                             reports: list[Any]) -> None:
    """A group of many variants takes minutes: its blocks so far tell the load, and move the ETA."""
    monkeypatch.setattr(harness.run.execute, "EARLY_BUSY_S", 0.0)
    monkeypatch.setattr(harness.measure.group, "load_between",
                        lambda a, b: {"load_other_cores": 1.3, "steal_fraction": 0.0})
    calls = _busy_calls(monkeypatch)
    fractions: list[float] = []
    original = harness.run.progress.Console.group_progress
    monkeypatch.setattr(harness.run.progress.Console, "group_progress",
                        lambda self, f: (fractions.append(f), original(self, f)))
    run_suite(load_suite(write_yaml(tiny_doc(metrics=["time"]))), out=tmp_path, progress=False)
    assert calls[0][:2] == (0, 2)  # before any cell of the group was recorded
    assert fractions[-1] == 1.0 and 0 < min(fractions) < 0.5  # block by block, to the group's end


def test_bfloat16_on_a_cpu_without_it_is_said_before_running(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             write_yaml: Callable[..., Path], reports: list[Any],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """On an AVX2 CPU a bfloat16 Linear took 63× its float32 time: a sweep of such cells measures the emulation."""
    monkeypatch.setattr(harness.core.envinfo, "cpu_bf16", lambda: "emulated")
    doc = tiny_doc(axes={"dtype": ["bfloat16"], "seq_len": [16], "mode": ["fwd"]}, metrics=["memory"])
    run_suite(load_suite(write_yaml(doc)), out=tmp_path, progress=False)
    err = capsys.readouterr().err
    assert "warning: 2 cells run in bfloat16 on a CPU without bfloat16 instructions" in err
    assert "--set dtype=float32" in err
    with Store(tmp_path / "tiny" / "quick" / "results.db") as store:
        assert store.runs()["env"].iloc[0]["cpu_bf16"] == "emulated"
    monkeypatch.setattr(harness.core.envinfo, "cpu_bf16", lambda: "native")
    run_suite(load_suite(write_yaml(doc)), out=tmp_path, progress=False, fresh=True)
    assert "without bfloat16 instructions" not in capsys.readouterr().err
