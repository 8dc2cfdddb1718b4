"""Accuracy reports: the paper's Table 1 (accuracy per task and average, mean(std) over seeds, best in bold),
every evaluation point as CSV, and learning-curve figures per task (the paper's Fig. 3); with ``options["tables"]``
also the study tables of :mod:`harness.report_studies` (Tables 5, 6, 7 and S7).

The average column follows the reviewer's request: each seed's average over the tasks, then the mean and the
standard deviation of those per-seed averages (not the mean of the task standard deviations).

The helpers below (summary by arbitrary axes, cell lookup with failure text, best/second marks, table rendering and
file writing) are shared with the study tables so that every table formats numbers and failures the same way.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from .data import TASKS
from .report import env_summary, md_table, tex_escape, write_raw

TASK_LABELS = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
               "pathfinder": "Pathfinder"}
AVG = "avg"
Fmt = Literal["md", "tex"]
#: Optional study axes of accuracy cells and the value a cell without the axis has (clean data, the suite's model).
AXIS_DEFAULTS: dict[str, Any] = {"variant": "", "noise": 0.0, "noise_on": "train+test"}
NOISE_ON_LABELS = {"train+test": "train+test", "test": "test only"}
STUDY_TABLES = ("table5", "table6", "table7", "tableS7")
ALL_TABLES = ("table1", *STUDY_TABLES)


# ---------------------------------------------------------------------------------------------------
# Axes and labels.


def with_axis_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every optional study axis present and filled.

    Cells from a suite without an axis (or stored before it existed) must group with the clean / default cells
    rather than vanish: pandas drops NaN group keys. A clean cell (noise 0) has no noise to place, so its
    ``noise_on`` is set to ``train+test`` and it serves as the a = 0 point of both noise modes.
    """
    out = df.copy()
    for column, default in AXIS_DEFAULTS.items():
        out[column] = out[column].fillna(default) if column in out.columns else default
    out["noise"] = out["noise"].astype(float)
    out.loc[out["noise"] == 0, "noise_on"] = AXIS_DEFAULTS["noise_on"]
    return out


def varying_axes(df: pd.DataFrame, candidates: Sequence[str] = tuple(AXIS_DEFAULTS)) -> list[str]:
    """The ``candidates`` columns of ``df`` that take more than one value: the axes a row label must show so that
    rows of different variants or noise levels are never merged."""
    return [c for c in candidates if c in df.columns and df[c].nunique(dropna=False) > 1]


def axis_text(column: str, value: Any) -> str:
    """How one axis value reads inside a row or line label (``a=2``, ``test only``, ``Text``, ``r=1``)."""
    if column == "noise":
        return f"a={float(value):g}"
    if column == "noise_on":
        return NOISE_ON_LABELS.get(str(value), str(value))
    if column == "task":
        return TASK_LABELS.get(str(value), str(value))
    return str(value)


def row_label(values: Mapping[str, Any], primary: str = "attention") -> str:
    """``primary`` value followed by the other values in parentheses, e.g. ``s3attention (r=1, a=2, test only)``.

    The noise mode is left out of a clean row's label: a = 0 has no noise to place.
    """
    extras = [axis_text(c, v) for c, v in values.items()
              if c != primary and str(v) != "" and not (c == "noise_on" and float(values.get("noise", 1)) == 0)]
    head = axis_text(primary, values[primary])
    return f"{head} ({', '.join(extras)})" if extras else head


def row_order(df: pd.DataFrame, keys: Sequence[str], baseline: str | None) -> list[tuple[Hashable, ...]]:
    """The distinct ``keys`` tuples of ``df``: the baseline attention first, then by attention, task (paper order),
    variant, noise mode (train+test first) and noise level."""
    rank = {
        "attention": lambda v: (v != baseline, str(v)),
        "task": lambda v: (TASKS.index(v) if v in TASKS else len(TASKS), str(v)),
        "noise_on": lambda v: (v != AXIS_DEFAULTS["noise_on"], str(v)),
        "noise": float,
    }
    rows = {tuple(r) for r in df[list(keys)].itertuples(index=False, name=None)}
    return sorted(rows, key=lambda r: tuple(rank.get(k, str)(v) for k, v in zip(keys, r, strict=True)))


