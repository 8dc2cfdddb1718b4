"""A failure of the machine or its files while a cell runs (a full disk, an I/O error, a read-only filesystem, a
quota) is never stored as that cell's result: the run stops with exit 1 naming the file, the cells finished before
are kept, and a rerun after the fault is fixed finishes the run. The cell's own failures stay its status."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harness.kinds.speed.cells
import harness.models.checkpoints
from harness.core.cell import classify_exception
from harness.core.errors import EnvironmentFault
from harness.models.checkpoints import checkpoint_path
from tests.conftest import CliResult, tiny_doc
from tests.harness.kinds.accuracy.test_kind import ACC

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


def _csv(out: Path, suite: str, profile: str = "smoke") -> pd.DataFrame:
    path = out / suite / profile / "results.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame({"status": []})


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT])
def test_an_environment_errno_is_a_fault_not_a_status(code: int) -> None:
    with pytest.raises(EnvironmentFault, match="/data/x.pt"):
        classify_exception(OSError(code, "failed", "/data/x.pt"))
    assert classify_exception(OSError(errno.ENOENT, "no such file", "/x")).status == "error"  # the cell's own
    assert classify_exception(ValueError("bad")).status == "error"


def test_a_full_disk_in_a_speed_cell_stops_the_run_and_the_rerun_finishes(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    suite = write_yaml(tiny_doc(metrics=["time"], axes={"mode": ["fwd"]}))
    real = harness.kinds.speed.cells.build_workload
    calls = {"n": 0}

    def disk_full_on_the_third(cell: Any, device: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "tiny" / "f.tmp"))
        return real(cell, device)

    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", disk_full_on_the_third)
    first = cli("run", suite, "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    errors = [line for line in first.err_lines if line.startswith("attnbench: error:")]
    assert first.code == 1 and len(errors) == 1 and first.err_lines[-1] == errors[0], first.err
    assert "No space left on device" in errors[0] and "f.tmp" in errors[0] and "rerun" in errors[0]
    assert "error" not in set(_csv(tmp_path / "out", "tiny")["status"])  # nothing stored as a cell's error
    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", real)
    again = cli("run", suite, "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    assert again.code == 0, again.err
    assert set(_csv(tmp_path / "out", "tiny")["status"]) == {"ok"} and len(_csv(tmp_path / "out", "tiny")) == 4


def test_a_checkpoint_that_cannot_be_written_stops_the_run_and_the_rerun_trains(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch reports a full disk while saving as "[enforce fail at inline_container.cc] unexpected pos": the cells
    were stored as errors, and a rerun said "already done" for ever."""
    suite = write_yaml({**ACC, "axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [0]}})
    real = harness.models.checkpoints.torch.save

    def full(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if "checkpoints" in str(f):  # the checkpoint's temporary file, not the data cache
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
        real(obj, f, *args, **kwargs)

    monkeypatch.setattr(harness.models.checkpoints.torch, "save", full)
    first = cli("run", suite, "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    errors = [line for line in first.err_lines if line.startswith("attnbench: error:")]
    assert first.code == 1 and len(errors) == 1 and first.err_lines[-1] == errors[0], first.err
    assert "checkpoints" in errors[0] and ".pt" in errors[0] and "unexpected pos" in errors[0]
    assert _csv(tmp_path / "out", "acc").empty
    monkeypatch.setattr(harness.models.checkpoints.torch, "save", real)
    again = cli("run", suite, "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    assert again.code == 0 and set(_csv(tmp_path / "out", "acc")["status"]) == {"ok"}, again.err


def test_a_damaged_checkpoint_is_trained_from_the_start_not_recorded_as_an_error(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    suite = write_yaml({**ACC, "axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [0]}})
    out = tmp_path / "out"
    from harness.run.suitefile import load_suite

    (cell,) = load_suite(suite, "smoke").expand("cpu")
    garbage = checkpoint_path(out / "acc" / "smoke", cell)
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"not a checkpoint at all")
    result = cli("run", suite, "--out", out, "--profile", "smoke", "--device", "cpu")
    assert result.code == 0, result.err
    csv = _csv(out, "acc")
    assert list(csv["status"]) == ["ok"] and not garbage.exists()
    # the warning is kept with its cell (results.csv), and the console says so once
    assert "UserWarning: " in csv["warnings"].iloc[0] and "unreadable checkpoint" in csv["warnings"].iloc[0]
    assert "library warnings: 1 cells raised some" in result.err


def test_a_time_limit_beyond_a_year_is_bad_input(cli: Callable[..., CliResult], tiny_suite: Path,
                                                  tmp_path: Path) -> None:
    result = cli("run", tiny_suite, "--out", tmp_path / "out", "--timeout", "1e20")
    assert result.code == 2 and len(result.err_lines) == 1 and "--timeout" in result.err
    assert not (tmp_path / "out").exists()


def test_a_full_disk_while_writing_the_reports_names_the_file(
        cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from harness.core.cell import CellResult
    from tests.conftest import patch_kind

    patch_kind(monkeypatch, "speed", run=lambda cell, ctx: CellResult("ok", "", {"time_ms_median": 1.0}))
    assert cli("run", tiny_suite, "--out", tmp_path, "--device", "cpu").code == 0

    def full(*args: Any, **kwargs: Any) -> Any:  # the temporary file beside a report cannot even be created
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    result = cli("report", tmp_path)
    assert result.code == 1 and len(result.err_lines) == 1, result.err
    assert f"{tmp_path / 'tiny' / 'quick' / 'results.csv'}: No space left on device" in result.err
