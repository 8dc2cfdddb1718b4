"""Tests of harness.kinds.speed.crossover: fits, crossings with known answers, intervals, failed cells, the files
written by the speed reports and the marks on the scaling plots."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib.axes
import numpy as np
import pandas as pd
import pytest

import harness.kinds.speed.plots
from harness.kinds.speed.crossover import (
    ALWAYS,
    BASELINE,
    CROSSOVER_COLUMNS,
    EXTRAPOLATED,
    FROM,
    MEMORY_COLUMN,
    NEVER,
    NO_BASELINE,
    NOT_MEASURED,
    TIME_COLUMN,
    crossover_baselines,
    group_crossovers,
    plot_marks,
)
from harness.kinds.speed.plots import plot_scaling
from harness.kinds.speed.report import GROUP_COLUMNS, write_speed_reports
from harness.kinds.speed.scaling_fit import fit_scaling
from tests.harness.kinds.speed.test_speed import ENV

LENGTHS = (256, 512, 1024, 2048, 4096)
GROUP = {"device": "cpu", "dtype": "float32", "mode": "fwd+bwd", "batch_size": 4, "heads": 2, "dim": 64}
ROUNDS = 21
_Curve = Callable[[float], float]


def _cells(variants: dict[str, tuple[str, _Curve, _Curve]], *, noise: float = 0.03, lengths: Sequence[int] = LENGTHS,
           failed: dict[tuple[str, int], str] | None = None,
           seed: int = 1) -> tuple[pd.DataFrame, dict[tuple[str, str], list[float]]]:
    """Results of one group and their per-round samples: ``variants`` maps a name to (complexity, time in ms of n,
    peak memory in bytes of n); each round's time is the curve times log-normal noise of relative size ``noise``."""
    rng = np.random.default_rng(seed)
    failed = failed or {}
    rows, samples = [], {}
    for n in lengths:
        group = f"tg-{n}"
        for name, (complexity, time_ms, mem) in variants.items():
            status = failed.get((name, n), "ok")
            s = time_ms(n) * np.exp(noise * rng.standard_normal(ROUNDS))
            ok = status == "ok"
            if ok:
                samples[(group, name)] = s.tolist()
            rows.append({**GROUP, "attention": name, "complexity": complexity, "seq_len": n, "status": status,
                         "time_ms_median": float(np.median(s)) if ok else math.nan,
                         "time_ms_q25": float(np.percentile(s, 25)) if ok else math.nan,
                         "time_ms_q75": float(np.percentile(s, 75)) if ok else math.nan,
                         "rounds": ROUNDS, "peak_mem_bytes": float(mem(n)) if ok else math.nan,
                         "timing_group": group if ok else None})
    return pd.DataFrame(rows), samples


def vanilla_time(n: float) -> float:
    return 1e-6 * n**2


def linear_time(n: float) -> float:
    return 2e-3 * n  # equals vanilla_time at n = 2000


def vanilla_mem(n: float) -> float:
    return 4.0 * n**2


def linear_mem(n: float) -> float:
    return 8000.0 * n  # equals vanilla_mem at n = 2000


def _row(table: pd.DataFrame, attention: str, metric: str = TIME_COLUMN, baseline: str = "vanilla") -> pd.Series:
    rows = table[(table["attention"] == attention) & (table["metric"] == metric) & (table["baseline"] == baseline)]
    assert len(rows) == 1
    return rows.iloc[0]


def _crossovers(variants: dict[str, tuple[str, _Curve, _Curve]], **kwargs: object) -> pd.DataFrame:
    df, samples = _cells(variants, **kwargs)
    return group_crossovers(df, group=GROUP, baselines=["vanilla"], samples=samples, n_boot=400)


# ---------------------------------------------------------------------------------------------------------------------
# Fits


def test_fit_recovers_exact_models() -> None:
    n = np.array(LENGTHS, dtype=float)
    quad = fit_scaling(n, 0.5 + 3e-4 * n + 1e-6 * n**2, "n^2")
    assert quad(n)[0] == pytest.approx(0.5 + 3e-4 * n + 1e-6 * n**2, rel=1e-9)
    nlogn = fit_scaling(n, 2e-4 * n * np.log2(n), "n log n")
    assert nlogn(n)[0] == pytest.approx(2e-4 * n * np.log2(n), rel=1e-9)
    assert fit_scaling(n, 2e-3 * n, "n")(n)[0] == pytest.approx(2e-3 * n, rel=1e-9)


