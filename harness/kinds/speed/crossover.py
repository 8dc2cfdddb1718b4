"""The efficiency crossover (CAB's "efficiency length"): the sequence length from which an attention variant is
faster, or leaner, than a baseline, read off curves fitted to a speed or memory suite's results.

**Model.** Each variant's median time per call (``time_ms_median``) and its peak memory (``peak_mem_bytes``) are
fitted against n by the variant's registry complexity (the ``complexity`` column): ``n^2`` → a + b·n + c·n²,
``n log n`` → a + b·n + c·n·log₂n, ``n`` → a + b·n, coefficients ≥ 0, in relative error because timing noise is
multiplicative (:mod:`harness.kinds.speed.scaling_fit` says why and how). Only ok cells with a finite positive value
enter, and a model needs as many measured lengths as terms; a variant that has fewer is reported as not measured,
with its failed cells.

**Crossover.** Over the lengths where both were measured, the smallest n from which the variant's fitted curve
stays below the baseline's up to the largest common length. ``always``: the fitted curve is below on the whole
range and the variant was also measured faster (leaner) at the first common length; where the fit is below
throughout but that first measured point is not, the measured points decide (``from n ≤ 512 (measured: slower at
256; fitted: always)``). ``never within lo–hi``: not below at the largest. Beyond the range only where the orders
make a crossing certain (a variant of lower order than the baseline, whose fitted leading coefficient is positive),
marked as extrapolated.

**Interval** (time): a 95% percentile bootstrap of :data:`N_BOOT` replicates (fixed seed), refitting both curves in
each. A cell's median is recomputed from its stored per-round samples resampled with replacement, with the same
round indices for every variant timed in the same interleaved group, so a drift of the machine moves variant and
baseline together, as it did when they were measured. A cell stored without samples is perturbed log-normally by
the standard error of its median, 1.2533·σ/√rounds with σ = (ln q75 − ln q25)/1.349 (normal theory), and a cell
without quartiles is held fixed. Peak memory is deterministic (allocator counts), so its interval is the estimate
itself and none is shown. A replicate in which the variant is ahead throughout counts as the lowest length, one in
which it never is (without a certain extrapolation) as +∞; the interval then reads ``[≤256, >4,096]``.

**Columns** of ``crossover.csv``: ``crossover_n`` is set for ``from`` and ``extrapolated`` verdicts (NaN
otherwise); ``crossover_lo``/``crossover_hi`` equal ``seq_len_min`` where the bound is "at or below the range" and
are ``inf`` where it is "never"; ``measured_from`` is the smallest common measured length from which every measured
point is ahead (NaN if the last one is not).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.files import atomic_write_text
from ...report.format import env_summary, escape, length_label, md_table, write_csv
from ...report.stats import CONFIDENCE
from .scaling_fit import DEFAULT_MODEL, MODEL_LABELS, MODEL_TERMS, crossing_lengths, fit_scaling, model_of

#: Baselines every variant is compared with, in order of preference for the plots' marks: ``vanilla_sdpa`` is the
#: speed suite's compare reference (the steadiest kernel here), ``vanilla`` the paper's Table 4 baseline.
COMPARE_BASELINES: tuple[str, ...] = ("vanilla_sdpa", "vanilla")
TIME_COLUMN, MEMORY_COLUMN = "time_ms_median", "peak_mem_bytes"
#: (results column, metric kind as in plots, word for "ahead", word for "behind").
_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (TIME_COLUMN, "time", "faster", "slower"), (MEMORY_COLUMN, "memory", "leaner", "heavier"))
FROM, ALWAYS, NEVER, EXTRAPOLATED = "from", "always", "never", "extrapolated"
NOT_MEASURED, BASELINE, NO_BASELINE = "not measured", "baseline", "baseline not measured"
CROSSOVER_COLUMNS: tuple[str, ...] = (
    "attention", "complexity", "model", "metric", "baseline", "verdict", "crossover_n", "crossover_lo",
    "crossover_hi", "seq_len_min", "seq_len_max", "measured_from", "measured", "interval", "n_boot", "failed", "text",
)

N_BOOT = 1000
_SEED = 0  # the same results always give the same interval


# ---------------------------------------------------------------------------------------------------------------------
# One group's series: measured lengths, values and bootstrap replicates per variant and metric.


@dataclass(frozen=True)
class _Series:
    """One variant's measurements of one metric: what is fitted, and what is said when it cannot be."""

    attention: str
    model: str
    complexity: str
    seq_len: np.ndarray
    values: np.ndarray
    replicates: np.ndarray | None  # [N_BOOT, m], None for memory
    method: str
    failed: str

    @property
    def fittable(self) -> bool:
        return np.unique(self.seq_len).size >= len(MODEL_TERMS[self.model])

    def reason(self) -> str:
        """Why the series cannot be fitted: ``2 ok lengths, the n^2 model needs 3; status oom at 2K, 4K``."""
        terms = len(MODEL_TERMS[self.model])
        lengths = f"{self.seq_len.size} ok length{'s' if self.seq_len.size != 1 else ''}"
        status = f"; status {self.failed}" if self.failed else ""
        return f"{lengths}, the {self.model} model needs {terms}{status}"


