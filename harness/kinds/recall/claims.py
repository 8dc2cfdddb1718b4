"""Zoology's findings on MQAR, each checked by a rule that its own Figure 2 passes (a test runs the rules on the
figure's numbers, :data:`FIGURE2`).

Quoted verbatim: the paper's abstract (arXiv 2312.04927v1) and the authors' blog post of the same day, whose sentence
states the finding of Figure 2 in words; the caption of Figure 2 itself could not be read offline, so it is not
quoted. The rules:

1. **Attention recalls at every width** — the softmax baselines' recall is above :data:`SOLVED` at every (length,
   width) cell run: reproduced when every cell's 95% interval lies above it, contradicted when one lies below.
2. **The others need width that grows with the length** — for each other variant measured at two lengths, its recall
   at the narrowest width run at both falls from the shortest length to the longest (the Welch 95% interval of the
   fall above 0), where the softmax baseline's does not fall as much (the fall's interval against softmax's, above 0).
   Zoology's gated convolutions fall by 0.54 (BaseConv), 0.45 (Hyena) at d_model 64 between lengths 64 and 256; its
   attention by 0.01.

The ``none`` control (no mixing) bounds what a model learns from the query token and its position alone: it should
stay at chance, 1 / (V/2) for V/2 candidate values; its row says whether it did (within 2 points).

A quick profile's budget (fewer examples, epochs, widths) is not the paper's: its verdicts read ``consistent
(reduced budget)`` and ``inconsistent (reduced budget)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...report.claims import (
    CONTRADICTED,
    NOT_MEASURED,
    REPRODUCED,
    STRONGER,
    Claim,
    all_of_verdicts,
    sign_verdicts,
    write_claims,
)
from ...report.format import display_name
from ...report.stats import MIN_SEEDS, t_quantile
from .summary import summarise

#: Softmax attention in the zoo: the rows rule 1 is about, and the reference of rule 2.
SOFTMAX = ("vanilla", "vanilla_sdpa", "vanilla_xformers")
CONTROLS = ("none",)
#: Recall above this "solves" MQAR (Zoology stops training at 0.99; its attention reaches 0.97-0.98 at every cell).
SOLVED = 0.9
#: The control's recall may exceed chance by this much (2 points) and still be at chance.
CHANCE_SLACK = 0.02
ABSTRACT = ("“We perform an empirical and theoretical study of Mqar that elucidates differences in the "
            "parameter-efficiency of attention and gated-convolution recall.” (Zoology, abstract)")
BLOG = ("“to solve AR on longer and longer sequences, gated-convolutions needed more and more dimensionality (and, "
        "thus, FLOPs) while attention did not” (Zoology's authors, blog post of 11 Dec 2023, on Figure 2)")

#: Zoology's Figure 2, read off the published figure (assets/figure2.png of HazyResearch/zoology): MQAR accuracy by
#: architecture, sequence length (pairs = length / 16) and d_model 64, 128, 256, 512. Read to about ±0.02.
FIGURE2_WIDTHS = (64, 128, 256, 512)
FIGURE2: dict[str, dict[int, tuple[float, ...]]] = {
    "attention": {64: (0.98, 0.98, 0.98, 0.98), 128: (0.98, 0.98, 0.98, 0.98), 256: (0.97, 0.98, 0.98, 0.98),
                  512: (0.97, 0.97, 0.98, 0.98)},
    "hyena": {64: (0.51, 0.74, 0.83, 0.85), 128: (0.19, 0.62, 0.73, 0.83), 256: (0.06, 0.14, 0.53, 0.68),
              512: (0.02, 0.04, 0.11, 0.18)},
    "rwkv": {64: (0.74, 0.92, 0.96, 0.97), 128: (0.18, 0.50, 0.75, 0.91), 256: (0.06, 0.07, 0.66, 0.78),
             512: (0.02, 0.03, 0.16, 0.37)},
    "h3": {64: (0.91, 0.97, 0.97, 0.96), 128: (0.25, 0.72, 0.89, 0.75), 256: (0.05, 0.63, 0.61, 0.66),
           512: (0.02, 0.03, 0.03, 0.10)},
    "baseconv": {64: (0.69, 0.92, 0.94, 0.97), 128: (0.37, 0.61, 0.83, 0.95), 256: (0.15, 0.34, 0.80, 0.91),
                 512: (0.02, 0.03, 0.04, 0.70)},
}


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, int]:
    """(mean of a − mean of b, its 95% Welch interval, the smaller count): two independent sets of seeds; NaN and
    count 0 where one is empty."""
    if not len(a) or not len(b):
        return math.nan, math.nan, math.nan, 0
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(a.mean() - b.mean())
    n = int(min(len(a), len(b)))
    if n < 2:
        return diff, math.nan, math.nan, n
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff, n
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.975, max(1, int(math.floor(dof)))) * se
    return diff, diff - half, diff + half, n


def _seeds(summary: pd.DataFrame, runs: pd.DataFrame, name: str, task: tuple[int, int], d_model: int) -> list[float]:
    """The recall of ``name``'s ok seeds at one cell (a task: length and pairs), at the learning rate its summary
    chose."""
    def at(frame: pd.DataFrame) -> pd.Series:
        return ((frame["attention"] == name) & (frame["seq_len"] == task[0]) & (frame["num_kv_pairs"] == task[1])
                & (frame["d_model"] == d_model))

    row = summary[at(summary)]
    if row.empty:
        return []
    cell = runs[at(runs) & (runs["lr"] == row["lr"].iloc[0]) & (runs["status"] == "ok")]
    return cell["recall"].astype(float).tolist()


def attention_everywhere(summary: pd.DataFrame) -> list[Claim]:
    """Rule 1 for each softmax baseline that ran."""
    claims = []
    for name in [n for n in SOFTMAX if n in set(summary["attention"])]:
        rows = summary[summary["attention"] == name].sort_values(["seq_len", "d_model"])
        verdicts = sign_verdicts(rows["mean"], rows["lo"], rows["hi"], rows["n"], above=True, bound=SOLVED,
                                 comparisons=len(rows))
        # seeds that all recall the same (every one at 100%) give an interval of no width: unanimous above the bound
        unanimous = (rows["n"] >= MIN_SEEDS) & (rows["lo"] == rows["hi"]) & (rows["mean"] > SOLVED)
        verdicts = np.where(unanimous.to_numpy(), REPRODUCED, verdicts)
        verdict = str(all_of_verdicts(np.asarray(verdicts, dtype=object))[()])
        worst = rows.loc[rows["mean"].idxmin()]
        measured = (f"{display_name(name)}: lowest of {len(rows)} cell{'s' * (len(rows) != 1)} "
                    f"{100 * worst['mean']:.1f}% "
                    f"[{100 * worst['lo']:.1f}, {100 * worst['hi']:.1f}] at N {int(worst['seq_len'])}, d "
                    f"{int(worst['d_model'])}; rule: every cell above {100 * SOLVED:.0f}%")
        claims.append(Claim("Zoology Fig. 2", ABSTRACT, measured, verdict))
    return claims


def _tasks(summary: pd.DataFrame) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The shortest and the longest task of one pairs-per-length ratio (Figure 2's length / 16), the ratio with the
    most lengths; None where no ratio has two."""
    tasks = sorted({(int(n), int(p)) for n, p in summary[["seq_len", "num_kv_pairs"]].itertuples(index=False)})
    by_ratio: dict[float, list[tuple[int, int]]] = {}
    for n, p in tasks:
        by_ratio.setdefault(n / p, []).append((n, p))
    best = max(by_ratio.values(), key=len, default=[])
    return (best[0], best[-1]) if len(best) >= 2 else None


