"""The accuracy suites' figures: learning curves (the paper's Fig. 3) and the study figures of Tables 5, 6, 7 and
S7."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator

from ...report.plots import (
    COLUMN_IN,
    DOUBLE_IN,
    PALETTE,
    errorbar,
    outside_legend,
    paper_style,
    plt,
    save_figure,
    single_axes,
    wrap_title,
)
from .noise import TEST_ONLY, TRAIN_TEST

#: Lines one panel of learning curves holds: more noisy curves cross each other past telling apart (the robustness
#: suite's nine, three models at three noise settings, did), so more are split into rows of panels.
CURVES_MAX = 4
#: The height of a row of learning curves, and of the whole figure at most: a two-column paper's text height, which
#: seven rows of 1.7 in (the robustness suite's seven models) passed by half.
CURVE_ROW_IN, PAGE_IN = 1.7, 8.5


def plot_learning_curves(curves: pd.DataFrame, out_dir: Path, *, task: str, title: str,
                         by: str = "attention", order: Sequence[str] = ()) -> list[Path]:
    """Training loss and dev accuracy against step for one task, one line per value of ``by`` (the paper's Fig. 3).

    Lines are the mean over seeds at each evaluation step; the band spans the seeds' min and max. ``by`` is a
    label column that tells models apart (attention, or attention with variant and noise level), so that runs of
    different variants are never averaged into one line. ``order``: the legend's order (the table's rows); values
    it does not name follow by name. Up to :data:`CURVES_MAX` lines share a pair of panels; more are drawn in rows of
    pairs on one scale per column, the lines of one attention kept in one row (:func:`curve_rows`), each row
    with its legend; the figure is at most a page (:data:`PAGE_IN`) tall. Steps are integers, and so are the ticks.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = curve_rows(curves, by, order)
    with paper_style():
        # one scale per column: the rows' losses and accuracies compare at a glance
        height = min(0.6 + CURVE_ROW_IN * len(rows), PAGE_IN)
        fig, grid = plt.subplots(len(rows), 2, figsize=(DOUBLE_IN, height), sharex=True, sharey="col", squeeze=False)
        try:
            for (loss_ax, acc_ax), labels in zip(grid, rows, strict=True):
                _draw_curves([loss_ax, acc_ax], curves[curves[by].astype(str).isin(labels)], by, labels)
                outside_legend(acc_ax)
            for ax in grid[-1]:
                ax.set_xlabel("Step")
            fig.suptitle(wrap_title(title, DOUBLE_IN))
            return save_figure(fig, out_dir, f"curves_{task}")
        finally:
            plt.close(fig)


def curve_rows(curves: pd.DataFrame, by: str, order: Sequence[str] = ()) -> list[list[str]]:
    """The labels of ``by`` in legend order (``order``, then by name), packed into rows of at most
    :data:`CURVES_MAX` lines without splitting the lines of one attention (its noise levels, its variants) across
    rows; an attention with more lines than that has a row of its own, or, where its variants sweep settings
    (``r=16``, ``s1=32``: the hyperparameter suite's thirteen lines in one panel repeated the palette's colours), a
    row per setting swept, its values in numeric order, beside the variants that sweep nothing (the base) in every
    such row (:func:`_sweep_rows`)."""
    rank = {name: i for i, name in enumerate(order)}
    labels = sorted({str(v) for v in curves[by]}, key=lambda v: (rank.get(v, len(rank)), v))
    first = curves.assign(_label=curves[by].astype(str)).groupby("_label").first()
    owner = first["attention"].astype(str) if "attention" in curves.columns else pd.Series(labels, index=labels)
    variant = first["variant"].astype(str) if "variant" in curves.columns else pd.Series("", index=labels)
    blocks: dict[str, list[str]] = {}
    for label in labels:
        blocks.setdefault(owner[label], []).append(label)
    rows: list[list[str]] = []
    for block in blocks.values():
        parts = _sweep_rows(block, variant) if len(block) > CURVES_MAX else [block]
        for part in parts:
            if len(parts) == 1 and rows and len(rows[-1]) + len(part) <= CURVES_MAX:
                rows[-1] += part
            else:
                rows.append(list(part))
    return rows


