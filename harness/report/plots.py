"""What every kind's figures share: the paper style (one column of 3.3 in or two of 6.9 in, 8-pt fonts, TrueType
fonts in the PDF), a colour-blind-safe style per line with the baselines emphasised, small multiples by the zoo's
groups (:mod:`harness.report.groups`) with one shared legend, ``--highlight``, log ticks that never crowd, crossings
marked on a line, point labels placed where they overlap nothing, dot charts for a figure with one x value, and the
atomic write of a figure as PNG and PDF (each kind draws its own figures with these)."""

from __future__ import annotations

import math
import re
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from ..core.files import atomic_write
from .format import length_label
from .groups import group_of, paper_order
from .highlight import highlighting, is_highlighted, split_patterns  # noqa: F401  (re-exported)
from .labels import crossing_handle, declutter, label_point, mark_crossing  # noqa: F401  (re-exported)

# Benchmarks run headless (servers, CI) and only write files, so never pick an interactive backend.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FuncFormatter,
    Locator,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

COLUMN_IN, DOUBLE_IN = 3.3, 6.9  # a one-column and a two-column figure of a two-column paper
MAX_TICKS = 8  # labelled ticks per axis: more collide at 7 pt in a column's width
SINGLE_PANEL_MAX = 8  # up to this many variants besides the baselines, one panel reads; more go into small multiples
PANEL_MAX = 9  # lines besides the baselines in one panel: the palette's colours
SINGLE_AXES_IN = 2.5  # the height of a one-panel figure without its legend
LEGEND_LINE_IN = 0.115  # a 6.5-pt legend line with its spacing
HALF_COLUMN_CHARS = 27  # the longest legend label two columns of a 3.3-in figure's legend hold side by side
_FORMATS = (("png", {"dpi": 150}), ("pdf", {}))  # the PDF is the paper's copy (vector); the PNG is to look at
PAPER_RC: dict[str, object] = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "figure.titlesize": 8, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 6.5, "legend.frameon": False, "legend.handlelength": 1.8,
    "legend.labelspacing": 0.25, "legend.borderaxespad": 0.2, "legend.borderpad": 0.2,
    # Type 42 (TrueType) keeps the text editable and selectable; journals reject the default Type 3 bitmaps
    "pdf.fonttype": 42, "ps.fonttype": 42,
    "axes.linewidth": 0.6, "lines.linewidth": 1.0, "lines.markersize": 3.5, "grid.linewidth": 0.4, "grid.alpha": 0.35,
    "xtick.major.width": 0.6, "ytick.major.width": 0.6, "xtick.major.size": 2.5, "ytick.major.size": 2.5,
    "xtick.minor.size": 1.5, "ytick.minor.size": 1.5, "figure.labelsize": 8, "figure.constrained_layout.use": True,
    "savefig.pad_inches": 0.02,
}
#: Paul Tol's "muted" scheme with its three pale colours darkened (sand to ochre, cyan to blue, teal a shade): as
#: Tol gives them, sand and cyan reach under 1.8:1 contrast on white, too faint for a thin line on paper; each colour
#: here reaches at least 3:1 (the WCAG minimum for graphics), and the closest pair under simulated protanopia,
#: deuteranopia and tritanopia stays as far apart as in Tol's own scheme (tests/harness/report/test_plots.py checks
#: both). Black and greys are kept for the baselines and the lines ``--highlight`` mutes.
PALETTE = ("#332288", "#CC6677", "#117733", "#8C660E", "#297DCC", "#882255", "#32A68F", "#999933", "#AA4499")
MARKERS = "osD^vPX<>hp*"
BASELINE_STYLES = ({"color": "black", "ls": "-"}, {"color": "0.45", "ls": "--"}, {"color": "0.6", "ls": ":"})
MUTED = {"color": "0.78", "lw": 0.7, "marker": "", "zorder": 1}



@contextmanager
def paper_style() -> Iterator[None]:
    """The paper's rcParams (:data:`PAPER_RC`) for the figures made and saved inside."""
    with matplotlib.rc_context(PAPER_RC):
        yield


