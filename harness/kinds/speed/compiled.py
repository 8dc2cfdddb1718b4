"""Eager against compiled: each variant's ``torch.compile`` speed-up and compile time (the speed suites' compile axis).

The compiled and the eager cell of a variant are timed in different groups (each group has its own baseline, timed
in the same rounds), so their ratio is a ratio of medians, not paired: it moves with whatever the machine did between
the two groups, which the groups' noise flags record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from ...report.format import (
    MISSING,
    REFAULT_MARK,
    Fmt,
    display_name,
    escape,
    length_label,
    printed_rows,
    refaults,
    render_table,
    sig2,
    write_csv,
    write_table_files,
)
from ...report.groups import table_order

COLUMNS = ("attention", "seq_len", "time_ms_eager", "time_ms_compiled", "refaults_eager", "refaults_compiled",
           "compile_speedup", "compile_s",
           "compile_graphs", "compile_graph_breaks", "compile_rel_err", "compile_check", "status_compiled",
           "message_compiled")


#: Mark of a compiled time whose values were not compared with eager's (the forward draws random numbers).
#: († means a busy machine in every table; this is another mark.)
UNCHECKED = {"md": "ʳ", "tex": r"$^{r}$"}


def compile_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (attention, seq_len) that has an eager and a compiled cell in ``df`` (one group of the other
    columns): both medians, eager / compiled (above 1 = compiling pays), the compile time and graph breaks, and the
    compiled cell's status and message (a failed compilation is an ``error`` there)."""
    def part(compiled: bool) -> pd.DataFrame:
        cells = df[(df["compile"] != "eager") == compiled].reindex(columns=[
            "attention", "seq_len", "status", "time_ms_median", "threads", "compile_s", "compile_graphs",
            "compile_graph_breaks", "compile_rel_err", "compile_check", "message", "page_faults_per_call",
            "peak_mem_bytes"])
        return cells.assign(time_ms_median=cells["time_ms_median"].where(cells["status"] == "ok"),
                            refaults=[refaults(c) for c in cells.to_dict("records")])

    both = part(False).merge(part(True), on=["attention", "seq_len"], suffixes=("_eager", "_compiled"))
    same_threads = (both["threads_eager"] == both["threads_compiled"]) | (
        both["threads_eager"].isna() & both["threads_compiled"].isna())
    out = pd.DataFrame({
        "attention": both["attention"], "seq_len": both["seq_len"].astype(int),
        "time_ms_eager": both["time_ms_median_eager"], "time_ms_compiled": both["time_ms_median_compiled"],
        "refaults_eager": both["refaults_eager"], "refaults_compiled": both["refaults_compiled"],
        "compile_speedup": (both["time_ms_median_eager"] / both["time_ms_median_compiled"]).where(same_threads),
        "compile_s": both["compile_s_compiled"], "compile_graphs": both["compile_graphs_compiled"],
        "compile_graph_breaks": both["compile_graph_breaks_compiled"],
        "compile_rel_err": both["compile_rel_err_compiled"], "compile_check": both["compile_check_compiled"],
        "status_compiled": both["status_compiled"], "message_compiled": both["message_compiled"]})
    return out[list(COLUMNS)].sort_values(["attention", "seq_len"])


def comparison_table(cmp: pd.DataFrame, fmt: Fmt, *, baseline: str | None = None,
                     row_names: Mapping[str, str] | None = None, rows: Sequence[str] | None = None) -> str:
    """Variants × lengths: ``eager ms → compiled ms (eager/compiled×) [compile s]`` (eager and compiled side by
    side), or the compiled cell's failure status; the variants in Table 4's names and order (``rows``: the variants
    to print, None for every one)."""
    lengths = sorted(int(n) for n in cmp["seq_len"].unique())
    cells = cmp.set_index(["attention", "seq_len"]).to_dict("index")
    out = []
    for name in printed_rows(table_order(set(cmp["attention"]), baseline), rows, baseline):
        out.append([escape(display_name(name, row_names), fmt), *(_cell(cells.get((name, n)), fmt) for n in lengths)])
    return render_table(["Attention", *(length_label(n) for n in lengths)], out, fmt)


def _cell(c: Mapping[str, object] | None, fmt: Fmt) -> str:
    """One comparison cell (see :func:`comparison_table`)."""
    times, arrow = ("×", "→") if fmt == "md" else (r"$\times$", r"$\to$")
    if c is None:
        return MISSING[fmt]
    if c["status_compiled"] != "ok":
        return escape(str(c["status_compiled"]), fmt)
    ratio = f" ({sig2(c['compile_speedup'])}{times})" if pd.notna(c["compile_speedup"]) else ""
    eager = (f"{c['time_ms_eager']:.3g}{REFAULT_MARK[fmt] if c['refaults_eager'] else ''} {arrow} "
             if pd.notna(c["time_ms_eager"]) else "")
    took = f" [{c['compile_s']:.3g} s]" if pd.notna(c["compile_s"]) else ""
    unchecked = UNCHECKED[fmt] if str(c.get("compile_check", "")).startswith("not compared") else ""
    refaulted = REFAULT_MARK[fmt] if c["refaults_compiled"] else ""
    return f"{eager}{c['time_ms_compiled']:.3g}{unchecked}{refaulted}{ratio}{took}"


def write_compile_comparison(df: pd.DataFrame, out_dir: Path, *, group_columns: tuple[str, ...],
                             slug_of: Callable[[Mapping[str, object]], str],
                             title_of: Callable[[Mapping[str, object]], str], suite: str,
                             env: Mapping[str, object], baseline: str | None = None,
                             row_names: Mapping[str, str] | None = None,
                             rows: Sequence[str] | None = None) -> list[Path]:
    """Per group of the columns other than ``compile`` that has both: ``compile_<slug>.md``/``.tex`` (LaTeX: the
    ``rows`` a paper prints, and ``compile_<slug>_full.tex`` of every row where those leave some out), and
    ``compile.csv`` with every row."""
    if "time_ms_median" not in df.columns or df["compile"].nunique() < 2:
        return []
    by = [c for c in group_columns if c != "compile"]
    written, frames = [], []
    note = ("Eager → compiled median time per call in ms (eager median / compiled median: above 1× compiling pays; "
            "unpaired, the two were timed in different groups) [compile time: the first call, cold Inductor cache]. "
            "A status in place of a value: the compiled cell failed (message in compile.csv), `error` also where its "
            "output or gradients differ from eager's on the same weights and inputs (compile_rel_err in compile.csv). "
            "ʳ: not compared with eager, the forward draws random numbers. §: the time includes faulting at least a "
            "tenth of the cell's peak memory in again on every call (see Table 4).")
    for key, group in df.groupby(by, sort=True):
        g = dict(zip(by, key, strict=True))
        cmp = compile_comparison(group)
        if cmp.empty:
            continue
        frames.append(cmp.assign(**g))
        names = {"baseline": baseline, "row_names": row_names}
        full = comparison_table(cmp, "tex", **names)
        printed = comparison_table(cmp, "tex", rows=rows, **names)
        written += write_table_files(out_dir, f"compile_{slug_of(g)}", title=f"torch.compile — {suite}: {title_of(g)}",
                                     note=note, env=env, md_body=comparison_table(cmp, "md", **names),
                                     tex_body=printed, tex_full=full if full != printed else None)
    if frames:
        table = pd.concat(frames, ignore_index=True)
        written.insert(0, write_csv(table[[*by, *COLUMNS]], out_dir / "compile.csv"))
    return written
