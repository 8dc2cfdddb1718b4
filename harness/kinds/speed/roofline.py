"""The roofline view of the speed suites: achieved FLOP/s against arithmetic intensity, under the measured ceilings.

Per ok timed cell with a FLOP and byte count:
- intensity I = FLOPs / bytes moved (:mod:`harness.measure.traffic`: the eager operator graph's traffic, every op's
  operands and results, views free; an upper bound on the bytes, so I is a lower bound);
- attainable = min(P, B · I), with P the GEMM peak and B the copy bandwidth measured at the start of the cell's run
  (stored in the run's environment), the classic roofline of Williams, Waterman and Patterson (CACM 2009);
- ``roofline_fraction`` = achieved / attainable, and ``bound``: ``memory`` left of the ridge point P / B, else
  ``compute``; ``above_roof`` where the fraction exceeds 1, flagged in the table and ringed in the figure.
One figure per mode (and device, dtype, shape): the ceilings as lines, one point per variant and length (colour per
variant, size growing with the length), eager filled and compiled hollow, as tritonbench's roofline plot; many
variants as small multiples by group, the baselines in every panel, the ceilings' values in the shared legend.

A point above the roof is possible and says which estimate is loose: left of the ridge, the byte count is the eager
operator graph's with no cache reuse (an upper bound: an operand still in cache from the op before is counted again,
and a compiled cell's fused kernels skip round trips its count includes), so the point's true intensity lies to its
right; right of the ridge, P is the fastest of a few square GEMMs timed once per run, which a kernel timed in a
quieter moment, or one better blocked for its shape, can pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ...measure.flops import BANDWIDTH, peak_fraction
from ...report.format import (
    COMPILE_NAMES,
    MISSING,
    Fmt,
    display_name,
    escape,
    length_label,
    render_table,
    suite_title,
    write_csv,
    write_table_files,
)
from ...report.plots import (
    figure_legends,
    grid_labels,
    legend_handles,
    line_styles,
    panel_grid,
    panel_layout,
    paper_style,
    plain_log_axis,
    plt,
    save_figure,
)
from .crossover import COMPARE_BASELINES

#: Per run id: (GEMM peak GFLOP/s, copy bandwidth GB/s), from the run's environment.
Roofs = Mapping[str, tuple[float | None, float | None]]
ROOFLINE_COLUMNS = ("intensity_flop_per_byte", "gflops_per_s", "gemm_peak_gflops", "memory_bandwidth_gbs",
                    "attainable_gflops_per_s", "roofline_fraction", "bound", "above_roof")
ABOVE = "#CC3311"  # the ring of a point above its roof: a red no line of the palette uses
NOTE = ("Achieved GFLOP/s (its fraction of the attainable min(GEMM peak, bandwidth × I), I = FLOP/byte of the eager "
        "operator graph; mem = left of the ridge point, memory-bound). \"above roof\": achieved more than the roof; "
        "left of the ridge the byte count is an upper bound (no cache reuse between ops, and a compiled cell's fusion "
        "is not counted), so the true intensity is higher; right of it the peak is one run's fastest square GEMM, "
        "which a kernel can pass. See docs/measuring.md, section Roofline.")


def ceilings(df: pd.DataFrame, roofs: Roofs) -> pd.DataFrame:
    """Per row of ``df``, the GEMM peak and copy bandwidth its run measured (``gemm_peak_gflops``,
    ``memory_bandwidth_gbs``; NaN where the run has none, or the frame no run id)."""
    runs = df["run_id"] if "run_id" in df.columns else [None] * len(df)
    return pd.DataFrame([roofs.get(r, (None, None)) for r in runs], index=df.index,
                        columns=["gemm_peak_gflops", "memory_bandwidth_gbs"], dtype=float)


def attach_roofline(df: pd.DataFrame, roofs: Roofs) -> pd.DataFrame:
    """The ok cells that have an intensity and an achieved FLOP/s, with the roofline columns of the module doc."""
    needed = {"intensity_flop_per_byte", "gflops_per_s", "run_id"}
    if not needed <= set(df.columns):
        return df.iloc[0:0].assign(**{c: [] for c in ROOFLINE_COLUMNS})
    ok = df[(df["status"] == "ok") & (df["gflops_per_s"] > 0) & (df["intensity_flop_per_byte"] > 0)].copy()
    ok[["gemm_peak_gflops", "memory_bandwidth_gbs"]] = ceilings(ok, roofs)
    ok = ok.dropna(subset=["gemm_peak_gflops", "memory_bandwidth_gbs"])
    ok["attainable_gflops_per_s"] = np.minimum(ok["gemm_peak_gflops"],
                                               ok["memory_bandwidth_gbs"] * ok["intensity_flop_per_byte"])
    # achieved / min(P, B·I) is the larger of the two utilisations; the ceiling giving it says which side of the ridge
    fraction, against = peak_fraction(ok["gflops_per_s"], ok["gflops_per_s"] / ok["intensity_flop_per_byte"],
                                      ok["gemm_peak_gflops"], ok["memory_bandwidth_gbs"])
    ok["roofline_fraction"] = fraction
    ok["bound"] = np.where(against == BANDWIDTH, "memory", "compute")
    ok["above_roof"] = ok["roofline_fraction"] > 1.0
    return ok


def roofline_table(points: pd.DataFrame, fmt: Fmt) -> str:
    """Variants × lengths of one group: achieved GFLOP/s, its fraction of the attainable roof and the intensity."""
    lengths = sorted(int(n) for n in points["seq_len"].unique())
    cells = points.set_index(["attention", "seq_len"]).to_dict("index")
    pct = "%" if fmt == "md" else r"\%"
    rows = []
    for name in sorted(points["attention"].unique()):
        row = [escape(display_name(name), fmt)]
        for n in lengths:
            c = cells.get((name, n))
            if c is None:
                row.append(MISSING[fmt])
                continue
            bound = ", mem" if c["bound"] == "memory" else ""
            above = ", above roof" if c["above_roof"] else ""
            row.append(f"{c['gflops_per_s']:.3g} ({100 * c['roofline_fraction']:.0f}{pct}, "
                       f"I {c['intensity_flop_per_byte']:.2g}{bound}{above})")
        rows.append(row)
    return render_table(["Attention", *(length_label(n) for n in lengths)], rows, fmt)


def _roof(points: pd.DataFrame) -> tuple[float, float]:
    """(GEMM peak, bandwidth) drawn: the newest run's."""
    return float(points["gemm_peak_gflops"].iloc[-1]), float(points["memory_bandwidth_gbs"].iloc[-1])


