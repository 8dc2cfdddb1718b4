"""The roofline view of the speed suites: achieved FLOP/s against arithmetic intensity, under the measured ceilings.

Per ok timed cell with a FLOP and byte count:
- intensity I = FLOPs / bytes moved (:mod:`harness.measure.traffic`: the eager operator graph's traffic, every op's
  operands and results, views free; an upper bound on the bytes, so I is a lower bound);
- attainable = min(P, B · I), with P the GEMM peak and B the copy bandwidth measured at the start of the cell's run
  (stored in the run's environment), the classic roofline of Williams, Waterman and Patterson (CACM 2009);
- ``roofline_fraction`` = achieved / attainable, and ``bound``: ``memory`` left of the ridge point P / B, else
  ``compute``.
One figure per mode (and device, dtype, shape): the ceilings as lines, one point per variant and length (colour per
variant, size growing with the length), eager filled and compiled hollow, as tritonbench's roofline plot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ...report.format import (
    COMPILE_NAMES,
    MISSING,
    Fmt,
    display_name,
    escape,
    length_label,
    render_table,
    write_csv,
    write_table_files,
)
from ...report.plots import outside_legend, plt, save_figure, variant_style

#: Per run id: (GEMM peak GFLOP/s, copy bandwidth GB/s), from the run's environment.
Roofs = Mapping[str, tuple[float | None, float | None]]
ROOFLINE_COLUMNS = ("intensity_flop_per_byte", "gflops_per_s", "gemm_peak_gflops", "memory_bandwidth_gbs",
                    "attainable_gflops_per_s", "roofline_fraction", "bound")


def attach_roofline(df: pd.DataFrame, roofs: Roofs) -> pd.DataFrame:
    """The ok cells that have an intensity and an achieved FLOP/s, with the roofline columns of the module doc."""
    needed = {"intensity_flop_per_byte", "gflops_per_s", "run_id"}
    if not needed <= set(df.columns):
        return df.iloc[0:0].assign(**{c: [] for c in ROOFLINE_COLUMNS})
    ok = df[(df["status"] == "ok") & (df["gflops_per_s"] > 0) & (df["intensity_flop_per_byte"] > 0)].copy()
    ceilings = pd.DataFrame([roofs.get(r, (None, None)) for r in ok["run_id"]], index=ok.index,
                            columns=["gemm_peak_gflops", "memory_bandwidth_gbs"], dtype=float)
    ok[ceilings.columns] = ceilings
    ok = ok.dropna(subset=["gemm_peak_gflops", "memory_bandwidth_gbs"])
    slope = ok["memory_bandwidth_gbs"] * ok["intensity_flop_per_byte"]
    ok["attainable_gflops_per_s"] = np.minimum(ok["gemm_peak_gflops"], slope)
    ok["roofline_fraction"] = ok["gflops_per_s"] / ok["attainable_gflops_per_s"]
    ok["bound"] = np.where(slope < ok["gemm_peak_gflops"], "memory", "compute")
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
            row.append(f"{c['gflops_per_s']:.3g} ({100 * c['roofline_fraction']:.0f}{pct}, "
                       f"I {c['intensity_flop_per_byte']:.2g}{bound})")
        rows.append(row)
    return render_table(["Attention", *(length_label(n) for n in lengths)], rows, fmt)


def plot_roofline(points: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """The roofline figure of one mode: ceilings from the newest run's peak and bandwidth, the points of the module
    doc. Axes log-log: GFLOP/s against FLOP/byte."""
    peak, bandwidth = float(points["gemm_peak_gflops"].iloc[-1]), float(points["memory_bandwidth_gbs"].iloc[-1])
    lengths = sorted(int(n) for n in points["seq_len"].unique())
    size = {n: 25 + 35 * i for i, n in enumerate(lengths)}
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    try:
        intensities, ridge = points["intensity_flop_per_byte"], peak / bandwidth
        # the roof is exact with three vertices: the bandwidth slope up to the ridge point, then the flat peak
        x = np.array([min(intensities.min(), ridge) / 2, ridge, max(intensities.max(), ridge) * 2])
        ax.plot(x, np.minimum(peak, bandwidth * x), color="0.2", lw=1.5)
        ax.annotate(f"GEMM peak {peak:.3g} GFLOP/s", (x[-1], peak), ha="right", va="bottom", fontsize="small")
        ax.annotate(f"copy {bandwidth:.3g} GB/s", (x[0], bandwidth * x[0]), ha="left", va="bottom",
                    fontsize="small", rotation=20)
        handles = []
        for i, (name, sub) in enumerate(points.groupby("attention", sort=True)):
            style = variant_style(i)
            for compile_mode, part in sub.groupby("compile"):
                eager = compile_mode == "eager"
                ax.scatter(part["intensity_flop_per_byte"], part["gflops_per_s"], s=[size[n] for n in part["seq_len"]],
                           marker=style["marker"], facecolors=style["color"] if eager else "none",
                           edgecolors=style["color"], linewidths=1.2, zorder=3)
            handles.append(Line2D([], [], ls="", label=display_name(str(name)), **style))
        for mode in sorted(points["compile"].unique()):
            handles.append(Line2D([], [], ls="", marker="o", color="0.4", label=COMPILE_NAMES.get(mode, mode),
                                  markerfacecolor="0.4" if mode == "eager" else "none"))
        handles += [Line2D([], [], ls="", marker="o", color="0.6", markersize=np.sqrt(size[n]),
                           label=f"n = {length_label(n)}") for n in lengths]
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # ticks at 1, 2, 5 × 10^k labelled 20, 50, 100 rather than 2×10¹
            axis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("Arithmetic intensity (FLOP / byte moved, eager operator graph)")
        ax.set_ylabel("Achieved GFLOP/s")
        ax.set_title(title, fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        outside_legend(ax, handles)
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
    keep = [*group_columns, "attention", "seq_len", "gflops", "gbytes_moved", *ROOFLINE_COLUMNS]
    written = [write_csv(points[[c for c in keep if c in points.columns]], out_dir / "roofline.csv")]
    note = ("Achieved GFLOP/s (its fraction of the attainable min(GEMM peak, bandwidth × I), I = FLOP/byte of the "
            "eager operator graph; mem = left of the ridge point, memory-bound). See the README's Roofline section.")
    for key, group in points.groupby(list(group_columns), sort=True):
        g = dict(zip(group_columns, key, strict=True))
        written += write_table_files(out_dir, f"roofline_{slug_of(g)}", title=f"Roofline — {suite}: {title_of(g)}",
                                     note=note, env=env, md_body=roofline_table(group, "md"),
                                     tex_body=roofline_table(group, "tex"))
    by_mode = [c for c in group_columns if c != "compile"]
    for key, group in points.groupby(by_mode, sort=True) if plots else ():
        g = dict(zip(by_mode, key, strict=True))  # no compile: eager and compiled points in one figure
        written += plot_roofline(group, out_dir, stem=f"roofline_{slug_of(g)}",
                                 title=f"Roofline — {suite}: {title_of(g)}")
    return written
