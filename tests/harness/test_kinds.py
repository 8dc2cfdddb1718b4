"""The table of suite kinds: each kind declared once and read everywhere (a new kind runs end to end with nothing
else changed), capabilities decided before anything is built, and the settings each kind reads reaching its cells."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import attentions
import harness.kinds.speed.cells
import harness.measure.group
from harness.core import faults
from harness.core.cell import Cell, CellResult, Context
from harness.core.store import Store
from harness.core.suite import RankedQuantity, SuiteKind
from harness.kinds import KINDS
from harness.report.compare import Side, compare
from harness.report.compositional import load_suite_results, rank
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult, tiny_doc
from tests.harness.kinds.accuracy.test_kind import ACC

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


def _echo(cell: Cell, ctx: Context) -> CellResult:
    return CellResult("ok", "", {"echo_n": cell.params["seq_len"]})


def test_a_new_kind_needs_only_its_entry_in_the_table(monkeypatch: pytest.MonkeyPatch, write_yaml: Callable[..., Path],
                                                     tmp_path: Path) -> None:
    """Loader, runner, recorder, store and report export all look the kind up: nothing else names it."""
    seen: list[str] = []

    def reports(store: Store, name: str, options: Any, keys: list[str] | None) -> list[Path]:
        seen.append(f"{name}:{len(store.dataframe(keys))}:{options['tables']}")
        return []

    echo = dataclasses.replace(KINDS["speed"], name="echo", tables=("echo_table",), run=_echo, run_group=None,
                               write_reports=reports, keys=frozenset({"fixed", "metrics", "timing"}))
    monkeypatch.setitem(KINDS, "echo", echo)
    doc = tiny_doc(kind="echo")
    suite = load_suite(write_yaml(doc), "smoke")
    assert isinstance(suite.kind, SuiteKind) and suite.kind.name == "echo"
    summary = run_suite(suite, out=tmp_path, progress=False)
    assert summary.statuses == {"ok": len(suite.expand("cpu"))}
    assert seen == [f"tiny:{len(suite.expand('cpu'))}:['echo_table']"]
    with Store(tmp_path / "tiny" / "smoke" / "results.db") as store:
        df = store.dataframe()
    assert set(df["kind"]) == {"echo"} and set(df["echo_n"]) == set(suite.axes["seq_len"])


def test_a_new_kind_ranks_and_compares_on_what_it_declares(monkeypatch: pytest.MonkeyPatch,
                                                           write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    """``report --rank`` ranks a kind on the metrics it declares (``ranked``), and ``compare`` shows the axes it
    declares (``shown_axes``): neither names a kind."""
    echo = dataclasses.replace(KINDS["speed"], name="echo", ranked=(RankedQuantity("time_ms_median", "echo time",
                                                                                   False),),
                               shown_axes=("seq_len",))
    monkeypatch.setitem(KINDS, "echo", echo)
    suite = load_suite(write_yaml(tiny_doc(kind="echo", metrics=["time"])), "quick")
    for side in ("a", "b"):
        assert run_suite(suite, out=tmp_path / side, progress=False).statuses == {"ok": len(suite.expand("cpu"))}
    ranking = rank([load_suite_results(tmp_path / "a" / "tiny" / "quick")])
    assert set(ranking.table["variant"]) == {"vanilla", "s3attention"}
    assert {m.split(" @ ")[0] for m in ranking.values["metric"]} == {"echo time"}
    result = compare(*(Side(s, tmp_path / s / "tiny" / "quick" / "results.db", None) for s in ("a", "b")), 0.1)
    assert len(result) == len(suite.expand("cpu")) and list(result.columns[:4]) == [
        "suite", "attention", "seq_len", "device"] and set(result["kind"]) == {"echo"}


def test_unknown_kind_is_exit_2(cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    result = cli("run", write_yaml(tiny_doc(kind="sped")), "--out", tmp_path / "out")
    assert result.code == 2 and "kind: unknown kind 'sped'; choose one of speed, accuracy" in result.err


# ---------------------------------------------------------------------------------------------------------------------
# Capabilities are read, before anything is built


def _never_built(throwaway: Callable[..., Any], **caps: Any) -> str:
    """A registered variant that fails the test if the harness ever builds it."""
    name = throwaway(**caps).name
    spec = attentions.spec(name)

    class Forbidden(spec.module_cls):  # type: ignore[misc, valid-type]
        def __init__(self, cfg: Any) -> None:
            raise AssertionError(f"{name} was built although its capabilities rule the cell out")

    object.__setattr__(spec, "module_cls", Forbidden)
    return name


def test_a_length_off_the_variants_multiple_is_unsupported(throwaway: Callable[..., Any],
                                                          write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    name = _never_built(throwaway, seq_len_multiple_of=64)
    doc = tiny_doc(axes={"attention": [name], "seq_len": [96]})
    suite = load_suite(write_yaml(doc), "quick")
    cells = suite.expand("cpu")
    assert cells and all(c.skip_reason and "multiple of 64, got 96" in c.skip_reason for c in cells)
    summary = run_suite(suite, out=tmp_path, progress=False)
    assert summary.statuses == {"unsupported": len(cells)}
    with Store(tmp_path / "tiny" / "quick" / "results.db") as store:
        assert all("multiple of 64" in m for m in store.dataframe()["message"])


def test_padded_tasks_need_mask_support(throwaway: Callable[..., Any], write_yaml: Callable[..., Path],
                                        tmp_path: Path) -> None:
    """Every LRA task pads its sequences: a variant that ignores the mask would let padding leak into real tokens."""
    name = _never_built(throwaway, supports_mask=False)
    doc = {**ACC, "axes": {"attention": [name], "task": ["text"], "seed": [0]}}
    suite = load_suite(write_yaml(doc), "smoke")
    (cell,) = suite.expand("cpu")
    assert cell.skip_reason and "padding mask" in cell.skip_reason
    assert run_suite(suite, out=tmp_path, progress=False).statuses == {"unsupported": 1}


def test_speed_cells_have_no_padding(throwaway: Callable[..., Any], write_yaml: Callable[..., Path]) -> None:
    name = throwaway(supports_mask=False).name
    suite = load_suite(write_yaml(tiny_doc(axes={"attention": [name]})), "quick")
    assert not any(c.skip_reason for c in suite.expand("cpu"))


# ---------------------------------------------------------------------------------------------------------------------
# Settings reach the cell


def test_flush_l2_timing_key_reaches_the_timer(monkeypatch: pytest.MonkeyPatch,
                                               write_yaml: Callable[..., Path]) -> None:
    seen: list[dict[str, Any]] = []
    real = harness.measure.group.time_interleaved

    def spy(fns: list[Callable[[], object]], device: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(fns, device, **kwargs)

    monkeypatch.setattr(harness.measure.group, "time_interleaved", spy)
    doc = tiny_doc(metrics=["time"], timing={"flush_l2": True})
    cell = next(c for c in load_suite(write_yaml(doc), "quick").expand("cpu") if c.params["mode"] == "fwd")
    assert harness.kinds.speed.cells.measure_cell(cell, Context(Path("."))).status == "ok"
    assert seen and seen[0]["flush_l2"] is True  # no effect on the CPU, but what the suite asked for


def test_run_prints_the_suite_description(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                          tmp_path: Path) -> None:
    doc = tiny_doc(description="what this suite is for")
    result = cli("run", write_yaml(doc), "--out", tmp_path, "--device", "cpu", "--profile", "quick",
                 "--only", "vanilla", "--set", "seq_len=16", "--set", "mode=fwd")
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == "tiny: what this suite is for"


def test_an_unknown_fault_action_is_refused_not_taken_for_a_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.ENV, "runner.before_cell:1:kil")
    with pytest.raises(ValueError, match="unknown action 'kil'; use one of kill, exit, segv"):
        faults.point("some.other.point")


def test_importing_harness_changes_no_environment() -> None:
    """The profiler's log setting belongs to the memory module, not to ``import harness``."""
    code = ("import os, harness; a = 'KINETO_LOG_LEVEL' in os.environ; "
            "import harness.measure.memory; print(a, os.environ.get('KINETO_LOG_LEVEL'))")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "99"]
