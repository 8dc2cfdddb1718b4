"""Numbers you can publish: the code and the thread count in every key (an edited variant is measured again, the
others are reused), every run kept, noisy timings flagged, honest exits, and ``attnbench compare``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import harness.core.provenance
import harness.kinds.speed.cells
import harness.measure.group
import harness.run.runner
from harness.commands import default_threads
from harness.core.cell import Cell, CellResult, Context
from harness.core.store import Store
from harness.light import attnbench_command
from harness.report.export import write_suite_reports
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import CliResult, patch_kind, tiny_doc

pytestmark = pytest.mark.usefixtures("fast_runner", "one_thread")


def _forget_identities() -> None:
    provenance = harness.core.provenance
    for cached in (provenance._imports, provenance.import_closure, provenance._code_identity):
        cached.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_identities() -> Iterator[None]:
    """An edit of one test must not stay in the identities the next one computes."""
    _forget_identities()
    yield
    _forget_identities()


def _edit(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """As if ``module``'s file had been edited and a new process started: its source reads differently from now on
    (the identities are computed once per process: their caches are emptied)."""
    provenance = harness.core.provenance
    real = provenance._source

    def edited(name: str) -> bytes:
        return real(name) + (b"\n# edited\n" if name == module else b"")

    monkeypatch.setattr(provenance, "_source", edited)
    _forget_identities()


def test_editing_a_variant_makes_only_its_cells_stale(monkeypatch: pytest.MonkeyPatch, write_yaml: Callable[..., Path],
                                                      tmp_path: Path) -> None:
    suite_path = write_yaml(tiny_doc(metrics=["memory"]))
    first = run_suite(load_suite(suite_path), out=tmp_path, progress=False)
    assert first.skipped_done == 0 and sum(first.statuses.values()) == 8
    _edit(monkeypatch, "attentions.s3attention")
    suite = load_suite(suite_path)
    again = run_suite(suite, out=tmp_path, progress=False)
    assert again.skipped_done == 4 and sum(again.statuses.values()) == 4  # the four s3attention cells
    assert again.references == 0  # memory is not timed: no baseline to pair with
    with Store(tmp_path / "tiny" / "quick" / "results.db") as store:
        latest = store.dataframe([c.key for c in suite.expand("cpu")])
    assert sorted(set(latest.loc[latest["run_id"] == 2, "attention"])) == ["s3attention"]
    with Store(tmp_path / "tiny" / "quick" / "results.db") as store:  # `attnbench report`: every key of the store
        assert len(store.db.execute("SELECT DISTINCT key FROM cells").fetchall()) == 12  # the stale keys are kept
        assert len(store.dataframe()) == 8  # ... as history: one row per cell, its newest result
        assert write_suite_reports(store)
    _edit(monkeypatch, "harness.kinds.speed.cells")  # the measuring code: every cell of the kind
    assert run_suite(load_suite(suite_path), out=tmp_path, progress=False).skipped_done == 0


def test_a_stale_timed_variant_is_timed_beside_its_baseline_again(write_yaml: Callable[..., Path],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """Its speed-ups stay paired: the baseline is timed again in the same rounds, and its new row is stored."""
    suite_path = write_yaml(tiny_doc(metrics=["time"], axes={"seq_len": [16], "mode": ["fwd"]}))
    run_suite(load_suite(suite_path), out=tmp_path, progress=False)
    _edit(monkeypatch, "attentions.s3attention")
    again = run_suite(load_suite(suite_path), out=tmp_path, progress=False)
    assert (again.total, again.skipped_done, again.references, again.statuses) == (2, 1, 1, {"ok": 2})
    df = pd.read_csv(tmp_path / "tiny" / "quick" / "results.csv")
    assert df["speedup_paired"].all() and set(df["run_id"]) == {2}


def test_the_thread_count_is_part_of_the_key(write_yaml: Callable[..., Path]) -> None:
    import torch

    path = write_yaml(tiny_doc())
    one = {c.key for c in load_suite(path).expand("cpu")}
    torch.set_num_threads(2)
    assert not one & {c.key for c in load_suite(path).expand("cpu")}
    assert {c.threads for c in load_suite(path).expand("cpu")} == {2}


def test_default_threads_leave_a_core_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert default_threads("cpu") == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert default_threads("cpu") == 1


def test_timed_cells_store_their_samples_and_a_quiet_run_flags_nothing(write_yaml: Callable[..., Path],
                                                                       tmp_path: Path) -> None:
    suite = load_suite(write_yaml(tiny_doc(metrics=["time"])))
    run_suite(suite, out=tmp_path, progress=False)
    with Store(tmp_path / "tiny" / "quick" / "results.db") as store:
        df = store.dataframe()
        samples = store.samples()
    assert (df["status"] == "ok").all() and df["timing_group"].nunique() == 4  # one group per shape and mode
    assert {len(s) for s in samples.values()} == {10} and len(samples) == 8
    assert set(df["timing_group"]) == {group for _, group in samples}
    table = (tmp_path / "tiny" / "quick" / "ratios_cpu_float32_fwd_b1_h2_d16.md").read_text()
    assert "S3Attention" in table and "[" in table  # paired speed-ups with intervals


def test_a_busy_machine_flags_the_cells_and_warns(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult],
                                                  write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    monkeypatch.setattr(harness.measure.group, "load_between",
                        lambda a, b: {"load_other_cores": 1.0, "steal_fraction": 0.0})
    result = cli("run", write_yaml(tiny_doc(metrics=["time"])), "--out", tmp_path, "--device", "cpu")
    assert result.code == 0, result.err
    assert result.err_lines[-1].startswith("warning: 8 cells were timed while the machine was busy")
    df = pd.read_csv(tmp_path / "tiny" / "quick" / "results.csv")
    assert df["noisy"].all() and df["noisy_reason"].str.startswith("other processes used 1.00 cores").all()
    assert "†" in (tmp_path / "tiny" / "quick" / "table4_cpu_float32_fwd_b1_h2_d16.md").read_text()


def test_require_quiet_stops_with_exit_1_on_a_busy_machine(monkeypatch: pytest.MonkeyPatch,
                                                           cli: Callable[..., CliResult],
                                                           write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    monkeypatch.setattr(harness.run.runner, "other_load", lambda window_s=1.0: 1.0)
    result = cli("run", write_yaml(tiny_doc(metrics=["time"])), "--out", tmp_path, "--device", "cpu",
                 "--require-quiet", "--quiet-timeout", "2")
    assert result.code == 1
    assert result.err_lines == ["attnbench: error: --require-quiet: other processes still use 1.00 cores after 2 s "
                                "of waiting; stop them or raise --quiet-timeout (the cells measured so far are "
                                "stored)"]
    monkeypatch.setattr(harness.run.runner, "other_load", lambda window_s=1.0: 0.0)
    assert cli("run", write_yaml(tiny_doc(metrics=["time"])), "--out", tmp_path, "--device", "cpu",
               "--require-quiet").code == 0


def test_ctrl_c_prints_one_line_and_exits_130(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult],
                                              write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    calls = {"n": 0}

    def interrupted(cell: Cell, ctx: Context) -> CellResult:
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return CellResult("ok", "", {"time_ms_median": 1.0})

    patch_kind(monkeypatch, "speed", run=interrupted)
    path = write_yaml(tiny_doc())
    result = cli("run", path, "--out", tmp_path, "--device", "cpu")
    assert result.code == 130
    # the first finished cell's progress line (then one a minute), then one line
    assert "Traceback" not in result.err and len(result.err_lines) == 2
    line = result.err_lines[-1]
    assert line.startswith("attnbench: interrupted; 3 cells of tiny/quick are stored in ")
    assert line.endswith(f"resume with: {attnbench_command()} run {path} --out {tmp_path} --device cpu")


# ---------------------------------------------------------------------------------------------------------------------
# attnbench compare


def flat(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces (compare wraps its prose at 120 columns)."""
    return " ".join(text.split())


