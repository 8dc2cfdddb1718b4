"""Reports of the approximation suite: the error of each variant and budget against exact softmax attention, its
forward speed-up over the exact reference (``vanilla_sdpa``) timed in the same interleaved rounds (the median of the
per-round ratios, with a bootstrap interval, as the speed suite's), and a Pareto figure per length and input (error
against speed-up, one line per variant through its budgets; small multiples by group when many variants are drawn).

Files: ``results.csv`` and ``env.json`` (every row at full precision), ``approximation.csv`` (one row per cell with
the speed-up and its interval), ``approximation.md``/``.tex`` (a table per input and length, the cells that did not
run listed under it with their reason), and with plots ``pareto_<input>_n<N>.png``/``.pdf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ...core.files import atomic_write_text
from ...report.format import (
    MISSING,
    TIMES,
    Fmt,
    booktabs,
    display_name,
    env_summary,
    escape,
    length_label,
    md_table,
    number,
    printed_rows,
    sig2,
    sub_tables,
    suite_title,
    tex_float,
    tex_longtable,
    time_marks,
    with_minus,
    write_csv,
    write_raw,
)
from ...report.groups import group_of, table_order
from ...report.plots import (
    declutter,
    figure_legends,
    grid_labels,
    label_point,
    legend_handles,
    line_styles,
    panel_grid,
    panel_layout,
    paper_style,
    plain_log_axis,
    plt,
    save_figure,
)
from ...report.stats import paired_ratio

#: What the LaTeX tables print where the suite's ``report.rows`` does not say (besides the reference the speed-ups are
#: against): the exact rows and the approximations among the paper's Table 4 rows.
PAPER_ROWS = ("vanilla_sdpa", "vanilla", "linformer", "reformer", "nystromformer", "performer")
COLUMNS = ("rel_fro", "max_abs", "cos_mean", "cos_min", "attn_tv", "time_ms_median", "speedup")
HEADERS = ("Variant", "Budget", "Rel. error", "Max abs", "Cos (mean)", "Cos (min)", "Matrix TV", "Time (ms)",
           "Speed-up [95% CI]")
NOTE = ("Rel. error = ‖y − e‖_F/‖e‖_F against exact softmax attention e through the variant's own projections, over "
        "real tokens; Cos = cosine similarity of y_i and e_i per token (mean, worst); Matrix TV = mean over rows of "
        "½Σ|a_ij − p_ij| between the variant's attention matrix and softmax's, where the matrix can be read (— where "
        "not, or above the suite's matrix_max_seq_len). Speed-up = the reference's forward time / the variant's, "
        "median over the interleaved rounds they were timed in together, with a bootstrap 95% interval (> 1 is "
        "faster). † = timed while other processes kept the machine busy (a speed-up carries its reference's mark "
        "too); § = the time includes faulting memory in again on every call. "
        "Under a trained input, \"own weights\" marks a variant that could not take the trained projections.")


def attach_speedup(df: pd.DataFrame, samples: Mapping[tuple[str, str], list[float]], reference: str) -> pd.DataFrame:
    """``speedup``, ``speedup_lo``, ``speedup_hi``: the reference's time over each cell's, paired by interleaved round
    (``samples`` by (cell key, timing group): budgets of one attention are cells of their own); NaN where the
    reference was not timed in the cell's group."""
    out = df.assign(speedup=np.nan, speedup_lo=np.nan, speedup_hi=np.nan, speedup_reference_key=None)
    if "timing_group" not in out.columns:
        return out
    refs = out[out["attention"] == reference].drop_duplicates(["input", "seq_len"])
    ref_key = {(r["input"], r["seq_len"]): r["key"] for _, r in refs.iterrows()}
    for i, row in out.iterrows():
        group, reference_key = row["timing_group"], ref_key.get((row["input"], row["seq_len"]))
        own = samples.get((row["key"], group))
        ref = samples.get((reference_key, group))
        ratio = paired_ratio(ref, own) if own and ref else None
        if ratio is not None:
            out.loc[i, ["speedup", "speedup_lo", "speedup_hi"]] = [ratio.value, ratio.lo, ratio.hi]
            out.loc[i, "speedup_reference_key"] = reference_key  # whose marks the ratio carries too
    return out


