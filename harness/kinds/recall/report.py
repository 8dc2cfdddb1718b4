"""The recall suite's reports: the recall table, the Zoology and Based figures, recall against training time, and
``claims.md`` (:mod:`harness.kinds.recall.claims`).

A cell of the grid is (attention, sequence length, pairs, d_model). Zoology reports, per cell, the best of its
learning rates; with seeds, the learning rate whose mean recall over the seeds is highest is chosen, and the table
gives that learning rate's mean and 95% t-interval over its seeds (choosing on the same test sequences that report
the recall is what the paper does; with a 3,000-sequence test set the optimism of a choice among four is small).

- ``recall.md`` / ``recall.tex`` / ``recall.csv``: variants × (sequence length, d_model), recall in percent.
- ``recall_by_width``: recall against d_model, one panel per sequence length (Zoology's Figure 2); where one width
  was run, a dot per variant with its interval (the lines' points stood on one x, their intervals over each other).
- ``recall_by_state``: recall against the decoding state per sequence (bytes, log), one panel per sequence length,
  each variant a line over its widths and the Pareto front (no other point has a smaller state and a higher recall)
  drawn as a staircase (Based's Figure 2 layout).
- ``recall_by_step_time``: recall against the median training step time of the same run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import NullLocator

from ...report.format import (
    MISSING,
    Fmt,
    display_name,
    escape,
    printed_rows,
    render_table,
    suite_title,
    write_csv,
    write_raw,
    write_table_files,
)
from ...report.groups import table_order
from ...report.plots import (
    COLUMN_IN,
    DOUBLE_IN,
    LogTicks,
    dot_styles,
    figure_legends,
    legend_handles,
    line_styles,
    paper_style,
    plain_log_axis,
    plt,
    save_figure,
    wrap_title,
)
from .claims import recall_claims
from .summary import CELL, TASK, summarise

BASELINE = "vanilla"
#: The rows the LaTeX table prints where the suite's ``report.rows`` does not say: softmax and one variant of each
#: family a recall study compares (every row is in the Markdown table and in ``recall_full.tex``).
PAPER_ROWS = ("vanilla", "vanilla_sdpa", "local", "linear_transformer", "performer", "cosformer", "reformer",
              "fmmformer", "luna", "s3attention", "none")
def _cell_text(row: pd.Series | None, fmt: Fmt) -> str:
    if row is None:
        return MISSING[fmt]
    text = f"{100 * row['mean']:.1f}"
    if row["n"] > 1 and math.isfinite(row["hi"]):
        half = 100 * (row["hi"] - row["lo"]) / 2
        text += f" ± {half:.1f}" if fmt == "md" else rf"\,{{\scriptsize$\pm${half:.1f}}}"
    return text


def recall_table(summary: pd.DataFrame, names: list[str], fmt: Fmt, row_names: Mapping[str, str] | None = None
                 ) -> str:
    """Variants × (task, d_model): mean recall in percent ± the half-width of its 95% interval over seeds."""
    tasks = sorted({(int(a), int(b)) for a, b in summary[TASK].itertuples(index=False)})
    widths = sorted(int(d) for d in summary["d_model"].unique())
    index = {tuple(r[c] for c in CELL): r for _, r in summary.iterrows()}
    parts = []
    for seq_len, pairs in tasks:
        body = [[escape(display_name(name, row_names), fmt),
                 *(_cell_text(index.get((name, seq_len, pairs, d)), fmt) for d in widths)] for name in names]
        header = [f"N {seq_len}, {pairs} pairs", *(f"d {d}" for d in widths)]
        parts.append(render_table(header, body, fmt))
    return "\n\n".join(parts)


#: Drawn as the reference lines (black, grey dashed, light grey dotted): softmax in both backends and the control.
REFERENCES = (BASELINE, "vanilla_sdpa", "none")


def _styles(names: list[str]) -> dict[str, dict[str, object]]:
    return line_styles(names, [n for n in REFERENCES if n in names], mute=True)


def _interval(points: pd.DataFrame) -> tuple[pd.Series, list[pd.Series]]:
    """Recall (%) and its interval's lower and upper extents, the interval cut to [0, 100] (a t-interval over a few
    seeds reached below 0 and above 100, past the panel's edge)."""
    mean = 100 * points["mean"]
    return mean, [(mean - 100 * points["lo"].clip(lower=0.0)).fillna(0),
                  (100 * points["hi"].clip(upper=1.0) - mean).fillna(0)]


