"""``attnbench report --rank DIR...``: one ranking of the attention variants across suites, a compositional index as
CAB computes it (Zhang et al., "CAB: Comprehensive Attention Benchmarking on Long Sequence Modeling", ICML 2023,
https://arxiv.org/abs/2210.07661; ``scripts/compositional_index/compositional_index.py`` of Shark-NLP/CAB):

1. every suite gives metrics — one per measured quantity and cell of its axes ("time @ n=4096, fwd+bwd",
   "accuracy @ Text"), seeds averaged —;
2. per metric, each variant's z-score over the variants that have a value, signed so that higher is better;
3. the mean of a variant's z-scores within a suite is its suite index, the mean of its suite indices its overall
   index.

Unlike CAB, whose means and standard deviations are fixed constants of its paper's runs, the z-scores here are taken
over the variants ranked together, so the index says where a variant stands among those; adding or removing one
changes every index. Nothing is dropped silently: a variant without a value for a metric (a failed cell, a cell not
run, a suite that did not run it) is listed with the reason, and its indices are means over what it has.

Controls (the registry's group ``controls``: ``none``, ``mean_pool``) are never ranked: a layer that mixes nothing is
the fastest and leanest of all, and would both take a rank and move every other variant's z-score. They are scored
against the ranked variants' mean and std (without entering them) and shown apart. Suites of different profiles (a
smoke run's tiny data beside a quick run's) are ranked together only with a mark saying so.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import UserError
from ..core.kind_table import KINDS
from ..core.store import Store
from ..core.suite import RankedQuantity, SuiteKind
from .format import (
    shown_env,
)
from .groups import group_of

#: What a suite is ranked on is its kind's (:attr:`~harness.core.suite.SuiteKind.ranked`): speed, time and memory;
#: accuracy, accuracy; approximation, time and error (each variant at its default budget, :func:`at_defaults`);
#: forecasting, the test MSE; decode, ms per token and the state. Not FLOPs (neither better nor worse), nor the
#: training throughput of accuracy cells (speed suites time under controlled conditions).
#: Axes that name what is ranked (a study's variant is a model of its own), and axes averaged over (replicates).
VARIANT_AXES = ("attention", "variant", "budget")  # a budget other than the default names its cells too
REPLICATE_AXES = ("seed",)
#: Axes named in every metric label where a suite has them, even with one value ("time @ n=64, fwd").
PRIMARY_AXES = ("task", "seq_len", "mode")
#: Marks a variant whose overall index is a mean over fewer suites than were ranked.
COVERAGE_MARK: dict[str, str] = {"md": "†", "tex": r"$^\dagger$"}
#: The registry group whose members are never ranked (:func:`is_control`).
CONTROLS = "controls"
#: A std this small relative to the mean is rounding of equal values: their z-scores are 0, not ±1 from noise.
_EQUAL_RTOL = 1e-12
STEM = "ranking"


@dataclass(frozen=True)
class SuiteResults:
    """One suite's latest results: its label (``suite/profile``), directory, cells and the runs behind them."""

    label: str
    directory: Path
    df: pd.DataFrame
    runs: pd.DataFrame
    profile: str = ""


@dataclass(frozen=True)
class Ranking:
    """The ranking and everything needed to read it.

    Attributes:
        table: one row per variant, best first: variant, rank, overall, one index column per suite label,
            suites_covered, suites_total, metrics_covered, metrics_total.
        values: one row per (suite, metric, variant): the value (raw column units), its z-score (NaN where the variant
            has no value) and, where it has none or a partial one, the reason.
        skipped: metrics with fewer than two values (suite, metric, n_values), left out of every index.
        suites: the suite labels, in the order given.
        descriptions: per suite, what it is ranked on (one sentence).
        directories: per suite, its results directory.
        env: the environment of the newest run shown, with ``runs`` naming every run behind the numbers, per suite.
        budgets: per suite that sweeps approximation budgets, the budgets left out of the ranking (settings of their
            variant: :func:`at_defaults`), in words.
        controls: the variants shown apart and never ranked (:func:`is_control`), in the table's order.
        profiles: per suite, the profile its runs ran (``smoke``, ``quick``, ...; "" where unknown).
    """

    table: pd.DataFrame
    values: pd.DataFrame
    skipped: pd.DataFrame
    suites: list[str]
    descriptions: dict[str, str]
    directories: dict[str, Path]
    env: dict[str, object]
    budgets: dict[str, str] = field(default_factory=dict)
    controls: list[str] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)

    @property
    def contributing(self) -> list[str]:
        """The suites that gave at least one ranked metric (an index column), in the order given."""
        return [s for s in self.suites if s in self.table.columns]

    @property
    def mixed_profiles(self) -> bool:
        """Whether suites of different profiles are ranked together (a smoke run's figures beside a quick run's)."""
        return len({p for s, p in self.profiles.items() if s in self.contributing and p}) > 1


