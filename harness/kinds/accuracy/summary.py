"""Accuracy cells summarised the same way for every table: the study axes a row is told apart by, row labels and
order, and mean(std) over seeds per task with the per-seed average over the tasks (Table 1 and the study tables).

The average follows the reviewer's request: each seed's average over the tasks, then the mean and the standard
deviation of those per-seed averages (not the mean of the task standard deviations).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pandas as pd

from ...report.format import BELOW_CONTROL, Fmt, display_name, failed_text
from ...report.groups import table_order
from .noise import TEST_ONLY, TRAIN_TEST
from .tasks import TASK_NAMES, TASK_TABLE

#: Each task's name as tables and figures print it, in the table's (the paper's) order.
TASK_LABELS = {name: task.label for name, task in TASK_TABLE.items()}
AVG = "avg"
#: The no-mixing control every accuracy table compares its rows with (``attentions/none.py``).
CONTROL = "none"
#: The rows of the paper's Table 1 (its Table 5 prints some of them, Tables 6 and 7 S3Attention's variants), as
#: registry names or patterns, and the control: the attentions the LaTeX tables print where the suite's
#: ``report.rows`` does not say.
PAPER_ROWS = ("vanilla", "local", "sparse_transformer", "longformer", "linformer", "reformer", "sinkhorn",
              "synthesizer", "bigbird", "linear_transformer", "performer", "nystromformer*", "h_transformer_1d",
              "transformer_ls", "fnet", "luna", "fmmformer", "ponet", "cosformer", "scatterbrain", "s3attention",
              CONTROL)
#: Optional study axes of accuracy cells and the value a cell without the axis has (clean data, the suite's model).
AXIS_DEFAULTS: dict[str, Any] = {"variant": "", "noise": 0.0, "noise_on": TRAIN_TEST}
NOISE_ON_LABELS = {TRAIN_TEST: "train+test", TEST_ONLY: "test only"}


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


def only_noisy(df: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """A robustness suite (cells with noise a > 0) is ranked on its noisy cells: accuracy under noise.

    Its clean cells are clean accuracy, which an accuracy suite ranks; and not the relative drop from a = 0, which a
    model at chance (the ``none`` control) would win by losing nothing.
    """
    noisy = df["noise"] > 0
    return (df[noisy], True) if noisy.any() else (df, False)


#: Table 7's names of the ablated variants (the paper's), in its table, its figure and the learning curves.
ABLATION_LABELS = {"no_fourier_conv": "w/o Four. Conv.", "no_conv_stem": "w/o Conv. Stem",
                   "no_col_attention": "w/o Col. Attn.", "no_row_attention": "w/o Row Attn."}


def axis_text(column: str, value: Any, display: bool = False) -> str:
    """How one axis value reads inside a row or line label (``a=2``, ``test only``, ``Text``, ``r=1``); with
    ``display`` an attention reads as a paper prints it (:func:`~harness.report.format.display_name`) and an ablated
    variant as Table 7 names it, as LaTeX tables and figures show them, while Markdown and CSV keep the names the user
    types."""
    if column == "attention" and display:
        return display_name(str(value))
    if column == "variant" and display:
        return ABLATION_LABELS.get(str(value), str(value))
    if column == "noise":
        return f"a={float(value):g}"
    if column == "noise_on":
        return NOISE_ON_LABELS.get(str(value), str(value))
    if column == "task":
        return TASK_LABELS.get(str(value), str(value))
    return str(value)


def row_label(values: Mapping[str, Any], primary: str = "attention", display: bool = False) -> str:
    """``primary`` value followed by the other values in parentheses, e.g. ``s3attention (r=1, a=2, test only)``
    (with ``display``, ``S3Attention (r=1, a=2, test only)``: see :func:`axis_text`).

    The noise mode is left out of a clean row's label: a = 0 has no noise to place.
    """
    extras = [axis_text(c, v, display) for c, v in values.items()
              if c != primary and str(v) != "" and not (c == "noise_on" and float(values.get("noise", 1)) == 0)]
    head = axis_text(primary, values[primary], display)
    return f"{head} ({', '.join(extras)})" if extras else head


def row_order(df: pd.DataFrame, keys: Sequence[str], baseline: str | None) -> list[tuple[Hashable, ...]]:
    """The distinct ``keys`` tuples of ``df``: by attention in every table's order (the baseline first, then the
    exact baselines, the families in a paper's order and the control last: :func:`harness.report.groups.table_order`),
    task (paper order), variant, noise mode (train+test first) and noise level."""
    position = {name: i for i, name in enumerate(table_order(set(df["attention"]), baseline))}
    rank = {
        "attention": lambda v: (position.get(v, len(position)), str(v)),
        "task": lambda v: (TASK_NAMES.index(v) if v in TASK_NAMES else len(TASK_NAMES), str(v)),
        "noise_on": lambda v: (v != AXIS_DEFAULTS["noise_on"], str(v)),
        "noise": float,
    }
    rows = {tuple(r) for r in df[list(keys)].itertuples(index=False, name=None)}
    return sorted(rows, key=lambda r: tuple(rank.get(k, str)(v) for k, v in zip(keys, r, strict=True)))


def present_tasks(df: pd.DataFrame) -> list[str]:
    """Tasks of ``df`` in the paper's column order (ListOps, Text, Retrieval, Image, Pathfinder)."""
    return [t for t in TASK_NAMES if t in set(df["task"])]


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

    def beats(self, key: tuple[Hashable, ...], control: tuple[Hashable, ...]) -> bool | None:
        """Whether the entry's mean exceeds the ``control`` entry's by more than the seed spread (the larger of the
        two stds; 0 for a single seed), None where either has no result or ``key`` is the control itself."""
        mine, theirs = self.stat(key), self.stat(control)
        if key == control or mine is None or theirs is None:
            return None
        spread = max((0.0 if pd.isna(s["std"]) else float(s["std"])) for s in (mine, theirs))
        return float(mine["mean"]) - float(theirs["mean"]) > spread

    def below_control(self, key: tuple[Hashable, ...], control: tuple[Hashable, ...], fmt: Fmt) -> str:
        """:data:`BELOW_CONTROL`'s mark where the entry does not beat the control, else nothing."""
        return BELOW_CONTROL[fmt] if self.beats(key, control) is False else ""

    def ran_nowhere(self, model: tuple[Hashable, ...], tasks: Sequence[str]) -> set[str] | None:
        """The statuses of a model (a key without its task) that has no result and no out-of-memory cell in any of
        ``tasks`` (a row a paper's table drops, with a footnote), or None for a model that ran somewhere."""
        statuses: set[str] = set()
        for task in tasks:
            if self.stat((*model, task)) is not None:
                return None
            statuses |= self.statuses((*model, task))
        return None if "oom" in statuses else statuses or {"not run"}

    def statuses(self, key: tuple[Hashable, ...]) -> set[str]:
        """The statuses of the runs behind an entry (empty where none ran)."""
        return set(self._statuses.get(key, set()))

    def failed(self, key: tuple[Hashable, ...], fmt: Fmt) -> str:
        """The text of an entry without a result (see :func:`failed_text`)."""
        return failed_text(self._statuses.get(key), fmt)


def varying_label(df: pd.DataFrame, keys: Sequence[str], values: Sequence[Hashable], primary: str = "attention",
                  display: bool = False) -> str:
    """Row label showing the primary key and those other ``keys`` that vary in ``df``."""
    shown = {primary, *varying_axes(df, [k for k in keys if k != primary])}
    return row_label({k: v for k, v in zip(keys, values, strict=True) if k in shown}, primary, display)


def with_labels(summary: pd.DataFrame, keys: Sequence[str], primary: str = "attention") -> pd.DataFrame:
    """``summary`` with a ``label`` column for figures' legends (display names: see :func:`axis_text`)."""
    values = summary[list(keys)].itertuples(index=False, name=None)
    return summary.assign(label=[varying_label(summary, keys, v, primary, display=True) for v in values])