def _store(directory: Path, cells: list[Cell], scale: dict[str, float], seed: int, noisy: bool = False, *,
           machine: float = 1.0, drift: float = 0.0, baseline: str | None = None) -> None:
    """A run of ``cells``: 10 interleaved rounds per shape, each round slowed alike for every variant by a factor
    1 + N(0, ``drift``) (the machine moving within the run), every variant ``scale`` times slower and the whole
    machine ``machine`` times slower."""
    rng = np.random.default_rng(seed)
    env = {"git_commit": f"c{seed}", **({"report": {"baseline": baseline}} if baseline else {})}
    rounds: dict[str, np.ndarray] = {}
    with Store(directory / "results.db") as store:
        run = store.start_run("tiny", "quick", env, [])
        for cell in cells:
            shape = json.dumps({k: v for k, v in cell.params.items() if k != "attention"}, sort_keys=True)
            factors = rounds.setdefault(shape, machine * (1 + drift * rng.standard_normal(10)))
            samples = list(factors * rng.normal(10.0, 0.1, 10) * scale.get(cell.params["attention"], 1.0))
            metrics = {"time_ms_median": float(np.median(samples)), "timing_group": f"g{seed}-{shape}",
                       "noisy": noisy}
            store.put(run, cell, "ok", "", metrics, samples=samples)


