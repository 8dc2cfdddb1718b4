"""``attnbench report --rank``: z-scores and their sign, the index computed by hand, std = 0, missing and partial
values reported, skipped metrics, robustness suites ranked on their noisy cells, controls shown apart and never
ranked, suites of different profiles marked, suites that give nothing not counted, a LaTeX file that compiles, and
the CLI end to end."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.core.cell import Cell
from harness.core.store import Store
from harness.report.compositional import COVERAGE_MARK, SuiteResults, default_out_dir, rank, suite_metrics, zscores
from harness.report.ranking import (
    controls_table,
    method_text,
    notes_text,
    profiles_text,
    ranking_table,
    write_ranking,
)
from tests.conftest import CliResult
from tests.latex import ENGINE, compile_tex

Z1 = math.sqrt(1.5)  # z of the best of three evenly spaced values (population std)


def speed_cell(attention: str, seq_len: int = 16, mode: str = "fwd", suite: str = "speed") -> Cell:
    params = {"attention": attention, "seq_len": seq_len, "batch_size": 1, "heads": 2, "dim": 16, "mode": mode,
              "dtype": "float32"}
    return Cell(suite, "speed", params, {}, {}, ("time", "memory"), {}, "cpu")


def accuracy_cell(attention: str, task: str = "text", seed: int = 0, suite: str = "accuracy", **axes: Any) -> Cell:
    return Cell(suite, "accuracy", {"attention": attention, "task": task, "seed": seed, **axes}, {}, {},
                ("accuracy",), {}, "cpu")


Row = tuple[Cell, str, dict[str, float]]


def frame(rows: list[Row]) -> pd.DataFrame:
    """The rows as ``Store.dataframe`` gives them (axis values, status, metrics), without a store."""
    return pd.DataFrame([{"key": c.key, "suite": c.suite, "kind": c.kind, **c.params, "device": c.device,
                          "status": status, "message": "", **metrics, "run_id": 1} for c, status, metrics in rows])


def suite(label: str, rows: list[Row]) -> SuiteResults:
    return SuiteResults(label, Path(label), frame(rows), pd.DataFrame())


def write_store(directory: Path, name: str, rows: list[Row]) -> Path:
    with Store(directory / "results.db") as store:
        run = store.start_run(name, "smoke", {"device_name": "test-cpu", "torch_version": "x", "threads": 1}, [])
        for cell, status, metrics in rows:
            store.put(run, cell, status, "" if status == "ok" else "boom", metrics)
    return directory


def speed_rows(times: dict[str, float], memory: dict[str, float]) -> list[Row]:
    return [(speed_cell(a), "ok", {"time_ms_median": t, "peak_mem_bytes": memory[a], "gflops": 1.0})
            for a, t in times.items()]


def accuracy_rows(accuracy: dict[str, float]) -> list[Row]:
    return [(accuracy_cell(a), "ok", {"test_acc": v, "steps_per_s": 1.0}) for a, v in accuracy.items()]


# The hand-computed example: a is best on every metric; b and c trade places.
#   speed:    time   a=1, b=2, c=3 (ms, lower better)  -> z a=+Z1, b=0,   c=-Z1
#             memory a=10, b=30, c=20 (lower better)    -> z a=+Z1, b=-Z1, c=0
#             index  a=+Z1, b=-Z1/2, c=-Z1/2
#   accuracy: a=0.9, b=0.5, c=0.7 (higher better)       -> z a=+Z1, b=-Z1, c=0 (the index)
#   overall:  a=+Z1, b=(-Z1/2 - Z1)/2 = -3/4 Z1, c=(-Z1/2 + 0)/2 = -Z1/4
SPEED = speed_rows({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 10.0, "b": 30.0, "c": 20.0})
ACCURACY = accuracy_rows({"a": 0.9, "b": 0.5, "c": 0.7})


def test_index_by_hand_and_the_variant_best_everywhere_ranks_first() -> None:
    ranking = rank([suite("speed/smoke", SPEED), suite("accuracy/smoke", ACCURACY)])
    table = ranking.table.set_index("variant")
    assert list(ranking.table["variant"]) == ["a", "c", "b"]
    assert list(ranking.table["rank"]) == [1, 2, 3]
    expected = {"a": (Z1, Z1, Z1), "b": (-Z1 / 2, -Z1, -0.75 * Z1), "c": (-Z1 / 2, 0.0, -Z1 / 4)}
    for variant, (speed, accuracy, overall) in expected.items():
        assert table.loc[variant, "speed/smoke"] == pytest.approx(speed)
        assert table.loc[variant, "accuracy/smoke"] == pytest.approx(accuracy, abs=1e-12)
        assert table.loc[variant, "overall"] == pytest.approx(overall)
    assert (table["suites_covered"] == 2).all() and (table["metrics_covered"] == 3).all()
    assert (table["metrics_total"] == 3).all()
    z = ranking.values.set_index(["metric", "variant"])["z"]
    assert z[("time @ n=16, fwd", "a")] == pytest.approx(Z1)  # lower time is better: the sign is flipped
    assert z[("accuracy @ Text", "a")] == pytest.approx(Z1)


def test_the_sign_makes_higher_better_for_every_quantity() -> None:
    values = pd.DataFrame({"suite": "s", "metric": ["time", "time", "acc", "acc"], "column": "x",
                           "higher_is_better": [False, False, True, True], "variant": ["fast", "slow"] * 2,
                           "value": [1.0, 5.0, 0.2, 0.8]})
    z = zscores(values)[0].set_index(["metric", "variant"])["z"]
    # two values: the population std gives ±1
    assert z[("time", "fast")] == pytest.approx(1.0) and z[("time", "slow")] == pytest.approx(-1.0)
    assert z[("acc", "fast")] == pytest.approx(-1.0) and z[("acc", "slow")] == pytest.approx(1.0)


@pytest.mark.parametrize("value", [0.1, 1234.5678, 0.0])
def test_equal_values_give_z_zero(value: float) -> None:
    # 0.1 three times: the mean is not exactly 0.1, so the std is rounding, not 0
    values = pd.DataFrame({"suite": "s", "metric": "m", "column": "x", "higher_is_better": True,
                           "variant": ["a", "b", "c"], "value": [value] * 3})
    ranked, skipped = zscores(values)
    assert list(ranked["z"]) == [0.0, 0.0, 0.0] and skipped.empty


def test_failed_and_absent_variants_are_reported_not_dropped() -> None:
    speed = [*SPEED, (speed_cell("d"), "ok", {"time_ms_median": 0.5, "peak_mem_bytes": 5.0}),
             (speed_cell("e"), "oom", {}), (speed_cell("c", seq_len=32), "oom", {})]
    speed += [(speed_cell(a, seq_len=32), "ok", {"time_ms_median": t, "peak_mem_bytes": 1.0})
              for a, t in (("a", 2.0), ("b", 4.0), ("d", 1.0))]
    ranking = rank([suite("speed/smoke", speed), suite("accuracy/smoke", ACCURACY)])
    table = ranking.table.set_index("variant")
    # d ran only in the speed suite: its overall index is its speed index, marked, and the note says so
    assert table.loc["d", "suites_covered"] == 1 and pd.isna(table.loc["d", "accuracy/smoke"])
    assert table.loc["d", "overall"] == table.loc["d", "speed/smoke"]
    # e failed every cell: listed, without an index or a rank
    assert pd.isna(table.loc["e", "overall"]) and pd.isna(table.loc["e", "rank"])
    assert ranking.table.iloc[-1]["variant"] == "e"
    # c's n=32 cell ran out of memory: missing for those two metrics only
    missing = ranking.values[ranking.values["z"].isna()].set_index(["variant", "metric"])["reason"]
    assert missing[("c", "time @ n=32, fwd")] == "oom" and missing[("c", "memory @ n=32, fwd")] == "oom"
    assert missing[("d", "accuracy @ Text")] == "not run by this suite"
    assert table.loc["c", "metrics_covered"] == 3 and table.loc["c", "metrics_total"] == 5
    md = ranking_table(ranking, "md")
    d_row = next(line for line in md.splitlines() if "| d " in line)
    assert COVERAGE_MARK["md"] in d_row and "—" in d_row
    notes = "\n".join(notes_text(ranking))
    assert "index over 1 of 2 suites (no index from accuracy/smoke): d" in notes
    assert "not run by accuracy/smoke: d, e" in notes
    assert "c: speed/smoke: time @ n=32, fwd (oom); memory @ n=32, fwd (oom)" in notes
    assert "e: speed/smoke: all 4 metrics (no cell, oom)" in notes  # e has no n=32 cell at all
    assert "No index (no value in any ranked metric): e" in notes
    assert r"$^\dagger$" in ranking_table(ranking, "tex")


def test_partial_seeds_and_single_value_metrics() -> None:
    rows = [(accuracy_cell(a, "text", s), "ok", {"test_acc": v + s / 10}) for a, v in (("a", 0.5), ("b", 0.3))
            for s in (0, 1)]
    rows += [(accuracy_cell("c", "text", 0), "ok", {"test_acc": 0.6}), (accuracy_cell("c", "text", 1), "error", {}),
             (accuracy_cell("a", "image", 0), "ok", {"test_acc": 0.4}), (accuracy_cell("b", "image", 0), "nan", {})]
    values, description = suite_metrics(frame(rows), "acc")
    by = values.set_index(["metric", "variant"])
    assert by.loc[("accuracy @ Text", "a"), "value"] == pytest.approx(0.55)  # mean over seeds
    assert by.loc[("accuracy @ Text", "c"), "value"] == 0.6 and by.loc[("accuracy @ Text", "c"), "reason"] == "error"
    assert "mean over seeds 0, 1" in description
    ranking = rank([SuiteResults("acc", Path("acc"), frame(rows), pd.DataFrame())])
    assert list(ranking.skipped["metric"]) == ["accuracy @ Image"]  # only a has a value
    notes = "\n".join(notes_text(ranking))
    assert "c, acc: accuracy @ Text: 1 of 2 (error)" in notes
    assert "Skipped metrics (fewer than 2 variants with a value): acc: accuracy @ Image (1)" in notes


def test_robustness_suites_are_ranked_on_their_noisy_cells() -> None:
    rows = [(accuracy_cell(a, "image", 0, "robustness", noise=n, noise_on="train+test"), "ok", {"test_acc": v})
            for a, n, v in (("a", 0, 0.9), ("b", 0, 0.5), ("a", 2, 0.6), ("b", 2, 0.7))]
    values, description = suite_metrics(frame(rows), "rob")
    assert set(values["metric"]) == {"accuracy @ Image, a=2"}
    assert "noisy cells (a > 0) only" in description
    ranking = rank([SuiteResults("rob", Path("rob"), frame(rows), pd.DataFrame())])
    assert list(ranking.table["variant"]) == ["b", "a"]  # worse clean, better under noise


def test_default_out_dir(tmp_path: Path) -> None:
    assert default_out_dir([tmp_path / "r" / "speed" / "q", tmp_path / "r" / "memory" / "q"]) == tmp_path / "r"
    assert default_out_dir([tmp_path / "r" / "speed" / "q"]) == tmp_path / "r" / "speed" / "q"
    assert default_out_dir(["/a/x", "/b/y"]) == Path("results")


# ---------------------------------------------------------------------------------------------------------------------
# CLI


@pytest.fixture
def stores(tmp_path: Path) -> list[Path]:
    return [write_store(tmp_path / "results" / "speed" / "smoke", "speed", SPEED),
            write_store(tmp_path / "results" / "accuracy" / "smoke", "accuracy", ACCURACY)]


def test_cli_rank_end_to_end(cli: Callable[..., CliResult], stores: list[Path], tmp_path: Path) -> None:
    result = cli("report", "--rank", *stores)
    assert result.code == 0, result.err
    out_dir = tmp_path / "results"
    names = ["ranking.md", "ranking.tex", "ranking.csv", "ranking_metrics.csv"]
    assert [line.strip() for line in result.out.splitlines()[1:]] == [str(out_dir / n) for n in names]
    csv = pd.read_csv(out_dir / "ranking.csv")
    assert list(csv["variant"]) == ["a", "c", "b"] and list(csv["rank"]) == [1, 2, 3]
    assert csv.loc[0, "overall"] == pytest.approx(Z1) and list(csv.columns[3:5]) == ["speed/smoke", "accuracy/smoke"]
    md = (out_dir / "ranking.md").read_text()
    assert "z-score per metric across variants" in md
    assert "mean within suite, then mean across the 2 suites that contribute a metric" in md
    assert "2 metrics from suite speed/smoke" in md and "1 metrics from suite accuracy/smoke" in md
    assert "test-cpu" in md  # the environment of the runs behind the numbers
    tex = (out_dir / "ranking.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and "$+1.22$" in tex
    metrics = pd.read_csv(out_dir / "ranking_metrics.csv")
    assert len(metrics) == 9 and metrics["z"].notna().all()

    elsewhere = tmp_path / "elsewhere"
    assert cli("report", "--rank", *stores, "--out-dir", elsewhere).code == 0
    assert (elsewhere / "ranking.md").is_file()
    assert cli("report", stores[0]).code == 0  # one directory: the suite's own reports, as before
    assert (stores[0] / "results.csv").is_file()


def _one_error_line(result: CliResult, *needles: str) -> None:
    assert result.code == 2, result.err
    assert len(result.err_lines) == 1 and result.err_lines[0].startswith("attnbench: error: "), result.err
    for needle in needles:
        assert needle in result.err_lines[0]


def test_cli_rank_bad_input_exits_2(cli: Callable[..., CliResult], stores: list[Path], tmp_path: Path) -> None:
    _one_error_line(cli("report", "--rank", stores[0], tmp_path / "nowhere"), "nowhere", "results.db")
    _one_error_line(cli("report", "--rank", tmp_path / "results"), "no results.db", str(stores[0]))
    _one_error_line(cli("report", "--rank"), "--rank", "--help")
    _one_error_line(cli("report", stores[0], "--rank", stores[1]), "not allowed", "--help")
    _one_error_line(cli("report", stores[0], "--out-dir", tmp_path), "--out-dir", "--rank")
    _one_error_line(cli("report", "--rank", stores[0], stores[0]), "given twice")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_error_line(cli("report", "--rank", *stores, "--out-dir", blocker / "out"), "--out-dir")
    lonely = write_store(tmp_path / "lonely", "speed", SPEED[:1])
    _one_error_line(cli("report", "--rank", lonely), "nothing to rank")
    empty = tmp_path / "empty"
    Store(empty / "results.db").close()
    _one_error_line(cli("report", "--rank", empty), "no results yet")
    assert not (tmp_path / "results" / "ranking.md").exists()


def approximation_rows(errors: dict[tuple[str, str], float]) -> list[Row]:
    return [(Cell("approximation", "approximation", {"attention": a, "budget": b, "seq_len": 256, "input": "random"},
                  {}, {}, ("time",), {}, "cpu"), "ok", {"rel_fro": e, "time_ms_median": 1.0 + e})
            for (a, b), e in errors.items()]


def test_approximation_budgets_are_settings_of_their_variant() -> None:
    """linformer's k=256 is its default (the same layer as `linformer`): ranked as linformer; its other budgets and
    local's windows (none at local's default, 50) are named, not ranked beside the variants."""
    rows = approximation_rows({("linformer", "k=32"): 0.5, ("linformer", "k=256"): 0.2, ("performer", "default"): 0.3,
                               ("local", "window=200"): 0.01, ("local", "window=800"): 0.001,
                               ("vanilla", "default"): 0.0})
    ranking = rank([suite("approximation/quick", rows)])
    assert sorted(ranking.table["variant"]) == ["linformer", "performer", "vanilla"]
    assert ranking.budgets == {"approximation/quick": "linformer: k=32; local: window=200, window=800 (none at its "
                                                      "defaults: not ranked here)"}
    assert any("not ranked: linformer: k=32" in line for line in method_text(ranking))


# ---------------------------------------------------------------------------------------------------------------------
# Controls, profiles, suites that give nothing, the LaTeX file


def test_controls_are_shown_apart_and_never_ranked() -> None:
    """`none` mixes nothing: the fastest and leanest of all. It takes no rank and moves no ranked variant's z-score;
    its index is scored against the ranked variants and shown in a table of its own."""
    fast = speed_rows({"a": 1.0, "b": 2.0, "c": 3.0, "none": 0.01}, {"a": 10.0, "b": 30.0, "c": 20.0, "none": 0.0})
    with_control = rank([suite("speed/smoke", fast), suite("accuracy/smoke", ACCURACY)])
    without = rank([suite("speed/smoke", SPEED), suite("accuracy/smoke", ACCURACY)])
    table = with_control.table.set_index("variant")
    assert pd.isna(table.loc["none", "rank"]) and bool(table.loc["none", "control"])
    assert list(with_control.table["variant"]) == ["a", "c", "b", "none"] and with_control.controls == ["none"]
    assert table.loc["none", "speed/smoke"] > table.loc["a", "speed/smoke"]  # scored, against the ranked variants
    pd.testing.assert_series_equal(table.loc[["a", "b", "c"], "overall"],
                                   without.table.set_index("variant").loc[["a", "b", "c"], "overall"])
    md = ranking_table(with_control, "md")
    assert "none" not in md and "| none " in controls_table(with_control, "md")
    assert any("Controls (none) are not ranked" in line for line in method_text(with_control))


def test_suites_of_different_profiles_are_marked() -> None:
    quick = SuiteResults("speed/quick", Path("speed/quick"), frame(SPEED), pd.DataFrame(), "quick")
    smoke = SuiteResults("accuracy/smoke", Path("accuracy/smoke"), frame(ACCURACY), pd.DataFrame(), "smoke")
    mixed = rank([quick, smoke])
    assert mixed.mixed_profiles
    assert method_text(mixed)[0].startswith("**Budgets of different size ranked together**: speed/quick (quick), "
                                            "accuracy/smoke (smoke)")
    assert "A smoke profile checks that the pipeline runs" in profiles_text(mixed)
    same = rank([quick, SuiteResults("accuracy/quick", Path("accuracy/quick"), frame(ACCURACY), pd.DataFrame(),
                                     "quick")])
    assert not same.mixed_profiles and profiles_text(same) == "" and "Budgets" not in method_text(same)[0]


def test_a_suite_that_gives_no_metric_is_not_counted_as_ranked() -> None:
    failed = [(accuracy_cell(a, suite="robustness"), "error", {}) for a in ("a", "b")]
    ranking = rank([suite("speed/smoke", SPEED), suite("robustness/smoke", failed)])
    assert ranking.contributing == ["speed/smoke"] and ranking.suites == ["speed/smoke", "robustness/smoke"]
    method = method_text(ranking)
    assert "mean across the 1 suites that contribute a metric" in method[0]
    assert not any(line.startswith("0 metrics from") for line in method)
    assert any(line.startswith("No metric from robustness/smoke") and "error=2" in line for line in method)


def test_the_cli_says_how_many_suites_contribute_and_warns_of_mixed_profiles(
        cli: Callable[..., CliResult], tmp_path: Path) -> None:
    speed = write_store(tmp_path / "r" / "speed" / "smoke", "speed", SPEED)
    with Store(tmp_path / "r" / "acc" / "quick" / "results.db") as store:
        run = store.start_run("accuracy", "quick", {"device_name": "test-cpu"}, [])
        for cell, status, metrics in ACCURACY:
            store.put(run, cell, status, "", metrics)
    failed = write_store(tmp_path / "r" / "rob" / "smoke", "robustness",
                         [(accuracy_cell(a, suite="robustness"), "error", {}) for a in ("a", "b")])
    result = cli("report", "--rank", speed, tmp_path / "r" / "acc" / "quick", failed)
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].startswith("ranked 3 variants over 2 suites (1 more gave no metric")
    assert "warning: Budgets of different size ranked together" in result.err


def test_the_latex_ranking_compiles_its_caption_the_title_and_its_notes_under_it(tmp_path: Path) -> None:
    speed = [*SPEED, (speed_cell("e"), "oom", {}), *speed_rows({"none": 0.1}, {"none": 1.0})]
    ranking = rank([suite("speed/smoke", speed), suite("accuracy/smoke", ACCURACY)])
    assert len(notes_text(ranking)) > 1  # several notes: joined by blank lines before
    write_ranking(ranking, tmp_path)
    tex = (tmp_path / "ranking.tex").read_text()
    caption = tex[tex.index(r"\caption{"):tex.index(r"\label{")]
    assert caption == "\\caption{Ranking across suites (compositional index)}\n"  # the notes go under the table
    assert "index over 1 of 2 suites" in tex and "Control (not ranked)" in tex
    if ENGINE is not None:
        pdf, problems = compile_tex([tmp_path / "ranking.tex"], tmp_path / "latex")
        assert pdf is not None and not [p for p in problems.splitlines() if p.startswith("!")], problems
