"""The decode suite's reports: ms per token and state bytes against the context, beside the KV cache.

Files: ``results.csv`` (every cell, with ``bandwidth_bound_ms`` and ``bound_ratio``), and per group (device, dtype,
batch, heads, head width, key/value heads):

- ``decode_<slug>.{md,tex}``: Table 4's layout for decoding (LaTeX: the rows a paper prints, :data:`PAPER_ROWS` or
  the suite's ``report.rows``; ``decode_<slug>_full.tex`` every row). Rows are the variants, columns the contexts; ms
  per token with its multiplier against the baseline's KV cache (``3.2×``: the baseline's time over the variant's, the
  median over the interleaved rounds they were timed in together, > 1 is faster), the state in MiB with its saving
  (the baseline's bytes over the variant's), and the prefill in ms. The last column says from which context on the
  variant decodes faster than the KV cache (every measured context from there on), so the crossover is one line.
- ``decode_<slug>.{png,pdf}``: ms per token and state MiB against the context, log-log, one panel per family with
  the baseline in every panel.
- ``slopes.csv`` / ``slopes.md``: the log-log slope of ms per token and of the state against the context, with its
  95% t-interval and R²: 0 is a state of fixed size (recurrent sums, a window), 1 a cache that grows with the
  context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.files import atomic_write_text
from ...core.suite import is_finite_number
from ...measure.flops import RATE_COLUMNS, rate_columns  # noqa: F401  (RATE_COLUMNS: what with_bounds adds)
from ...report.format import (
    MISSING,
    NOISY_MARK,
    TIMES,
    Fmt,
    display_name,
    escape,
    length_label,
    md_table,
    number,
    printed_rows,
    render_table,
    sig2,
    suite_title,
    write_csv,
    write_raw,
    write_table_files,
)
from ...report.groups import table_order
from ...report.plots import (
    figure_legends,
    grid_labels,
    legend_handles,
    length_axis,
    line_styles,
    oom_key,
    oom_marks,
    panel_grid,
    panel_layout,
    paper_style,
    plain_log_axis,
    plt,  # through report.plots, which sets matplotlib up before pyplot loads
    save_figure,
)
from ...report.stats import paired_ratio, slope_fit

GROUP_COLUMNS = ("device", "dtype", "batch_size", "heads", "head_dim", "kv_heads")
#: What the LaTeX tables print where the suite's ``report.rows`` does not say: the KV caches, the paper's Table 4 rows
#: (those that do not decode are named in the note), and one variant of each other kind of state: recurrent sums
#: (the linear transformer, cosFormer), a window (local attention), both (FMMformer). Every row is in the Markdown
#: table and in ``decode_<group>_full.tex``.
PAPER_ROWS = ("vanilla", "vanilla_sdpa", "linformer", "reformer", "nystromformer", "performer", "s3attention",
              "linear_transformer", "cosformer", "local", "fmmformer")
#: The mark of a CUDA step timed with a warm L2 (the cell's ``warm_cache``, :func:`harness.measure.timing.warm_cache`).
WARM_MARK = {"md": "‡", "tex": r"$^\ddagger$"}
#: The columns a slope is fitted to, and their names in the slopes table.
SLOPED = {"ms_per_token": "ms per token", "state_bytes": "state bytes"}


def with_bounds(df: pd.DataFrame, bandwidth: Mapping[int, float | None]) -> pd.DataFrame:
    """``bandwidth_bound_ms`` (the state's bytes at the copy bandwidth the cell's run measured: a step reads its whole
    state) and ``bound_ratio`` (ms per token over it) for every ok cell; and a step's achieved rates
    (:data:`RATE_COLUMNS`): TFLOP/s, GB/s and their fraction of the copy bandwidth (a decode run measures no GEMM
    peak, and a step, a matrix-vector product per head, is memory-bound)."""
    df = df.copy()
    gbs = df["run_id"].map(lambda r: bandwidth.get(int(r)) or float("nan")).astype(float)
    if "state_bytes" in df.columns:
        df["memory_bandwidth_gbs"] = gbs
        df["bandwidth_bound_ms"] = df["state_bytes"] / (gbs * 1e9) * 1e3
        if "ms_per_token" in df.columns:
            df["bound_ratio"] = df["ms_per_token"] / df["bandwidth_bound_ms"]
    raw = df.reindex(columns=["gflops", "gbytes_moved", "time_ms_median"]).apply(pd.to_numeric, errors="coerce")
    ok_time = raw["time_ms_median"].where(df["status"] == "ok")
    return df.assign(**rate_columns(raw["gflops"], raw["gbytes_moved"], ok_time, np.nan, gbs))


def _groups(df: pd.DataFrame) -> list[tuple[dict[str, object], pd.DataFrame]]:
    columns = [c for c in GROUP_COLUMNS if c in df.columns]
    keyed = df.assign(**{c: df[c].fillna(-1) for c in columns if df[c].isna().any()})
    out = []
    for key, sub in keyed.groupby(columns, sort=True):
        group = dict(zip(columns, key if isinstance(key, tuple) else (key,), strict=True))
        out.append(({k: v for k, v in group.items() if v != -1}, df.loc[sub.index]))
    return out


def _slug(group: Mapping[str, object]) -> str:
    kv = f"_kv{group['kv_heads']}" if "kv_heads" in group else ""
    return (f"{group['device']}_{group['dtype']}_b{group['batch_size']}_h{group['heads']}_d{group['head_dim']}{kv}")


def _title(group: Mapping[str, object], suite: str, what: str = "Decoding") -> str:
    kv = f" · kv heads {group['kv_heads']}" if "kv_heads" in group else ""
    return (f"{what} — {suite_title(suite)}: {str(group['device']).upper()} · {group['dtype']} · "
            f"batch {group['batch_size']} · {group['heads']} heads of {group['head_dim']}{kv}")


def _speedups(sub: pd.DataFrame, samples: Mapping[tuple[str, str], Sequence[float]], baseline: str
              ) -> dict[tuple[str, int], float]:
    """(attention, context) -> the baseline's ms per token over the variant's, paired over their rounds where both
    were timed in one group (else the ratio of medians)."""
    ok = sub[sub["status"] == "ok"]
    base = ok[ok["attention"] == baseline].set_index("context")
    out = {}
    for row in ok.itertuples():
        if row.context not in base.index or not getattr(row, "ms_per_token", None):
            continue
        b = base.loc[row.context]
        group = getattr(row, "timing_group", None)
        pair = samples.get((group, baseline)), samples.get((group, row.attention))
        ratio = paired_ratio(pair[0], pair[1]) if group == b.get("timing_group") and all(pair) else None
        out[(row.attention, int(row.context))] = ratio.value if ratio else b["ms_per_token"] / row.ms_per_token
    return out


def shown_attentions(sub: pd.DataFrame) -> list[str]:
    """The attentions a table has a row for: those with a cell that ran (ok, or a failure worth a mark); one that was
    ``unsupported`` in every cell (no causal form, no decoding) is named in the note instead."""
    ran = sub[sub["status"] != "unsupported"]
    return list(dict.fromkeys(ran["attention"]))


def not_decoding_note(sub: pd.DataFrame) -> str:
    """The sentence naming the attentions left out of a table because none of their cells could run here."""
    left = sorted(set(sub["attention"]) - set(shown_attentions(sub)))
    if not left:
        return ""
    return (f" Not shown, as they do not decode here (their reasons: `attnbench list NAME`, results.csv): "
            f"{', '.join(display_name(n) for n in left)}.")


def _faster_from(speedups: Mapping[tuple[str, int], float], name: str, contexts: Sequence[int]) -> int | None:
    """The shortest context from which ``name`` decodes faster than the baseline at every measured context."""
    measured = [(c, speedups[(name, c)]) for c in contexts if (name, c) in speedups]
    if not measured or measured[-1][1] <= 1.0:
        return None
    start = measured[-1][0]
    for c, r in reversed(measured):
        if r <= 1.0:
            break
        start = c
    return start


def _cell_text(sub: pd.DataFrame, name: str, n: int, column: str, multiplier: float | None, fmt: Fmt) -> str:
    row = sub[(sub["attention"] == name) & (sub["context"] == n)]
    if row.empty:
        return MISSING[fmt]
    status = row["status"].iloc[0]
    if status != "ok":
        return "OOM" if status == "oom" else MISSING[fmt]
    text = number(row[column].iloc[0] / (2**20 if column == "state_bytes" else 1), fmt)
    text += _marks(row.iloc[0].to_dict(), fmt) if column == "ms_per_token" else ""
    if multiplier is not None and math.isfinite(multiplier):
        text += f" ({sig2(multiplier)}{TIMES[fmt]})"  # Table 4's multipliers: above 1 is better
    return text


def _marks(cell: Mapping[str, object], fmt: Fmt) -> str:
    """A step time's marks, and those of every figure derived from it: † busy machine, ‡ warm L2 (CUDA)."""
    return (NOISY_MARK[fmt] if cell.get("noisy") in (True, 1) else "") + (
        WARM_MARK[fmt] if cell.get("warm_cache") in (True, 1) else "")