@pytest.fixture
def stores(write_yaml: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    cells = load_suite(write_yaml(tiny_doc())).expand("cpu")
    _store(tmp_path / "a", cells, {}, 0)
    _store(tmp_path / "b", cells, {"s3attention": 1.3}, 1)
    return tmp_path / "a", tmp_path / "b"


def test_compare_finds_the_slower_variant_and_fails_on_it(cli: Callable[..., CliResult],
                                                          stores: tuple[Path, Path]) -> None:
    a, b = stores
    same = cli("compare", a, a, "--fail-on-regression")
    assert same.code == 0 and "0 slower and 0 faster" in flat(same.out)
    result = cli("compare", a, b, "--threshold", "10%", "--fail-on-regression")
    assert result.code == 1
    assert "4 slower and 0 faster beyond 10%" in flat(result.out) and "4 the same" in flat(result.out)
    rows = json.loads(cli("compare", a, b, "--format", "json").out)["cells"]
    slower = {(r["attention"], r["verdict"]) for r in rows if r["ratio"] > 1.2}
    assert slower == {("s3attention", "regression")} and all(0.95 < r["ratio"] < 1.05 for r in rows
                                                             if r["attention"] == "vanilla")
    assert cli("compare", a, b).code == 0  # reporting only, unless asked to fail
    csv = cli("compare", a, b, "--format", "csv").out
    assert csv.splitlines()[0].startswith("suite,attention,")


def test_compare_reads_at_a_glance(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                   tmp_path: Path) -> None:
    """Within 120 columns; the columns every cell shares named once above the table; the largest change first;
    --only-changed lists the changed cells only; the ratio columns say what they divide."""
    doc = tiny_doc(axes={"attention": ["vanilla", "sparse_transformer_strided", "s3attention"]})
    cells = load_suite(write_yaml(doc)).expand("cpu")
    _store(tmp_path / "a", cells, {}, 0, baseline="vanilla")
    _store(tmp_path / "b", cells, {"s3attention": 1.3, "sparse_transformer_strided": 0.6}, 1, baseline="vanilla")
    out = cli("compare", tmp_path / "a", tmp_path / "b").out
    lines = out.splitlines()
    assert max(map(len, lines[1:])) <= 120, max(lines, key=len)  # the title names the two directories as given
    assert "Every cell: batch_size 1, heads 2, dim 16, dtype float32, compile eager." in out  # constant columns, once
    header = next(line for line in lines if line.startswith("| attention"))
    assert "batch_size" not in header and "B/A of t/ref [95%]" in header and "A t/ref" in header
    body = [line for line in lines if line.startswith("| ") and not line.startswith("| attention")]
    assert body[0].startswith("| sparse_transformer_strided") and "improvement" in body[0]  # 0.6x: |log| largest
    assert "t/ref = the cell's time ÷ `vanilla`'s in the same interleaved rounds" in flat(out)
    only = cli("compare", tmp_path / "a", tmp_path / "b", "--only-changed").out
    rows = [line for line in only.splitlines() if line.startswith("| ") and not line.startswith("| attention")]
    assert len(rows) == 8 and all("same" not in r and "baseline" not in r for r in rows)
    assert "4 unchanged cells not shown" in flat(only)


def test_a_regression_timed_on_a_busy_machine_is_shown_but_not_failed(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    cells = load_suite(write_yaml(tiny_doc())).expand("cpu")
    _store(tmp_path / "a", cells, {}, 0)
    _store(tmp_path / "b", cells, {"s3attention": 1.3}, 1, noisy=True)
    result = cli("compare", tmp_path / "a", tmp_path / "b", "--fail-on-regression")
    assert result.code == 0
    assert "4 of the slower timed on a busy machine (†), not counted as regressions" in flat(result.out)
    assert "regression †" in flat(result.out)


def test_compare_two_runs_of_one_store(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                       tmp_path: Path) -> None:
    cells = load_suite(write_yaml(tiny_doc())).expand("cpu")
    _store(tmp_path, cells, {}, 0)
    _store(tmp_path, cells, {"vanilla": 0.5}, 1)
    result = cli("compare", f"{tmp_path}@1", f"{tmp_path}@2", "--format", "json")
    verdicts = {(r["attention"], r["verdict"]) for r in json.loads(result.out)["cells"]}
    assert verdicts == {("vanilla", "improvement"), ("s3attention", "same")}


def test_compare_relative_to_the_baseline_cancels_the_drift_of_the_machine(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    cells = load_suite(write_yaml(tiny_doc())).expand("cpu")
    _store(tmp_path / "a", cells, {}, 0, drift=0.05, baseline="vanilla")
    _store(tmp_path / "b", cells, {}, 1, machine=1.4, drift=0.05, baseline="vanilla")  # the machine 40% slower
    absolute = cli("compare", tmp_path / "a", tmp_path / "b", "--absolute", "--threshold", "10%")
    assert "8 slower" in flat(absolute.out) and "absolute times" in flat(absolute.out)
    relative = cli("compare", tmp_path / "a", tmp_path / "b", "--threshold", "10%", "--fail-on-regression")
    assert relative.code == 0, relative.out  # the suite's baseline, stored with the run, is the default reference
    said = flat(relative.out)
    assert "4 cells timed in both, relative to `vanilla`" in said and "0 slower and 0 faster" in said
    assert "`vanilla` itself took 1.4× its time in A" in flat(relative.out)
    rows = json.loads(cli("compare", tmp_path / "a", tmp_path / "b", "--format", "json").out)
    assert rows["relative_to"] == "vanilla"
    assert {r["verdict"] for r in rows["cells"] if r["attention"] == "vanilla"} == {"baseline"}
    for r in rows["cells"]:  # the per-round ratio is the variant's own slowdown, 1.0 here, drift or not
        assert r["attention"] == "vanilla" or (abs(r["rel_a"] - 1) < 0.05 and abs(r["ratio"] - 1) < 0.05)


def test_compare_relative_finds_a_slower_variant_on_a_faster_machine(
        cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    cells = load_suite(write_yaml(tiny_doc())).expand("cpu")
    _store(tmp_path / "a", cells, {}, 0, drift=0.05)
    _store(tmp_path / "b", cells, {"s3attention": 1.3}, 1, machine=0.78, drift=0.05)  # slower code, faster machine
    absolute = cli("compare", tmp_path / "a", tmp_path / "b", "--threshold", "10%", "--fail-on-regression")
    # no baseline stored: absolute, and the drift hides it
    assert absolute.code == 0 and "0 slower" in flat(absolute.out)
    relative = cli("compare", tmp_path / "a", tmp_path / "b", "--threshold", "10%", "--relative-to", "vanilla",
                   "--fail-on-regression")
    assert relative.code == 1 and "4 slower and 0 faster beyond 10%" in flat(relative.out)
    rows = json.loads(cli("compare", tmp_path / "a", tmp_path / "b", "--relative-to", "vanilla", "--format",
                          "json").out)["cells"]
    assert all(1.2 < r["ratio"] < 1.4 and r["verdict"] == "regression" for r in rows if r["attention"] != "vanilla")


@pytest.mark.parametrize(("args", "message"), [
    (("{tmp}/nothing", "{tmp}/nothing"), "no results.db here or below"),
    (("{tmp}/a@x", "{tmp}/a"), "the run after @ must be a run id"),
    (("{tmp}/a@9", "{tmp}/a"), "no run 9 in"),
    (("{tmp}/a", "{tmp}/b", "--threshold", "lots"), "--threshold lots: give a percentage"),
    (("{tmp}/a", "{tmp}/empty"), "no cell was timed (with stored samples) in both"),
    (("{tmp}/a", "{tmp}/b", "--relative-to", "nosuch"), "needs `nosuch` timed in its rounds on both sides"),
    (("{tmp}/a", "{tmp}/b", "--relative-to", "vanilla", "--absolute"), "not allowed with argument"),
])
def test_compare_bad_input_is_exit_2(cli: Callable[..., CliResult], stores: tuple[Path, Path], tmp_path: Path,
                                     args: tuple[str, ...], message: Any) -> None:
    (tmp_path / "nothing").mkdir()
    with Store(tmp_path / "a" / "results.db") as store:  # a copy of A's cells without samples: nothing to compare
        cell = Cell.from_json(json.loads(store.db.execute("SELECT cell_json FROM cells").fetchone()[0]))
    with Store(tmp_path / "empty" / "results.db") as store:
        store.put(store.start_run("tiny", "quick", {}, []), cell, "ok", "", {"peak_mem_bytes": 1.0})
    result = cli("compare", *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.code == 2 and len(result.err_lines) == 1 and message in result.err
