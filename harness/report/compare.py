"""``attnbench compare A B``: did anything get slower or faster between two sets of results?

A and B are results directories (a suite's ``<out>/<suite>/<profile>``, or any directory holding one
``results.db``), each optionally ``@RUN`` to take the cells of one run of that store instead of the latest result of
every cell: ``compare results/speed/quick@3 results/speed/quick@5`` compares two runs of one store. Cells are
matched by what they measure (suite, axis values, device), not by key, so results of different code compare.

Per matched cell timed in both: the ratio of medians B / A with a bootstrap 95% interval, and the two-sided
Mann-Whitney p-value of the stored per-round samples. A cell is a ``regression`` when B is slower beyond the
threshold (ratio > 1 + threshold) and the difference is significant (p < :data:`ALPHA`), an ``improvement``
likewise the other way (ratio < 1 / (1 + threshold)), else ``same``. A regression of a cell timed while the machine
was busy on either side (its ``noisy`` flag) is listed with a † but does not count for ``--fail-on-regression``:
the load, not the code, may have made it slower; rerun it on a quiet machine. This is what xformers'
``--compare``, asv and pytest-benchmark offer, on the raw samples every run keeps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import UserError
from ..store import Store
from .format import md_table, sig2
from .stats import mann_whitney_p, ratio_of_medians

ALPHA = 0.01  # significance level; many cells are compared at once, so stricter than 0.05


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a store and, optionally, one of its runs."""

    label: str
    db: Path
    run_id: int | None


def parse_side(text: str) -> Side:
    """``DIR`` or ``DIR@RUN`` -> the store under DIR (exit 2 when there is none, or several)."""
    path, sep, run = text.rpartition("@") if "@" in text else (text, "", "")
    if sep and not run.isdigit():
        raise UserError(f"compare {text}: the run after @ must be a run id (a number), e.g. {path}@3")
    directory = Path(path)
    dbs = [directory / "results.db"] if (directory / "results.db").is_file() else sorted(directory.rglob("results.db"))
    if len(dbs) != 1:
        what = "no results.db" if not dbs else f"{len(dbs)} stores ({', '.join(str(d.parent) for d in dbs[:3])} ...)"
        raise UserError(f"compare {text}: {what} here or below; give one suite directory, e.g. results/speed/quick")
    return Side(text, dbs[0], int(run) if run else None)


def _cells(side: Side) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    with Store(side.db) as store:
        if side.run_id is not None and side.run_id not in set(store.runs()["run_id"]):
            raise UserError(f"compare {side.label}: no run {side.run_id} in {side.db}; see its runs table")
        df = store.dataframe(run_id=side.run_id)
        if df.empty:
            raise UserError(f"compare {side.label}: no results in {side.db}")
        samples = store.samples(set(df["key"]), run_ids=set(df["run_id"]))
    by_key = {}
    for row in df.itertuples():  # the samples of the very row shown (its run's timing group)
        group = getattr(row, "timing_group", None)
        if (row.key, group) in samples:
            by_key[row.key] = samples[(row.key, group)]
    return df, by_key


def compare(a: Side, b: Side, threshold: float) -> pd.DataFrame:
    """One row per cell measured ok in both: medians, ratio B/A with its interval, p-value and verdict."""
    df_a, samples_a = _cells(a)
    df_b, samples_b = _cells(b)
    identity = [c for c in ("suite", "attention", "task", "seed", "noise", "noise_on", "variant", "seq_len",
                            "batch_size", "heads", "dim", "mode", "dtype", "device") if c in df_a.columns
                and c in df_b.columns]
    merged = df_a.merge(df_b, on=identity, suffixes=("_a", "_b"))
    rows = []
    for r in merged.to_dict("records"):
        sa, sb = samples_a.get(r["key_a"]), samples_b.get(r["key_b"])
        if r["status_a"] != "ok" or r["status_b"] != "ok" or not sa or not sb:
            continue
        ratio = ratio_of_medians(sb, sa)
        if ratio is None:
            continue
        p = mann_whitney_p(sa, sb)
        verdict = "same"
        if p < ALPHA and ratio.value > 1 + threshold:
            verdict = "regression"
        elif p < ALPHA and ratio.value < 1 / (1 + threshold):
            verdict = "improvement"
        rows.append({**{c: r[c] for c in identity}, "median_a_ms": r["time_ms_median_a"],
                     "median_b_ms": r["time_ms_median_b"], "ratio": ratio.value, "ratio_lo": ratio.lo,
                     "ratio_hi": ratio.hi, "p_value": p, "verdict": verdict,
                     "noisy_a": bool(r.get("noisy_a") is True), "noisy_b": bool(r.get("noisy_b") is True)})
    out = pd.DataFrame(rows)
    return out.sort_values("ratio", ascending=False, ignore_index=True) if not out.empty else out


def counts_as_regression(result: pd.DataFrame) -> pd.Series:
    """Regressions measured on a quiet machine on both sides: what ``--fail-on-regression`` fails on."""
    return (result["verdict"] == "regression") & ~result["noisy_a"] & ~result["noisy_b"]


def render(result: pd.DataFrame, a: Side, b: Side, threshold: float, fmt: str) -> str:
    """The comparison as Markdown (a summary line and the table), CSV or JSON."""
    if fmt == "csv":
        return result.to_csv(index=False)
    if fmt == "json":
        return json.dumps({"a": a.label, "b": b.label, "threshold": threshold, "alpha": ALPHA,
                           "cells": result.to_dict("records")}, indent=2, default=str) + "\n"
    counts = result["verdict"].value_counts().to_dict() if not result.empty else {}
    noisy = int(((result["verdict"] == "regression") & ~counts_as_regression(result)).sum()) if not result.empty else 0
    head = (f"### {b.label} against {a.label}\n\n{len(result)} cells timed in both: "
            f"{counts.get('regression', 0)} slower and {counts.get('improvement', 0)} faster beyond "
            f"{100 * threshold:g}% (Mann-Whitney p < {ALPHA}), {counts.get('same', 0)} the same"
            + (f"; {noisy} of the slower timed on a busy machine (†), not counted as regressions" if noisy else "")
            + ".\n")
    if result.empty:
        return head
    shown = [c for c in ("attention", "task", "seq_len", "batch_size", "mode", "dtype") if c in result.columns]
    rows = [[*(str(r[c]) for c in shown), sig2(r["median_a_ms"]), sig2(r["median_b_ms"]),
             f"{r['ratio']:.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]", f"{r['p_value']:.2g}",
             r["verdict"] + (" †" if r["noisy_a"] or r["noisy_b"] else "")] for r in result.to_dict("records")]
    table = md_table([*shown, "A (ms)", "B (ms)", "B / A [95% CI]", "p", "verdict"], rows, n_left=len(shown))
    return f"{head}\n{table}\n\n† = timed while the machine was busy in A or B.\n"