def _draw_roofline(ax: plt.Axes, points: pd.DataFrame, names: list[str], styles: Mapping[str, Mapping[str, object]],
                   size: dict[int, float]) -> None:
    """The ceilings and the points of ``names`` (the baselines under the others), a red ring around each point above
    its roof. The ceilings' values go in the legend: written at the roof's ends, points covered them."""
    peak, bandwidth = _roof(points)
    intensities, ridge = points["intensity_flop_per_byte"], peak / bandwidth
    # the roof is exact with three vertices: the bandwidth slope up to the ridge point, then the flat peak
    x = np.array([min(intensities.min(), ridge) / 2, ridge, max(intensities.max(), ridge) * 2])
    ax.plot(x, np.minimum(peak, bandwidth * x), color="0.2", lw=1.2, zorder=1)
    for name in names:
        style, part = styles[name], points[points["attention"] == name]
        for compile_mode, sub in part.groupby("compile"):
            eager = compile_mode == "eager"
            ax.scatter(sub["intensity_flop_per_byte"], sub["gflops_per_s"], s=[size[n] for n in sub["seq_len"]],
                       marker=style.get("marker") or "o", facecolors=style["color"] if eager else "none",
                       edgecolors=style["color"], linewidths=0.8, zorder=style.get("zorder", 2) + 1)
        # above its own run's roof, or above the drawn one (the newest run's: with several runs they differ)
        drawn = np.minimum(peak, bandwidth * part["intensity_flop_per_byte"])
        above = part[part["above_roof"].astype(bool) | (part["gflops_per_s"] > drawn)]
        if len(above):
            ax.scatter(above["intensity_flop_per_byte"], above["gflops_per_s"], marker="o", facecolors="none",
                       edgecolors=ABOVE, linewidths=1.0, s=[size[n] * 2.2 + 20 for n in above["seq_len"]], zorder=6)