def variant_style(i: int) -> dict[str, str]:
    """Colour and marker of the ``i``-th line of a panel: nine colours, twelve markers, so that every pair differs
    within a panel of up to :data:`PANEL_MAX` lines and stays distinct beyond."""
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def line_styles(names: Sequence[str], baselines: Sequence[str] = (), *,
                mute: bool = True) -> dict[str, dict[str, object]]:
    """The style of every line of one panel: the baselines thick in black and greys, under the others; with a
    ``--highlight``, the matching variants thicker, coloured and on top, and (``mute``) the rest grey and thin; else a
    colour and marker each in the order given. Small multiples pass ``mute=False``: a family's panel tells its members
    apart by colour, and the highlighted variant is drawn in every panel (:func:`panel_layout`)."""
    styles: dict[str, dict[str, object]] = {}
    # the baselines under the variants: a variant that matches one (SDPA beside the math kernel, a cache of the same
    # size) stays visible on top of its thick line
    for i, name in enumerate(b for b in baselines if b in names):
        styles[name] = {**BASELINE_STYLES[min(i, len(BASELINE_STYLES) - 1)], "lw": 1.8,
                        "marker": MARKERS[i % len(MARKERS)], "zorder": 1.5}
    highlighted = [n for n in names if n not in styles and is_highlighted(n)]
    for i, name in enumerate(highlighted):  # the first colours, the same in every panel, and no other line's
        styles[name] = {**variant_style(i), "lw": 1.8, "zorder": 4}
    colours = PALETTE[len(highlighted):] or PALETTE
    for i, name in enumerate(n for n in names if n not in styles):
        if is_highlighted(name) is False and mute:
            styles[name] = dict(MUTED)
            continue
        styles[name] = {"color": colours[i % len(colours)], "marker": MARKERS[(i + len(highlighted)) % len(MARKERS)],
                        "lw": 1.0, "zorder": 2}
    return styles


def dot_styles(names: Sequence[str], baselines: Sequence[str] = ()) -> dict[str, dict[str, object]]:
    """:func:`line_styles` for a dot chart, where each row is labelled: one colour for every variant, so that colour
    means something only where it is meant to (the baselines, a ``--highlight``)."""
    styles = line_styles(names, baselines)
    for name in names:
        if name not in baselines and is_highlighted(name) is None:
            styles[name] = {"color": PALETTE[0], "marker": "o", "zorder": 2}
    return styles


