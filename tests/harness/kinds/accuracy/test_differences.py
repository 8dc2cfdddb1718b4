"""Differences against the reference row, paired by seed, with t-intervals: Table 1's, Table 5's (and its relative
change), Tables 6 and 7's, checked against hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from harness.kinds.accuracy.differences import (
    interval_text,
    paired_difference,
    per_seed,
    table1_differences,
    table5_differences,
    variant_differences,
    write_differences,
)
from harness.report.stats import t_interval
from tests.harness.kinds.accuracy.test_studies import cells


def _table1() -> pd.DataFrame:
    rows = [("vanilla", "text", 0, "ok", 0.60), ("vanilla", "text", 1, "ok", 0.62), ("vanilla", "text", 2, "ok", 0.64),
            ("s3attention", "text", 0, "ok", 0.63), ("s3attention", "text", 1, "ok", 0.66),
            ("s3attention", "text", 2, "error", None)]
    return cells(rows, ["attention", "task", "seed", "status", "test_acc"])


def test_paired_by_seed_only_over_seeds_both_finished() -> None:
    wide = per_seed(_table1(), ["attention"])
    iv = paired_difference(wide, ("s3attention",), ("vanilla",), "text")
    # seeds 0 and 1: differences 3 and 4 points; mean 3.5, s = 0.7071, t(0.975, 1) = 12.706
    assert iv is not None and iv.n == 2 and math.isclose(iv.mean, 3.5)
    assert math.isclose(iv.hi - iv.mean, 12.706 * 0.70710678 / math.sqrt(2), rel_tol=1e-4)
    assert iv.contains_zero and interval_text(iv, "md").endswith("ⁿˢ")


def test_table1_differences_render_and_csv(tmp_path: Path) -> None:
    (table,) = table1_differences(_table1(), ["attention"], "vanilla")
    md = table.render("md")
    assert "| S3Attention | +3.50 [−2.85, +9.85]ⁿˢ |" in md  # display names, as in Table 1 itself; a real minus
    assert r"+3.50 [$-$2.85, +9.85]$^{ns}$" in table.render("tex")
    assert table.heading == "Difference from Transformer (percentage points)"
    source = "generated stand-in (attnbench text stand-in v6: {})"
    written = write_differences(tmp_path, "table1", "Table 1 — t", [table], env={},
                                results=_table1().assign(data_source=source))
    assert {p.name for p in written} == {"table1_diff.md", "table1_diff.tex", "table1_diff.csv"}
    csv = pd.read_csv(tmp_path / "table1_diff.csv", keep_default_na=False)
    assert set(csv["column"]) == {"text", "avg"} and csv["n_seeds"].tolist() == [2, 2]
    assert csv["task"].tolist() == ["text", ""] and csv["data_source"].eq(source).all()  # each row, pasted alone
    assert table1_differences(_table1(), ["attention"], None) == []


def test_table5_differences_against_baseline_and_clean() -> None:
    rows = []
    for seed, (v0, v8, s0, s8) in enumerate(((0.50, 0.40, 0.50, 0.48), (0.52, 0.42, 0.52, 0.51),
                                             (0.54, 0.43, 0.54, 0.53))):
        rows += [("vanilla", 0, "train+test", seed, "ok", v0), ("vanilla", 8, "train+test", seed, "ok", v8),
                 ("s3attention", 0, "train+test", seed, "ok", s0), ("s3attention", 8, "train+test", seed, "ok", s8)]
    vs, relative = table5_differences(cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"],
                                            task="image"), "vanilla")
    (s3_vs,) = vs.intervals()
    assert s3_vs[0].mean == 0.0 and math.isclose(s3_vs[1].mean, (8 + 9 + 10) / 3) and not s3_vs[1].contains_zero
    rel = dict(zip([c.model[0] for c in relative.comparisons], relative.intervals(), strict=True))
    expected = [100 * (0.40 - 0.50) / 0.50, 100 * (0.42 - 0.52) / 0.52, 100 * (0.43 - 0.54) / 0.54]
    assert math.isclose(rel["vanilla"][0].mean, sum(expected) / 3)
    assert "relative change from a = 0" in relative.heading and relative.columns == [8.0]


def test_variant_differences_against_the_base_variant() -> None:
    rows = [("s3attention", v, "text", seed, "ok", acc) for v, accs in (("base", (0.5, 0.6)), ("r1", (0.4, 0.45)))
            for seed, acc in enumerate(accs)]
    (table,) = variant_differences(cells(rows, ["attention", "variant", "task", "seed", "status", "test_acc"]),
                                   [("base", "Baseline"), ("r1", "r=1")], "base")
    assert [c.label for c in table.comparisons] == ["r=1"]
    (row,) = table.intervals()
    assert math.isclose(row[0].mean, -12.5) and math.isclose(row[1].mean, -12.5)  # text, and the average


@pytest.mark.parametrize(("values", "marked"), [
    ([-0.25, -0.25], True),  # the README's old Table 7 figure: two identical seeds, "-0.25 [-0.25, -0.25]"
    ([-0.25, -0.25, -0.25], True),  # zero width
    ([-1.0, -2.0], True),  # two seeds: no sign established, whatever the interval
    ([-1.0, -2.0, -1.5], False),
])
def test_the_ns_mark_needs_three_seeds_and_an_interval_of_some_width(values: list[float], marked: bool) -> None:
    assert interval_text(t_interval(values), "md").endswith("ⁿˢ") is marked