def _sweep_rows(block: list[str], variant: pd.Series) -> list[list[str]]:
    """One attention's lines (more than :data:`CURVES_MAX`) as rows: a row per setting its variants sweep
    (``<setting>=<value>``), at most :data:`CURVES_MAX` values a row in numeric order, each with the lines that sweep
    nothing; the block as one row where its variants sweep nothing (the ablation's named parts)."""
    swept: dict[str, list[str]] = {}
    for label in block:
        setting, sep, _value = variant[label].partition("=")
        swept.setdefault(setting if sep else "", []).append(label)
    fixed = swept.pop("", [])
    if not swept:
        return [block]

    def value(label: str) -> tuple[float, str]:
        text = variant[label].partition("=")[2]
        try:
            return float(text), text
        except ValueError:
            return math.inf, text

    rows = []
    for members in swept.values():
        members = sorted(members, key=value)
        rows += [fixed + members[i:i + CURVES_MAX] for i in range(0, len(members), CURVES_MAX)]
    return rows


def _draw_curves(axes: list[plt.Axes], curves: pd.DataFrame, by: str, order: Sequence[str]) -> None:
    rank = {name: i for i, name in enumerate(order)}
    groups = sorted(curves.groupby(by, sort=True), key=lambda g: (rank.get(str(g[0]), len(rank)), str(g[0])))
    for i, (label, sub) in enumerate(groups):
        sub = sub.assign(dev_acc=100.0 * sub["dev_acc"])  # accuracy in %, as every table shows it
        stats = sub.groupby("step")[["train_loss", "dev_acc"]].agg(["mean", "min", "max"])
        color = PALETTE[i % len(PALETTE)]
        for ax, column in zip(axes, ("train_loss", "dev_acc"), strict=True):
            steps = stats.index.to_numpy()
            # markers: a curve of one evaluation (a short run) is still a visible point
            ax.plot(steps, stats[(column, "mean")], color=color, label=str(label), marker="o", ms=2.5)
            ax.fill_between(steps, stats[(column, "min")], stats[(column, "max")], color=color, alpha=0.15,
                            linewidth=0)
    for ax, label in zip(axes, ("Training loss", "Dev accuracy (%)"), strict=True):
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a step is a whole number: no 2.5 between 2 and 3
        ax.grid(True)