def _warm_note(sub: pd.DataFrame) -> str:
    """:data:`WARM_NOTE` where some step of ``sub`` was timed with a warm L2, else nothing."""
    return WARM_NOTE if "warm_cache" in sub.columns and sub["warm_cache"].isin([True, 1]).any() else ""


#: The throughput table's blocks (label, column) and the one-time costs' (each only where some cell has a value).
RATE_BLOCKS = (("TFLOP/s", "tflops_per_s"), ("% of copy BW", "peak_fraction"), ("GB/s", "gbytes_per_s"))
ONETIME_BLOCKS = (("First step (ms)", "first_call_ms"), ("Plan (ms)", "plan_ms"))


def _block_text(cell: Mapping[str, object] | None, column: str, fmt: Fmt) -> str:
    """One cell of a block: a rate (3 significant digits) with its time's marks, a % with one decimal, a one-time
    cost in ms; ``OOM`` or ``—`` where the cell has none."""
    if cell is None or cell["status"] != "ok":
        return "OOM" if cell is not None and cell["status"] == "oom" else MISSING[fmt]
    value = cell.get(column)
    if not is_finite_number(value):
        return MISSING[fmt]
    if column == "peak_fraction":
        return f"{100 * float(value):.1f}"  # type: ignore[arg-type]
    marks = _marks(cell, fmt) if column in ("tflops_per_s", "gbytes_per_s") else ""
    return number(float(value), fmt) + marks  # type: ignore[arg-type]