def _failed_text(sub: pd.DataFrame, column: str) -> str:
    """``oom at 2K, 4K; error at 512``: every cell of the variant that gives no value for ``column``."""
    by_status: dict[str, list[int]] = {}
    for row in sub.sort_values("seq_len").itertuples():
        value = getattr(row, column, math.nan)
        status = str(row.status)
        if status == "ok" and _positive(value):
            continue
        by_status.setdefault(status if status != "ok" else "no value", []).append(int(row.seq_len))
    return "; ".join(f"{s} at {', '.join(length_label(n) for n in ns)}" for s, ns in sorted(by_status.items()))


def _positive(value: object) -> bool:
    return isinstance(value, int | float | np.floating | np.integer) and math.isfinite(value) and value > 0


def _complexity(sub: pd.DataFrame) -> str:
    values = sub["complexity"].dropna() if "complexity" in sub.columns else pd.Series(dtype=object)
    return str(values.iloc[0]) if not values.empty else DEFAULT_MODEL


def _round_indices(ok: pd.DataFrame, samples: Mapping[tuple[str, str], Sequence[float]],
                   rng: np.random.Generator, n_boot: int) -> dict[str, np.ndarray]:
    """Per timing group, the resampled round indices [n_boot, rounds] shared by every variant timed in it; rounds
    are truncated to the shortest sample list of the group, as :func:`harness.report.stats.paired_ratio` pairs."""
    if "timing_group" not in ok.columns:
        return {}
    lengths: dict[str, int] = {}
    for row in ok.itertuples():
        s = samples.get((row.timing_group, row.attention))
        if isinstance(row.timing_group, str) and s is not None and len(s) >= 2 and np.all(np.isfinite(s)):
            lengths[row.timing_group] = min(lengths.get(row.timing_group, len(s)), len(s))
    return {g: rng.integers(0, k, size=(n_boot, k)) for g, k in sorted(lengths.items())}


def _time_replicates(ok: pd.DataFrame, samples: Mapping[tuple[str, str], Sequence[float]],
                     indices: Mapping[str, np.ndarray], rng: np.random.Generator,
                     n_boot: int) -> tuple[np.ndarray, str]:
    """Bootstrap replicates [n_boot, m] of the cells' medians (module docstring) and the method used."""
    columns, methods = [], set()
    for row in ok.itertuples():
        group = getattr(row, "timing_group", None)
        s = samples.get((group, row.attention)) if isinstance(group, str) else None
        if s is not None and group in indices:
            idx = indices[group]
            columns.append(np.median(np.asarray(s, dtype=float)[:idx.shape[1]][idx], axis=1))
            methods.add("rounds")
            continue
        q25, q75 = getattr(row, "time_ms_q25", math.nan), getattr(row, "time_ms_q75", math.nan)
        if _positive(q25) and _positive(q75) and q75 >= q25:
            rounds = getattr(row, "rounds", math.nan)
            k = float(rounds) if _positive(rounds) else 1.0  # without a count, the spread of one round: wider
            se = 1.2533 * (math.log(q75) - math.log(q25)) / 1.349 / math.sqrt(k)
            columns.append(row.time_ms_median * np.exp(se * rng.standard_normal(n_boot)))
            methods.add("quartiles")
        else:
            columns.append(np.full(n_boot, float(row.time_ms_median)))
            methods.add("fixed")
    method = "+".join(m for m in ("rounds", "quartiles", "fixed") if m in methods)
    return np.stack(columns, axis=1), method


