"""The units the field's benchmarks print beside a time (FlashAttention's and tritonbench's), and the one-time costs,
in tables of their own beside each group's Table 4, which keeps the paper's layout and its one column.

``throughput_<slug>.{md,tex}``: per variant and length, from the cell's median time,
- **TFLOP/s** achieved: the FLOPs the call performs (``gflops``: FlopCounterMode over the eager call, with the
  formulas of :mod:`harness.measure.flops`) over the median time;
- **% of peak** (:func:`harness.measure.flops.peak_fraction`): against the GEMM peak P the run measured at its start,
  or, marked ``*``, against its measured copy bandwidth B where the cell is memory-bound (intensity below the ridge
  point P / B). The same figure as the roofline's fraction of its roof; above 100% says which estimate is loose (see
  :mod:`harness.kinds.speed.roofline`);
- **GB/s**: the bytes the eager operator graph moves (``gbytes_moved``, :mod:`harness.measure.traffic`: no cache
  reuse between ops, an upper bound) over the median time.
Each carries its time's marks († busy machine, § re-faulting, ‡ warm L2).

``onetime_<slug>.{md,tex}``: what a cell pays once, never inside its steady-state time: its first call
(``first_call_ms``: lazy initialisation, the allocator's first requests), or in a compiled group torch.compile's first
call (``compile_s``: compilation plus one execution, the same call), and the plan its modules build ahead of it
(``plan_ms``: ``build_plan``, :func:`harness.measure.timing.build_plans`; a FlexAttention block mask), where one has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from ...core.suite import is_finite_number
from ...measure.flops import BANDWIDTH, rate_columns
from ...report.format import (
    MISSING,
    Fmt,
    booktabs,
    display_name,
    escape,
    length_label,
    md_table,
    number,
    printed_rows,
    time_marks,
    write_table_files,
)
from .roofline import Roofs, ceilings
from .table4 import PAPER_ROWS, WARM_NOTE, any_warm, block_head, cache_mark, shown_rows

#: The mark of a % of peak taken against the copy bandwidth (a memory-bound cell).
MEMORY_BOUND = {"md": "*", "tex": "$^*$"}
#: One block of a table: its label and the text of a cell (None where it has no value).
Block = tuple[str, Callable[[Mapping[str, object], Fmt], str | None]]


def attach_rates(df: pd.DataFrame, roofs: Roofs) -> pd.DataFrame:
    """``df`` with :data:`~harness.measure.flops.RATE_COLUMNS` for every ok timed cell with a FLOP count: TFLOP/s,
    GB/s, the fraction of the peak of the cell's run (``roofs``) and which peak it is against (``gemm`` or
    ``bandwidth``); NaN elsewhere."""
    raw = df.reindex(columns=["gflops", "gbytes_moved", "time_ms_median"]).apply(pd.to_numeric, errors="coerce")
    ok_time = raw["time_ms_median"].where(df["status"] == "ok")
    peaks = ceilings(df, roofs)
    return df.assign(**rate_columns(raw["gflops"], raw["gbytes_moved"], ok_time, peaks["gemm_peak_gflops"],
                                    peaks["memory_bandwidth_gbs"]))


def _marked(column: str) -> Callable[[Mapping[str, object], Fmt], str | None]:
    """A cell's ``column`` (3 significant digits) with its time's marks: the rate is no better than the time."""
    def text(c: Mapping[str, object], fmt: Fmt) -> str | None:
        value = c.get(column)
        if not is_finite_number(value):
            return None
        return number(float(value), fmt) + time_marks(c, fmt) + cache_mark(c, fmt)  # type: ignore[arg-type]

    return text


def _percent(c: Mapping[str, object], fmt: Fmt) -> str | None:
    """The % of peak, one decimal, ``*`` where it is against the copy bandwidth."""
    value = c.get("peak_fraction")
    if not is_finite_number(value):
        return None
    return f"{100 * float(value):.1f}" + (MEMORY_BOUND[fmt] if c.get("peak_against") == BANDWIDTH else "")  # type: ignore[arg-type]


def _plain(column: str) -> Callable[[Mapping[str, object], Fmt], str | None]:
    """A cell's ``column`` (3 significant digits)."""
    def text(c: Mapping[str, object], fmt: Fmt) -> str | None:
        value = c.get(column)
        return number(float(value), fmt) if is_finite_number(value) else None  # type: ignore[arg-type]

    return text


def _has(df: pd.DataFrame, column: str) -> bool:
    ok = df[df["status"] == "ok"]
    return column in ok.columns and bool(pd.to_numeric(ok[column], errors="coerce").notna().any())


def rate_blocks(df_group: pd.DataFrame) -> list[Block]:
    """The throughput table's blocks that some cell of the group has a value in."""
    blocks: list[tuple[str, str, Callable[[Mapping[str, object], Fmt], str | None]]] = [
        ("TFLOP/s", "tflops_per_s", _marked("tflops_per_s")), ("% of peak", "peak_fraction", _percent),
        ("GB/s", "gbytes_per_s", _marked("gbytes_per_s"))]
    return [(label, text) for label, column, text in blocks if _has(df_group, column)]


