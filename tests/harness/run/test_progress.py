"""What a run prints (harness.run.progress): failures as they happen, a progress line a minute in a log, the cells
that do not run folded into a line per reason, the files counted and the command that lists them as this shell runs
it, an ETA that moves inside a long group, a busy machine said once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from harness.light import attnbench_command
from harness.run import progress
from harness.run.progress import Console, duration, files_line, reasons_line


class Bar:
    def __init__(self) -> None:
        self.n = 0

    def update(self) -> None:
        self.n += 1


def test_duration() -> None:
    assert [duration(s) for s in (0.4, 42, 185, 3725)] == ["0s", "42s", "3m05s", "1h02m"]


def test_reasons_fold_into_one_line() -> None:
    line = reasons_line("not run here", ["rule A"] * 279 + ["cuda only"] * 12 + ["x1", "x2", "x3", "x4"])
    assert line is not None and line.startswith("not run here: 295 cells — rule A (279); cuda only (12);")
    assert "2 more for 2 other reasons" in line and reasons_line("x", []) is None


def test_files_are_counted_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "attnbench_command", lambda: "attnbench")
    line = files_line(Path("/r"), [Path(f"/r/t{i}.md") for i in range(3)] + [Path("/r/f.png"), Path("/r/f.pdf")])
    assert line == "results: /r — wrote 5 files (3 .md, 1 .pdf, 1 .png); `attnbench show /r` lists them"


def test_hints_name_the_command_as_this_shell_runs_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """After `make bench-speed`, `attnbench` is not on PATH: the closing hint said `attnbench show ...` all the same."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "attnbench").write_text("#!/bin/sh\n")
    (bin_dir / "attnbench").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert attnbench_command() == ".venv/bin/attnbench"
    assert "`.venv/bin/attnbench show /r` lists them" in files_line(Path("/r"), [])
    monkeypatch.chdir("/")
    assert attnbench_command() == str(bin_dir / "attnbench")
    monkeypatch.setenv("PATH", str(bin_dir))  # activated: the bare name is this installation's
    assert attnbench_command() == "attnbench"


class TtyBar(Bar):
    """A terminal's bar: the text after it and where it stands."""

    def __init__(self) -> None:
        super().__init__()
        self.postfix = ""

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text


def test_the_eta_moves_inside_a_long_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted only when a cell ended, a run of long groups showed `4/22 [09:30<14:40]` ... `[14:30<14:40]`: the
    share of the running group's rounds done counts too."""
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(progress, "HEARTBEAT_S", 3600)
    console = Console(total=4, tty=True, bar=TtyBar())
    for label in ("a n=4096", "b n=4096"):
        console.starting(label)
    assert console.bar.postfix == "0/4 [0s<?] b n=4096"  # nothing done: no estimate yet
    now[0] = 100.0
    console.group_progress(0.25)  # half a cell's worth of 4 done in 100 s: 700 s left
    assert console.bar.postfix.startswith("0/4 [1m40s<11m40s]") and console.bar.n == 0.5
    now[0] = 200.0
    console.group_progress(0.5)  # one cell's worth in 200 s: 600 s left
    assert console.bar.postfix.startswith("0/4 [3m20s<10m00s]")
    assert console._pace(now[0]) == "25%, 3m20s elapsed, about 10m00s left"  # the log's line says the same
    now[0] = 400.0
    console.finished("a n=4096", "ok", "", "ok")
    console.finished("b n=4096", "ok", "", "ok")
    assert console.bar.postfix.startswith("2/4 [6m40s<6m40s]")
    console.starting("c n=8192")
    assert console.fraction == 0.0  # a new group starts from none of its rounds
    console.close()


def test_a_busy_machine_is_said_once_with_its_share_of_the_cores(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(total=10, tty=False, bar=Bar())
    console.busy(1.3, 2)
    console.busy(1.9, 2)
    console.close()
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "busy" in x]
    assert line.startswith("warning: the machine is busy: other processes used 1.30 of its 2 cores (65%)")
    assert "flagged noisy (†)" in line and "--require-quiet" in line


def test_a_log_gets_failures_a_line_a_minute_and_the_count(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([0.0, 1.0, 2.0, 70.0, 200.0])  # the start, each ok cell's end, the close
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    console = Console(total=6, tty=False, bar=Bar())  # started at t = 0
    for i, status in enumerate(["ok", "unsupported", "ok", "ok", "error", "unsupported"]):
        console.finished(f"cell{i}", status, "rule A" if status == "unsupported" else "", f"{status} text")
    console.close(announced=[])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[1/6] cell0: ok text  ·  16%, 1s elapsed, about 5s left")  # the first at once
    assert lines[1].startswith("[4/6] cell3: ok text  ·  66%, 1m10s elapsed")  # 60 s after the last line
    assert lines[2] == "[5/6] cell4: error text"  # a failure, at once
    assert lines[3] == "[6/6] cells done in 3m20s" and lines[4] == "not run here: 2 cells — rule A (2)"
    assert len(lines) == 5 and console.bar.n == 6


def test_a_long_cell_keeps_the_log_alive(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A cell that takes minutes (Inductor compiling) still gets a line a minute: the cell and how long so far."""
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    monkeypatch.setattr(progress, "EVERY_S", 0.05)
    console = Console(total=1, tty=False, bar=Bar())
    console.starting("vanilla n=4096 compiled")
    deadline = time.monotonic() + 10
    while "still measuring" not in (said := capsys.readouterr().err) and time.monotonic() < deadline:
        time.sleep(0.02)
    console.close()
    assert "... [0/1] 0%, " in said and "; still measuring vanilla n=4096 compiled: " in said


def test_a_group_is_named_as_one(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    monkeypatch.setattr(progress, "EVERY_S", 0.05)
    console = Console(total=3, tty=False, bar=Bar())
    for label in ("a n=1024", "b n=1024", "c n=1024"):
        console.starting(label)
    deadline = time.monotonic() + 10
    while "still measuring" not in (said := capsys.readouterr().err) and time.monotonic() < deadline:
        time.sleep(0.02)
    console.close()
    assert "still measuring 3 cells together (from a n=1024): " in said


def test_a_line_quoting_terminal_escapes_prints_them_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """A cell label (an accuracy variant's name) and a cell's message quote input: neither may drive the terminal."""
    console = Console(total=1, tty=False, bar=Bar())
    console.finished("variant=\x1b[2J\x1b]0;owned\x07", "error", "", "error \x1b[31mFAKE: all cells ok\nforged")
    console.close()
    err = capsys.readouterr().err
    assert r"variant=\x1b[2J\x1b]0;owned\x07: error \x1b[31mFAKE: all cells ok\x0aforged" in err
    assert "\x1b" not in err and "\x07" not in err
    assert "\x1b" not in files_line(Path("/r/\x1b[2J"), [])