def test_fit_is_non_negative_and_relative() -> None:
    n = np.array(LENGTHS, dtype=float)
    # An unconstrained line through these points has a negative intercept.
    values = np.array([0.1, 0.3, 0.9, 2.0, 4.2])
    fit = fit_scaling(n, values, "n")
    assert np.all(fit.coef >= 0)
    # In relative error the short lengths count as much as the long ones: no point is off by more than ~2×.
    assert np.all(np.abs(np.log(fit(n)[0] / values)) < math.log(2.5))
    # Several replicates at once: one coefficient row each.
    assert fit_scaling(n, np.stack([values, 2 * values]), "n").coef.shape == (2, 2)


def test_fit_rejects_degenerate_input() -> None:
    with pytest.raises(ValueError, match="needs as many distinct lengths"):
        fit_scaling([256, 512], [1.0, 2.0], "n^2")
    with pytest.raises(ValueError, match="positive"):
        fit_scaling([256, 512, 1024], [1.0, 0.0, 2.0], "n")
    with pytest.raises(ValueError, match="must agree"):
        fit_scaling([256, 512, 1024], [1.0, 2.0], "n")


# ---------------------------------------------------------------------------------------------------------------------
# Crossings with known answers


def test_known_crossing_at_2000_from_rounds() -> None:
    table = _crossovers({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)})
    row = _row(table, "linear")
    assert row["verdict"] == FROM
    assert row["crossover_n"] == pytest.approx(2000, rel=0.03)
    assert row["crossover_lo"] < 2000 < row["crossover_hi"]
    assert row["crossover_hi"] / row["crossover_lo"] < 1.2  # 3% noise, 21 rounds: a narrow interval
    assert row["interval"] == "bootstrap (rounds)" and row["n_boot"] == 400
    assert row["text"].startswith("from n ≈ ") and row["text"].count("[") == 1
    assert row["measured"] == "faster from 2K" and row["measured_from"] == 2048
    assert (row["seq_len_min"], row["seq_len_max"]) == (256, 4096)
    assert _row(table, "vanilla")["verdict"] == BASELINE


def test_known_crossing_from_quartiles_without_samples() -> None:
    df, _samples = _cells({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)})
    row = _row(group_crossovers(df, group=GROUP, baselines=["vanilla"], samples=None, n_boot=400), "linear")
    assert row["verdict"] == FROM and row["crossover_n"] == pytest.approx(2000, rel=0.03)
    assert row["crossover_lo"] < 2000 < row["crossover_hi"]
    assert row["interval"] == "bootstrap (quartiles)"


