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


@pytest.mark.parametrize("planted", [".data_cache", ".cache", ".cache/matplotlib", ".cache/tmp"])
def test_a_cache_folder_linking_outside_out_is_refused_before_anything_is_written(
        cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, planted: str) -> None:
    """The data cache, TMPDIR, Ray's session, Inductor and matplotlib would write wherever such a link points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "out" / planted
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    result = _run(cli, tiny_suite, tmp_path / "out")
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert str(link) in result.err and "outside --out" in result.err
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "out" / "tiny").exists()


def test_a_link_deep_in_the_cache_to_a_file_outside_out_is_refused(cli: Callable[..., CliResult], tiny_suite: Path,
                                                                    tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious\n")
    fonts = tmp_path / "out" / ".cache" / "matplotlib"
    fonts.mkdir(parents=True)
    (fonts / "fontlist-v390.json").symlink_to(victim)
    result = _run(cli, tiny_suite, tmp_path / "out")
    assert result.code == 2 and "fontlist-v390.json" in result.err and victim.read_text() == "precious\n"


def test_a_link_that_stays_inside_out_is_the_runs_own(cli: Callable[..., CliResult], tiny_suite: Path,
                                                      tmp_path: Path) -> None:
    """Ray leaves ``session_latest`` pointing at its newest session folder, under ``<out>/.cache/ray``."""
    ray = tmp_path / "out" / ".cache" / "ray"
    (ray / "session_1").mkdir(parents=True)
    (ray / "session_latest").symlink_to(ray / "session_1", target_is_directory=True)
    assert _run(cli, tiny_suite, tmp_path / "out").code == 0
