"""Ctrl-C and SIGTERM are one line, wherever they land: in a run's cells (the run's end is recorded and the line says
how to resume), during start-up (before anything is stored) or during ``report``; SIGTERM exits 143, Ctrl-C 130."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import harness.commands
from harness.core.cell import Cell, CellResult, Context
from harness.light import attnbench_command
from tests.conftest import CliResult, patch_kind, tiny_doc

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


def _kill(signum: int) -> None:
    """Send ``signum`` to this process, if the command handles it (without a handler SIGTERM would end pytest)."""
    assert signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None), "the command set no handler"
    os.kill(os.getpid(), signum)


def test_sigterm_in_a_run_records_its_end_and_says_how_to_resume(
        monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
        tmp_path: Path) -> None:
    calls = {"n": 0}

    def terminated(cell: Cell, ctx: Context) -> CellResult:
        calls["n"] += 1
        if calls["n"] == 3:
            _kill(signal.SIGTERM)  # as `kill PID` or a job scheduler would
        return CellResult("ok", "", {"time_ms_median": 1.0})

    patch_kind(monkeypatch, "speed", run=terminated)
    path = write_yaml(tiny_doc())
    before = signal.getsignal(signal.SIGTERM)
    result = cli("run", path, "--out", tmp_path, "--device", "cpu")
    assert signal.getsignal(signal.SIGTERM) == before  # the handler lives as long as the command
    assert result.code == 143 and "Traceback" not in result.err, result.err
    line = result.err_lines[-1]
    assert line.startswith("attnbench: terminated (SIGTERM); 2 cells of tiny/quick are stored in "), line
    assert line.endswith(f"resume with: {attnbench_command()} run {path} --out {tmp_path} --device cpu")
    with sqlite3.connect(tmp_path / "tiny" / "quick" / "results.db") as conn:
        finished, summary = conn.execute("SELECT finished_utc, summary_json FROM runs").fetchone()
    assert finished and json.loads(summary)["stopped_by"] == "Terminated"
    patch_kind(monkeypatch, "speed", run=lambda cell, ctx: CellResult("ok", "", {"time_ms_median": 1.0}))
    again = cli("run", path, "--out", tmp_path, "--device", "cpu")
    assert again.code == 0 and "8 cells, 2 already done" in again.out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_is_one_line_and_stores_nothing(
        monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
        signum: int) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        _kill(signum)

    monkeypatch.setattr(harness.commands, "load_suite", stopped)  # while the suite file is read
    result = cli("run", tiny_suite, "--out", tmp_path / "out", "--device", "cpu")
    how = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert result.code == 128 + signum and result.err_lines == [
        f"attnbench: {how}; nothing was half-written; run the command again"], result.err
    assert not (tmp_path / "out").exists()


def test_ctrl_c_during_report_is_one_line(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult],
                                          tiny_suite: Path, tmp_path: Path) -> None:
    patch_kind(monkeypatch, "speed", run=lambda cell, ctx: CellResult("ok", "", {"time_ms_median": 1.0}))
    assert cli("run", tiny_suite, "--out", tmp_path, "--device", "cpu").code == 0

    def interrupted(*args: object, **kwargs: object) -> list[Path]:
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.commands, "write_suite_reports", interrupted)
    result = cli("report", tmp_path)
    assert result.code == 130 and result.err_lines == [
        "attnbench: interrupted; nothing was half-written; run the command again"], result.err