def _series(df_group: pd.DataFrame, column: str, samples: Mapping[tuple[str, str], Sequence[float]],
            n_boot: int) -> dict[str, _Series]:
    """Every variant's series of ``column``; time gets bootstrap replicates paired through the timing groups."""
    rng = np.random.default_rng(_SEED)
    usable = df_group[(df_group["status"] == "ok") & (df_group[column] > 0)
                      & np.isfinite(df_group[column].astype(float))].sort_values(["attention", "seq_len"])
    indices = _round_indices(usable, samples, rng, n_boot) if column == TIME_COLUMN else {}
    out = {}
    for attention, sub in df_group.groupby("attention", sort=True):
        ok = usable[usable["attention"] == attention]
        complexity = _complexity(sub)
        replicates, method = None, "none (deterministic)"
        if column == TIME_COLUMN and not ok.empty:
            replicates, method = _time_replicates(ok, samples, indices, rng, n_boot)
        out[str(attention)] = _Series(
            str(attention), model_of(complexity), complexity, ok["seq_len"].to_numpy(dtype=float),
            ok[column].to_numpy(dtype=float), replicates, method, _failed_text(sub, column))
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Rows: one per (metric, baseline, variant).


def _approx(n: float) -> str:
    """Three significant digits with thousands separators (1834 → ``1,830``): two would print a ±1% interval
    around 2,000 as ``[2,000, 2,000]``."""
    return f"{float(f'{n:.3g}'):,.0f}"


def _exact(n: float) -> str:
    return f"{round(n):,}"


def _bound(value: float, lo: float, hi: float) -> str:
    if value <= lo:
        return f"≤{_exact(lo)}"
    return f">{_exact(hi)}" if math.isinf(value) else _approx(value)


def _measured_from(v: _Series, b: _Series) -> tuple[float, float, float, float]:
    """(smallest common measured length from which every measured point is ahead, NaN if the last one is not; the
    first and the last common length; the last common length where the variant is behind, NaN if none). All NaN
    when the two share no measured length."""
    common = np.intersect1d(v.seq_len, b.seq_len)
    if common.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    ahead = np.array([v.values[v.seq_len == n][0] < b.values[b.seq_len == n][0] for n in common])
    behind = np.flatnonzero(~ahead)
    if not ahead[-1]:
        start = math.nan
    else:
        start = float(common[behind[-1] + 1] if behind.size else common[0])
    last_behind = float(common[behind[-1]]) if behind.size else math.nan
    return start, float(common[0]), float(common[-1]), last_behind


def _row(v: _Series, b: _Series, ahead_word: str, behind_word: str) -> dict[str, object]:
    """The comparison of one variant with one baseline (both fittable)."""
    lo, hi = max(v.seq_len.min(), b.seq_len.min()), min(v.seq_len.max(), b.seq_len.max())
    row: dict[str, object] = {"seq_len_min": lo, "seq_len_max": hi}
    measured_from, first, last, last_behind = _measured_from(v, b)
    if not lo < hi or math.isnan(first) or first == last:
        return {**row, "verdict": NOT_MEASURED, "text": "not measured (fewer than two common measured lengths)"}
    point = crossing_lengths(fit_scaling(v.seq_len, v.values, v.complexity),
                             fit_scaling(b.seq_len, b.values, b.complexity), lo, hi)[0]
    if v.replicates is not None and b.replicates is not None:
        boot = crossing_lengths(fit_scaling(v.seq_len, v.replicates, v.complexity),
                                fit_scaling(b.seq_len, b.replicates, b.complexity), lo, hi)
        tail = 100 * (1 - CONFIDENCE) / 2
        # inverted_cdf picks sample values, so the ≤lo and +inf ends of the replicates stay exact
        q_lo, q_hi = (float(q) for q in np.percentile(boot, [tail, 100 - tail], method="inverted_cdf"))
        method = f"bootstrap ({'+'.join(sorted({v.method, b.method}))})"
    else:
        q_lo = q_hi = float(point)
        method = "none (deterministic)"
    interval = f" [{_bound(q_lo, lo, hi)}, {_bound(q_hi, lo, hi)}]" if q_lo != q_hi else ""
    span = f"{_exact(lo)}–{_exact(hi)}"
    if math.isnan(measured_from):
        measured = f"{behind_word} at {length_label(int(last))}"
    elif measured_from == first:
        measured = f"{ahead_word} at every common n"
    else:
        measured = f"{ahead_word} from {length_label(int(measured_from))}"

    if point <= lo and measured_from != first:
        # The fitted curve is below throughout but the first measured point is not (a model that cannot follow
        # the short lengths, or noise there): "always" would contradict a measurement, so the measured points decide.
        fitted = f"measured: {behind_word} at {length_label(int(last_behind))}; fitted: always{interval}"
        if math.isnan(measured_from):
            verdict, text, n = NEVER, f"never within {span} ({fitted})", math.nan
        else:
            verdict, text, n = FROM, f"from n ≤ {_exact(measured_from)} ({fitted})", measured_from
    elif point <= lo:
        verdict, text, n = ALWAYS, "always" + interval, math.nan
    elif math.isinf(point):
        verdict, text, n = NEVER, f"never within {span}{interval if math.isfinite(q_lo) else ''}", math.nan
    elif point <= hi:
        verdict, text, n = FROM, f"from n ≈ {_approx(point)}{interval}", point
    else:
        verdict, text, n = EXTRAPOLATED, f"> {_exact(hi)}, extrapolated ≈ {_approx(point)}{interval}", point
    return {**row, "verdict": verdict, "crossover_n": n, "crossover_lo": q_lo, "crossover_hi": q_hi,
            "measured_from": measured_from, "measured": measured, "interval": method, "text": text,
            "n_boot": 0 if v.replicates is None else v.replicates.shape[0]}