def blocks_table(sub: pd.DataFrame, blocks: Sequence[tuple[str, str]], *, baseline: str, fmt: Fmt,
                 row_names: Mapping[str, str] | None = None, rows: Sequence[str] | None = None) -> str:
    """Variants × contexts, a table per block that some ok cell has a value in (``blocks``: :data:`RATE_BLOCKS` or
    :data:`ONETIME_BLOCKS`), in the decode table's rows and order; empty where no block has a value."""
    contexts = sorted(int(c) for c in sub["context"].unique())
    names = printed_rows(table_order(shown_attentions(sub), baseline), rows, baseline)
    cells = sub.drop_duplicates(["attention", "context"], keep="last").set_index(["attention", "context"]).to_dict(
        "index")
    ok = sub[sub["status"] == "ok"]
    parts = []
    for label, column in blocks:
        if column not in ok.columns or not pd.to_numeric(ok[column], errors="coerce").notna().any():
            continue
        body = [[escape(display_name(name, row_names), fmt), *(_block_text(cells.get((name, n)), column, fmt)
                                                               for n in contexts)] for name in names]
        parts.append(render_table([label, *(length_label(n) for n in contexts)], body, fmt))
    return "\n\n".join(parts)


RATES_NOTE = ("TFLOP/s: the FLOPs of one decoding step of the batch (counted on a step) over its median time. GB/s: "
              "the bytes the step's operator graph moves (the state and the weights read, the new token written; no "
              "cache reuse between ops, an upper bound) over the median time. % of copy BW: that GB/s over the copy "
              "bandwidth the run measured (a step is memory-bound, and a decode run measures no GEMM peak); "
              "bound_ratio in results.csv is the step's time over the state's bytes at that bandwidth. † busy "
              "machine. OOM = out of memory; — = failed, not run or not counted.")
ONETIME_NOTE = ("One-time costs, each outside every timed step. First step: the wall time of the first decoding step "
                "after the prefill (lazy initialisation, the allocator's first requests). Plan: the module's "
                "build_plan for the prompt's length (a FlexAttention block mask), before the prefill; — where the "
                "module has none. OOM = out of memory; — = failed or not run.")
#: What :data:`WARM_MARK` says, in a note (where some cell has it).
WARM_NOTE = (" ‡ (CUDA) the state and the weights fit in L2, which was not flushed between steps (timing.flush_l2 "
             "off): every timed step found them in L2, and a cold-cache step takes longer.")