def _cell_text(value: object, column: str, fmt: Fmt) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING[fmt]
    v = float(value)  # type: ignore[arg-type]
    if column == "speedup":
        return f"{sig2(v)}{TIMES[fmt]}"  # its interval is added by _rows
    if column.startswith("cos"):
        return with_minus(f"{v:.4f}", fmt)
    if 0 < abs(v) < 1e-3:  # float32 rounding of an exact configuration: the exponent is what matters
        return with_minus(f"{v:.1e}", fmt)
    return number(v, fmt)


def _rows(part: pd.DataFrame, fmt: Fmt) -> list[list[str]]:
    """The table's rows; a time carries its cell's marks († busy machine, § memory faulted in on every call) and a
    speed-up those of both its timings, the cell's and the reference's."""
    by_key = {r["key"]: r for _, r in part.iterrows()}
    rows = []
    for _, r in part.iterrows():
        if r["status"] != "ok":
            cells = [str(r["status"]).upper()] + [MISSING[fmt]] * (len(COLUMNS) - 1)
        else:
            cells = [_cell_text(r.get(c), c, fmt) for c in COLUMNS]
            own = time_marks(r, fmt)
            if cells[-2] != MISSING[fmt]:
                cells[-2] += own
            if math.isfinite(r.get("speedup_lo", math.nan)):
                reference = by_key.get(r.get("speedup_reference_key"))
                cells[-1] += f" [{sig2(r['speedup_lo'])}, {sig2(r['speedup_hi'])}]" + time_marks(r, fmt, reference)
        budget = str(r["budget"]) + (" (own weights)" if r.get("weights") == "own" and r.get("input_kind") == "trained"
                                     else "")
        rows.append([escape(display_name(str(r["attention"])), fmt), escape(budget, fmt), *cells])
    return rows


def _not_run_lines(part: pd.DataFrame, fmt: Fmt) -> list[str]:
    """One line per reason a cell was not run or failed, naming its cells (a failure is listed, never dropped)."""
    lines = []
    for (status, message), cells in part.groupby(["status", part["message"].fillna("")], sort=True):
        names = ", ".join(sorted({f"{a} [{b}]" if b != "default" else str(a)
                                  for a, b in zip(cells["attention"], cells["budget"], strict=True)}))
        lines.append(escape(f"{status} ({message}): {names}" if message else f"{status}: {names}", fmt))
    return lines


def _not_approximation(df: pd.DataFrame) -> pd.Series:
    """True on the rows of attentions not measured because they are not approximations of softmax attention."""
    return (df["status"] == "unsupported") & df["message"].str.startswith("not an approximation", na=False)


def _parts(df: pd.DataFrame, fmt: Fmt, rows: Sequence[str] | None = None
           ) -> tuple[list[tuple[str, str, list[str]]], str]:
    """Per (input, length): its heading, its table of the measured cells (rows in every table's order, then by time;
    ``rows``: the attentions to print, None for every one) and the lines naming the cells that did not run; and the
    line naming the attentions that are not approximations."""
    skipped = _not_approximation(df)
    parts = []
    for (inp, n), part in df[~skipped].groupby(["input", "seq_len"], sort=True):
        desc = str(part["input_desc"].dropna().iloc[0]) if part["input_desc"].notna().any() else inp
        heading = f"Input {inp} ({desc}), n = {length_label(int(n))}"
        printed = printed_rows(table_order(set(part["attention"])), rows)
        part = part[part["attention"].isin(printed)]
        shown = part[part["status"] != "unsupported"]
        order = {name: i for i, name in enumerate(printed)}
        shown = shown.assign(_order=shown["attention"].map(order)).sort_values(
            ["_order", "speedup", "budget"], ascending=[True, False, True], kind="stable")
        body = _rows(shown, fmt) if len(shown) else []
        head = [" & ".join(escape(h, "tex") for h in HEADERS) + r" \\"]  # "95% CI": % would start a comment
        table = "" if not body else (md_table(HEADERS, body, n_left=2) if fmt == "md" else
                                     booktabs("ll" + "r" * len(COLUMNS), head, body))
        parts.append((heading, table, _not_run_lines(part[part["status"] != "ok"], fmt)))
    others = df.loc[skipped, "attention"].drop_duplicates()
    names = ", ".join(f"`{a}`" if fmt == "md" else display_name(a) for a in others)
    return parts, f"Not approximations of softmax attention (not measured): {names}." if len(others) else ""


