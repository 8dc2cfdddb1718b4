"""No write follows a symbolic link planted under --out: the lock file, a store or a report, and a suite directory
that links elsewhere are refused (exit 2, one line naming the link) before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


def _run(cli: Callable[..., CliResult], suite: Path, out: Path) -> CliResult:
    return cli("run", suite, "--out", out, "--profile", "smoke", "--device", "cpu")


@pytest.mark.parametrize("planted", [".lock", "results.db", "results.csv"])
def test_a_link_planted_in_the_suite_directory_is_refused_and_its_target_untouched(
        cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    directory = tmp_path / "out" / "tiny" / "smoke"
    directory.mkdir(parents=True)
    (directory / planted).symlink_to(victim)
    result = _run(cli, tiny_suite, tmp_path / "out")
    assert result.code == 2 and len(result.err_lines) == 1 and planted in result.err and "symbolic link" in result.err
    assert victim.read_text() == "precious\n"


def test_a_suite_directory_that_links_outside_out_is_refused(cli: Callable[..., CliResult], tiny_suite: Path,
                                                             tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tiny").symlink_to(elsewhere, target_is_directory=True)
    result = _run(cli, tiny_suite, tmp_path / "out")
    assert result.code == 2 and "tiny" in result.err and "symbolic link" in result.err
    assert list(elsewhere.iterdir()) == []


def test_out_itself_may_be_a_link(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real, target_is_directory=True)
    assert _run(cli, tiny_suite, tmp_path / "out").code == 0
    assert (real / "tiny" / "smoke" / "results.csv").is_file()


def test_report_refuses_a_planted_link_too(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    assert _run(cli, tiny_suite, tmp_path / "out").code == 0
    victim = tmp_path / "victim.md"
    victim.write_text("mine\n")
    table = next((tmp_path / "out" / "tiny" / "smoke").glob("table4_*.md"))
    table.unlink()
    table.symlink_to(victim)
    result = cli("report", tmp_path / "out")
    assert result.code == 2 and table.name in result.err and victim.read_text() == "mine\n"