def is_control(variant: str) -> bool:
    """Whether a ranked variant (``none``, ``none (r=1)``) is a control: its attention is in the registry's
    :data:`CONTROLS` group."""
    return group_of(str(variant).partition(" (")[0]) == CONTROLS


# ---------------------------------------------------------------------------------------------------------------------
# Loading


def load_suite_results(directory: str | Path) -> SuiteResults:
    """The latest result of every cell of the store in ``directory`` (a suite's results directory).

    Raises:
        UserError: no ``results.db`` in ``directory`` (naming the stores below it, if any), or an empty store.
    """
    directory = Path(directory)
    db = directory / "results.db"
    if not db.is_file():
        below = sorted(str(p.parent) for p in directory.rglob("results.db")) if directory.is_dir() else []
        hint = f"; stores below it: {', '.join(below)}" if below else ""
        raise UserError(f"--rank {directory}: no results.db here; give a suite's results directory written by "
                        f"`attnbench run`, e.g. results/speed/quick{hint}")
    with Store(db, read_only=True) as store:
        df = store.dataframe()
        runs = store.runs(set(df["run_id"])) if not df.empty else store.runs([])
    if df.empty:
        raise UserError(f"--rank {directory}: the store holds no results yet; run the suite first")
    profile = str(runs["profile"].iloc[-1])
    return SuiteResults(f"{df['suite'].iloc[0]}/{profile}", directory, df, runs, profile)


def default_out_dir(directories: Sequence[str | Path]) -> Path:
    """Where the ranking goes without ``--out-dir``: the deepest directory holding every DIR (``results`` for
    ``results/speed/quick results/memory/quick``; the DIR itself when one is given), or ``./results`` when the DIRs
    share nothing but the filesystem root."""
    common = Path(os.path.commonpath([os.path.abspath(d) for d in directories]))
    return Path("results") if common == Path(common.anchor) else common


# ---------------------------------------------------------------------------------------------------------------------
# Metrics of one suite


def _kind(df: pd.DataFrame) -> SuiteKind:
    """The one registered kind of a store's cells."""
    kinds = set(df["kind"])
    if len(kinds) != 1 or next(iter(kinds)) not in KINDS:
        raise UserError(f"cells of suite kinds {', '.join(sorted(map(str, kinds)))}: a store holds one known kind")
    return KINDS[kinds.pop()]


