"""The run lock of a suite directory (harness.core.files.directory_lock): one holder, and a ``.lock`` file only
while a run holds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.core.files import directory_lock


def test_the_lock_file_exists_only_while_a_run_holds_it(tmp_path: Path) -> None:
    """docs/cli.md: `.lock` exists while a run is in progress; a finished run used to leave it with its pid."""
    lock = tmp_path / "suite" / ".lock"
    with directory_lock(tmp_path / "suite"):
        assert lock.read_text() == str(os.getpid())
        with pytest.raises(UserError, match=f"in use by another attnbench run \\(pid {os.getpid()}\\)"):
            with directory_lock(tmp_path / "suite"):
                pass
        assert lock.is_file()  # the refused second holder removed nothing
    assert not lock.exists()
    with pytest.raises(RuntimeError), directory_lock(tmp_path / "suite"):
        raise RuntimeError("a run that fails")
    assert not lock.exists()


def test_a_killed_runs_lock_file_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_text("999999")  # a SIGKILLed run's file: unlocked, its pid gone
    with directory_lock(tmp_path):
        assert (tmp_path / ".lock").read_text() == str(os.getpid())
    assert not (tmp_path / ".lock").exists()