def _key_handles(points: pd.DataFrame, size: dict[int, float]) -> list[Line2D]:
    """What the roof, the fill, the size and a red ring of a point mean (in the shared legend)."""
    peak, bandwidth = _roof(points)
    roof = f"roof: {peak:.3g} GFLOP/s GEMM, {bandwidth:.3g} GB/s copy"
    handles = [Line2D([], [], color="0.2", lw=1.2, label=roof)]
    handles += [Line2D([], [], ls="", marker="o", color="0.4", label=COMPILE_NAMES.get(mode, mode),
                       markerfacecolor="0.4" if mode == "eager" else "none")
                for mode in sorted(points["compile"].unique())]
    handles += [Line2D([], [], ls="", marker="o", color="0.6", markersize=np.sqrt(s), label=f"n = {length_label(n)}")
                for n, s in size.items()]
    if points["above_roof"].astype(bool).any():
        handles.append(Line2D([], [], ls="", marker="o", mfc="none", mec=ABOVE, mew=1.0, markersize=7,
                              label="above its roof (see note)"))
    return handles


def plot_roofline(points: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """The roofline figure of one mode: ceilings from the newest run's peak and bandwidth, the points of the module
    doc; small multiples by the zoo's groups (:func:`harness.report.plots.panel_layout`) when many variants are drawn,
    the baselines in every panel and one shared legend. Axes log-log: GFLOP/s against FLOP/byte."""
    lengths = sorted(int(n) for n in points["seq_len"].unique())
    size = {n: 10 + 22 * i for i, n in enumerate(lengths)}
    present = [str(a) for a in points["attention"].unique()]
    every, layout = panel_layout(present, [b for b in COMPARE_BASELINES if b in present])
    key = _key_handles(points, size)
    with paper_style():
        fig, axes = panel_grid(len(layout), entries=max(len(m) for _t, m in layout), shared=len(every) + len(key))
        try:
            own, shared = [], []
            for ax, (panel_title, members) in zip(axes, layout, strict=True):
                styles = {n: {**s, "ls": ""} for n, s in line_styles([*every, *members], every,
                                                                      mute=len(layout) == 1).items()}
                _draw_roofline(ax, points, [*every, *members], styles, size)
                shared = shared or legend_handles(every, styles, display_name)
                own.append((ax, legend_handles(members, styles, display_name)))
                if panel_title:
                    ax.set_title(panel_title, loc="left")
                ax.grid(True, which="major")
            figure_legends(fig, own, shared, key)
            axes[0].set_xscale("log")
            axes[0].set_yscale("log")
            plain_log_axis(axes[0].xaxis)
            plain_log_axis(axes[0].yaxis)
            grid_labels(fig, axes, "Arithmetic intensity (FLOP / byte moved, eager operator graph)", "Achieved GFLOP/s",
                        title)
            return save_figure(fig, out_dir, stem)
        finally:
            plt.close(fig)


def write_roofline(df: pd.DataFrame, out_dir: Path, roofs: Roofs, *, group_columns: tuple[str, ...],
                   slug_of: Callable[[Mapping[str, object]], str], title_of: Callable[[Mapping[str, object]], str],
                   suite: str, env: Mapping[str, object], plots: bool = True) -> list[Path]:
    """``roofline.csv`` (every point), per group ``roofline_<slug>.md``/``.tex`` and, per group of the other columns
    than ``compile``, the figure ``roofline_<slug>.{png,pdf}`` (eager and compiled points together)."""
    points = attach_roofline(df, roofs)
    if points.empty:
        return []
    group_columns = tuple(c for c in group_columns if c in points.columns)  # a frame stored before an axis existed
    keep = [*group_columns, "attention", "seq_len", "gflops", "gbytes_moved", *ROOFLINE_COLUMNS]
    written = [write_csv(points[[c for c in keep if c in points.columns]], out_dir / "roofline.csv")]
    for key, group in points.groupby(list(group_columns), sort=True):
        g = dict(zip(group_columns, key, strict=True))
        title = f"Roofline — {suite_title(suite)}: {title_of(g)}"
        written += write_table_files(out_dir, f"roofline_{slug_of(g)}", title=title, note=NOTE, env=env,
                                     md_body=roofline_table(group, "md"), tex_body=roofline_table(group, "tex"))
    by_mode = [c for c in group_columns if c != "compile"]
    for key, group in points.groupby(by_mode, sort=True) if plots else ():
        g = dict(zip(by_mode, key, strict=True))  # no compile: eager and compiled points in one figure
        written += plot_roofline(group, out_dir, stem=f"roofline_{slug_of(g)}",
                                 title=f"Roofline — {suite_title(suite)}: {title_of(g)}")
    return written
