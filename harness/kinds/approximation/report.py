"""Reports of the approximation suite: the error of each variant and budget against exact softmax attention, its
forward speed-up over the exact reference (``vanilla_sdpa``) timed in the same interleaved rounds (the median of the
per-round ratios, with a bootstrap interval, as the speed suite's), and a Pareto figure per length and input (error
against speed-up, one line per variant through its budgets).

Files: ``results.csv`` and ``env.json`` (every row at full precision), ``approximation.csv`` (one row per cell with
the speed-up and its interval), ``approximation.md``/``.tex`` (a table per input and length, the cells that did not
run listed under it with their reason), and with plots ``pareto_<input>_n<N>.png``/``.pdf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import matplotlib.ticker as mticker
import numpy as np
import pandas as pd

from ...core.files import atomic_write_text
from ...report.format import (
    MISSING,
    TIMES,
    Fmt,
    booktabs,
    display_name,
    env_summary,
    escape,
    format_value,
    length_label,
    md_table,
    sig2,
    suite_title,
    tex_comment,
    write_csv,
    write_raw,
)
from ...report.plots import single_axes
from ...report.stats import paired_ratio

COLUMNS = ("rel_fro", "max_abs", "cos_mean", "cos_min", "attn_tv", "time_ms_median", "speedup")
HEADERS = ("Variant", "Budget", "Rel. error", "Max abs", "Cos (mean)", "Cos (min)", "Matrix TV", "Time (ms)",
           "Speed-up [95% CI]")
NOTE = ("Rel. error = ‖y − e‖_F/‖e‖_F against exact softmax attention e through the variant's own projections, over "
        "real tokens; Cos = cosine similarity of y_i and e_i per token (mean, worst); Matrix TV = mean over rows of "
        "½Σ|a_ij − p_ij| between the variant's attention matrix and softmax's, where the matrix can be read (— where "
        "not, or above the suite's matrix_max_seq_len). Speed-up = the reference's forward time / the variant's, "
        "median over the interleaved rounds they were timed in together, with a bootstrap 95% interval (> 1 is "
        "faster). "
        "Under a trained input, \"own weights\" marks a variant that could not take the trained projections.")


def attach_speedup(df: pd.DataFrame, samples: Mapping[tuple[str, str], list[float]], reference: str) -> pd.DataFrame:
    """``speedup``, ``speedup_lo``, ``speedup_hi``: the reference's time over each cell's, paired by interleaved round
    (``samples`` by (cell key, timing group): budgets of one attention are cells of their own); NaN where the
    reference was not timed in the cell's group."""
    out = df.assign(speedup=np.nan, speedup_lo=np.nan, speedup_hi=np.nan)
    if "timing_group" not in out.columns:
        return out
    refs = out[out["attention"] == reference].drop_duplicates(["input", "seq_len"])
    ref_key = {(r["input"], r["seq_len"]): r["key"] for _, r in refs.iterrows()}
    for i, row in out.iterrows():
        group = row["timing_group"]
        own = samples.get((row["key"], group))
        ref = samples.get((ref_key.get((row["input"], row["seq_len"])), group))
        ratio = paired_ratio(ref, own) if own and ref else None
        if ratio is not None:
            out.loc[i, ["speedup", "speedup_lo", "speedup_hi"]] = [ratio.value, ratio.lo, ratio.hi]
    return out


def _cell_text(value: object, column: str, fmt: Fmt) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING[fmt]
    v = float(value)  # type: ignore[arg-type]
    if column == "speedup":
        return f"{sig2(v)}{TIMES[fmt]}"  # its interval is added by _rows
    if column.startswith("cos"):
        return f"{v:.4f}"
    if 0 < abs(v) < 1e-3:  # float32 rounding of an exact configuration: the exponent is what matters
        return f"{v:.1e}"
    return format_value(v)


def _rows(part: pd.DataFrame, fmt: Fmt) -> list[list[str]]:
    rows = []
    for _, r in part.iterrows():
        if r["status"] != "ok":
            cells = [str(r["status"]).upper()] + [MISSING[fmt]] * (len(COLUMNS) - 1)
        else:
            cells = [_cell_text(r.get(c), c, fmt) for c in COLUMNS]
            if math.isfinite(r.get("speedup_lo", math.nan)):
                cells[-1] += f" [{sig2(r['speedup_lo'])}, {sig2(r['speedup_hi'])}]"
        budget = str(r["budget"]) + (" (own weights)" if r.get("weights") == "own" and r.get("input_kind") == "trained"
                                     else "")
        rows.append([escape(str(r["attention"]), fmt), escape(budget, fmt), *cells])
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