def _normalised(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its kind's optional axes filled (:attr:`SuiteKind.normalise`)."""
    kind = _kind(df)
    return kind.normalise(df) if kind.normalise is not None else df


def _value_text(kind: SuiteKind, column: str, value: Hashable) -> str:
    """How one axis value reads in a label: the kind's words where it has them (``a=2``, ``Text``)."""
    return kind.value_text(column, value) if kind.value_text is not None else str(value)


def _axis_value_text(kind: SuiteKind, column: str, value: Hashable) -> str:
    if column == "seq_len":
        return f"n={value}"
    if column in ("task", "noise", "noise_on", "mode", "dtype", "device"):
        return _value_text(kind, column, value)
    return f"{column}={value}"


def _sort_value(kind: SuiteKind, column: str, value: Hashable) -> tuple[float, str]:
    """Numbers by size, an axis the kind orders (the LRA tasks) in its order, the rest by name (n=64 before
    n=128)."""
    order = list(kind.value_order.get(column, ()))
    if value in order:
        return (float(order.index(value)), "")
    if isinstance(value, int | float | np.number) and not isinstance(value, bool):
        return (float(value), "")
    return (float("inf"), str(value))


def _metric_axes(df: pd.DataFrame) -> list[str]:
    """The axes a metric is a cell of: the suite kind's axes and the device, without variant and replicate axes."""
    axes = [*_kind(df).all_axes(), "device"]
    return [a for a in axes if a in df.columns and a not in (*VARIANT_AXES, *REPLICATE_AXES)]


def suite_metrics(df: pd.DataFrame, suite: str) -> tuple[pd.DataFrame, str]:
    """One suite's metric values per variant, and one sentence saying what it is ranked on.

    Returns:
        A frame with one row per (metric, variant with at least one cell of it): suite, metric, column,
        higher_is_better, variant, value (mean over the variant's ok runs of the cell — its seeds —, NaN when none
        finished ok), runs, ok_runs and reason (the statuses of the failed runs, "" when every run is ok); and the
        description.
    """
    kind = _kind(df)
    df = _normalised(df)
    axes = _metric_axes(df)
    # the axes that vary over the whole suite, so a robustness metric names its noise level even with one a > 0
    shown = [a for a in axes if a in PRIMARY_AXES or df[a].nunique(dropna=False) > 1]
    df, part_only = kind.rank_subset(df) if kind.rank_subset is not None else (df, False)
    df = df.assign(_variant=_variant_names(df))
    ok = df["status"] == "ok"
    frames, used = [], []
    for quantity in kind.ranked:
        if quantity.column not in df.columns:
            continue
        value = pd.to_numeric(df[quantity.column], errors="coerce").where(ok)
        value = value.where(np.isfinite(value))
        if value.isna().all():  # this suite does not measure it (a memory suite's time)
            continue
        used.append(quantity)
        cells = df.assign(_value=value, _failed=df["status"].where(~ok))
        grouped = cells.groupby([*axes, "_variant"], dropna=False, sort=False)
        out = grouped.agg(value=("_value", "mean"), runs=("status", "size"), ok_runs=("_value", "count"),
                          reason=("_failed", lambda s: ", ".join(sorted(set(s.dropna()))))).reset_index()
        out = out.sort_values(axes, key=lambda c: c.map(lambda v, col=c.name: _sort_value(kind, col, v)),
                              kind="stable")
        labels = [", ".join(_axis_value_text(kind, a, v) for a, v in zip(shown, r, strict=True))
                  for r in out[shown].itertuples(index=False, name=None)]
        frames.append(pd.DataFrame({
            "suite": suite, "metric": [f"{quantity.name} @ {t}" if t else quantity.name for t in labels],
            "column": quantity.column, "higher_is_better": quantity.higher_is_better, "variant": out["_variant"],
            "value": out["value"], "runs": out["runs"], "ok_runs": out["ok_runs"], "reason": out["reason"]}))
    values = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["suite", "metric", "column", "higher_is_better", "variant", "value", "runs", "ok_runs", "reason"])
    return values, _describe(used, shown, df, part_only, kind.ranked)


def _describe(used: Sequence[RankedQuantity], shown: Sequence[str], df: pd.DataFrame, noisy_only: bool,
              ranked: Sequence[RankedQuantity]) -> str:
    if not used:
        statuses = ", ".join(f"{s}={n}" for s, n in df["status"].value_counts().sort_index().items())
        return f"no ok cell with {' or '.join(q.column for q in ranked) or 'a ranked metric'} ({statuses})"
    quantities = " and ".join(f"{q.name} (`{q.column}`, {'higher' if q.higher_is_better else 'lower'} is better)"
                              for q in used)
    text = f"{quantities} per ({', '.join(shown)})" if shown else quantities
    if "seed" in df.columns and df["seed"].nunique() > 1:
        text += f", mean over seeds {', '.join(str(s) for s in sorted(df['seed'].unique()))}"
    if noisy_only:
        text += ("; noisy cells (a > 0) only: accuracy under noise, not the change from a = 0, which a model at "
                 "chance would win")
    return text


# ---------------------------------------------------------------------------------------------------------------------
# z-scores and the index