def approximation_tables(df: pd.DataFrame, fmt: Fmt = "md") -> str:
    """A Markdown table per (input, length), the cells that did not run listed under it with their reason; the
    attentions that are not approximations once, at the end."""
    parts, others = _parts(df, fmt)
    out = ["\n\n".join([f"#### {heading}", *([table] if table else []), *(f"- {line}" for line in not_run)])
           for heading, table, not_run in parts]
    return "\n\n".join([*out, *([others] if others else [])])


def approximation_tex(df: pd.DataFrame, title: str, env: Mapping[str, object],
                      rows: Sequence[str] | None = PAPER_ROWS) -> tuple[str, str | None]:
    """One table float per (input, length) of the attentions ``rows`` names (a paper's rows): its caption the title
    and the input, the notes and what did not run under it; and, where those leave some out, the long table of every
    row for a supplement (None where they leave none out)."""
    parts, others = _parts(df, "tex", rows)
    every, _ = _parts(df, "tex")
    floats, comments = [], (env_summary(env), *(["Every row: approximation_full.tex."] if every != parts else []))
    for heading, table, not_run in parts:
        if table:
            missing = f" Not run: {'; '.join(not_run)}." if not_run else ""
            floats.append(tex_float(table, caption=f"{title}: {heading}", notes=f"{NOTE}{missing} {others}".strip(),
                                    label=f"approximation_{heading}", comments=comments, keys=2))
    if every == parts:
        return "\n".join(floats), None
    body = sub_tables([(heading, table) for heading, table, _ in every if table], "tex")
    not_run = "; ".join(line for _, _, lines in every for line in lines)
    full = tex_longtable(body, caption=f"{title}: every row", label="approximation_full", comments=comments[:1],
                         notes=f"{NOTE}{f' Not run: {not_run}.' if not_run else ''} {others}".strip(), keys=2)
    return "\n".join(floats), full


#: An error below this is float32 rounding of an exact configuration (the math Transformer, a window as long as the
#: sequence): such points sit on the axis floor, drawn ▼, so the axis spans the approximations' errors (with the
#: exact points at 1e-7 it spanned seven decades and squeezed every variant into the top one).
ROUNDING = 1e-4


def _floor(part: pd.DataFrame) -> float:
    """The y axis' floor: a third of the smallest error above rounding (at most 1e-2)."""
    approximate = part.loc[part["rel_fro"] >= ROUNDING, "rel_fro"]
    return min(float(approximate.min()) / 3, 1e-2) if len(approximate) else ROUNDING


def _draw_pareto(ax: plt.Axes, part: pd.DataFrame, names: list[str], styles: Mapping[str, Mapping[str, object]],
                 baselines: list[str], floor: float) -> bool:
    """The lines of ``names`` through their budgets, the dearest and the cheapest budget labelled (placed by
    :func:`harness.report.plots.declutter`), errors below ``floor`` on it (▼); returns whether any is."""
    exact_points = False
    for name in sorted(names, key=lambda n: styles[n].get("zorder", 2)):
        line, style = part[part["attention"] == name].sort_values("speedup"), styles[name]
        ax.plot(line["speedup"], line["rel_fro"].clip(lower=floor), gid=name, **style)
        below = line[line["rel_fro"] < floor]
        if len(below):
            exact_points = True
            ax.plot(below["speedup"], [floor] * len(below), ls="", marker="v", color=style["color"], ms=5,
                    clip_on=False, zorder=4)
        if len(line) > 1 and style.get("marker") != "" and name not in baselines:
            for (_, r), dy in zip(line.iloc[[0, -1]].iterrows(), (-1, 1), strict=True):
                label_point(ax, r["speedup"], max(r["rel_fro"], floor), str(r["budget"]), style["color"], dy < 0)
    return exact_points


def _keys(reference: str, exact_points: bool) -> list[Line2D]:
    """The shared legend's keys: the exact reference's line at 1, and the ▼ of errors below the axis if any."""
    keys = [Line2D([], [], color="0.45", ls="--", lw=1.2, label=f"{display_name(reference)}, exact: speed-up 1")]
    if exact_points:
        keys.append(Line2D([], [], ls="", marker="v", color="0.3", label="exact to rounding (below the axis)"))
    return keys