def width_grows_with_length(summary: pd.DataFrame, runs: pd.DataFrame) -> list[Claim]:
    """Rule 2 for each non-softmax variant with cells at two lengths (of one pairs-per-length ratio) and a common
    width; a variant without is "not measured"."""
    ends = _tasks(summary)
    if ends is None:
        return []
    short, long_ = ends
    reference = next((n for n in SOFTMAX if n in set(summary["attention"])), None)

    def widths(name: str, task: tuple[int, int]) -> set[int]:
        rows = summary[(summary["attention"] == name) & (summary["seq_len"] == task[0])
                       & (summary["num_kv_pairs"] == task[1])]
        return {int(d) for d in rows["d_model"]}

    claims = []
    for name in [n for n in summary["attention"].unique() if n not in SOFTMAX and n not in CONTROLS]:
        common = sorted(widths(name, short) & widths(name, long_))
        if not common:
            claims.append(Claim("Zoology Fig. 2", BLOG, f"{display_name(name)}: no width run at both N {short[0]} "
                                f"and {long_[0]}", NOT_MEASURED))
            continue
        d = common[0]
        fall = _welch(_seeds(summary, runs, name, short, d), _seeds(summary, runs, name, long_, d))
        parts = [sign_verdicts(*fall, above=True, bound=0.0, comparisons=2)[()]]
        words = (f"{display_name(name)} at d {d}: falls {100 * fall[0]:.1f} points [{_pts(fall)}] from N {short[0]} "
                 f"to {long_[0]}")
        if reference is not None:
            ref = _welch(_seeds(summary, runs, reference, short, d), _seeds(summary, runs, reference, long_, d))
            # the difference of two independent falls: a conservative interval (the ends of the two apart)
            more = (fall[0] - ref[0], fall[1] - ref[2], fall[2] - ref[1], min(fall[3], ref[3]))
            parts.append(sign_verdicts(*more, above=True, bound=0.0, comparisons=2)[()])
            words += f"; {display_name(reference)} falls {100 * ref[0]:.1f} [{_pts(ref)}]"
        claims.append(Claim("Zoology Fig. 2", BLOG, words,
                            str(all_of_verdicts(np.asarray(parts, dtype=object))[()])))
    return claims


