"""``attnbench compare A B``: did anything get slower or faster between two sets of results?

A and B are results directories (a suite's ``<out>/<suite>/<profile>``, or any directory holding one
``results.db``), each optionally ``@RUN`` to take the cells of one run of that store instead of the latest result of
every cell: ``compare results/speed/quick@3 results/speed/quick@5`` compares two runs of one store. Cells are
matched by what they measure (suite, axis values, device), not by key, so results of different code compare.

Two bases. **Relative** (the default when the suite names a baseline, or with ``--relative-to NAME``): a cell's
samples are its per-round time divided by the baseline's time in the same interleaved round, and A and B compare
those ratios. Between two runs a machine drifts as a whole, either direction by shape, by more than the changes one
wants to see; in each round that drift, and a background load that slows every variant alike, cancels. The
baseline's own rows are shown with their absolute change for information (verdict ``baseline``), never as a
regression: relative to itself nothing can change. **Absolute** (``--absolute``): the stored per-round times
themselves, for comparing two machines or a change to the baseline.

Per matched cell: the ratio of medians B / A with a bootstrap 95% interval, and the two-sided Mann-Whitney p-value
of the samples. A cell is a ``regression`` when B is slower beyond the threshold with confidence — the whole
interval above 1 + threshold — and the rank test agrees (p < :data:`ALPHA`); an ``improvement`` likewise the other
way (the whole interval below 1 / (1 + threshold)); else ``same``. The interval, not the point estimate, must clear
the threshold because the samples of one run cannot show the variation between runs: between two quiet runs, cells
whose code had not changed moved past the default threshold relative to the reference, while their intervals reached
back below it (measured: docs/measuring.md, "Provenance, history and `attnbench compare`"). A regression of a cell
timed while the machine was busy on either side (its ``noisy`` flag) is listed with a † but does not count for
``--fail-on-regression``: the load, not the code, may have made it slower; rerun it on a quiet machine. This is
what xformers' ``--compare``, asv and pytest-benchmark offer, on the raw samples every run keeps.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import UserError
from ..core.kind_table import KINDS
from ..core.store import Store
from .format import md_table, sig2
from .stats import Ratio, mann_whitney_p, ratio_of_medians

ALPHA = 0.01  # significance level; many cells are compared at once, so stricter than 0.05


def _shown(df: pd.DataFrame) -> tuple[str, ...]:
    """The axes a comparison's rows show: the suite, the attention, the axes its kind shows
    (:attr:`~harness.core.suite.SuiteKind.shown_axes`, each where the suite has it) and the device. Cells are matched
    on all of them and every other axis too (``compile``, ``sdpa_backend``, a study's settings):
    ``Store.dataframe(identity=True)``."""
    kinds = [KINDS[k] for k in dict.fromkeys(df["kind"]) if k in KINDS] if "kind" in df.columns else []
    axes = [a for kind in kinds for a in kind.shown_axes]
    return ("suite", "attention", *dict.fromkeys(axes), "device")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a store and, optionally, one of its runs."""

    label: str
    db: Path
    run_id: int | None


@dataclass(frozen=True)
class _Timed:
    """A side's cells (one row each), their absolute samples and, relative to a baseline, their per-round ratios."""

    df: pd.DataFrame
    absolute: dict[str, list[float]]
    relative: dict[str, list[float]]


def parse_side(text: str) -> Side:
    """``DIR`` or ``DIR@RUN`` -> the store under DIR (exit 2 when there is none, or several)."""
    # a directory whose name holds an @ is itself (DIR@RUN names a run only where no such path exists)
    path, sep, run = text.rpartition("@") if "@" in text and not Path(text).exists() else (text, "", "")
    if sep and not run.isdigit():
        raise UserError(f"compare {text}: the run after @ must be a run id (a number), e.g. {path}@3")
    directory = Path(path)
    dbs = [directory / "results.db"] if (directory / "results.db").is_file() else sorted(directory.rglob("results.db"))
    if len(dbs) != 1:
        what = "no results.db" if not dbs else f"{len(dbs)} stores ({', '.join(str(d.parent) for d in dbs[:3])} ...)"
        raise UserError(f"compare {text}: {what} here or below; give one suite directory, e.g. results/speed/quick")
    return Side(text, dbs[0], int(run) if run else None)


def suite_baseline(side: Side) -> str | None:
    """The default reference of a relative comparison, from the suite's report options stored with the run: its
    ``compare_reference`` (the speed suite: ``vanilla_sdpa``, whose per-round times are the steadiest here), else
    its ``baseline``."""
    with Store(side.db, read_only=True) as store:
        runs = store.runs([side.run_id] if side.run_id is not None else None)
    report = runs["env"].iloc[-1].get("report") if len(runs) else None
    if not isinstance(report, dict):
        return None
    reference = report.get("compare_reference") or report.get("baseline")
    return str(reference) if reference else None


def _cells(side: Side, baseline: str | None) -> _Timed:
    with Store(side.db, read_only=True) as store:
        if side.run_id is not None and side.run_id not in set(store.runs()["run_id"]):
            raise UserError(f"compare {side.label}: no run {side.run_id} in {side.db}; see its runs table")
        df = store.dataframe(run_id=side.run_id, identity=True)
        if df.empty:
            raise UserError(f"compare {side.label}: no results in {side.db}")
        samples = store.samples(set(df["key"]), run_ids=set(df["run_id"]))
        groups = set(df["timing_group"].dropna()) if "timing_group" in df.columns else set()
        by_group = store.group_samples(groups) if baseline else {}
    absolute, relative = {}, {}
    for row in df.itertuples():  # the samples of the very row shown (its run's timing group)
        group = getattr(row, "timing_group", None)
        own = samples.get((row.key, group))
        if not own:
            continue
        absolute[row.key] = own
        base = by_group.get((group, baseline))
        if base and row.attention != baseline:  # round i of the variant over round i of the baseline (the rounds
            # of a variant that failed part-way stop early, hence not strict)
            relative[row.key] = [o / b for o, b in zip(own, base, strict=False) if b > 0]
    return _Timed(df, absolute, relative)


def _verdict(ratio: Ratio, p: float, threshold: float) -> str:
    """Beyond the threshold with 95% confidence (the whole interval past it) and significant by the rank test."""
    if p < ALPHA and ratio.lo > 1 + threshold:
        return "regression"
    if p < ALPHA and ratio.hi < 1 / (1 + threshold):
        return "improvement"
    return "same"


def compare(a: Side, b: Side, threshold: float, baseline: str | None = None) -> pd.DataFrame:
    """One row per cell measured ok in both: medians, ratio B/A with its interval, p-value and verdict.

    With ``baseline``, the ratio compares each cell's per-round time ratio to ``baseline`` (timed in the same
    interleaved rounds) between A and B; cells without the baseline in their rounds on either side are left out, and
    the baseline's own rows compare absolutely with the verdict ``baseline``. Without it, the absolute samples.
    """
    timed_a, timed_b = _cells(a, baseline), _cells(b, baseline)
    suites_a, suites_b = set(timed_a.df["suite"]), set(timed_b.df["suite"])
    if not suites_a & suites_b:
        raise UserError(f"compare: {a.label} holds suite {', '.join(sorted(suites_a))} and {b.label} suite "
                        f"{', '.join(sorted(suites_b))}; compare two results directories of one suite")
    # every axis must agree (an eager cell is never paired with a compiled one); the shown ones are kept as columns
    identity = ["identity", *(c for c in _shown(timed_a.df) if c in timed_a.df.columns and c in timed_b.df.columns)]
    merged = timed_a.df.merge(timed_b.df, on=identity, suffixes=("_a", "_b"))
    rows = []
    for r in merged.to_dict("records"):
        if r["status_a"] != "ok" or r["status_b"] != "ok":
            continue
        is_base = baseline is not None and r["attention"] == baseline
        pick = "absolute" if baseline is None or is_base else "relative"
        sa, sb = getattr(timed_a, pick).get(r["key_a"]), getattr(timed_b, pick).get(r["key_b"])
        ratio = ratio_of_medians(sb, sa) if sa and sb else None
        if ratio is None:
            continue
        p = mann_whitney_p(sa, sb)
        row = {**{c: r[c] for c in identity[1:]}, "kind": r.get("kind_a"), "median_a_ms": r["time_ms_median_a"],
               "median_b_ms": r["time_ms_median_b"]}
        if baseline is not None:
            row |= {"rel_a": None if is_base else float(pd.Series(sa).median()),
                    "rel_b": None if is_base else float(pd.Series(sb).median())}
        rows.append(row | {"ratio": ratio.value, "ratio_lo": ratio.lo, "ratio_hi": ratio.hi, "p_value": p,
                           "verdict": "baseline" if is_base else _verdict(ratio, p, threshold),
                           "noisy_a": bool(r.get("noisy_a") is True), "noisy_b": bool(r.get("noisy_b") is True)})
    out = pd.DataFrame(rows)
    return out.sort_values("ratio", ascending=False, ignore_index=True) if not out.empty else out


def counts_as_regression(result: pd.DataFrame) -> pd.Series:
    """Regressions measured on a quiet machine on both sides: what ``--fail-on-regression`` fails on."""
    return (result["verdict"] == "regression") & ~result["noisy_a"] & ~result["noisy_b"]


def _summary(result: pd.DataFrame, a: Side, b: Side, threshold: float, baseline: str | None) -> str:
    counts = result["verdict"].value_counts().to_dict() if not result.empty else {}
    noisy = int(((result["verdict"] == "regression") & ~counts_as_regression(result)).sum()) if not result.empty else 0
    compared = len(result) - counts.get("baseline", 0)
    basis = (f"relative to `{baseline}` timed in the same rounds (`--absolute` for raw times)" if baseline
             else "absolute times")
    head = (f"### {b.label} against {a.label}\n\n{compared} cells timed in both, {basis}: "
            f"{counts.get('regression', 0)} slower and {counts.get('improvement', 0)} faster beyond "
            f"{100 * threshold:g}% (the 95% interval past it, Mann-Whitney p < {ALPHA}), {counts.get('same', 0)} "
            "the same"
            + (f"; {noisy} of the slower timed on a busy machine (†), not counted as regressions" if noisy else "")
            + ".")
    if counts.get("baseline"):
        drift = result.loc[result["verdict"] == "baseline", "ratio"]
        head += (f" `{baseline}` itself took {sig2(float(drift.median()))}× its time in A (median over its "
                 f"{len(drift)} cells, {sig2(float(drift.min()))}–{sig2(float(drift.max()))}×): the drift the "
                 "relative basis cancels.")
    title, _, text = head.partition("\n\n")
    return f"{title}\n\n{textwrap.fill(text, WIDTH)}\n"


#: ``compare``'s Markdown table stays within this many columns (a terminal, a pull request's comment).
WIDTH = 120


def changed(result: pd.DataFrame) -> pd.DataFrame:
    """The rows whose verdict is a regression or an improvement (``--only-changed``)."""
    return result[result["verdict"].isin(("regression", "improvement"))] if not result.empty else result


def _constant(result: pd.DataFrame, columns: list[str]) -> tuple[list[str], str]:
    """(the columns that vary, the words naming the values of those that do not)."""
    varying = [c for c in columns if result[c].nunique(dropna=False) > 1]
    fixed = [f"{c} {result[c].iloc[0]}" for c in columns if c not in varying]
    return varying, (f"Every cell: {', '.join(fixed)}.\n" if fixed else "")


def render(result: pd.DataFrame, a: Side, b: Side, threshold: float, fmt: str, baseline: str | None = None,
           only_changed: bool = False) -> str:
    """The comparison as Markdown (a summary line and the table, largest changes first, constant columns named once
    above it, within :data:`WIDTH` columns), CSV or JSON (every row and column)."""
    if fmt == "csv":
        return result.to_csv(index=False)
    if fmt == "json":
        return json.dumps({"a": a.label, "b": b.label, "threshold": threshold, "alpha": ALPHA,
                           "relative_to": baseline, "cells": result.to_dict("records")},
                          indent=2, default=str) + "\n"
    head = _summary(result, a, b, threshold, baseline)
    rows_df = changed(result) if only_changed else result
    if rows_df.empty:
        return head + ("\nNo cell changed beyond the threshold.\n" if only_changed and not result.empty else "")
    # largest change first, either way: |log(B / A)|
    rows_df = rows_df.assign(_size=rows_df["ratio"].map(lambda v: abs(math.log(v)) if v > 0 else math.inf))
    rows_df = rows_df.sort_values("_size", ascending=False, kind="stable")
    axes = [c for c in _shown(rows_df) if c in rows_df.columns and c not in ("suite", "device")]
    shown, fixed = _constant(rows_df, axes)
    ref = ["A t/ref", "B t/ref"] if baseline else []

    def relative(r: dict[str, Any]) -> list[str]:
        if not baseline:
            return []
        return ["", ""] if r["verdict"] == "baseline" else [f"{r['rel_a']:.3g}", f"{r['rel_b']:.3g}"]

    rows = [[*(str(r[c]) for c in shown), sig2(r["median_a_ms"]), sig2(r["median_b_ms"]), *relative(r),
             f"{r['ratio']:.3g} [{r['ratio_lo']:.3g},{r['ratio_hi']:.3g}]",
             r["verdict"] + (" †" if r["noisy_a"] or r["noisy_b"] else "")] for r in rows_df.to_dict("records")]
    change = "B/A of t/ref [95%]" if baseline else "B/A [95%]"
    table = md_table([*shown, "A ms", "B ms", *ref, change, "verdict"], rows, n_left=len(shown))
    legend = (f"t/ref = the cell's time ÷ `{baseline}`'s in the same interleaved rounds (median over rounds); "
              "B/A = the ratio of B's to A's. " if baseline else "B/A = B's median time ÷ A's. ")
    hidden = f" ({len(result) - len(rows_df)} unchanged cells not shown: drop --only-changed to see them)" \
        if only_changed and len(rows_df) < len(result) else ""
    notes = (f"{legend}† = timed while the machine was busy in A or B. Largest change first{hidden}; each cell's "
             "Mann-Whitney p and every other column in `--format csv`.")
    return f"{head}\n{fixed}{table}\n\n{textwrap.fill(notes, WIDTH)}\n"