def _side_tables(out_dir: Path, sub: pd.DataFrame, group: Mapping[str, object], *, suite: str,
                 env: Mapping[str, object], tables: Mapping[str, object], rows: Sequence[str]) -> list[Path]:
    """``throughput_<slug>`` and ``onetime_<slug>`` of a group, each where one of its blocks has a value."""
    written: list[Path] = []
    warm = _warm_note(sub)
    for stem, what, blocks, note in (("throughput", "Decoding throughput", RATE_BLOCKS, RATES_NOTE + warm),
                                     ("onetime", "Decoding one-time costs", ONETIME_BLOCKS, ONETIME_NOTE)):
        md = blocks_table(sub, blocks, fmt="md", **tables)  # type: ignore[arg-type]
        if not md:
            continue
        full, printed = (blocks_table(sub, blocks, fmt="tex", rows=r, **tables) for r in (None, rows))  # type: ignore[arg-type]
        written += write_table_files(out_dir, f"{stem}_{_slug(group)}", title=_title(group, suite, what), note=note,
                                     env=env, md_body=md, tex_body=printed, tex_full=full if full != printed else None)
    return written


def decode_table(sub: pd.DataFrame, samples: Mapping[tuple[str, str], Sequence[float]], *, baseline: str,
                 fmt: Fmt, row_names: Mapping[str, str] | None = None, rows: Sequence[str] | None = None) -> str:
    """The group's table (see the module docstring), in Markdown or LaTeX; ``rows``: the variants to print (names or
    patterns: a paper's rows), None for every one."""
    contexts = sorted(int(c) for c in sub["context"].unique())
    names = printed_rows(table_order(shown_attentions(sub), baseline), rows, baseline)
    speedups = _speedups(sub, samples, baseline)
    base_state = sub[(sub["attention"] == baseline) & (sub["status"] == "ok")].set_index("context")["state_bytes"]
    parts = []
    for column, label in (("ms_per_token", "ms per token"), ("state_bytes", "state MiB"), ("prefill_ms", "prefill ms")):
        if column not in sub.columns:
            continue
        body = []
        for name in names:
            cells = []
            for n in contexts:
                mult = speedups.get((name, n)) if column == "ms_per_token" else None
                if column == "state_bytes" and n in base_state.index:
                    mine = sub[(sub["attention"] == name) & (sub["context"] == n) & (sub["status"] == "ok")]
                    mult = float(base_state[n] / mine["state_bytes"].iloc[0]) if len(mine) else None
                cells.append(_cell_text(sub, name, n, column, None if name == baseline else mult, fmt))
            if column == "ms_per_token":
                start = _faster_from(speedups, name, contexts)
                cells.append("baseline" if name == baseline else MISSING[fmt] if start is None else length_label(start))
            body.append([escape(display_name(name, row_names), fmt), *cells])
        header = [label, *(length_label(n) for n in contexts)] + (["faster from"] if column == "ms_per_token" else [])
        parts.append(render_table(header, body, fmt))
    return "\n\n".join(parts)


def _figure(sub: pd.DataFrame, out_dir: Path, stem: str, title: str, baseline: str) -> list[Path]:
    """ms per token and state MiB against the context, log-log (the context ticked at the measured ones), a panel per
    family with the baseline in each and in one shared legend (:func:`harness.report.plots.panel_layout`)."""
    ok = sub[sub["status"] == "ok"]
    if ok.empty or ok["context"].nunique() < 2:
        return []
    oom = sub[sub["status"] == "oom"]  # no value: a ✕ at the top edge where it ran out of memory
    baselines = [baseline] if baseline in set(ok["attention"]) else []
    every, groups = panel_layout(ok["attention"].unique(), baselines)
    written = []
    for column, label, suffix in (("ms_per_token", "ms per token", ""), ("state_bytes", "state (MiB)", "_state")):
        with paper_style():
            fig, axes = panel_grid(len(groups), entries=max(len(m) for _, m in groups), shared=len(every))
            try:
                own, shared = [], []
                for ax, (panel, members) in zip(axes, groups, strict=True):
                    names = [*every, *members]
                    styles = line_styles(names, baselines, mute=len(groups) == 1)
                    for name in names:
                        points = ok[ok["attention"] == name].sort_values("context")
                        values = points[column] / (2**20 if column == "state_bytes" else 1)
                        ax.plot(points["context"], values, label=display_name(name), gid=name, **styles[name])
                        oom_marks(ax, oom.loc[oom["attention"] == name, "context"].tolist(), styles[name]["color"],
                                  gid=f"{name} oom")
                    ax.set_yscale("log")
                    plain_log_axis(ax.yaxis)
                    ax.grid(True, which="major")
                    if panel:
                        ax.set_title(panel, loc="left")
                    shared = shared or legend_handles(every, styles, display_name)
                    own.append((ax, legend_handles(members, styles, display_name)))
                figure_legends(fig, own, shared, [oom_key()] if oom["attention"].isin(ok["attention"]).any() else [])
                length_axis(axes[0], ok["context"].unique())
                grid_labels(fig, axes, "context (tokens in the state)", label, f"{title}: {label}")
                written += save_figure(fig, out_dir, f"{stem}{suffix}")
            finally:
                plt.close(fig)
    return written