def zscores(values: pd.DataFrame, controls: Collection[str] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Adds ``z`` to ``values``: per (suite, metric), (x − mean) / std over the ranked variants with a value, times −1
    where lower is better, so a higher z is always better.

    The std is the population std (ddof=0), so two variants get ±1. Where every value is equal (std 0, or a std that
    is only rounding of equal values) every z is 0: the metric tells the variants nothing apart. ``controls`` enter
    neither the mean nor the std (nor the count of values): each is scored against the ranked variants, so that a
    layer mixing nothing moves no other variant's z-score.

    Returns:
        ``values`` with ``z`` for the ranked metrics, and the skipped metrics (suite, metric, n_values): those with
        fewer than two values of ranked variants, which no z-score can be taken over.
    """
    keys = ["suite", "metric"]
    reference = values["value"].where(~values["variant"].isin(list(controls)))
    n_values = reference.groupby([values[k] for k in keys], sort=False).transform("count")
    skipped = (values.assign(_reference=reference)[n_values < 2].groupby(keys, sort=False)["_reference"].count()
               .rename("n_values").reset_index())
    ranked = values[n_values >= 2].copy()
    grouped = reference[n_values >= 2].groupby([ranked[k] for k in keys], sort=False)
    mean, std = grouped.transform("mean"), grouped.transform(lambda x: x.std(ddof=0))
    equal = ~(std > _EQUAL_RTOL * mean.abs().clip(lower=np.finfo(float).tiny))
    sign = np.where(ranked["higher_is_better"].astype(bool), 1.0, -1.0)
    z = sign * (ranked["value"] - mean) / std.where(~equal, 1.0)
    ranked["z"] = z.where(~equal | ranked["value"].isna(), 0.0).where(ranked["value"].notna())
    return ranked.reset_index(drop=True), skipped


def _complete(ranked: pd.DataFrame, present: dict[str, set[str]], variants: Sequence[str]) -> pd.DataFrame:
    """Every ranked metric × every variant: a variant without a row gets NaN and the reason (the suite did not run
    it, or has no cell of it for that metric: a skip rule, a cell not run yet)."""
    grid = ranked[["suite", "metric", "column", "higher_is_better"]].drop_duplicates()
    grid = grid.merge(pd.DataFrame({"variant": list(variants)}), how="cross")
    out = grid.merge(ranked, on=["suite", "metric", "column", "higher_is_better", "variant"], how="left")
    absent = out["runs"].isna()
    out.loc[absent, "reason"] = ["not run by this suite" if v not in present[s] else "no cell"
                                 for s, v in zip(out.loc[absent, "suite"], out.loc[absent, "variant"], strict=True)]
    out["reason"] = out["reason"].fillna("")
    return out


def rank(suites: Sequence[SuiteResults]) -> Ranking:
    """The compositional index of every variant of ``suites`` (see the module docstring), best first.

    Raises:
        UserError: two DIRs are the same suite, or no metric has two variants with a value.
    """
    where = [s.directory.resolve() for s in suites]
    if len(set(where)) < len(where):
        raise UserError(f"--rank: a directory is given twice ({', '.join(map(str, where))}); give each suite once")
    labels = [s.label for s in suites]
    if len(set(labels)) < len(labels):  # one suite's results from two places are told apart by their directory
        labels = [str(s.directory) for s in suites]
    frames, descriptions, present, budgets = [], {}, {}, {}
    for label, suite in zip(labels, suites, strict=True):
        df, budgets[label] = at_defaults(suite.df)
        values, descriptions[label] = suite_metrics(df, label)
        frames.append(values)
        present[label] = set(_variant_names(_normalised(df)))
    variants = sorted(set().union(*present.values()))
    controls = [v for v in variants if is_control(v)]
    ranked, skipped = zscores(pd.concat(frames, ignore_index=True), controls)
    if ranked.empty:
        raise UserError("--rank: nothing to rank: no metric of these suites has a value for two variants; rank "
                        "suites that ran at least two variants")
    values = _complete(ranked, present, variants)
    table = _index_table(values, [s for s in labels if s in set(values["suite"])], variants, controls)
    return Ranking(table, values, skipped, labels, descriptions, dict(zip(labels, (s.directory for s in suites),
                                                                          strict=True)), _env(labels, suites),
                   {label: text for label, text in budgets.items() if text},
                   [v for v in table["variant"] if v in set(controls)],
                   {label: s.profile for label, s in zip(labels, suites, strict=True)})


def _index_table(values: pd.DataFrame, suites: Sequence[str], variants: Sequence[str],
                 controls: Sequence[str]) -> pd.DataFrame:
    """One row per variant: its suite indices (the means of its z-scores per suite), their mean (overall), its rank
    among the ranked variants (none for a control) and its coverage; the ranked variants best first, then the
    controls."""
    index = values.pivot_table(index="variant", columns="suite", values="z", aggfunc="mean")
    index = index.reindex(index=variants, columns=[s for s in suites if s in index.columns])
    table = index.reset_index()
    table.columns.name = None
    control = table["variant"].isin(list(controls))
    table.insert(1, "overall", index.mean(axis=1, skipna=True).to_numpy())
    table.insert(1, "rank", table["overall"].where(~control).rank(ascending=False, method="min").astype("Int64"))
    table["control"] = control
    table["suites_covered"] = index.notna().sum(axis=1).to_numpy()
    table["suites_total"] = len(index.columns)
    table["metrics_covered"] = values.groupby("variant")["z"].count().reindex(variants).to_numpy()
    table["metrics_total"] = len(values[["suite", "metric"]].drop_duplicates())
    return table.sort_values(["control", "overall", "variant"], ascending=[True, False, True], na_position="last",
                             ignore_index=True)


def _is_default(attention: str, budget: object) -> bool:
    """Whether an approximation cell's ``budget`` (``k=256``, ``n_hashes=1 bucket_size=32``, ``default``) is the
    attention's registered default configuration."""
    text = str(budget)
    if text in ("", "default", "nan", "None"):
        return True
    import attentions  # the registry (torch): only for a suite that sweeps budgets

    try:
        config = attentions.spec(attention).config
    except (KeyError, ValueError):
        return False
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    return bool(fields) and all(str(getattr(config, k, None)) == v for k, v in fields.items())


def at_defaults(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """An approximation suite's cells at each attention's registered defaults, and the other budgets in words.

    A budget is a setting of its variant, not a variant of its own: ranked beside each other, ``linformer (k=256)``
    would compete with ``linformer`` (the same layer) and a small window with its own default. So each variant is
    ranked at its defaults; one whose sweep never runs them is left out of that suite (and said so)."""
    if "budget" not in df.columns or "attention" not in df.columns or df.empty:
        return df, ""
    default = pd.Series([_is_default(a, b) for a, b in zip(df["attention"], df["budget"], strict=True)],
                        index=df.index)
    words = []
    for attention, rows in df[~default].groupby("attention", sort=True):
        missing = "" if default[df["attention"] == attention].any() else " (none at its defaults: not ranked here)"
        words.append(f"{attention}: {', '.join(sorted(set(map(str, rows['budget']))))}{missing}")
    # at its defaults a cell is the variant itself: `linformer`, not `linformer (k=256)`
    return df[default].assign(budget="default"), "; ".join(words)


def _env(labels: Sequence[str], suites: Sequence[SuiteResults]) -> dict[str, object]:
    """The newest run's environment, and every run behind the numbers, by suite (the footer's provenance)."""
    shown = {label: shown_env(s.runs) for label, s in zip(labels, suites, strict=True) if not s.runs.empty}
    if not shown:
        return {}
    newest = max(shown, key=lambda label: str(shown[label].get("time_utc", "")))
    return {**shown[newest], "runs": "; ".join(f"{label}: {env['runs']}" for label, env in shown.items())}


def _variant_names(df: pd.DataFrame) -> list[str]:
    """Each cell's variant as a name: the attention, then its other variant axes in parentheses, e.g.
    ``s3attention (r=1)`` or ``linformer (k=256)``; an approximation's budget "default" is the attention itself."""
    kind = _kind(df)
    axes = [a for a in VARIANT_AXES if a in df.columns]
    names = []
    for values in df[axes].itertuples(index=False, name=None):
        extras = [_value_text(kind, a, v) for a, v in zip(axes[1:], values[1:], strict=True)
                  if str(v) not in ("", "default", "nan")]
        names.append(f"{values[0]} ({', '.join(extras)})" if extras else str(values[0]))
    return names