def test_interval_is_reproducible() -> None:
    variants = {"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)}
    first, second = _crossovers(variants), _crossovers(variants)
    pd.testing.assert_frame_equal(first, second)


def test_always_never_and_extrapolated() -> None:
    table = _crossovers({
        "vanilla": ("n^2", vanilla_time, vanilla_mem),
        "fast": ("n", lambda n: 1e-5 * n, lambda n: 10.0 * n),
        "slow": ("n^2", lambda n: 3e-6 * n**2, lambda n: 8.0 * n**2),
        "far": ("n", lambda n: 1e-2 * n, lambda n: 1e5 * n),  # crosses vanilla at n = 10,000 and 25,000
    })
    fast = _row(table, "fast")
    assert fast["verdict"] == ALWAYS and fast["text"] == "always" and math.isnan(fast["crossover_n"])
    assert fast["measured"] == "faster at every common n"

    slow = _row(table, "slow")
    assert slow["verdict"] == NEVER and slow["text"] == "never within 256–4,096"
    assert math.isinf(slow["crossover_lo"]) and math.isinf(slow["crossover_hi"])  # no replicate crosses
    assert slow["measured"] == "slower at 4K"

    far = _row(table, "far")
    assert far["verdict"] == EXTRAPOLATED and far["crossover_n"] == pytest.approx(10_000, rel=0.05)
    assert far["text"].startswith("> 4,096, extrapolated ≈ ")
    assert far["crossover_lo"] < 10_000 < far["crossover_hi"]
    far_mem = _row(table, "far", MEMORY_COLUMN)
    assert far_mem["verdict"] == EXTRAPOLATED and far_mem["crossover_n"] == pytest.approx(25_000, rel=1e-3)


def test_no_extrapolation_between_equal_orders() -> None:
    # Two quadratic curves never provably cross beyond the range, however close.
    table = _crossovers({"vanilla": ("n^2", vanilla_time, vanilla_mem),
                         "slow": ("n^2", lambda n: 1.1e-6 * n**2, lambda n: 4.4 * n**2)}, noise=0.0)
    assert _row(table, "slow")["verdict"] == NEVER
    assert _row(table, "slow", MEMORY_COLUMN)["verdict"] == NEVER


def test_measured_points_overrule_a_fit_below_throughout() -> None:
    # The linear model cannot follow the slow first point, so its curve is below vanilla's everywhere; the measured
    # 256 is slower, so "always" would be wrong: the crossover lies in (256, 512].
    points = {256: 0.07, 512: 0.01, 1024: 0.02, 2048: 0.04, 4096: 0.08}
    table = _crossovers({"vanilla": ("n^2", vanilla_time, vanilla_mem),
                         "odd": ("n", lambda n: points[n], linear_mem)}, noise=0.0)
    row = _row(table, "odd")
    assert row["verdict"] == FROM and row["crossover_n"] == 512
    assert row["text"] == "from n ≤ 512 (measured: slower at 256; fitted: always)"  # noise 0: no interval
    assert row["measured"] == "faster from 512" and row["measured_from"] == 512


def test_the_verdict_names_the_length_where_it_was_measured_behind() -> None:
    # Faster at 256 but slower at 4K, while the linear fit is below throughout: the text must name 4K, not 256.
    points = {256: 0.03, 512: 0.06, 1024: 0.3, 2048: 0.2, 4096: 20.0}
    table = _crossovers({"vanilla": ("n^2", vanilla_time, vanilla_mem),
                         "odd": ("n", lambda n: points[n], linear_mem)}, noise=0.0)
    row = _row(table, "odd")
    assert "slower at 256" not in row["text"]
    if "fitted: always" in row["text"]:
        assert "measured: slower at 4K" in row["text"]
    assert row["measured"] == "slower at 4K"


def test_no_common_measured_length_is_not_measured() -> None:
    vanilla, _ = _cells({"vanilla": ("n^2", vanilla_time, vanilla_mem)}, lengths=(256, 1024, 4096))
    other, samples = _cells({"linear": ("n", linear_time, linear_mem)}, lengths=(512, 2048, 8192))
    table = group_crossovers(pd.concat([vanilla, other], ignore_index=True), group=GROUP, baselines=["vanilla"],
                             samples=samples, n_boot=50)
    row = _row(table, "linear")
    assert row["verdict"] == NOT_MEASURED and "common" in row["text"]


def test_memory_crossing_is_deterministic() -> None:
    table = _crossovers({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)})
    row = _row(table, "linear", MEMORY_COLUMN)
    assert row["verdict"] == FROM and row["crossover_n"] == pytest.approx(2000, rel=1e-3)
    assert row["crossover_lo"] == row["crossover_hi"] == row["crossover_n"]  # a degenerate interval, not shown
    assert row["text"] == "from n ≈ 2,000" and row["interval"] == "none (deterministic)" and row["n_boot"] == 0
    assert row["measured"] == "leaner from 2K"


# ---------------------------------------------------------------------------------------------------------------------
# Failed cells, missing baselines: every variant keeps its row


def test_failed_cells_are_reported_not_dropped() -> None:
    variants = {"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem),
                "broken": ("n log n", linear_time, linear_mem), "dead": ("n", linear_time, linear_mem)}
    failed = {("broken", 1024): "oom", ("broken", 2048): "oom", ("broken", 4096): "oom", ("linear", 512): "error",
              **{("dead", n): "error" for n in LENGTHS}}
    table = _crossovers(variants, failed=failed)
    assert len(table) == 2 * len(variants)  # time and memory, every variant
    broken = _row(table, "broken")
    assert broken["verdict"] == NOT_MEASURED
    assert broken["text"] == "not measured (2 ok lengths, the n log n model needs 3; status oom at 1K, 2K, 4K)"
    assert _row(table, "dead")["text"] == "not measured (0 ok lengths, the n model needs 2; status error at 256, " \
                                          "512, 1K, 2K, 4K)"
    linear = _row(table, "linear")  # one failed cell: still fitted, the failure listed
    assert linear["verdict"] == FROM and linear["failed"] == "error at 512"


