"""``--set`` checked before torch (harness.run.overrides): the axes it reads from each kind's declaration without
importing it are the kind's axes, and its error is the loader's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.core.errors import SuiteError
from harness.kinds import DEFAULT_KIND, KINDS
from harness.run import overrides
from harness.run.suitefile import load_suite, parse_set
from tests.conftest import REPO_ROOT, CliResult


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_axes_read_without_importing_a_kind_are_its_axes(kind: str) -> None:
    assert overrides.declared_axes(kind) == tuple(KINDS[kind].all_axes())


def test_the_default_kind_is_the_loaders() -> None:
    assert overrides.DEFAULT_KIND == DEFAULT_KIND


def test_a_suite_files_kind_is_read_as_the_loader_reads_it(write_yaml: Callable[..., Path]) -> None:
    assert overrides.suite_kind(REPO_ROOT / "suites" / "speed.yaml", "quick") == "speed"
    assert overrides.suite_kind(REPO_ROOT / "suites" / "robustness.yaml", "smoke") == "accuracy"
    assert overrides.suite_kind(write_yaml("name: x\nprofiles: {q: {kind: decode}}\n"), "q") == "decode"
    assert overrides.suite_kind(write_yaml("[not, a, mapping]\n"), "q") is None
    assert overrides.suite_kind(REPO_ROOT / "nowhere.yaml", "q") is None
    assert overrides.declared_axes("../core") is None and overrides.declared_axes("nosuch") is None


def test_the_early_error_is_the_loaders(tiny_suite: Path) -> None:
    with pytest.raises(SuiteError) as early:
        overrides.check_set_axes(tiny_suite, "quick", ["seq_len=64", "config.dropout=0.1", "seqlen=64"])
    with pytest.raises(SuiteError) as late:
        load_suite(tiny_suite, "quick", parse_set(["seqlen=64"]))
    assert str(early.value) == str(late.value)
    assert str(early.value).endswith("did you mean seq_len?")
    overrides.check_set_axes(tiny_suite, "quick", ["seq_len=64", "config.dropout=0.1"])  # nothing to refuse


def test_the_cli_refuses_a_set_typo_in_one_line(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    result = cli("run", REPO_ROOT / "suites" / "decode.yaml", "--set", "seq_len=64", "--out", tmp_path)
    assert result.code == 2 and len(result.err_lines) == 1
    assert "--set: seq_len: unknown axis for a decode suite; valid axes: attention, context" in result.err
    assert not (tmp_path / "decode").exists()