def _width_dots(data: pd.DataFrame, tasks: list[tuple[int, int]], out_dir: Path, stem: str, title: str) -> list[Path]:
    """One width run: a row per variant (the table's order), its recall and interval, a panel per task."""
    names = table_order(data["attention"].unique(), BASELINE)
    styles = dot_styles(names, [n for n in REFERENCES if n in names])
    rows = np.arange(len(names))[::-1]
    with paper_style():
        width = COLUMN_IN if len(tasks) == 1 else DOUBLE_IN
        fig, axes = plt.subplots(1, len(tasks), figsize=(width, 0.9 + 0.13 * len(names)), sharey=True,
                                 squeeze=False, layout="constrained")
        try:
            for ax, (seq_len, pairs) in zip(axes[0], tasks, strict=True):
                panel = data[(data["seq_len"] == seq_len) & (data["num_kv_pairs"] == pairs)].set_index("attention")
                for row, name in zip(rows, names, strict=True):
                    if name in panel.index:
                        y, err = _interval(panel.loc[[name]])
                        ax.errorbar(y, [row], xerr=err, capsize=2, ms=4, color=styles[name]["color"],
                                    marker=styles[name].get("marker") or "o", ls="", gid=name)
                ax.set_yticks(rows, labels=[display_name(n) for n in names])
                ax.set_xlim(-3, 103)
                ax.set_xlabel("recall (%)")
                ax.set_title(f"N = {seq_len}, {pairs} pairs", loc="left")
                ax.grid(True, axis="x")
            fig.suptitle(wrap_title(f"{title}, d = {int(data['d_model'].iloc[0])}", width))
            return save_figure(fig, out_dir, stem)
        finally:
            plt.close(fig)


def _panels(summary: pd.DataFrame, out_dir: Path, stem: str, title: str, x: str, xlabel: str, *,
            scale: float = 1.0, front: bool = False) -> list[Path]:
    """One panel per task, recall (%) against ``x`` / ``scale`` (log), a line per variant (its widths), 95% intervals
    as bars; ``front``: the Pareto front as a dashed staircase."""
    data = summary[np.isfinite(summary[x].astype(float)) & (summary[x].astype(float) > 0)]
    data = data.assign(**{x: data[x].astype(float) / scale})
    if data.empty:
        return []
    tasks = sorted({(int(a), int(b)) for a, b in data[TASK].itertuples(index=False)})
    if x == "d_model" and data[x].nunique() == 1:
        return _width_dots(data, tasks, out_dir, stem, title.replace(" against model width", ""))
    names = table_order(data["attention"].unique(), BASELINE)
    styles = _styles(names)
    with paper_style():
        width = 3.3 if len(tasks) == 1 else 6.9
        fig, axes = plt.subplots(1, len(tasks), figsize=(width, 2.3 + 0.13 * math.ceil(len(names) / 4)), sharey=True,
                                 squeeze=False, layout="constrained")
        axes = list(axes.ravel())
        try:
            for ax, (seq_len, pairs) in zip(axes, tasks, strict=True):
                panel = data[(data["seq_len"] == seq_len) & (data["num_kv_pairs"] == pairs)]
                for name in names:
                    points = panel[panel["attention"] == name].sort_values(x)
                    if points.empty:
                        continue
                    y, err = _interval(points)
                    style = {k: v for k, v in styles[name].items() if k != "ls"}
                    ax.errorbar(points[x], y, yerr=err, capsize=2, ms=3.5, ls=styles[name].get("ls", "-"), **style)
                if front:
                    _pareto(ax, panel, x)
                ax.set_xscale("log", base=2 if x == "d_model" else 10)
                if x == "d_model":  # ticked at the widths run
                    ax.set_xticks(sorted(data[x].unique()), [f"{int(w)}" for w in sorted(data[x].unique())])
                    ax.xaxis.set_minor_locator(NullLocator())
                else:
                    plain_log_axis(ax.xaxis)
                    ax.xaxis.set_major_locator(LogTicks(max_ticks=4))  # a third of a page wide
                ax.set_ylim(-3, 103)
                ax.set_title(f"N = {seq_len}, {pairs} pairs", loc="left")
                ax.grid(True, which="major")
            keys = [plt.Line2D([], [], color="black", ls=(0, (4, 2)), lw=0.9, label="Pareto front")] if front else []
            figure_legends(fig, [(ax, []) for ax in axes], legend_handles(names, styles, display_name), keys)
            for ax in axes:
                ax.set_xlabel(xlabel)
            axes[0].set_ylabel("recall (%)")
            fig.suptitle(wrap_title(title, width))
            return save_figure(fig, out_dir, stem)
        finally:
            plt.close(fig)