def test_baseline_not_measured() -> None:
    variants = {"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)}
    failed = {("vanilla", n): "oom" for n in (1024, 2048, 4096)}
    df, samples = _cells(variants, failed=failed)
    table = group_crossovers(df, group=GROUP, baselines=["vanilla_sdpa", "vanilla"], samples=samples, n_boot=100)
    assert list(table.columns) == [*GROUP, *CROSSOVER_COLUMNS]
    absent = _row(table, "linear", baseline="vanilla_sdpa")
    assert absent["verdict"] == NO_BASELINE and absent["text"] == "baseline not measured (not in the group)"
    unfit = _row(table, "linear", baseline="vanilla")
    assert unfit["verdict"] == NO_BASELINE and "oom at 1K, 2K, 4K" in unfit["text"]
    assert plot_marks(table) == (None, {})


def test_crossover_baselines() -> None:
    assert crossover_baselines(["vanilla", "vanilla_sdpa", "x"], "vanilla") == ["vanilla_sdpa", "vanilla"]
    assert crossover_baselines(["vanilla", "x"], "vanilla") == ["vanilla"]
    assert crossover_baselines(["x"], "vanilla") == ["vanilla"]


def test_plot_marks_prefer_vanilla_sdpa_and_the_range() -> None:
    df, samples = _cells({
        "vanilla": ("n^2", vanilla_time, vanilla_mem),
        "vanilla_sdpa": ("n^2", lambda n: 0.5 * vanilla_time(n), vanilla_mem),
        "linear": ("n", linear_time, linear_mem),
        "fast": ("n", lambda n: 1e-5 * n, lambda n: 10.0 * n),
    })
    table = group_crossovers(df, group=GROUP, baselines=["vanilla_sdpa", "vanilla"], samples=samples, n_boot=100)
    baseline, marks = plot_marks(table)
    assert baseline == "vanilla_sdpa"
    assert set(marks) == {"time", "memory"}
    assert set(marks["time"]) == {"linear"} and marks["time"]["linear"] == pytest.approx(4000, rel=0.03)
    assert marks["memory"]["linear"] == pytest.approx(2000, rel=1e-3)  # "fast" is always ahead: no mark


def test_plot_marks_prefer_the_suites_baseline() -> None:
    """The ratio figures divide by the suite's baseline: the rings are against it where it was measured, so that a
    ring sits where a ratio line crosses 1."""
    df, samples = _cells({
        "vanilla": ("n^2", vanilla_time, vanilla_mem),
        "vanilla_sdpa": ("n^2", lambda n: 0.5 * vanilla_time(n), vanilla_mem),
        "linear": ("n", linear_time, linear_mem),
    })
    table = group_crossovers(df, group=GROUP, baselines=["vanilla_sdpa", "vanilla"], samples=samples, n_boot=100)
    baseline, marks = plot_marks(table, "vanilla")
    assert baseline == "vanilla" and marks["time"]["linear"] == pytest.approx(2000, rel=0.03)
    assert plot_marks(table, "performer")[0] == "vanilla_sdpa"  # not compared with: the usual order


def test_a_ratio_figure_rings_only_crossovers_against_its_own_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df, _samples = _cells({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem),
                           "vanilla_sdpa": ("n^2", lambda n: 0.5 * vanilla_time(n), vanilla_mem)})
    marks: list[float] = []
    real_mark = harness.kinds.speed.plots.mark_crossing
    monkeypatch.setattr(harness.kinds.speed.plots, "mark_crossing",
                        lambda ax, x, y, color: (marks.append(y), real_mark(ax, x, y, color)))
    plot_scaling(df.assign(peak_mem_bytes=math.nan), tmp_path, slug="s", title="t", baseline="vanilla",
                 crossover_baseline="vanilla_sdpa", crossovers={"time": {"linear": 4000.0}})
    assert len(marks) == 1  # on the time figure; the ratio to vanilla does not cross 1 at SDPA's crossover


