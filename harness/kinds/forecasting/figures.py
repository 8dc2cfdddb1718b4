"""The forecasting suite's figure: one test window's history, truth and each model's forecast, a panel per model
(seven forecasts over one truth crossed past telling apart, and hid it), in the paper style."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from ...report.plots import DOUBLE_IN, LEGEND_LINE_IN, PALETTE, paper_style, plt, save_figure, wrap_title

COLUMNS = 4  # panels a row, two columns of a paper wide
PANEL_IN = 1.25  # a panel's height


def history_shown(history: int, horizon: int) -> int:
    """The steps of history drawn before the forecast: as many as the horizon (at least 24), so that a short
    horizon after a long window (ILI: 24 after 96) is not squeezed into the panel's last fifth."""
    return min(history, max(horizon, 24))


def forecast_panels(out_dir: Path, stem: str, title: str, history: Sequence[float], truth: Sequence[float],
                    forecasts: Mapping[str, Sequence[float]]) -> list[Path]:
    """``<stem>.{png,pdf}``: a panel per model (``forecasts`` by its name, in that order), :data:`COLUMNS` a row,
    on one scale: the history's last :func:`history_shown` steps and the truth in black (dashed, over the forecast),
    the model's forecast in colour; one legend under the panels."""
    shown = history_shown(len(history), len(truth))
    t_hist, t_future = np.arange(-shown, 0), np.arange(len(truth))
    rows, cols = math.ceil(len(forecasts) / COLUMNS), min(COLUMNS, len(forecasts))
    out_dir.mkdir(parents=True, exist_ok=True)
    with paper_style():
        fig, grid = plt.subplots(rows, cols, figsize=(DOUBLE_IN, 0.75 + PANEL_IN * rows + LEGEND_LINE_IN),
                                 sharex=True, sharey=True, squeeze=False)
        try:
            axes = list(grid.ravel())
            for i, (ax, (name, forecast)) in enumerate(zip(axes, forecasts.items(), strict=False)):
                ax.plot(t_hist, history[-shown:], color="black", lw=0.8)
                ax.plot(t_future, truth, color="black", lw=0.8, ls="--", zorder=3)
                ax.plot(t_future, forecast, color=PALETTE[i % len(PALETTE)], lw=1.0, gid=name)
                ax.axvline(0, color="0.6", lw=0.5)
                ax.set_title(name, loc="left")
                ax.grid(True)
            for i, ax in enumerate(axes[len(forecasts):], start=len(forecasts)):
                fig.delaxes(ax)
                axes[i - cols].xaxis.set_tick_params(labelbottom=True)  # the panel above now ends its column
            for ax in axes[len(forecasts) - cols:len(forecasts)]:  # the lowest panel of each column: a figure-wide
                ax.set_xlabel("Step (0: the first forecast)")  # label sat on the legend under the panels
            handles = [Line2D([], [], color="black", lw=0.8, label=f"history (last {shown} steps)"),
                       Line2D([], [], color="black", lw=0.8, ls="--", label="truth"),
                       Line2D([], [], color="0.45", lw=1.0, label="forecast (the panel's model)")]
            fig.legend(handles=handles, loc="outside lower center", ncol=3)
            fig.supylabel("Value (scaled)")
            fig.suptitle(wrap_title(title, DOUBLE_IN))
            return save_figure(fig, out_dir, stem)
        finally:
            plt.close(fig)