def present_tasks(df: pd.DataFrame) -> list[str]:
    """Tasks of ``df`` in the paper's column order (ListOps, Text, Retrieval, Image, Pathfinder)."""
    return [t for t in TASKS if t in set(df["task"])]


def seeds_text(df: pd.DataFrame) -> str:
    """The seeds of ``df``, e.g. ``0, 1, 2``, for the notes under each table."""
    return ", ".join(str(s) for s in sorted(int(s) for s in df["seed"].unique()))


# ---------------------------------------------------------------------------------------------------
# Summary and cell lookup.


def accuracy_summary(df: pd.DataFrame, by: Sequence[str] = ("attention",)) -> pd.DataFrame:
    """Per (``by``..., task) — and the per-seed task average as task "avg" — mean, std (ddof=1) and count of test
    accuracy in percent over seeds, from ok cells only; plus the number of failed cells.

    ``by`` names the columns that identify a model (default: the attention; the study tables add ``variant``,
    ``noise`` and ``noise_on``), so cells that differ in any of them are never averaged together.
    """
    by = list(by)
    df = with_axis_defaults(df)
    ok = df[df["status"] == "ok"].assign(acc=lambda d: 100.0 * d["test_acc"].astype(float))
    tasks = present_tasks(df)
    rows = [ok[[*by, "task", "seed", "acc"]]]
    if not ok.empty:
        # A seed's average is defined only when that seed finished every task of the table.
        per_seed = ok.pivot_table(index=[*by, "seed"], columns="task", values="acc", aggfunc="first")
        per_seed = per_seed.reindex(columns=tasks).dropna()
        rows.append(per_seed.mean(axis=1).rename("acc").reset_index().assign(task=AVG))
    stats = pd.concat(rows, ignore_index=True).groupby([*by, "task"])["acc"].agg(mean="mean", std="std", n="count")
    failed = df[df["status"] != "ok"].groupby([*by, "task"]).size().rename("failed")
    out = stats.reset_index().merge(failed.reset_index(), on=[*by, "task"], how="outer")
    out["failed"] = out["failed"].fillna(0).astype(int)
    out["n"] = out["n"].fillna(0).astype(int)
    return out.sort_values([*by, "task"], ignore_index=True)


def missing_text(fmt: Fmt) -> str:
    """A failed or absent cell: an em dash (``---`` in LaTeX, where the Unicode one needs font support)."""
    return "—" if fmt == "md" else "---"


def failed_text(statuses: set[str] | None, fmt: Fmt) -> str:
    """``OOM`` when every run behind a cell ran out of memory (a result in itself), else the missing mark."""
    return "OOM" if statuses == {"oom"} else missing_text(fmt)


class SummaryCells:
    """:func:`accuracy_summary` of ``df`` by ``keys``, looked up by ``(*keys, task)``, with the statuses of the runs
    behind each entry so that a table can tell an out-of-memory cell from a failed or missing one."""

    def __init__(self, df: pd.DataFrame, keys: Sequence[str]) -> None:
        df = with_axis_defaults(df)
        self.keys = list(keys)
        self.summary = accuracy_summary(df, self.keys)
        self._stats = self.summary.set_index([*self.keys, "task"])
        self._statuses = df.groupby([*self.keys, "task"])["status"].agg(set)

    def stat(self, key: tuple[Hashable, ...]) -> pd.Series | None:
        """Mean, std and n of an entry with at least one ok run, else None."""
        if key not in self._stats.index or self._stats.loc[key, "n"] == 0:
            return None
        return self._stats.loc[key]

    def mean(self, key: tuple[Hashable, ...]) -> float | None:
        """Mean accuracy (%) of an entry, None where no run finished."""
        s = self.stat(key)
        return None if s is None else float(s["mean"])

    def failed(self, key: tuple[Hashable, ...], fmt: Fmt) -> str:
        """The text of an entry without a result (see :func:`failed_text`)."""
        return failed_text(self._statuses.get(key), fmt)


