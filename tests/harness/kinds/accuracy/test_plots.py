"""The accuracy suites' figures: learning curves and the study figures, files and what they show."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import harness.kinds.accuracy.plots
import harness.report.plots
from harness.kinds.accuracy.plots import (
    CURVES_MAX,
    PAGE_IN,
    curve_rows,
    plot_ablation,
    plot_incoherence,
    plot_learning_curves,
    plot_noise_robustness,
    plot_parameter_sweep,
)
from tests.harness.figures import check_files, spy_axes


def test_plot_learning_curves_one_line_per_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curves = pd.DataFrame({"step": [1, 2] * 3, "train_loss": [1.0, 0.5] * 3, "dev_acc": [0.3, 0.4] * 3,
                           "model": ["a (base)"] * 2 + ["a (r=1)"] * 4, "seed": [0, 0, 0, 0, 1, 1]})
    lines: list[list[str]] = []
    real_save = harness.kinds.accuracy.plots.save_figure

    def spy(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
        lines.append([line.get_label() for line in fig.axes[1].get_lines()])
        return real_save(fig, out_dir, stem)

    monkeypatch.setattr(harness.kinds.accuracy.plots, "save_figure", spy)
    paths = plot_learning_curves(curves, tmp_path, task="text", title="t", by="model")
    check_files(paths, ["curves_text.png", "curves_text.pdf"])
    assert lines == [["a (base)", "a (r=1)"]]  # the two seeds of "a (r=1)" are one mean line
    plot_learning_curves(curves, tmp_path, task="text", title="t", by="model", order=["a (r=1)"])
    assert lines[-1] == ["a (r=1)", "a (base)"]  # the table's order first, the rest by name


def test_study_figures(tmp_path: Path) -> None:
    noise = pd.DataFrame({"label": ["v"] * 4 + ["s"] * 2, "noise": [0.0, 2.0, 4.0, 4.0, 0.0, 2.0],
                          "noise_on": ["train+test", "train+test", "train+test", "test", "train+test", "train+test"],
                          "mean": [41.0, 40.0, math.nan, 39.0, 57.0, 56.0],
                          "std": [1.0, math.nan, math.nan, 0.5, 1.0, 1.0]})
    check_files(plot_noise_robustness(noise, tmp_path, stem="n", title="noise"), ["n.png", "n.pdf"])
    sweep = pd.DataFrame({"value": [1.0, 8.0, 16.0] * 2, "series": ["ListOps"] * 3 + ["Average"] * 3,
                          "mean": [37.0, 38.0, 38.5, 51.0, 53.0, 54.0], "std": [0.5] * 6})
    check_files(plot_parameter_sweep(sweep, tmp_path, stem="r", title="r", parameter="r"), ["r.png", "r.pdf"])
    diffs = pd.DataFrame({"model": ["Four. Conv.", "Row Attn."], "diff": [-6.14, 0.3]})
    check_files(plot_ablation(diffs, tmp_path, stem="a", title="ablation"), ["a.png", "a.pdf"])
    mu = pd.DataFrame({"label": ["Text", "Text"], "rank": [32, 16], "mu_x_mean": [2.75, 3.98], "mu_x_std": [0.03, 0.05],
                       "mu_smooth_mean": [2.05, 3.23], "mu_smooth_std": [0.01, 0.04]})
    check_files(plot_incoherence(mu, tmp_path / "new", stem="i", title="mu"), ["i.png", "i.pdf"])


def test_learning_curves_show_percent_and_single_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curves = pd.DataFrame({"step": [5], "train_loss": [0.7], "dev_acc": [0.625], "attention": ["vanilla"]})
    seen = spy_axes(monkeypatch, harness.kinds.accuracy.plots)
    plot_learning_curves(curves, tmp_path, task="text", title="t")
    (loss_ax, acc_ax), = seen
    (line,) = acc_ax.get_lines()
    assert list(line.get_ydata()) == [62.5] and line.get_marker() not in (None, "", "None")
    assert "%" in acc_ax.get_ylabel()


def test_many_learning_curves_are_rows_of_a_few_with_whole_step_ticks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The robustness suite's nine curves (three models at three noise settings) crossed each other in one panel,
    over ticks at steps 2.5 and 3.5: rows of at most CURVES_MAX lines, one model's settings in one row, whole steps."""
    models = ["vanilla", "s3attention", "none"]
    settings = ["(a=0)", "(a=8, train+test)", "(a=8, test only)"]
    curves = pd.DataFrame([{"step": step, "train_loss": 1.0 / step + i, "dev_acc": 0.1 * step, "attention": m,
                            "model": f"{m} {s}", "seed": 0}
                           for i, (m, s) in enumerate((m, s) for m in models for s in settings) for step in (2, 4)])
    seen = spy_axes(monkeypatch, harness.kinds.accuracy.plots)
    plot_learning_curves(curves, tmp_path, task="image", title="t", by="model", order=[f"{m} {s}" for m in models
                                                                                      for s in settings])
    (axes,) = seen
    rows = [[line.get_label() for line in ax.get_lines()] for ax in axes[1::2]]  # the accuracy panel of each row
    assert rows == [[f"{m} {s}" for s in settings] for m in models]
    assert all(len(row) <= CURVES_MAX for row in rows)
    for ax in axes:
        lo, hi = ax.get_xlim()
        assert all(float(t).is_integer() for t in ax.get_xticks() if lo <= t <= hi)
    assert curve_rows(curves.assign(model=curves["attention"]).drop_duplicates("attention"), "model") == [
        ["none", "s3attention", "vanilla"]]  # one line per model: as few rows as fit