def approximation_tables(df: pd.DataFrame, fmt: Fmt) -> str:
    """A table per (input, length) of the measured cells, rows sorted by variant then time, the cells that did not run
    listed under it with their reason; the attentions that are not approximations once, at the end."""
    skipped = _not_approximation(df)
    parts = []
    for (inp, n), part in df[~skipped].groupby(["input", "seq_len"], sort=True):
        desc = str(part["input_desc"].dropna().iloc[0]) if part["input_desc"].notna().any() else inp
        heading = f"Input {inp} ({desc}), n = {length_label(int(n))}"
        shown = part[part["status"] != "unsupported"].sort_values(["attention", "speedup", "budget"],
                                                                  ascending=[True, False, True], kind="stable")
        body = []
        if len(shown):
            rows = _rows(shown, fmt)
            body.append(md_table(HEADERS, rows, n_left=2) if fmt == "md"
                        else booktabs("ll" + "r" * len(COLUMNS), [" & ".join(HEADERS) + r" \\"], rows))
        not_run = _not_run_lines(part[part["status"] != "ok"], fmt)
        if fmt == "md":
            body += [f"- {line}" for line in not_run]
            parts.append(f"#### {heading}\n\n" + "\n\n".join(body))
        else:
            not_run_line = [tex_comment(" ".join(not_run))] if not_run else []  # one comment line, not one each
            parts.append("\n".join([tex_comment(heading), *body, *not_run_line]))
    others = df.loc[skipped, "attention"].drop_duplicates()
    if len(others):
        names = ", ".join(f"`{a}`" if fmt == "md" else escape(a, fmt) for a in others)
        line = f"Not approximations of softmax attention (not measured): {names}."
        parts.append(line if fmt == "md" else tex_comment(line))
    return "\n\n".join(parts)


def plot_pareto(df: pd.DataFrame, out_dir: Path, *, suite: str, reference: str) -> list[Path]:
    """Per (input, length): relative error against speed-up, one line per variant through its budgets."""
    ok = df[(df["status"] == "ok") & df["speedup"].notna() & (df["attention"] != reference)]
    written: list[Path] = []
    for (inp, n), part in ok.groupby(["input", "seq_len"], sort=True):
        def draw(ax, part: pd.DataFrame = part) -> None:  # noqa: ANN001  (matplotlib Axes)
            for name, line in part.groupby("attention", sort=True):
                line = line.sort_values("speedup")
                err = line["rel_fro"].clip(lower=1e-7)  # an exact configuration still shows, at the axis floor
                (handle,) = ax.plot(line["speedup"], err, marker="o", markersize=4, label=display_name(str(name)))
                if len(line) > 1:  # label the dearest and the cheapest budget
                    for _, r in line.iloc[[0, -1]].iterrows():
                        ax.annotate(str(r["budget"]), (r["speedup"], max(r["rel_fro"], 1e-7)), fontsize=6,
                                    color=handle.get_color(), xytext=(3, 3), textcoords="offset points")
            ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8, label=f"{display_name(reference)} (exact)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            for axis in (ax.xaxis, ax.yaxis):  # at least two labelled ticks on a short log range
                axis.set_major_locator(mticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(mticker.FormatStrFormatter("%g"))

        title = f"{suite_title(suite)}: error against speed, n = {length_label(int(n))}, {inp} input"
        written += single_axes(out_dir, f"pareto_{inp}_n{int(n)}", title, draw,
                                xlabel=f"forward speed-up over {reference} (same rounds; > 1 is faster)",
                                ylabel="relative error ‖y − e‖/‖e‖")
    return written


def write_approximation_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str,
                                reference: str = "vanilla_sdpa", plots: bool = True,
                                samples: Mapping[tuple[str, str], list[float]] | None = None) -> list[Path]:
    """Every report of an approximation suite's results into ``out_dir``; returns the paths written.

    ``samples``: raw timing samples by (cell key, timing group) (:meth:`harness.core.store.Store.samples`), for the
    paired speed-ups.
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
    tex = "\n".join([tex_comment(f"{title}. {NOTE}"), tex_comment(env_summary(env)),
                     approximation_tables(df, "tex")]) + "\n"
    written += [atomic_write_text(out_dir / "approximation.md", md),
                atomic_write_text(out_dir / "approximation.tex", tex)]
    if plots:
        written += plot_pareto(df, out_dir, suite=suite, reference=reference)
    return written