def pareto_front(points: pd.DataFrame, x: str) -> pd.DataFrame:
    """The points no other point beats on both counts (a smaller ``x`` and a higher mean recall), by ``x``."""
    ordered = points.sort_values([x, "mean"], ascending=[True, False])
    best, keep = -math.inf, []
    for i, row in ordered.iterrows():
        if row["mean"] > best:
            keep.append(i)
            best = row["mean"]
    return ordered.loc[keep]


def _pareto(ax: plt.Axes, panel: pd.DataFrame, x: str) -> None:
    front = pareto_front(panel, x)
    if len(front):
        ax.step(front[x], 100 * front["mean"], where="post", color="black", ls=(0, (4, 2)), lw=0.9, zorder=5)


def write_recall_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str,
                         options: Mapping[str, object]) -> list[Path]:
    """Every report of a recall suite's results into ``out_dir`` (see the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = write_raw(df, out_dir, env)
    summary = summarise(df)
    written.append(write_csv(summary, out_dir / "recall.csv"))
    ran = df[df["status"] != "unsupported"]
    names = table_order(ran["attention"].unique(), BASELINE)
    unsupported = sorted(set(df["attention"]) - set(ran["attention"]))
    seeds = int(summary["n"].max()) if len(summary) else 0
    note = (f"MQAR recall (%) at the query positions of the test sequences, the mean over {seeds} seed(s) at the "
            f"learning rate with the highest mean (of those run), ± the half-width of its 95% t-interval; "
            f"N: tokens per sequence; d: the model's width; — not run or failed (see results.csv)."
            + (f" No causal form, so not run: {', '.join(display_name(n) for n in unsupported)}." if unsupported
               else ""))
    row_names = options.get("row_names")
    tables = {"row_names": row_names}
    printed = printed_rows(names, options.get("rows") or PAPER_ROWS, BASELINE)
    full, tex = (recall_table(summary, n, "tex", **tables) for n in (names, printed))
    written += write_table_files(out_dir, "recall", title=f"MQAR recall — {suite}", note=note, env=env,
                                 md_body=recall_table(summary, names, "md", **tables), tex_body=tex,
                                 tex_full=full if full != tex else None)
    figures = (("recall_by_width", "d_model", "model width d", "against model width", 1.0, False),
               ("recall_by_state", "state_bytes", "decoding state per sequence (KiB)", "against decoding state", 1024.0,
                True),
               ("recall_by_step_time", "step_ms", "training step (ms, median)", "against training time", 1.0, False))
    for stem, x, label, what, scale, front in figures:
        written += _panels(summary, out_dir, stem, f"MQAR recall {what} — {suite_title(suite)}", x, label,
                           scale=scale, front=front)
    vocab = int(df["vocab_size"].dropna().iloc[0]) if "vocab_size" in df.columns and df["vocab_size"].notna().any() \
        else 8192
    written += recall_claims(summary, out_dir, suite=suite, smoke=bool(options.get("smoke")),
                             reduced=bool(options.get("reduced_budget", True)), runs=df[df["status"] == "ok"],
                             vocab_size=vocab)
    return written
