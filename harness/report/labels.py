"""Labels at points that overlap nothing: a label is placed at the first spot around its point where it stays in
its panel and covers no marker, no other label and no line, else where it covers no marker and no label (a thin
leader line to its point when it sits away from it), or hidden; and the rings that mark a crossing on a line, whose
lengths go in the legend instead of beside them."""

from __future__ import annotations

import math

import matplotlib.text
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.path import Path
from matplotlib.transforms import Bbox

_LABEL = "point label"  # the gid of a label at a point, which declutter places
_LEADER = "point label leader"  # the gid of the line from a label placed away from its point to the point
#: Where a label may sit around its point, tried in this order at 4, 10 and 18 pt from it: (x side, y side),
#: -1 left or below, 0 centred, 1 right or above.
_SPOTS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (0, 1), (0, -1))


def label_point(ax: Axes, x: float, y: float, text: str, color: object, below: bool = False) -> None:
    """A short label beside the point (``x``, ``y``), on a white ground, above it (``below``: under it) until
    :func:`declutter` places it where it overlaps nothing."""
    label = ax.annotate(text, (x, y), xytext=(4, -4 if below else 4), textcoords="offset points", fontsize=6,
                        color=color, zorder=7, gid=_LABEL, va="top" if below else "bottom",
                        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    # not part of the layout: a label moved by declutter must not make the layout shrink the axes to reach it
    label.set_in_layout(False)


def mark_crossing(ax: Axes, x: float, y: float, color: object) -> None:
    """A ring on a line at (``x``, ``y``): where the variant crosses the baseline (its length goes in the legend,
    :func:`crossing_handle`: labels beside rings that many variants put near the same length collide)."""
    ax.plot([x], [y], ls="", marker="o", ms=5.5, mfc="white", mec=color, mew=1.1, zorder=6)


def _marker_boxes(ax: Axes, dpi: float) -> list[Bbox]:
    """The display boxes of every marker drawn in ``ax`` (what a label must not hide)."""
    boxes = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_marker() in (None, "", "None", " "):
            continue
        r = line.get_markersize() * dpi / 72 / 2 + 1
        for x, y in line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float)):
            if math.isfinite(x) and math.isfinite(y):
                boxes.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    return boxes


def _line_paths(ax: Axes) -> list[Path]:
    """The display paths of every line drawn in ``ax`` as a line (a series, a reference line; not the grid)."""
    return [line.get_transform().transform_path(line.get_path()) for line in ax.get_lines()
            if line.get_visible() and line.get_linestyle() not in ("None", "", " ") and len(line.get_xydata()) > 1]


def _placed(label: matplotlib.text.Annotation, spot: tuple[int, int], distance: float, renderer: object) -> Bbox:
    """Moves ``label`` to ``spot`` at ``distance`` points from its point; returns its display box there."""
    sx, sy = spot
    label.xyann = (sx * distance, sy * distance)
    label.set_horizontalalignment({1: "left", -1: "right", 0: "center"}[sx])
    label.set_verticalalignment("bottom" if sy > 0 else "top")
    return label.get_window_extent(renderer)


def _place(label: matplotlib.text.Annotation, inside: Bbox, taken: list[Bbox], lines: list[Path],
           renderer: object) -> bool:
    """Puts ``label`` at the first spot (near, then farther) inside ``inside`` that covers no box of ``taken``, first
    one that also crosses none of ``lines``; records its box in ``taken``; False where no spot is free."""
    below = label.xyann[1] < 0
    order = sorted(_SPOTS, key=lambda s: s[1] > 0) if below else list(_SPOTS)
    spots = [(d, s) for d in (4.0, 10.0, 18.0) for s in order]
    for avoid in (lines, []):
        for distance, spot in spots:
            box = _placed(label, spot, distance, renderer)
            if (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1
                    and not any(box.overlaps(t) for t in taken)
                    and not any(path.intersects_bbox(box, filled=False) for path in avoid)):
                taken.append(box)
                if distance > 4.0:  # away from its point: a leader says whose it is
                    _leader(label)
                return True
    return False


def _leader(label: matplotlib.text.Annotation) -> None:
    """A thin line in the label's colour from its corner nearest its point to (almost) the point."""
    leader = label.axes.annotate("", label.xy, xytext=label.xyann, textcoords="offset points", zorder=6.9,
                                 gid=_LEADER, arrowprops={"arrowstyle": "-", "color": label.get_color(), "lw": 0.4,
                                                          "shrinkA": 0, "shrinkB": 2.5})
    leader.set_in_layout(False)


def declutter(fig: Figure) -> None:
    """Places each point label (:func:`label_point`) at the first spot around its point (:data:`_SPOTS`, near, then
    farther) where it stays inside its panel and overlaps no marker, no label placed before it and no line (a
    label's white ground hid the lines it lay on), else where it overlaps no marker and no label; a label that has
    no such spot is hidden rather than drawn over data or another label. A label placed away from its point gets a
    thin leader line to it."""
    fig.draw_without_rendering()  # the layout fixes where every point is (no pixels needed for that)
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [c for c in ax.texts if c.get_gid() == _LABEL and c.get_visible()]
        if not labels:
            continue
        taken, lines = _marker_boxes(ax, fig.dpi), _line_paths(ax)
        for label in labels:
            if not _place(label, ax.bbox, taken, lines, renderer):
                label.set_visible(False)


def crossing_handle(against: str) -> Line2D:
    """The legend's key of the rings of :func:`mark_crossing`."""
    return Line2D([], [], ls="", marker="o", ms=5.5, mfc="white", mec="0.3", mew=1.1,
                  label=f"crossover vs {against} (its n after each name)")