def decode_slopes(df: pd.DataFrame) -> pd.DataFrame:
    """Per group and attention, the log-log slope of ms per token and of the state against the context."""
    ok = df[df["status"] == "ok"]
    records = []
    for group, sub in _groups(ok):
        for name, points in sub.groupby("attention", sort=True):
            for column, what in SLOPED.items():
                good = points[points[column] > 0] if column in points.columns else points.iloc[0:0]
                if good["context"].nunique() < 2:
                    continue
                slope, lo, hi, r2 = slope_fit(good["context"], good[column])
                records.append({**group, "attention": name, "metric": what, "slope": slope, "slope_lo": lo,
                                "slope_hi": hi, "r2": r2, "n_points": len(good),
                                "context_min": int(good["context"].min()), "context_max": int(good["context"].max())})
    return pd.DataFrame.from_records(records)


def _slopes_md(slopes: pd.DataFrame) -> str:
    title = "### Log-log slopes against the context"
    if slopes.empty:
        return f"{title}\n\nNo attention has ok cells at two contexts or more.\n"
    group_columns = [c for c in GROUP_COLUMNS if c in slopes.columns]
    rows = []
    for r in slopes.to_dict("records"):
        interval = (f"{r['slope']:.2f} [{r['slope_lo']:.2f}, {r['slope_hi']:.2f}]"
                    if np.isfinite(r["slope_lo"]) else f"{r['slope']:.2f} (2 points)")
        rows.append([*(str(r[c]) for c in group_columns), r["attention"], r["metric"], interval, f"{r['r2']:.3f}",
                     f"{length_label(r['context_min'])}–{length_label(r['context_max'])}"])
    note = ("0: a state of fixed size, read whole at every step (recurrent sums, a window); 1: a state that grows with "
            "the context (a KV cache). The interval is the fit's 95% t-interval (from three contexts on).")
    header = [*group_columns, "attention", "metric", "slope [95%]", "R²", "contexts"]
    return f"{title}\n\n{md_table(header, rows, n_left=len(group_columns) + 2)}\n\n{note}\n"


def write_decode_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str, baseline: str,
                         bandwidth: Mapping[int, float | None],
                         samples: Mapping[tuple[str, str], Sequence[float]] | None = None,
                         row_names: Mapping[str, str] | None = None,
                         rows: Sequence[str] | None = None) -> list[Path]:
    """Every report of a decode suite's results into ``out_dir`` (see the module docstring); ``rows``: the suite's
    ``report.rows``, the variants the LaTeX tables print (None: :data:`PAPER_ROWS`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    df = with_bounds(df, bandwidth)
    written = write_raw(df, out_dir, env)
    samples = samples or {}
    note = (f"ms per token: the median of one decoding step of the batch at that context, timed in interleaved rounds "
            f"with the other variants; (k×): {display_name(baseline, row_names)}'s time over the variant's (> 1 is "
            f"faster), its state's bytes over the variant's for the state; † timed on a busy machine; OOM out of "
            f"memory; — not run (see results.csv). TFLOP/s, GB/s and the share of the copy bandwidth: "
            f"throughput_<group>; the first step and plan construction: onetime_<group>.")
    for group, sub in _groups(df):
        stem = f"decode_{_slug(group)}"
        title = _title(group, suite)
        tables = {"baseline": baseline, "row_names": row_names}
        full, printed = (decode_table(sub, samples, fmt="tex", rows=r, **tables) for r in (None, rows or PAPER_ROWS))
        written += write_table_files(out_dir, stem, title=title, note=note + _warm_note(sub) + not_decoding_note(sub),
                                     env=env, md_body=decode_table(sub, samples, fmt="md", **tables), tex_body=printed,
                                     tex_full=full if full != printed else None)
        written += _side_tables(out_dir, sub, group, suite=suite, env=env, tables=tables, rows=rows or PAPER_ROWS)
        written += _figure(sub, out_dir, stem, title, baseline)
    slopes = decode_slopes(df)
    written.append(write_csv(slopes, out_dir / "slopes.csv"))
    written.append(atomic_write_text(out_dir / "slopes.md", _slopes_md(slopes)))
    return written