def panels(names: Iterable[str], baselines: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """The panels of a figure of ``names`` as (title, variants besides the baselines): one untitled panel for up to
    :data:`SINGLE_PANEL_MAX` variants, else one per group of :mod:`harness.report.groups` in the paper's order, a group
    of more than :data:`PANEL_MAX` split evenly (``low rank (1/2)``). Every variant is in exactly one panel."""
    others = [n for n in paper_order(names, baselines) if n not in baselines]
    if len(others) <= SINGLE_PANEL_MAX:
        return [("", others)]
    by_group: dict[str, list[str]] = {}
    for name in others:
        by_group.setdefault(group_of(name), []).append(name)
    out = []
    for group, members in by_group.items():
        parts = math.ceil(len(members) / PANEL_MAX)
        size = math.ceil(len(members) / parts)
        out += [(group if parts == 1 else f"{group} ({i + 1}/{parts})", members[i * size:(i + 1) * size])
                for i in range(parts)]
    return out


def panel_layout(names: Iterable[str], baselines: Sequence[str] = ()) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(the lines every panel draws, the :func:`panels`): the baselines present and, where the figure is small
    multiples, the variants ``--highlight`` matches, so a highlighted variant is seen beside every family instead of
    alone in its own group's panel (a panel left empty by that is dropped)."""
    names = list(dict.fromkeys(names))
    every = [b for b in baselines if b in names]
    layout = panels(names, baselines)
    highlighted = [n for _title, members in layout for n in members if is_highlighted(n)]
    rest = [(title, [m for m in members if m not in highlighted]) for title, members in layout]
    rest = [(title, members) for title, members in rest if members]
    if len(layout) == 1 or not highlighted or not rest:
        return every, layout
    return [*every, *highlighted], rest


def wrap_title(title: str, width_in: float, fontsize: float = 8.0) -> str:
    """``title`` broken into lines that fit ``width_in`` at ``fontsize`` (DejaVu Sans averages about 0.58 em a
    character over mixed text; at 0.52 a full line of a 3.3-in figure touched its edges)."""
    # the items of a "CPU · float32 · batch 4 · dim 64" title break between items, never inside one ("dim" / "64")
    if " · " in title:
        title = " · ".join(part.replace(" ", "\u00a0") for part in title.split(" · "))
    return textwrap.fill(title, width=max(20, int(width_in * 72 / (0.58 * fontsize)))).replace("\u00a0", " ")


def panel_grid(n: int, *, entries: int, shared: int = 0, sharey: bool = True) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure of ``n`` panels with shared axes, each tall enough for a legend of ``entries`` lines beside it and the
    figure for a shared legend of ``shared`` entries under it (:func:`figure_legends`): one column wide for one panel
    (its one legend below, in two columns), else two panels a row, two columns wide. Unused cells are removed (the
    figure's axes are its panels). Call inside :func:`paper_style`."""
    if n == 1:  # a legend beside would leave a column's axes a third of its width
        fig, ax = plt.subplots(figsize=(COLUMN_IN, SINGLE_AXES_IN + LEGEND_LINE_IN * math.ceil((entries + shared) / 2)))
        return fig, [ax]
    row_in = max(1.7, 0.118 * entries + 0.55)  # a 6.5-pt legend line with its spacing is about 0.11 in
    rows = math.ceil(n / 2)
    fig, grid = plt.subplots(rows, 2, figsize=(DOUBLE_IN, row_in * rows + 0.55 + 0.115 * math.ceil(shared / 4)),
                             sharex=True, sharey=sharey, squeeze=False)
    axes = list(grid.ravel())
    for i, ax in enumerate(axes[n:], start=n):
        fig.delaxes(ax)
        axes[i - 2].xaxis.set_tick_params(labelbottom=True)  # the panel above now ends its column
    return fig, axes[:n]


def grid_labels(fig: plt.Figure, axes: Sequence[plt.Axes], xlabel: str, ylabel: str, title: str) -> None:
    """Axis labels and title of a :func:`panel_grid` figure, wrapped to its width: on the axes of a single panel; for a
    grid, the x label under the bottom panel of each column (the layout stacks the shared legend under those, where
    it drew a figure-wide x label over it) and the y label once."""
    width = fig.get_figwidth()
    if len(axes) == 1:
        axes[0].set_xlabel(wrap_title(xlabel, width * 0.8))
        axes[0].set_ylabel(wrap_title(ylabel, fig.get_figheight() * 0.8))
    else:
        for ax in axes[-2:]:  # the last two panels end the two columns (panel_grid)
            ax.set_xlabel(wrap_title(xlabel, width * 0.4))
        fig.supylabel(wrap_title(ylabel, fig.get_figheight() * 0.8))
    fig.suptitle(wrap_title(title, width))


def panel_legend(ax: plt.Axes, handles: Sequence[Line2D]) -> None:
    """The panel's legend beside it, top-aligned (the layout keeps it in frame), or under the figure where the
    panel is the figure's only one."""
    if not handles:
        return
    fig = ax.get_figure()
    if len([a for a in fig.axes if a.get_visible()]) == 1:
        # two columns where the labels fit half a column's width, else one (the figure grows to hold it)
        ncol = 2 if max(len(h.get_label()) for h in handles) <= HALF_COLUMN_CHARS else 1
        fig.set_figheight(max(fig.get_figheight(), SINGLE_AXES_IN + LEGEND_LINE_IN * math.ceil(len(handles) / ncol)))
        fig.legend(handles=list(handles), loc="outside lower center", ncol=ncol)
        return
    ax.legend(handles=list(handles), loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              ncol=1 if len(handles) <= 14 else 2)


def oom_marks(ax: plt.Axes, lengths: Sequence[float], color: object, gid: str | None = None) -> None:
    """An OOM has no value: a ✕ at the top edge (x in data, y in axes coordinates) shows where a variant ran out of
    memory (:func:`oom_key` says so in the legend)."""
    (marks,) = ax.plot(list(lengths), [1.0] * len(lengths), ls="", marker="x", ms=5, mew=1.2, color=color, gid=gid,
                       transform=ax.get_xaxis_transform(), clip_on=False)
    # out of the layout: its extent in a blended transform on log axes threw the constrained layout (panels squeezed
    # and their legends cut at the figure's edge)
    marks.set_in_layout(False)


def oom_key() -> Line2D:
    """The legend key of :func:`oom_marks`."""
    return Line2D([], [], ls="", marker="x", mew=1.2, color="0.3", label="OOM (top edge)")


def figure_legends(fig: plt.Figure, own: Sequence[tuple[plt.Axes, Sequence[Line2D]]], every: Sequence[Line2D],
                   keys: Sequence[Line2D] = ()) -> None:
    """The legends of a :func:`panel_grid` figure: ``own`` gives each panel's handles of its own lines, ``every`` the
    lines drawn in every panel (baselines, a ``--highlight``) and ``keys`` what marks mean (OOM, a crossover ring).
    A single panel gets one legend under the figure; small multiples a legend of their own lines beside each panel
    and one shared legend under the panels, so that no panel repeats the baselines and the keys."""
    if len(own) == 1:
        panel_legend(own[0][0], [*every, *own[0][1], *keys])
        return
    for ax, handles in own:
        panel_legend(ax, handles)
    shared = [*every, *keys]
    if shared:
        fig.legend(handles=shared, loc="outside lower center", ncol=min(len(shared), 4))


def outside_legend(ax: plt.Axes, handles: list | None = None) -> None:
    """Legend to the right of the axes, so it never hides a line; ``save_figure`` keeps it in frame."""
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)


def legend_handles(names: Sequence[str], styles: Mapping[str, Mapping[str, object]],
                   label: Callable[[str], str]) -> list[Line2D]:
    """A handle per line in ``names``' order; the lines ``--highlight`` mutes share one handle, "others"."""
    handles, muted = [], False
    for name in names:
        style = styles[name]
        if style.get("color") == MUTED["color"] and style.get("marker") == "":
            muted = True
            continue
        handles.append(Line2D([], [], color=style["color"], ls=style.get("ls", "-"), lw=style.get("lw", 1.0),
                              marker=style.get("marker", ""), label=label(name)))
    if muted:
        handles.append(Line2D([], [], color=MUTED["color"], lw=MUTED["lw"], label="others"))
    return handles


class LogTicks(Locator):
    """Major ticks of a log axis, at most :data:`MAX_TICKS` in view: 1-2-5 steps on a short range, then 1-3, then
    powers of ten (strided on a very wide range), linear steps where not even two powers fit (a narrow range)."""

    def __init__(self, max_ticks: int = MAX_TICKS) -> None:
        self.max_ticks = max_ticks

    def __call__(self) -> Sequence[float]:
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        vmin, vmax = sorted((vmin, vmax))
        if vmin <= 0:
            vmin = vmax * 1e-3
        linear = MaxNLocator(nbins=self.max_ticks - 2, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)
        for subs in ((1.0, 2.0, 5.0), (1.0, 3.0), (1.0,)):
            ticks = LogLocator(base=10, subs=subs, numticks=self.max_ticks).tick_values(vmin, vmax)
            inside = int(((ticks >= vmin * 0.999) & (ticks <= vmax * 1.001)).sum())
            if inside < 3 and subs[1:] and (linear > 0).sum() >= 3:  # under a decade: 0.4, 0.6, 0.8, 1 read better
                return linear[linear > 0]
            if 2 <= inside <= self.max_ticks:
                return ticks
        return linear


def plain_log_axis(axis: matplotlib.axis.Axis) -> None:
    """A log axis labelled 0.5, 20, 300 (a paper reads those better than 5×10⁻¹) at :class:`LogTicks`."""
    axis.set_major_locator(LogTicks())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def length_axis(ax: plt.Axes, lengths: Sequence[int]) -> None:
    """The x axis of sequence lengths (or contexts): log base 2, ticked only at the measured lengths (every k-th
    where more than :data:`MAX_TICKS`), labelled 1K, 4K as the tables are (a log-10 axis set 10000 beside 20000)."""
    ax.set_xscale("log", base=2)
    lengths = sorted({int(n) for n in lengths})
    shown = lengths if len(lengths) <= MAX_TICKS else lengths[::math.ceil(len(lengths) / MAX_TICKS)]
    ax.set_xticks(shown, labels=[length_label(n) for n in shown])
    ax.xaxis.set_minor_locator(NullLocator())


def short_length(n: float) -> str:
    """A sequence length in four characters or so, K = 1024 as the tables' 1K: 700, 1000, 1.8K (1000 as 0.98K misread
    as under a thousand)."""
    return f"{n / 1024:.2g}K" if round(n) >= 1024 else f"{n:.0f}"


def dot_chart(ax: plt.Axes, names: Sequence[str], values: Mapping[str, float], styles: Mapping[str, Mapping],
              *, label: Callable[[str], str], statuses: Mapping[str, str] | None = None,
              reference: float | None = None) -> None:
    """A dot per variant, one row each (``names`` top to bottom) on a log x axis: the figure of a single x value,
    where a line would be one point. A variant without a value shows its status (``oom``) in its row; ``reference``
    draws a vertical line (the baseline's value, or 1 in a ratio chart)."""
    rows = np.arange(len(names))[::-1]
    for row, name in zip(rows, names, strict=True):
        style = styles[name]
        value = values.get(name, math.nan)
        ax.axhline(row, color="0.9", lw=0.4, zorder=0)
        if math.isfinite(value) and value > 0:
            ax.plot([value], [row], ls="", marker=style.get("marker") or "o", color=style["color"], gid=name,
                    ms=5 if style.get("lw", 1.0) >= 1.5 else 4, zorder=style.get("zorder", 2))
        elif statuses and name in statuses:
            ax.annotate(statuses[name], (0.99, row), xycoords=("axes fraction", "data"), ha="right", va="center",
                        fontsize=6, color="0.4")
    if reference is not None and math.isfinite(reference):
        ax.axvline(reference, color="black", lw=0.7, zorder=1)
    ax.set_yticks(rows, labels=[label(n) for n in names])
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.set_xscale("log")
    plain_log_axis(ax.xaxis)
    ax.grid(True, axis="x", which="major")


_NO_GLYPH = re.compile(r"Glyph \d+ \((.+)\) missing from font")
_NOTED: set[str] = set()  # characters already reported missing


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` (150 dpi) and ``<stem>.pdf`` (TrueType fonts) in the paper style; returns the
    paths. A figure laid out by the paper style keeps its width (3.3 or 6.9 in); any other is cropped to its content.

    Characters the font lacks (a suite named in CJK script) make matplotlib warn once per character and format; they
    are folded into one line naming the figure.
    """
    paths = []
    exact = isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    with warnings.catch_warnings(record=True) as caught, paper_style():
        warnings.simplefilter("always")
        for ext, kwargs in _FORMATS:
            # the format is explicit: the temporary name has no suffix; "tight" keeps a legacy figure's legend
            bbox = None if exact else "tight"
            path = atomic_write(out_dir / f"{stem}.{ext}",
                                lambda tmp, ext=ext, kwargs=kwargs, bbox=bbox: fig.savefig(
                                    tmp, format=ext, bbox_inches=bbox, **kwargs))
            paths.append(path)
            if exact:  # laid out once, by the first save: the second format keeps it (a layout pass of the zoo's
                fig.set_layout_engine("none")  # small multiples cost as much as drawing them)
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
                ylabel: str, figsize: tuple[float, float] = (COLUMN_IN, 2.6), legend_columns: int = 2) -> list[Path]:
    """Creates one axes in the paper style, lets ``draw`` fill it, adds labels, grid, the title over the figure and
    the legend under it in ``legend_columns`` columns (the figure grows by the legend's lines, so the axes keep the
    column's width: a legend beside them left a 3.3-in figure half its width and pushed a centred title past its
    edge), saves and closes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with paper_style():
        fig, ax = plt.subplots(figsize=figsize)
        try:
            draw(ax)
            ax.set_xlabel(wrap_title(xlabel, figsize[0] * 0.8))
            ax.set_ylabel(ylabel)
            fig.suptitle(wrap_title(title, figsize[0]))
            ax.grid(True)
            handles, _ = ax.get_legend_handles_labels()
            if handles:
                fig.set_figheight(figsize[1] + 0.115 * math.ceil(len(handles) / legend_columns))
                fig.legend(handles=handles, loc="outside lower center", ncol=legend_columns)
            return save_figure(fig, out_dir, stem)
        finally:
            plt.close(fig)


def errorbar(ax: plt.Axes, x: pd.Series, points: pd.DataFrame, **style: object) -> None:
    """Mean with ± std over seeds as error bars; a single seed (std NaN) draws no bar."""
    ax.errorbar(x.to_numpy(dtype=float), points["mean"].to_numpy(dtype=float),
                yerr=points["std"].fillna(0.0).to_numpy(dtype=float), capsize=2, **style)
