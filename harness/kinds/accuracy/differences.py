"""Differences against a reference row, paired by seed, with 95% Student-t intervals: the statistics behind what
Tables 1, 5, 6 and 7 are read for.

Table 1 and Table 5 compare each attention with the baseline attention (vanilla), Tables 6 and 7 each variant with
the base variant. A difference is the mean over seeds of (row − reference) for the same seed — the same data, the
same initialisation seed and the same noise draw — with a t-interval over those per-seed differences. With two
seeds the interval is wide (t = 12.7 at one degree of freedom), which is the width two seeds support. An interval
that contains zero, rests on fewer than three seeds or has no width (identical seeds) carries :data:`NS`: the table
does not establish the sign of that difference. Table 5's relative
change from a = 0 gets its interval the same way, from the per-seed relative changes.

Each table's differences are written beside it as ``<table>_diff.{md,tex,csv}``; each CSV row names its task and
the data its cells were measured on (:func:`harness.core.datasource.with_sources`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from ...core import datasource
from ...report.format import (
    MISSING,
    Fmt,
    display_name,
    escape,
    printed_rows,
    render_table,
    sub_tables,
    with_minus,
    write_csv,
    write_table_files,
)
from ...report.stats import Interval, t_interval
from .summary import AVG, AXIS_DEFAULTS, TASK_LABELS, present_tasks, row_label, row_order, with_axis_defaults

NS: dict[str, str] = {"md": "ⁿˢ", "tex": r"$^{ns}$"}
NS_NOTE = ("Mean over seeds of the per-seed difference, [95% t-interval over seeds]; ns = the sign of the difference "
           "is not established: the interval contains 0, rests on fewer than 3 seeds, or has no width (identical "
           "seeds).")
Key = tuple[Hashable, ...]


@dataclass(frozen=True)
class Comparison:
    """One row of a differences table: ``model`` against ``reference`` (both keys of :func:`per_seed`'s index)."""

    label: str
    model: Key
    reference: Key
    tex_label: str = ""  # the label with display names, for both tables (default: ``label``; the CSV keeps ``label``)
    task: str = ""  # the task of both rows where the columns are not tasks (Table 5's noise levels)


def per_seed(df: pd.DataFrame, keys: Sequence[str], column: str = "task") -> pd.DataFrame:
    """Test accuracy (%) of the ok cells, one row per (``keys``..., seed), one column per value of ``column``; by
    task, also ``avg``: the seed's average over every task of the table (NaN unless it finished them all)."""
    df = with_axis_defaults(df)
    ok = df[df["status"] == "ok"].assign(acc=lambda d: 100.0 * d["test_acc"].astype(float))
    if ok.empty:
        return pd.DataFrame()
    wide = ok.pivot_table(index=[*keys, "seed"], columns=column, values="acc", aggfunc="first")
    if column == "task":
        tasks = present_tasks(df)
        wide = wide.reindex(columns=tasks)
        wide[AVG] = wide[tasks].mean(axis=1, skipna=False)
    return wide


def _by_seed(wide: pd.DataFrame, key: Key, column: Hashable) -> pd.Series | None:
    """The per-seed values of one row and column, indexed by seed."""
    if wide.empty or column not in wide.columns:
        return None
    try:
        rows = wide.loc[key]  # [seeds, columns]: the row's seeds
    except KeyError:
        return None
    return rows[column].dropna() if isinstance(rows, pd.DataFrame) else None


def paired_difference(wide: pd.DataFrame, model: Key, reference: Key, column: Hashable, *,
                      relative: bool = False) -> Interval | None:
    """Mean and t-interval over the seeds both rows finished of model − reference (percentage points), or with
    ``relative`` of 100 · (model − reference) / reference (percent)."""
    a, b = _by_seed(wide, model, column), _by_seed(wide, reference, column)
    if a is None or b is None:
        return None
    a, b = a.align(b, join="inner")
    if a.empty:
        return None
    diff = (a - b) / b.where(b != 0) * 100.0 if relative else a - b
    return t_interval(diff.tolist())


def interval_text(iv: Interval | None, fmt: Fmt) -> str:
    """``+1.23 [−0.40, +2.86]ⁿˢ``; a single seed has no interval (``+1.23 (1 seed)ⁿˢ``); no pair is ``—``."""
    if iv is None:
        return MISSING[fmt]
    body = f"{iv.mean:+.2f} (1 seed)" if iv.n < 2 else f"{iv.mean:+.2f} [{iv.lo:+.2f}, {iv.hi:+.2f}]"
    return with_minus(body, fmt) + ("" if iv.sign_established else NS[fmt])


@dataclass(frozen=True)
class DiffTable:
    """Comparisons over columns of one :func:`per_seed` frame, rendered under ``heading``."""

    heading: str
    wide: pd.DataFrame
    comparisons: list[Comparison]
    columns: list[Hashable]
    header: list[str]
    relative: bool = False

    def intervals(self) -> list[list[Interval | None]]:
        return [[paired_difference(self.wide, c.model, c.reference, col, relative=self.relative)
                 for col in self.columns] for c in self.comparisons]

    def only(self, rows: Sequence[str] | None, baseline: str | None) -> DiffTable:
        """The table with the comparisons of the attentions ``rows`` names (names or patterns; None: every one)."""
        names = set(printed_rows(sorted({str(c.model[0]) for c in self.comparisons}), rows, baseline))
        return replace(self, comparisons=[c for c in self.comparisons if c.model[0] in names])

    def render(self, fmt: Fmt) -> str:
        rows = [[escape(c.tex_label or c.label, fmt),
                 *(interval_text(iv, fmt) for iv in ivs)]
                for c, ivs in zip(self.comparisons, self.intervals(), strict=True)]
        return render_table(self.header, rows, fmt)

    def records(self) -> list[dict[str, object]]:
        # the task a row's cells ran, for its data source: the row's own, else the column's (none for the average)
        return [{"table": self.heading, "row": c.label, "column": str(col),
                 "task": c.task or (str(col) if col in TASK_LABELS else ""), "relative": self.relative,
                 "unit": "% of the a = 0 accuracy" if self.relative else "accuracy percentage points",
                 "mean": iv.mean if iv else None, "lo": iv.lo if iv else None, "hi": iv.hi if iv else None,
                 "n_seeds": iv.n if iv else 0, "contains_zero": iv.contains_zero if iv else None,
                 "sign_established": iv.sign_established if iv else None}
                for c, ivs in zip(self.comparisons, self.intervals(), strict=True)
                for col, iv in zip(self.columns, ivs, strict=True)]


def _task_columns(df: pd.DataFrame) -> tuple[list[Hashable], list[str]]:
    tasks = present_tasks(with_axis_defaults(df))
    return [*tasks, AVG], [TASK_LABELS[t] for t in tasks] + ["Avg"]


def table1_differences(df: pd.DataFrame, keys: Sequence[str], baseline: str | None) -> list[DiffTable]:
    """Every row of Table 1 against the baseline attention with the same study axes."""
    df = with_axis_defaults(df)
    if baseline is None or baseline not in set(df["attention"]):
        return []
    names = [n for n in row_order(df, keys, baseline) if n[0] != baseline]
    comparisons = [Comparison(row_label(dict(zip(keys, n, strict=True))), n, (baseline, *n[1:]),
                              row_label(dict(zip(keys, n, strict=True)), display=True)) for n in names]
    columns, labels = _task_columns(df)
    return [DiffTable(f"Difference from {display_name(baseline)} (percentage points)", per_seed(df, keys), comparisons,
                      columns,
                      ["Model", *labels])]


def table5_differences(df: pd.DataFrame, baseline: str | None) -> list[DiffTable]:
    """Per noise mode: each model against the baseline attention at every a, and each model's relative change from
    its own a = 0 (both per task and variant)."""
    df = with_axis_defaults(df)
    keys = ["attention", "variant", "task"]
    out = []
    for mode in sorted(set(df.loc[df["noise"] > 0, "noise_on"]), key=lambda m: (m != AXIS_DEFAULTS["noise_on"], m)):
        sub = df[(df["noise"] == 0) | (df["noise_on"] == mode)]
        wide = per_seed(sub, keys, column="noise")
        levels = sorted(sub["noise"].unique())
        models = row_order(sub, keys, baseline)
        label = {m: row_label({"attention": m[0], "variant": m[1], "task": m[2]}) for m in models}
        shown = {m: row_label({"attention": m[0], "variant": m[1], "task": m[2]}, display=True) for m in models}
        header = ["Model", *(f"a = {a:g}" for a in levels)]  # a: the noise amplitude of U(-a, a)
        if baseline in set(sub["attention"]):
            vs = [Comparison(label[m], m, (baseline, *m[1:]), shown[m], task=str(m[2]))
                  for m in models if m[0] != baseline]
            heading = f"noise on {mode}: difference from {display_name(baseline)} (percentage points)"
            out.append(DiffTable(heading, wide, vs, list(levels), header))
        noisy = [a for a in levels if a > 0]
        own = [Comparison(label[m], m, m, shown[m], task=str(m[2])) for m in models]
        out.append(_RelativeToClean(f"noise on {mode}: relative change from a = 0 (%)", wide, own, noisy,
                                    ["Model", *(f"a = {a:g}" for a in noisy)], relative=True))
    return out


@dataclass(frozen=True)
class _RelativeToClean(DiffTable):
    """Each row's value at a against the same row at a = 0 (Table 5's relative change), per seed."""

    def intervals(self) -> list[list[Interval | None]]:
        out = []
        for c in self.comparisons:
            clean = _by_seed(self.wide, c.model, 0.0)
            row = []
            for a in self.columns:
                noisy = _by_seed(self.wide, c.model, a)
                if clean is None or noisy is None:
                    row.append(None)
                    continue
                x, x0 = noisy.align(clean, join="inner")
                row.append(t_interval(((x - x0) / x0.where(x0 != 0) * 100.0).tolist()) if len(x) else None)
            out.append(row)
        return out


def variant_differences(df: pd.DataFrame, rows: Sequence[tuple[str, str]], base_variant: str) -> list[DiffTable]:
    """Tables 6 and 7: each (variant, label) of ``rows`` against the base variant of the same attention."""
    df = with_axis_defaults(df)
    keys = ["attention", "variant"]
    attentions = sorted(set(df.loc[df["variant"] == base_variant, "attention"]))
    wide = per_seed(df, keys)
    columns, labels = _task_columns(df)
    present = set(zip(df["attention"], df["variant"], strict=True))
    out = []
    for attention in attentions:
        comparisons = [Comparison(label, (attention, variant), (attention, base_variant)) for variant, label in rows
                       if variant != base_variant and (attention, variant) in present]
        if comparisons:
            out.append(DiffTable(f"{display_name(attention)}: difference from the `{base_variant}` variant (percentage "
                                 "points)",
                                 wide, comparisons, columns, ["Model", *labels]))
    return out


def write_differences(out_dir: Path, table: str, title: str, tables: Sequence[DiffTable],
                      env: Mapping[str, object], *, results: pd.DataFrame, rows: Sequence[str] | None = None,
                      baseline: str | None = None) -> list[Path]:
    """``<table>_diff.{md,tex,csv}``: the difference tables under their headings (LaTeX: the comparisons of the
    attentions ``rows`` names, a paper's rows, and ``<table>_diff_full.tex`` of every one where those leave some
    out), and every interval as a CSV row with the data source of the cells of ``results`` (the table's cells) that
    ran its task."""
    if not tables:
        return []

    def body(fmt: Fmt, shown: Sequence[DiffTable]) -> str:
        return sub_tables([(t.heading, t.render(fmt)) for t in shown if t.comparisons], fmt)

    full, printed = body("tex", tables), body("tex", [t.only(rows, baseline) for t in tables])
    written = write_table_files(out_dir, f"{table}_diff", title=f"{title}: differences with 95% intervals",
                                note=NS_NOTE, md_body=body("md", tables), tex_body=printed,
                                tex_full=full if full != printed else None, env=env)
    records = datasource.with_sources(pd.DataFrame([r for t in tables for r in t.records()]), results)
    return [*written, write_csv(records, out_dir / f"{table}_diff.csv")]