def test_a_sweep_of_settings_is_a_row_per_setting_beside_its_base(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The hyperparameter suite's thirteen curves (the base and r, s1, s2 swept one at a time) were one panel, the
    palette's colours repeated: a row per setting, its values in numeric order (s2=4 before s2=16), the base in each;
    the robustness suite's seven rows fit a page."""
    sweep = {"r": [1, 16, 32, 64], "s1": [16, 32, 64], "s2": [1, 16, 32, 4]}
    variants = ["base", *(f"{k}={v}" for k, values in sweep.items() for v in values)]
    curves = pd.DataFrame([{"step": step, "train_loss": 1.0, "dev_acc": 0.5, "attention": "s3attention",
                            "variant": v, "model": f"S3Attention ({v})", "seed": 0}
                           for v in variants for step in (1, 2)])
    rows = curve_rows(curves, "model", order=sorted(curves["model"].unique()))
    assert rows == [[f"S3Attention ({v})" for v in ["base", *(f"{k}={v}" for v in sorted(values))]]
                    for k, values in sweep.items()]
    seen = spy_axes(monkeypatch, harness.kinds.accuracy.plots)
    plot_learning_curves(curves, tmp_path, task="text", title="t", by="model")
    (axes,) = seen
    for ax in axes[1::2]:
        colours = [line.get_color() for line in ax.get_lines()]
        assert len(set(colours)) == len(colours) <= CURVES_MAX + 1
    seven = pd.DataFrame([{"step": 1, "train_loss": 1.0, "dev_acc": 0.5, "attention": f"a{i}", "model": f"a{i} ({n})"}
                          for i in range(7) for n in ("a=0", "a=2", "a=8")])
    plot_learning_curves(seven, tmp_path, task="image", title="t", by="model")
    assert len(seen[-1]) == 14 and seen[-1][0].get_figure().get_figheight() <= PAGE_IN


def test_error_bars_at_one_x_value_stand_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Table 5's seven models at three noise levels, Table 6's tasks at each value: each series' bars at its own x
    (they were drawn over each other), the ticks at the levels run."""
    seen = spy_axes(monkeypatch, harness.report.plots)  # single_axes saves
    noise = pd.DataFrame([{"label": f"m{i}", "noise": a, "noise_on": "train+test", "mean": 50.0 + i, "std": 5.0}
                          for i in range(7) for a in (0.0, 2.0, 8.0)])
    plot_noise_robustness(noise, tmp_path, stem="n", title="noise")
    sweep = pd.DataFrame([{"value": v, "series": s, "mean": 50.0, "std": 3.0} for s in ("Average", "Text", "Image")
                          for v in (1.0, 8.0, 64.0)])
    plot_parameter_sweep(sweep, tmp_path, stem="r", title="r", parameter="r")
    for (ax,), levels in zip(seen, ([0.0, 2.0, 8.0], [1.0, 8.0, 64.0]), strict=True):
        xs = [list(line.get_xdata()) for line in ax.get_lines() if line.get_linestyle() != "None"]  # not the caps
        assert len(xs) in (7, 3)
        for k, level in enumerate(levels):
            at = [x[k] for x in xs]
            assert len(set(at)) == len(at)  # no two series at the same x
            assert min(at) < level < max(at)  # centred on the level
        assert list(ax.get_xticks()) == levels
