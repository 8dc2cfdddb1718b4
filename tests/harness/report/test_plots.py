"""Tests of harness.report.plots: files written, formats, skipped figures and no leaked figures."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import harness.report.plots
from harness.kinds.speed.report import write_speed_reports
from harness.report.plots import (
    plot_ablation,
    plot_incoherence,
    plot_learning_curves,
    plot_noise_robustness,
    plot_parameter_sweep,
    plot_scaling,
)
from tests.harness.kinds.speed.test_speed import ENV, make_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_files(paths: list[Path], names: list[str]) -> None:
    assert [p.name for p in paths] == names
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC if path.suffix == ".png" else b"%PDF")
    assert plt.get_fignums() == []


def test_plot_scaling_writes_time_and_memory(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(), tmp_path / "figs", slug="s", title="synthetic")
    _check_files(paths, ["time_s.png", "time_s.pdf", "memory_s.png", "memory_s.pdf"])


def test_plot_scaling_train_step(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(mode="train_step"), tmp_path, slug="t", title="train")
    _check_files(paths, ["time_t.png", "time_t.pdf", "memory_t.png", "memory_t.pdf"])


def test_plot_scaling_skips_unmeasured_metric(tmp_path: Path) -> None:
    df = make_results().assign(peak_mem_bytes=math.nan)
    paths = plot_scaling(df, tmp_path, slug="s", title="time only")
    _check_files(paths, ["time_s.png", "time_s.pdf"])
    assert plot_scaling(df.assign(status="oom"), tmp_path / "none", slug="s", title="all OOM") == []


def test_write_reports_draws_each_group(tmp_path: Path) -> None:
    df = pd.concat([make_results(), make_results().assign(device="cuda")])
    written = write_speed_reports(df, tmp_path, env=ENV, suite="synthetic")
    figures = sorted(p.name for p in written if p.suffix in (".png", ".pdf"))
    assert figures == sorted(f"{kind}_{device}_float32_fwdpbwd_b4_h2_d64.{ext}" for kind in ("time", "memory")
                             for device in ("cpu", "cuda") for ext in ("png", "pdf"))
    _check_files([tmp_path / name for name in figures], figures)


def test_plot_learning_curves_one_line_per_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curves = pd.DataFrame({"step": [1, 2] * 3, "train_loss": [1.0, 0.5] * 3, "dev_acc": [0.3, 0.4] * 3,
                           "model": ["a (base)"] * 2 + ["a (r=1)"] * 4, "seed": [0, 0, 0, 0, 1, 1]})
    lines: list[list[str]] = []
    real_save = harness.report.plots.save_figure

    def spy(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
        lines.append([line.get_label() for line in fig.axes[1].get_lines()])
        return real_save(fig, out_dir, stem)

    monkeypatch.setattr(harness.report.plots, "save_figure", spy)
    paths = plot_learning_curves(curves, tmp_path, task="text", title="t", by="model")
    _check_files(paths, ["curves_text.png", "curves_text.pdf"])
    assert lines == [["a (base)", "a (r=1)"]]  # the two seeds of "a (r=1)" are one mean line


def test_study_figures(tmp_path: Path) -> None:
    noise = pd.DataFrame({"label": ["v"] * 4 + ["s"] * 2, "noise": [0.0, 2.0, 4.0, 4.0, 0.0, 2.0],
                          "noise_on": ["train+test", "train+test", "train+test", "test", "train+test", "train+test"],
                          "mean": [41.0, 40.0, math.nan, 39.0, 57.0, 56.0],
                          "std": [1.0, math.nan, math.nan, 0.5, 1.0, 1.0]})
    _check_files(plot_noise_robustness(noise, tmp_path, stem="n", title="noise"), ["n.png", "n.pdf"])
    sweep = pd.DataFrame({"value": [1.0, 8.0, 16.0] * 2, "series": ["ListOps"] * 3 + ["Average"] * 3,
                          "mean": [37.0, 38.0, 38.5, 51.0, 53.0, 54.0], "std": [0.5] * 6})
    _check_files(plot_parameter_sweep(sweep, tmp_path, stem="r", title="r", parameter="r"), ["r.png", "r.pdf"])
    diffs = pd.DataFrame({"model": ["Four. Conv.", "Row Attn."], "diff": [-6.14, 0.3]})
    _check_files(plot_ablation(diffs, tmp_path, stem="a", title="ablation"), ["a.png", "a.pdf"])
    mu = pd.DataFrame({"label": ["Text", "Text"], "rank": [32, 16], "mu_x_mean": [2.75, 3.98], "mu_x_std": [0.03, 0.05],
                       "mu_smooth_mean": [2.05, 3.23], "mu_smooth_std": [0.01, 0.04]})
    _check_files(plot_incoherence(mu, tmp_path / "new", stem="i", title="mu"), ["i.png", "i.pdf"])


def _spy_axes(monkeypatch: pytest.MonkeyPatch) -> list[list[plt.Axes]]:
    """The axes of every figure saved (looked at before the figure is closed)."""
    seen: list[list[plt.Axes]] = []
    real_save = harness.report.plots.save_figure

    def spy(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
        fig.canvas.draw()  # tick labels are set at draw time
        seen.append(list(fig.axes))
        return real_save(fig, out_dir, stem)

    monkeypatch.setattr(harness.report.plots, "save_figure", spy)
    return seen


def test_a_narrow_log_axis_still_has_two_labelled_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = make_results()
    df["time_ms_median"] = 30.0 + df["seq_len"] / 1000.0  # 30.5 .. 34: far less than a decade
    df["peak_mem_bytes"] = 2**20 * (50.0 + df["seq_len"] / 4096.0)
    seen = _spy_axes(monkeypatch)
    plot_scaling(df, tmp_path, slug="s", title="narrow")
    for (ax,) in seen:
        lo, hi = ax.get_ylim()
        labelled = [t for t in ax.yaxis.get_major_ticks() if t.label1.get_text() and lo <= t.get_loc() <= hi]
        assert len(labelled) >= 2, [t.label1.get_text() for t in labelled]


def test_learning_curves_show_percent_and_single_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curves = pd.DataFrame({"step": [5], "train_loss": [0.7], "dev_acc": [0.625], "attention": ["vanilla"]})
    seen = _spy_axes(monkeypatch)
    plot_learning_curves(curves, tmp_path, task="text", title="t")
    (loss_ax, acc_ax), = seen
    (line,) = acc_ax.get_lines()
    assert list(line.get_ydata()) == [62.5] and line.get_marker() not in (None, "", "None")
    assert "%" in acc_ax.get_ylabel()
