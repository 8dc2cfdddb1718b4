"""Scaling plots: time (or training throughput) and peak memory against sequence length, log-log."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullLocator

from harness.report import Metric, length_label, metrics_for

# Benchmarks run headless (servers, CI) and only write files, so never pick an interactive backend.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_MARKERS = "osD^vP*Xh<>p"
_FORMATS = (("png", {"dpi": 150}), ("pdf", {}))


def _ok_points(df: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """Rows that can be drawn on a log axis: status ok and a positive measured value."""
    return df[(df["status"] == "ok") & (df[metric.column] > 0)]


def _plot_metric(df_group: pd.DataFrame, metric: Metric, out_dir: Path, stem: str, title: str) -> list[Path]:
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    try:
        any_oom = False
        # Colours and markers follow the sorted attention names, so a variant looks the same in the
        # time and the memory figure.
        for i, (attention, sub) in enumerate(df_group.groupby("attention", sort=True)):
            style = {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)]}
            ok = _ok_points(sub, metric)
            oom = sub[sub["status"] == "oom"]
            if ok.empty and oom.empty:
                continue
            # Reindexing to all lengths leaves NaN at failed cells, which breaks the line there instead of
            # drawing across a length that has no measurement.
            values = (ok.set_index("seq_len")[metric.column] * metric.scale).reindex(lengths)
            ax.plot(lengths, values.to_numpy(), label=str(attention), **style)
            if not oom.empty:
                # An OOM has no value; pin it to the top edge (x in data, y in axes coordinates) so the
                # figure shows where each variant ran out of memory.
                ax.plot(oom["seq_len"], [1.0] * len(oom), ls="", marker="x", ms=9, mew=2,
                        color=style["color"], transform=ax.get_xaxis_transform(), clip_on=False)
                any_oom = True

        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # Plain numbers (0.5, 20, 300) read better in a paper than 5x10^-1 mantissa labels.
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        ax.set_xticks(lengths, labels=[length_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())  # the lengths themselves are the only useful x ticks
        ax.set_xlabel("Sequence length")
        ax.set_ylabel(metric.label)
        ax.set_title(title, fontsize="medium")
        ax.grid(True, which="major", alpha=0.3)
        handles, _labels = ax.get_legend_handles_labels()
        if any_oom:
            handles.append(Line2D([], [], ls="", marker="x", mew=2, color="0.3", label="OOM (top edge)"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small",
                  frameon=False)

        return save_figure(fig, out_dir, stem)
    finally:
        plt.close(fig)


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` (150 dpi) and ``<stem>.pdf``; returns the paths."""
    paths = []
    for ext, kwargs in _FORMATS:
        path = out_dir / f"{stem}.{ext}"
        fig.savefig(path, bbox_inches="tight", **kwargs)  # "tight" keeps an outside legend in frame
        paths.append(path)
    return paths


def plot_learning_curves(curves: pd.DataFrame, out_dir: Path, *, task: str, title: str) -> list[Path]:
    """Training loss and dev accuracy against step for one task, one line per attention (the paper's Fig. 3).

    Lines are the mean over seeds at each evaluation step; the band spans the seeds' min and max.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    try:
        for i, (attention, sub) in enumerate(curves.groupby("attention", sort=True)):
            stats = sub.groupby("step")[["train_loss", "dev_acc"]].agg(["mean", "min", "max"])
            for ax, column in zip(axes, ("train_loss", "dev_acc"), strict=True):
                steps = stats.index.to_numpy()
                ax.plot(steps, stats[(column, "mean")], color=f"C{i % 10}", label=str(attention))
                ax.fill_between(steps, stats[(column, "min")], stats[(column, "max")], color=f"C{i % 10}",
                                alpha=0.15, linewidth=0)
        for ax, label in zip(axes, ("Training loss", "Dev accuracy"), strict=True):
            ax.set_xlabel("Step")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
        fig.suptitle(title, fontsize="medium")
        return save_figure(fig, out_dir, f"curves_{task}")
    finally:
        plt.close(fig)


def plot_scaling(df_group: pd.DataFrame, out_dir: Path, *, slug: str, title: str) -> list[Path]:
    """Draws time and peak memory against sequence length for one group, one line per attention.

    Both axes are logarithmic (x in base 2, ticked at the measured lengths), so a power law is a
    straight line whose slope is its exponent. Only ok cells are drawn; OOM cells are marked with an ✕
    at the top edge in the variant's colour. In ``train_step`` mode the time figure shows throughput
    (steps/s) instead of time per call. A figure whose metric was not measured is skipped.

    Args:
        df_group: Results rows of one group (see :data:`harness.report.GROUP_COLUMNS`).
        out_dir: Destination directory; created if needed.
        slug: Group slug used in the file names ``time_<slug>.{png,pdf}`` and ``memory_<slug>.{png,pdf}``.
        title: Figure title.

    Returns:
        The paths written (PNG at 150 dpi, then PDF, per figure).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if df_group.empty:
        return []
    written: list[Path] = []
    for metric in metrics_for(str(df_group["mode"].iloc[0])):
        if _ok_points(df_group, metric).empty:
            continue
        written += _plot_metric(df_group, metric, out_dir, f"{metric.kind}_{slug}", title)
    return written