def _shown_columns(df_group: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """Metrics the group measured (every metric when no cell is ok, so its failures are reported)."""
    ok = df_group[df_group["status"] == "ok"]
    shown = [m for m in _METRICS if m[0] in df_group.columns and (ok.empty or ok[m[0]].notna().any())]
    return shown or list(_METRICS)


def group_crossovers(df_group: pd.DataFrame, *, group: Mapping[str, object], baselines: Sequence[str],
                     samples: Mapping[tuple[str, str], Sequence[float]] | None = None,
                     n_boot: int = N_BOOT) -> pd.DataFrame:
    """The crossover of every variant of one group against each baseline, for time and peak memory.

    Args:
        df_group: Results rows of one group (one row per attention and seq_len; columns ``attention``, ``seq_len``,
            ``status``, ``time_ms_median``, ``peak_mem_bytes``, optionally ``complexity``, ``time_ms_q25``,
            ``time_ms_q75``, ``rounds``, ``timing_group``).
        group: The group's key columns and values, copied to the front of every row.
        baselines: Attention names to compare with; a baseline not measured in the group gets rows saying so.
        samples: Per-round timing samples by (timing group, attention), for the time intervals.
        n_boot: Bootstrap replicates.

    Returns:
        One row per (metric, baseline, variant), every variant of the group included, columns ``group``'s keys then
        :data:`CROSSOVER_COLUMNS` (described in the module docstring).
    """
    samples = samples or {}
    # A suite that never measured a metric has no column for it: its rows then say "not measured".
    df_group = df_group.assign(**{c: math.nan for c, *_ in _METRICS if c not in df_group.columns})
    rows = []
    for column, _kind, ahead, behind in _shown_columns(df_group):
        series = _series(df_group, column, samples, n_boot)
        for baseline in baselines:
            b = series.get(baseline)
            for name, v in series.items():
                row: dict[str, object] = {"attention": name, "complexity": v.complexity, "model": MODEL_LABELS[v.model],
                                          "metric": column, "baseline": baseline, "failed": v.failed}
                if name == baseline:
                    row.update(verdict=BASELINE, text="— (baseline)")
                elif not v.fittable:
                    row.update(verdict=NOT_MEASURED, text=f"not measured ({v.reason()})")
                elif b is None or not b.fittable:
                    why = "not in the group" if b is None else b.reason()
                    row.update(verdict=NO_BASELINE, text=f"baseline not measured ({why})")
                else:
                    row.update(_row(v, b, ahead, behind))
                rows.append(row)
    frame = pd.DataFrame(rows, columns=list(CROSSOVER_COLUMNS))
    # Lengths and counts are integers; a row that compared nothing leaves them empty, not 0.
    frame = frame.astype({c: "Int64" for c in ("seq_len_min", "seq_len_max", "measured_from", "n_boot")})
    for key, value in reversed(list(group.items())):
        frame.insert(0, key, value)
    return frame


def crossover_baselines(attentions: Iterable[str], baseline: str) -> list[str]:
    """The baselines to compare with: :data:`COMPARE_BASELINES` and the suite's ``baseline``, those measured at
    all in ``attentions``; the suite's baseline alone (reported as not measured) when none is."""
    present = set(attentions)
    wanted = [b for b in dict.fromkeys((*COMPARE_BASELINES, baseline)) if b in present]
    return wanted or [baseline]


def plot_marks(table: pd.DataFrame, prefer: str | None = None) -> tuple[str | None, dict[str, dict[str, float]]]:
    """The crossovers a group's plots mark: against ``prefer`` (the suite's baseline, what the ratio figures divide
    by, so that a ring sits where a ratio line crosses 1) where some variant was compared with it, else against the
    first baseline of the table that was (the order of :data:`COMPARE_BASELINES`); only those within the measured
    range; by metric kind, then variant."""
    # A baseline that was not measured places no mark.
    measured = table[table["verdict"].isin([FROM, ALWAYS, NEVER, EXTRAPOLATED])]
    if measured.empty:
        return None, {}
    compared = list(dict.fromkeys(str(b) for b in measured["baseline"]))
    baseline = prefer if prefer in compared else compared[0]
    kinds = {column: kind for column, kind, _a, _b in _METRICS}
    marks: dict[str, dict[str, float]] = {}
    for row in table[(table["baseline"] == baseline) & (table["verdict"] == FROM)].itertuples():
        marks.setdefault(kinds[row.metric], {})[str(row.attention)] = float(row.crossover_n)
    return baseline, marks


# ---------------------------------------------------------------------------------------------------------------------
# Files.


HEADER = (
    "Each variant's median time and peak memory are fitted against n by its registry complexity, in relative error "
    "with non-negative coefficients (n² → a + b·n + c·n², n log n → a + b·n + c·n·log₂n, n → a + b·n). Crossover: "
    "the smallest n of the lengths both were measured at from which the variant's fitted curve stays below the "
    "baseline's; \"always\" = below throughout and measured ahead at the first length; beyond the range only where "
    "a lower order makes the crossing certain (\"extrapolated\"). Interval (time): 95% percentile bootstrap of "
    "{n_boot} refits, resampling the interleaved timing rounds with the same rounds for every variant of a timing "
    "group (cells without stored rounds: log-normal with the standard error of the median from the quartiles); "
    "≤lo = ahead throughout in some replicates, >hi = never. Peak memory is deterministic: no interval."
)


def crossover_markdown(table: pd.DataFrame, *, group_columns: Sequence[str],
                       title_of: Callable[[Mapping[str, object]], str], suite: str, env: Mapping[str, object],
                       n_boot: int = N_BOOT) -> str:
    """``crossover.md``: the header saying what was fitted and how the interval was made, then a table per group
    (variant, metric, baseline, crossover with its interval, the measured check, failed cells)."""
    parts = [f"### Efficiency crossover — {suite}", HEADER.format(n_boot=n_boot)]
    if table.empty:
        parts.append("No results.")
    for key, sub in table.groupby(list(group_columns), sort=True):
        group = dict(zip(group_columns, key if isinstance(key, tuple) else (key,), strict=True))
        header = ["Attention", "Complexity", "Metric", "vs", "Crossover [95% CI]", "Measured", "Failed cells"]
        rows = [[escape(str(r["attention"]), "md"), str(r["complexity"]),
                 "time" if r["metric"] == TIME_COLUMN else "memory", escape(str(r["baseline"]), "md"),
                 str(r["text"]), r["measured"] if isinstance(r["measured"], str) else "—", r["failed"] or "—"]
                for r in sub.to_dict("records")]
        parts.append(f"#### {title_of(group)}\n\n{md_table(header, rows, n_left=len(header))}")
    parts.append(f"_Environment: {env_summary(env)}_")
    return "\n\n".join(parts) + "\n"


def write_crossover(tables: Sequence[pd.DataFrame], out_dir: Path, *, group_columns: Sequence[str],
                    title_of: Callable[[Mapping[str, object]], str], suite: str,
                    env: Mapping[str, object], n_boot: int = N_BOOT) -> list[Path]:
    """Writes ``crossover.csv`` (every row at full precision) and ``crossover.md`` into ``out_dir``.

    Args:
        tables: :func:`group_crossovers` of each group.
        out_dir: Destination directory.
        group_columns: The key columns the tables start with.
        title_of: A group's title from its key (``harness.kinds.speed.report.group_title``).
        suite: Suite name, for the title.
        env: Environment, for the footer.
        n_boot: Bootstrap replicates the tables were made with, for the header.

    Returns:
        The two paths, CSV first.
    """
    frames = [t for t in tables if not t.empty]
    table = (pd.concat(frames, ignore_index=True) if frames
             else pd.DataFrame(columns=[*group_columns, *CROSSOVER_COLUMNS]))
    csv = write_csv(table[[*group_columns, *CROSSOVER_COLUMNS]], Path(out_dir) / "crossover.csv")
    md = crossover_markdown(table, group_columns=group_columns, title_of=title_of, suite=suite, env=env,
                            n_boot=n_boot)
    return [csv, atomic_write_text(Path(out_dir) / "crossover.md", md)]
