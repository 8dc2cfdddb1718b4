"""What every kind's figures share: the headless backend, a line style per variant, a legend outside the axes, one
set of axes with a title and labels, error bars, and the atomic write of a figure as PNG and PDF (each kind draws its
own figures with these)."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import matplotlib
import pandas as pd

from ..core.files import atomic_write

# Benchmarks run headless (servers, CI) and only write files, so never pick an interactive backend.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_MARKERS = "osD^vP*Xh<>p"
_FORMATS = (("png", {"dpi": 150}), ("pdf", {}))


def variant_style(i: int) -> dict[str, str]:
    """Colour and marker of the ``i``-th variant (sorted by name): 10 colours × 12 markers, so that no two of the
    zoo's rows look alike in one figure, and a variant looks the same in every figure of a group."""
    return {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)]}


def outside_legend(ax: plt.Axes, handles: list | None = None) -> None:
    """Legend to the right of the axes, so it never hides a line; ``save_figure`` keeps it in frame."""
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)


_NO_GLYPH = re.compile(r"Glyph \d+ \((.+)\) missing from font")
_NOTED: set[str] = set()  # characters already reported missing


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` (150 dpi) and ``<stem>.pdf``; returns the paths.

    Characters the font lacks (a suite named in CJK script) make matplotlib warn once per character and format; they
    are folded into one line naming the figure.
    """
    paths = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for ext, kwargs in _FORMATS:
            # "tight" keeps an outside legend in frame; the format is explicit: the temporary name has no suffix
            path = atomic_write(out_dir / f"{stem}.{ext}",
                                lambda tmp, ext=ext, kwargs=kwargs: fig.savefig(tmp, format=ext, bbox_inches="tight",
                                                                                 **kwargs))
            paths.append(path)
    missing = []
    for w in caught:
        glyph = _NO_GLYPH.search(str(w.message))
        if glyph is None:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif (char := glyph.group(1).encode().decode("unicode_escape")) not in _NOTED | set(missing):
            missing.append(char)
    if missing:  # once per character and process: a run writes dozens of figures with the same title
        _NOTED.update(missing)
        print(f"attnbench: note: {len(missing)} characters have no glyph in matplotlib's font and show as boxes in "
              f"{out_dir / stem} and the figures after it: {''.join(missing[:20])}", file=sys.stderr)
    return paths


def single_axes(out_dir: Path, stem: str, title: str, draw: Callable[[plt.Axes], None], *, xlabel: str,
                 ylabel: str, figsize: tuple[float, float] = (6.4, 4.2)) -> list[Path]:
    """Creates one axes, lets ``draw`` fill it, adds labels, grid, title and an outside legend, saves and closes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=figsize)
    try:
        draw(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize="medium")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            outside_legend(ax)
        return save_figure(fig, out_dir, stem)
    finally:
        plt.close(fig)


def errorbar(ax: plt.Axes, x: pd.Series, points: pd.DataFrame, **style: object) -> None:
    """Mean with ± std over seeds as error bars; a single seed (std NaN) draws no bar."""
    ax.errorbar(x.to_numpy(dtype=float), points["mean"].to_numpy(dtype=float),
                yerr=points["std"].fillna(0.0).to_numpy(dtype=float), capsize=3, **style)