def test_plot_scaling_marks_the_crossovers_on_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df, _samples = _cells({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)})
    lines: list[float] = []
    original = matplotlib.axes.Axes.axvline

    def spy_vertical(self: matplotlib.axes.Axes, x: float = 0, *args: object, **kwargs: object) -> object:
        lines.append(x)
        return original(self, x, *args, **kwargs)

    marks: list[tuple[float, float]] = []
    real_mark = harness.kinds.speed.plots.mark_crossing

    def spy_mark(ax: matplotlib.axes.Axes, x: float, y: float, color: object) -> None:
        marks.append((x, y))
        real_mark(ax, x, y, color)

    monkeypatch.setattr(matplotlib.axes.Axes, "axvline", spy_vertical)
    monkeypatch.setattr(harness.kinds.speed.plots, "mark_crossing", spy_mark)
    paths = plot_scaling(df, tmp_path, slug="s", title="marks", crossover_baseline="vanilla", baseline="vanilla",
                         crossovers={"time": {"linear": 2000.0}, "memory": {"linear": 1990.0}})
    assert [p.name for p in paths] == [f"{stem}.{ext}" for stem in ("time_s", "time_ratio_s", "memory_s",
                                                                    "memory_ratio_s") for ext in ("png", "pdf")]
    assert [x for x, _y in marks] == [2000.0, 2000.0, 1990.0, 1990.0]
    # on the variant's own line: its time there, and a multiplier against the baseline of about 1
    assert marks[0][1] == pytest.approx(linear_time(2000), rel=0.1)
    assert marks[1][1] == pytest.approx(1.0, rel=0.15)
    assert marks[2][1] == pytest.approx(linear_mem(1990) / 2**20, rel=0.1)
    assert lines == []  # no free-standing vertical lines


# ---------------------------------------------------------------------------------------------------------------------
# End to end: the speed reports write crossover.md and crossover.csv


def test_write_speed_reports_writes_crossover(tmp_path: Path) -> None:
    variants = {"vanilla": ("n^2", vanilla_time, vanilla_mem),
                "vanilla_sdpa": ("n^2", lambda n: 0.5 * vanilla_time(n), lambda n: 2.0 * n**2),
                "linear": ("n", linear_time, linear_mem), "broken": ("n log n", linear_time, linear_mem)}
    failed = {("broken", n): "error" for n in LENGTHS}
    df, samples = _cells(variants, failed=failed)
    other = df.assign(dtype="bfloat16")
    other["timing_group"] = other["timing_group"].map(lambda g: None if g is None else f"bf-{g}")
    samples |= {(f"bf-{g}", a): s for (g, a), s in samples.items()}
    written = write_speed_reports(pd.concat([df, other]), tmp_path, env=ENV, suite="synthetic", plots=False,
                                  samples=samples)
    names = [p.name for p in written]
    assert names.index("crossover.csv") == names.index("slopes.md") + 1
    assert names.index("crossover.md") == names.index("crossover.csv") + 1

    csv = pd.read_csv(tmp_path / "crossover.csv")
    assert list(csv.columns) == [*GROUP_COLUMNS, *CROSSOVER_COLUMNS]
    # every variant × {time, memory} × {vanilla_sdpa, vanilla} × 2 groups
    assert len(csv) == len(variants) * 2 * 2 * 2
    counts = csv.groupby(["dtype", "attention"]).size()
    assert set(counts.index.get_level_values("attention")) == set(variants) and set(counts) == {4}
    linear = csv[(csv["attention"] == "linear") & (csv["metric"] == TIME_COLUMN) & (csv["baseline"] == "vanilla")]
    assert linear["crossover_n"].to_numpy() == pytest.approx([2000, 2000], rel=0.03)
    assert (csv[csv["attention"] == "broken"]["verdict"] == NOT_MEASURED).all()

    md = (tmp_path / "crossover.md").read_text()
    assert md.startswith("### Efficiency crossover — synthetic\n\nEach variant's median time and peak memory are "
                         "fitted")
    assert "95% percentile bootstrap of 1000 refits" in md
    assert "#### CPU · bfloat16 · forward + backward · eager · batch 4 · 2 heads · dim 64" in md
    assert "#### CPU · float32 · forward + backward · eager · batch 4 · 2 heads · dim 64" in md
    assert md.count("not measured (0 ok lengths, the n log n model needs 3; status error at 256") == 2 * 2 * 2
    assert md.count("— (baseline)") == 2 * 2 * 2
    assert md.rstrip().endswith("2025-01-01T00:00:00Z_")


def test_write_speed_reports_crossover_of_a_memory_suite(tmp_path: Path) -> None:
    df, _samples = _cells({"vanilla": ("n^2", vanilla_time, vanilla_mem), "linear": ("n", linear_time, linear_mem)})
    df = df.drop(columns=["time_ms_median", "time_ms_q25", "time_ms_q75", "timing_group"])
    write_speed_reports(df, tmp_path, env=ENV, suite="memory", plots=False)
    csv = pd.read_csv(tmp_path / "crossover.csv")
    assert set(csv["metric"]) == {MEMORY_COLUMN}  # time was not measured: no rows of it
    row = csv[csv["attention"] == "linear"].iloc[0]
    assert row["verdict"] == FROM and row["crossover_n"] == pytest.approx(2000, rel=1e-3)