def plot_noise_robustness(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table 5's figure: test accuracy against noise amplitude a, one colour per model, error bars = std over seeds;
    solid where the noise is in every split, dashed where only the test split is noisy.

    Args:
        summary: Columns ``label`` (model), ``noise``, ``noise_on``, ``mean``, ``std``; the a = 0 rows (noise_on
            ``train+test``) start the lines of both modes.
    """
    styles = {TRAIN_TEST: ("-", "noise on train and test"), TEST_ONLY: ("--", "noise on test only")}
    count = summary["label"].nunique()

    def draw(ax: plt.Axes) -> None:
        noisy = summary[summary["noise"] > 0]
        span = summary["noise"].max() - summary["noise"].min()
        for i, (label, sub) in enumerate(summary.groupby("label", sort=False)):
            clean = sub[sub["noise"] == 0]
            name: str | None = str(label)  # the legend names each model once
            for mode, (ls, _) in styles.items():
                points = sub[(sub["noise"] > 0) & (sub["noise_on"] == mode)]
                if points.empty and not (mode == TRAIN_TEST and noisy.empty):
                    continue  # a mode this model was not run in would be a lone a = 0 point
                points = pd.concat([clean, points]).dropna(subset=["mean"]).sort_values("noise")
                x = points["noise"] + dodge(i, count) * span
                errorbar(ax, x, points, color=PALETTE[i % len(PALETTE)], ls=ls, marker="o", label=name)
                name = None
        levels = sorted(summary["noise"].unique())
        ax.set_xticks(levels, labels=[f"{a:g}" for a in levels])
        if (noisy["noise_on"] == TEST_ONLY).any():
            for ls, text in styles.values():
                ax.plot([], [], color="0.3", ls=ls, label=text)

    return single_axes(out_dir, stem, title, draw, xlabel="Noise amplitude a of U(-a, a)", ylabel="Test accuracy (%)")


def plot_parameter_sweep(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str,
                         parameter: str) -> list[Path]:
    """Table 6's figure: test accuracy against one parameter's value (log2 axis when all values are positive),
    one line per task and a thick line for the average over tasks.

    Args:
        summary: Columns ``value`` (numeric), ``series`` (task label or ``Average``), ``mean``, ``std``.
        parameter: The parameter's name, the x label.
    """

    values = sorted(float(v) for v in summary["value"].unique())
    log = all(v > 0 for v in values)
    count = summary["series"].nunique()

    def draw(ax: plt.Axes) -> None:
        for i, (series, sub) in enumerate(summary.groupby("series", sort=False)):
            points = sub.dropna(subset=["mean"]).sort_values("value")
            thick = series == "Average"
            color = "k" if thick else PALETTE[i % len(PALETTE)]
            shift = dodge(i, count)
            x = (points["value"] * 2 ** (shift * math.log2(values[-1] / values[0])) if log
                 else points["value"] + shift * (values[-1] - values[0]))
            errorbar(ax, x, points, color=color, lw=2 if thick else 1.2, marker="o", label=str(series),
                     zorder=3 if thick else 2)
        if log:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(values, labels=[f"{v:g}" for v in values])

    return single_axes(out_dir, stem, title, draw, xlabel=parameter, ylabel="Test accuracy (%)")


#: How far apart, as a fraction of the x axis' span, the series of a figure of error bars are drawn at one x value:
#: seven models' bars at one noise level were drawn over each other.
DODGE = 0.02


def dodge(i: int, count: int) -> float:
    """The ``i``-th of ``count`` series' shift along x, a fraction of the axis' span (:data:`DODGE` apart, centred):
    error bars at one x value side by side instead of over each other."""
    return DODGE * (i - (count - 1) / 2)


def plot_ablation(diffs: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table 7's figure: horizontal bars of each ablated model's average accuracy minus the baseline's.

    Args:
        diffs: Columns ``model`` (display name) and ``diff`` (percentage points), in table order.
    """

    def draw(ax: plt.Axes) -> None:
        y = np.arange(len(diffs))
        values = diffs["diff"].to_numpy(dtype=float)
        ax.barh(y, values, color=[PALETTE[1] if v < 0 else PALETTE[2] for v in values])
        ax.set_yticks(y, labels=[str(m) for m in diffs["model"]])
        ax.invert_yaxis()  # first row of the table on top
        ax.axvline(0.0, color="0.3", lw=1)

    height = 1.0 + 0.2 * len(diffs)
    return single_axes(out_dir, stem, title, draw, xlabel="Average accuracy − baseline (points)", ylabel="",
                       figsize=(COLUMN_IN, height))


def plot_incoherence(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table S7's figure: μ-incoherence before and after the Fourier convolution, a pair of bars per (row, rank)
    with the pooled std as error bars.

    Args:
        summary: Columns ``label``, ``rank``, ``mu_x_mean``, ``mu_x_std``, ``mu_smooth_mean``, ``mu_smooth_std``.
    """

    def draw(ax: plt.Axes) -> None:
        x = np.arange(len(summary))
        # the paper's symbols (mathtext), in the palette of every other figure
        for i, (offset, which, name) in enumerate(((-0.2, "mu_x", r"$\mu_X$"),
                                                  (0.2, "mu_smooth", r"$\mu_X^{\mathrm{smooth}}$"))):
            ax.bar(x + offset, summary[f"{which}_mean"].to_numpy(dtype=float), width=0.4, label=name,
                   color=PALETTE[i], yerr=summary[f"{which}_std"].to_numpy(dtype=float), capsize=3)
        ax.set_xticks(x, labels=[f"{label}\nrank={rank}" for label, rank in zip(summary["label"], summary["rank"],
                                                                                 strict=True)])

    return single_axes(out_dir, stem, title, draw, xlabel="", ylabel=r"$\mu$-incoherence")