# ---------------------------------------------------------------------------------------------------
# Formatting and rendering.


def rank_marks(values: Sequence[float | None], depth: int = 1) -> list[int | None]:
    """0 for the best, 1 for the second best, ... (up to ``depth``) of ``values`` as displayed with 2 decimals.

    Comparing the displayed numbers makes cells that read the same share a mark; None values get none.
    """
    shown = [None if v is None else float(f"{v:.2f}") for v in values]
    top = sorted({v for v in shown if v is not None}, reverse=True)[:depth]
    return [top.index(v) if v in top else None for v in shown]


def mark(text: str, rank: int | None, fmt: Fmt) -> str:
    """Bold for rank 0 (best) and underline for rank 1 (second best), as the paper marks them."""
    if rank == 0:
        return f"**{text}**" if fmt == "md" else rf"\textbf{{{text}}}"
    if rank == 1:
        return f"<u>{text}</u>" if fmt == "md" else rf"\underline{{{text}}}"
    return text


def escape(text: str, fmt: Fmt) -> str:
    """A label made safe for a Markdown table cell or LaTeX."""
    return text.replace("|", r"\|") if fmt == "md" else tex_escape(text)


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], fmt: Fmt) -> str:
    """A GitHub Markdown table or a booktabs ``tabular`` (first column left, the others centred)."""
    if fmt == "md":
        return md_table(header, rows)
    return "\n".join([
        rf"\begin{{tabular}}{{l{'c' * (len(header) - 1)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(r) + r" \\" for r in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ])


def tex_comment(text: str) -> str:
    """A one-line LaTeX comment: a newline inside ``text`` would end the comment and leak text into the document."""
    return "% " + " ".join(text.splitlines())


def write_table_files(out_dir: Path, stem: str, *, title: str, note: str, md_body: str, tex_body: str,
                      env: Mapping[str, object]) -> list[Path]:
    """``<stem>.md`` (title, table, note, environment) and ``<stem>.tex`` (title, note and environment as comments,
    so the fragment can be ``\\input`` into a table float, then the tabular)."""
    md = f"### {title}\n\n{md_body}\n\n{note}\n\n_Environment: {env_summary(env)}_\n"
    tex = "\n".join([tex_comment(f"{title}. {note}"), *(tex_comment(f"{k}: {v}") for k, v in env.items()),
                     tex_body]) + "\n"
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}.tex"]
    for path, text in zip(paths, (md, tex), strict=True):
        path.write_text(text, encoding="utf-8")
    return paths


# ---------------------------------------------------------------------------------------------------
# Table 1.


def _cell_text(stat: pd.Series) -> str:
    mean, std, n = float(stat["mean"]), float(stat["std"]), int(stat["n"])
    return f"{mean:.2f}" if n < 2 or pd.isna(std) else f"{mean:.2f}({std:.2f})"


def table1_keys(df: pd.DataFrame) -> list[str]:
    """Columns identifying a Table 1 row: the attention, plus each study axis with several values in ``df``."""
    return ["attention", *varying_axes(with_axis_defaults(df))]


def table1(df: pd.DataFrame, *, fmt: Fmt, baseline: str | None = "vanilla") -> str:
    """Table 1: one row per model, one column per task plus the average, ``mean(std)`` over seeds.

    A model is the attention, or "attention (variant, a=noise)" where the cells have several variants or noise
    levels, so that those are never averaged together. The best mean of each column is bold; a failed or missing
    cell is ``OOM`` (if every run of it ran out of memory) or ``—``. The baseline's rows come first.
    """
    df = with_axis_defaults(df)
    keys = table1_keys(df)
    cells = SummaryCells(df, keys)
    columns = [*present_tasks(df), AVG]
    names = row_order(df, keys, baseline)
    best = {c: rank_marks([cells.mean((*name, c)) for name in names]) for c in columns}
    rows = []
    for i, name in enumerate(names):
        row = [escape(row_label(dict(zip(keys, name, strict=True))), fmt)]
        for c in columns:
            stat = cells.stat((*name, c))
            row.append(cells.failed((*name, c), fmt) if stat is None else mark(_cell_text(stat), best[c][i], fmt))
        rows.append(row)
    return render_table(["Model", *(TASK_LABELS[t] for t in columns[:-1]), "Avg"], rows, fmt)


def _seeds_note(df: pd.DataFrame) -> str:
    return (f"Test accuracy (%), mean(std) over seeds {seeds_text(df)}; Avg = mean(std) of each "
            "seed's average over the tasks. Best in bold. OOM = out of memory; — = failed or not run.")


def _write_learning_curves(df: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, suite: str) -> list[Path]:
    """One figure per task; lines are labelled like Table 1's rows so variants and noise levels stay apart."""
    from .plots import plot_learning_curves

    keys = [k for k in table1_keys(df) if k in curves.columns]
    curves = with_axis_defaults(curves)
    labels = [row_label(dict(zip(keys, r, strict=True))) for r in curves[keys].itertuples(index=False, name=None)]
    curves = curves.assign(model=labels)
    written: list[Path] = []
    for task, sub in curves.groupby("task", sort=True):
        written += plot_learning_curves(sub, out_dir, task=str(task), title=f"{suite}: {TASK_LABELS[task]}",
                                        by="model")
    return written


def write_accuracy_reports(
    df: pd.DataFrame,
    curves: pd.DataFrame,
    out_dir: Path,
    *,
    env: Mapping[str, object],
    suite: str,
    baseline: str | None = "vanilla",
    plots: bool = True,
    options: Mapping[str, Any] | None = None,
) -> list[Path]:
    """results.csv, env.json, curves.csv and curves_<task>.{png,pdf}, plus for each table of ``options["tables"]``
    (default: Table 1 only) ``<table>.{md,tex,csv}`` and its figures, into ``out_dir``.

    Args:
        df: Accuracy cells, one row per cell (``Store.dataframe()``).
        curves: Evaluation points (``Store.curves()``).
        out_dir: Destination directory; created if needed.
        env: Environment of the run (JSON-serialisable), shown under every table.
        suite: Suite name, used in titles.
        baseline: Attention listed first; ``options["baseline"]`` wins when given.
        plots: Whether to draw figures.
        options: The suite's report options: ``tables`` (subset of :data:`ALL_TABLES`), ``baseline``,
            ``baseline_variant`` and ``variants`` (label -> config overrides, in suite order).

    Raises:
        ValueError: If ``options["tables"]`` names a table this module cannot write.
    """
    options = dict(options or {})
    tables = list(options.get("tables") or ["table1"])
    unknown = [t for t in tables if t not in ALL_TABLES]
    if unknown:
        raise ValueError(f"unknown report tables {unknown}; choose from {', '.join(ALL_TABLES)}")
    baseline = options.get("baseline", baseline)
    out_dir = Path(out_dir)
    df = df.sort_values([c for c in ("attention", *AXIS_DEFAULTS, "task", "seed") if c in df.columns],
                        kind="stable", ignore_index=True)
    written = write_raw(df, out_dir, env)
    for column in ("test_acc", "best_dev_acc"):
        if column not in df.columns:
            df[column] = float("nan")
    if "table1" in tables:
        summary_path = out_dir / "table1.csv"
        accuracy_summary(df, table1_keys(df)).to_csv(summary_path, index=False)
        written += write_table_files(out_dir, "table1", title=f"Table 1 — {suite}", note=_seeds_note(df),
                                     md_body=table1(df, fmt="md", baseline=baseline),
                                     tex_body=table1(df, fmt="tex", baseline=baseline), env=env)
        written.append(summary_path)
    studies = [t for t in tables if t in STUDY_TABLES]
    if studies:
        from .report_studies import write_study_reports

        written += write_study_reports(df, out_dir, tables=studies, env=env, suite=suite, plots=plots,
                                       options={**options, "baseline": baseline})
    curves_path = out_dir / "curves.csv"
    curves.to_csv(curves_path, index=False)
    written.append(curves_path)
    if plots and not curves.empty:
        written += _write_learning_curves(df, curves, out_dir, suite)
    return written