def _pts(iv: tuple[float, float, float, int]) -> str:
    return "—" if not math.isfinite(iv[1]) else f"{100 * iv[1]:.1f}, {100 * iv[2]:.1f}"


def control_at_chance(summary: pd.DataFrame, vocab_size: int) -> list[Claim]:
    """The ``none`` control's recall against chance (1 / (V/2)), at every cell it ran."""
    rows = summary[summary["attention"].isin(CONTROLS)]
    if rows.empty:
        return []
    chance = 1 / (vocab_size // 2)
    verdicts = sign_verdicts(rows["mean"], rows["lo"], rows["hi"], rows["n"], above=False,
                             bound=chance + CHANCE_SLACK, comparisons=len(rows))
    verdict = str(all_of_verdicts(np.asarray(verdicts, dtype=object))[()])
    best = rows.loc[rows["mean"].idxmax()]
    return [Claim("control", "without mixing, a model cannot recall (chance: 1 / (V/2))",
                  f"{display_name('none')}: highest {100 * best['mean']:.2f}% [{100 * best['lo']:.2f}, "
                  f"{100 * best['hi']:.2f}] of {len(rows)} cell{'s' * (len(rows) != 1)}; chance {100 * chance:.3f}%",
                  verdict)]


#: The verdict words of a reduced budget (a quick profile): a verdict about this budget, not the paper's.
REDUCED = {REPRODUCED: "consistent (reduced budget)", CONTRADICTED: "inconsistent (reduced budget)",
           STRONGER: "consistent (reduced budget)"}


def recall_claims(summary: pd.DataFrame, out_dir: Path, *, suite: str, smoke: bool, reduced: bool,
                  runs: pd.DataFrame | None = None, vocab_size: int = 8192) -> list[Path]:
    """``claims.md`` of a recall suite (rules 1 and 2 and the control, see the module docstring)."""
    runs = runs if runs is not None else pd.DataFrame(columns=["attention", "seq_len", "d_model", "lr", "recall"])
    claims = [*attention_everywhere(summary), *width_grows_with_length(summary, runs),
              *control_at_chance(summary, vocab_size)]
    seeds = int(summary["n"].max()) if len(summary) else None
    return write_claims(out_dir, claims, suite=suite, smoke=smoke, seeds=seeds, words=REDUCED if reduced else None,
                        without="no softmax baseline, no other variant at two lengths and no control ran")


def figure2_frame(noise: float = 0.01, seeds: int = MIN_SEEDS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, runs) of Zoology's Figure 2 as this suite's reports hold them: ``seeds`` runs a cell at the paper's
    value ± ``noise`` (a spread of seeds), one learning rate. Zoology's attention stands as ``vanilla``."""
    records = []
    for arch, by_length in FIGURE2.items():
        name = "vanilla" if arch == "attention" else arch
        for seq_len, values in by_length.items():
            for d, value in zip(FIGURE2_WIDTHS, values, strict=True):
                for s in range(seeds):
                    records.append({"attention": name, "seq_len": seq_len, "num_kv_pairs": seq_len // 16,
                                    "d_model": d, "lr": 1e-3, "seed": s, "status": "ok",
                                    "recall": value + noise * (s - (seeds - 1) / 2), "state_bytes": math.nan,
                                    "step_ms": math.nan})
    runs = pd.DataFrame.from_records(records)
    return summarise(runs), runs