def plot_pareto(df: pd.DataFrame, out_dir: Path, *, suite: str, reference: str) -> list[Path]:
    """Per (input, length): relative error against speed-up, one line per variant through its budgets; many
    variants as small multiples by the zoo's groups (:func:`harness.report.plots.panel_layout`), the exact rows (the
    baselines) in every panel and in one shared legend, and the reference as a vertical line at 1."""
    ok = df[(df["status"] == "ok") & df["speedup"].notna() & (df["attention"] != reference)]
    written: list[Path] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for (inp, n), part in ok.groupby(["input", "seq_len"], sort=True):
        present = [str(a) for a in part["attention"].unique()]
        baselines = [a for a in present if group_of(a) == "exact"]
        every, layout = panel_layout(present, baselines)
        title = f"{suite_title(suite)}: error against speed, n = {length_label(int(n))}, {inp} input"
        with paper_style():
            fig, axes = panel_grid(len(layout), entries=max(len(m) for _t, m in layout), shared=len(every) + 2)
            try:
                floor, own, shared, exact_points = _floor(part), [], [], False
                for ax, (panel_title, members) in zip(axes, layout, strict=True):
                    styles = line_styles([*every, *members], baselines, mute=len(layout) == 1)
                    exact_points |= _draw_pareto(ax, part, [*every, *members], styles, baselines, floor)
                    ax.axvline(1.0, color="0.45", linestyle="--", linewidth=1.2)
                    shared = shared or legend_handles(every, styles, display_name)
                    own.append((ax, legend_handles(members, styles, display_name)))
                    if panel_title:
                        ax.set_title(panel_title, loc="left")
                    ax.grid(True, which="major")
                figure_legends(fig, own, shared, _keys(reference, exact_points))
                axes[0].set_xscale("log")
                axes[0].set_yscale("log")
                axes[0].set_ylim(bottom=floor)
                plain_log_axis(axes[0].xaxis)
                plain_log_axis(axes[0].yaxis)
                grid_labels(fig, axes, f"forward speed-up over {display_name(reference)} (same rounds; > 1 is faster)",
                            "relative error ‖y − e‖/‖e‖", title)
                declutter(fig)
                written += save_figure(fig, out_dir, f"pareto_{inp}_n{int(n)}")
            finally:
                plt.close(fig)
    return written


def write_approximation_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str,
                                reference: str = "vanilla_sdpa", plots: bool = True,
                                samples: Mapping[tuple[str, str], list[float]] | None = None,
                                rows: Sequence[str] | None = None) -> list[Path]:
    """Every report of an approximation suite's results into ``out_dir``; returns the paths written.

    ``samples``: raw timing samples by (cell key, timing group) (:meth:`harness.core.store.Store.samples`), for the
    paired speed-ups; ``rows``: the suite's ``report.rows``, the attentions the LaTeX tables print (None:
    :data:`PAPER_ROWS`; every row in ``approximation_full.tex``).
    """
    out_dir = Path(out_dir)
    for column in ("input_desc", "message", "weights", *COLUMNS[:-1]):
        if column not in df.columns:
            df = df.assign(**{column: np.nan})
    df = attach_speedup(df.sort_values(["input", "seq_len", "attention"], kind="stable", ignore_index=True),
                        samples or {}, reference)
    written = write_raw(df, out_dir, env)
    shown = [c for c in ("attention", "budget", "input", "input_desc", "seq_len", "status", "message", "weights",
                         *COLUMNS, "speedup_lo", "speedup_hi", "attn_rel_fro", "attn_max_abs", "noisy",
                         "noisy_reason") if c in df.columns]
    written.append(write_csv(df[shown], out_dir / "approximation.csv"))
    title = f"Approximation error against exact softmax attention — {suite}"
    md = f"### {title}\n\n{approximation_tables(df, 'md')}\n\n{NOTE}\n\n_Environment: {env_summary(env)}_\n"
    tex, full = approximation_tex(df, title, env, [reference, *(rows or PAPER_ROWS)])
    written += [atomic_write_text(out_dir / "approximation.md", md),
                atomic_write_text(out_dir / "approximation.tex", tex)]
    if full is not None:
        written.append(atomic_write_text(out_dir / "approximation_full.tex", full))
    if plots:
        written += plot_pareto(df, out_dir, suite=suite, reference=reference)
    return written