def onetime_blocks(df_group: pd.DataFrame) -> list[Block]:
    """The one-time costs' blocks that some cell of the group has a value in: in a compiled group the first call is
    the compilation (``compile_s``), else ``first_call_ms``; then ``plan_ms``."""
    compiled = "compile" in df_group.columns and (df_group["compile"] != "eager").any()
    first = ("torch.compile, first call (s)", "compile_s") if compiled else ("First call (ms)", "first_call_ms")
    blocks = [(*first, _plain(first[1])), ("Plan (ms)", "plan_ms", _plain("plan_ms"))]
    return [(label, text) for label, column, text in blocks if _has(df_group, column)]


def blocks_table(df_group: pd.DataFrame, names: Sequence[str], blocks: Sequence[Block], fmt: Fmt,
                 row_names: Mapping[str, str] | None = None) -> str:
    """Variants × lengths for each block: Markdown one table (``label length`` columns), LaTeX one booktabs tabular
    per block, as Table 4 sets its time and memory. ``OOM`` marks an out-of-memory cell, ``—`` any other cell
    without a value."""
    cells = df_group.set_index(["attention", "seq_len"]).to_dict("index")
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())

    def cell(name: str, n: int, text: Callable[[Mapping[str, object], Fmt], str | None]) -> str:
        c = cells.get((name, n))
        if c is not None and c["status"] == "oom":
            return "OOM"
        shown = text(c, fmt) if c is not None and c["status"] == "ok" else None
        return MISSING[fmt] if shown is None else shown

    def label(name: str) -> str:
        return escape(display_name(name, row_names), fmt)

    if fmt == "md":
        header = ["Attention", *(f"{b} {length_label(n)}" for b, _ in blocks for n in lengths)]
        return md_table(header, [[label(name), *(cell(name, n, t) for _, t in blocks for n in lengths)]
                                 for name in names])
    return "\n\n".join(booktabs(f"l{'r' * len(lengths)}", block_head(b, lengths),
                                [[label(name), *(cell(name, n, t) for n in lengths)] for name in names])
                       for b, t in blocks)


RATES_NOTE = ("TFLOP/s: the FLOPs the call performs (counted on the eager call) over its median time. % of peak: of "
              "the GEMM peak the run measured; * of its measured copy bandwidth, where the cell is memory-bound "
              "(FLOP/byte below the ridge point, peak / bandwidth): the roofline's fraction of its roof (above 100%: "
              "see the roofline's note). GB/s: the bytes the eager operator graph moves (no cache reuse between ops: "
              "an upper bound) over the median time. † busy machine, § re-faulting time (see Table 4). "
              "OOM = out of memory; — = failed, not run or not counted.")
ONETIME_NOTE = ("One-time costs, each outside every timed call. First call: its wall time (lazy initialisation, the "
                "allocator's first requests); in a compiled group, torch.compile's first call in an empty Inductor "
                "cache: compilation plus one execution (compile_s). Plan: the modules' build_plan for the cell's shape "
                "(a FlexAttention block mask), before the first call; — where no module has one. "
                "OOM = out of memory; — = failed or not run.")


def write_group_tables(out_dir: Path, df_group: pd.DataFrame, *, slug: str, title: str, suite: str,
                       env: Mapping[str, object], baseline: str, row_names: Mapping[str, str] | None,
                       rows: Sequence[str] | None) -> list[Path]:
    """``throughput_<slug>`` and ``onetime_<slug>`` (each where a block has a value): Markdown with every row, LaTeX
    with the rows a paper prints (``rows``, else :data:`PAPER_ROWS`) and ``_full.tex`` of every row where those leave
    some out."""
    shown, _, _ = shown_rows(df_group, baseline)
    printed = printed_rows(shown, rows or PAPER_ROWS, baseline)
    written: list[Path] = []
    for stem, what, blocks, note in (("throughput", "Throughput", rate_blocks(df_group), RATES_NOTE),
                                     ("onetime", "One-time costs", onetime_blocks(df_group), ONETIME_NOTE)):
        if not blocks:
            continue
        note = note.replace("(see Table 4). ", "(see Table 4); " + WARM_NOTE) if any_warm(df_group) else note
        tables = {"blocks": blocks, "row_names": row_names}
        written += write_table_files(
            out_dir, f"{stem}_{slug}", title=f"{what} — {suite}: {title}", note=note, env=env,
            md_body=blocks_table(df_group, shown, fmt="md", **tables),
            tex_body=blocks_table(df_group, printed, fmt="tex", **tables),
            tex_full=blocks_table(df_group, shown, fmt="tex", **tables) if len(printed) < len(shown) else None)
    return written
