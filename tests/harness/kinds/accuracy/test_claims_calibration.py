"""The accuracy claims' rules as statistical tests: how often each reads `contradicted` at the claim's boundary, and
how often `reproduced` when the paper's own table is the truth, simulated with seed noise as our runs measure it.

Seed noise, all from docs/results/2026-11-25-amd-epyc-2core.md:
- Table 1 and Table 5 ("Quick accuracy run (Table 1)"): S3Attention's Average over seeds 85.17 (1.43), the spread of
  the claim's own model; on Image, vanilla 99.70 (0.42), the largest spread of a model that left the plateau (the
  others: 100.00 (0.00), 99.95 (0.07)). Each model's value per seed is drawn around the truth with that spread,
  independently of the other models'.
- Table S7 ("Quick studies", Table S7): the reduction of μ per seed at each rank, 2 seeds each, Text rank 32
  −17.97% [−42.40, +6.46] and rank 16 −54.42% [−221.49, +112.66], Pathfinder rank 32 +3.34% [−11.15, +17.82] and
  rank 16 −4.12% [−46.51, +38.26]. A 95% interval over 2 seeds is mean ± t(0.975, 1) · s / √2, so s = half-width ·
  √2 / 12.706; a dataset's figure is the mean over its two ranks, whose spread is √(s₃₂² + s₁₆²) / 2 taking the
  ranks as independent: Text 9.4 points, Pathfinder 2.5.

Each verdict is a t-test, so at a boundary its rate of `contradicted` does not depend on the spread; the power does.
Where the profile's seeds cannot give the paper's own table a majority of `reproduced` under these spreads, the test
says how many seeds can, and asserts it there.

Monte-Carlo error: each rate is a mean of TRIALS Bernoulli draws, so "at most 5%" is asserted as at most 5% plus
three standard errors of a 5% rate (:func:`tests.harness.report.test_claims.at_most`).
"""

from __future__ import annotations

import math

import numpy as np

from harness.kinds.accuracy.claims import (
    IMAGE_MARGIN_BOUND,
    PAPER_IMAGE,
    PAPER_TABLE5_S3,
    incoherence_verdicts,
    is_other_model,
    robust_bound,
    robust_verdicts,
)
from harness.report.claims import CONTRADICTED, REPRODUCED, STRONGER, several_verdicts
from harness.report.stats import t_intervals
from tests.harness.kinds.accuracy.test_claims import IMAGE_SEED_STD, PAPER_TABLE1, PAPER_TABLE5
from tests.harness.report.test_claims import TRIALS, at_most

#: S3Attention's Average: its spread over seeds in the quick Table 1 (points).
AVERAGE_SEED_STD = 1.43


def _spread(lo: float, hi: float) -> float:
    """The per-seed standard deviation behind a 95% t-interval over 2 seeds."""
    return (hi - lo) / 2 * math.sqrt(2) / 12.706


#: Each dataset's reduction of μ, averaged over ranks 32 and 16: its spread over seeds (points).
S7_SEED_STD = {"text": math.hypot(_spread(-42.40, 6.46), _spread(-221.49, 112.66)) / 2,
               "pathfinder": math.hypot(_spread(-11.15, 17.82), _spread(-46.51, 38.26)) / 2}
#: The paper's Table S7: each dataset's reduction (%) averaged over ranks 32 and 16, from its μ values
#: (tests/harness/kinds/accuracy/test_claims.py: PAPER_TABLE_S7).
PAPER_S7 = {"text": 22.15, "pathfinder": 38.37}


def _draw(rng: np.random.Generator, truth: np.ndarray, std: float | np.ndarray, seeds: int) -> np.ndarray:
    """Per-seed values around ``truth`` with spread ``std`` (broadcast with it): [TRIALS, ..., seeds]."""
    truth = np.asarray(truth, dtype=float)
    return truth[None, ..., None] + np.asarray(std)[..., None] * rng.standard_normal((TRIALS, *truth.shape, seeds))


# ---------------------------------------------------------------------------------------------------------------------
# Table 5


def _robustness(rng: np.random.Generator, change: float, seeds: int) -> np.ndarray:
    """The Table 5 rule's verdicts when S3Attention's true relative change at a = 8 is ``change`` (%) from the
    paper's 57.47 at a = 0; each accuracy with our Image seed noise."""
    clean = _draw(rng, np.float64(57.47), IMAGE_SEED_STD, seeds)
    noisy = _draw(rng, np.float64(57.47 * (1 + change / 100)), IMAGE_SEED_STD, seeds)
    return robust_verdicts(*t_intervals(100 * (noisy - clean) / clean), 8.0)


def test_table5_at_its_bound_contradicts_at_most_5_percent() -> None:
    rng = np.random.default_rng(10)
    for seeds in (3, 5):
        assert (_robustness(rng, robust_bound(8.0), seeds) == CONTRADICTED).mean() <= at_most(0.05), seeds


def test_table5_on_the_papers_own_table_is_reproduced_most_of_the_time() -> None:
    """The paper's −4.92% at a = 8 and its five replicates (the `paper` profile's five seeds). The old rule —
    S3Attention loses less than every other model — is also simulated on the same table: its 0.05-point margin over
    Linformer left it `reproduced` in a small minority of runs, though the paper is right."""
    rng = np.random.default_rng(11)
    verdicts = _robustness(rng, PAPER_TABLE5_S3[8.0], 5)
    assert (verdicts == REPRODUCED).mean() > 0.5
    assert (verdicts == CONTRADICTED).mean() <= at_most(0.05)
    changes = {}
    for model, (clean, change) in PAPER_TABLE5.items():
        a0 = _draw(rng, np.float64(clean), IMAGE_SEED_STD, 5)
        changes[model] = 100 * (_draw(rng, np.float64(clean * (1 + change / 100)), IMAGE_SEED_STD, 5) - a0) / a0
    s3 = changes.pop("s3attention")
    old = several_verdicts(*t_intervals(np.stack([s3 - c for c in changes.values()], axis=1)), above=True)
    assert (old == REPRODUCED).mean() < 0.25


# ---------------------------------------------------------------------------------------------------------------------
# Table S7


def _incoherence(rng: np.random.Generator, truth: dict[str, float], seeds: int) -> np.ndarray:
    values = np.stack([_draw(rng, np.float64(truth[d]), S7_SEED_STD[d], seeds) for d in PAPER_S7], axis=1)
    return incoherence_verdicts(*t_intervals(values))


def test_tableS7_at_the_bands_lower_edge_contradicts_at_most_5_percent() -> None:
    """Both datasets at once at 15% (half the claimed 30%): the worst case of the two parts' union."""
    rng = np.random.default_rng(12)
    for seeds in (5, 10):
        verdicts = _incoherence(rng, dict.fromkeys(PAPER_S7, 15.0), seeds)
        assert (verdicts == CONTRADICTED).mean() <= at_most(0.05), seeds


def test_tableS7_on_the_papers_own_table_needs_ten_seeds() -> None:
    """Text 22.15% and Pathfinder 38.37%. With the Text spread our quick run measured (9.4 points a seed, most of it
    at rank 16), the `paper` profile's five seeds leave Text's interval too wide to place in [15, 45]% most of the
    time; ten seeds place it there in most runs. Neither ever contradicts."""
    rng = np.random.default_rng(13)
    for seeds in (5, 10):
        verdicts = _incoherence(rng, PAPER_S7, seeds)
        assert (verdicts == CONTRADICTED).mean() <= at_most(0.05), seeds
    assert np.isin(_incoherence(rng, PAPER_S7, 10), [REPRODUCED, STRONGER]).mean() > 0.5


# ---------------------------------------------------------------------------------------------------------------------
# Table 1


OTHERS = [m for m in PAPER_TABLE1 if is_other_model(m)]


def _averages(rng: np.random.Generator, s3: float, seeds: int) -> np.ndarray:
    """The Average rule's verdicts (S3Attention minus each other model, paired by seed) when S3Attention's true
    Average is ``s3`` and every other model's the paper's."""
    others = np.array([np.mean(PAPER_TABLE1[m]) for m in OTHERS])
    difference = _draw(rng, np.float64(s3), AVERAGE_SEED_STD, seeds)[:, None] - _draw(rng, others, AVERAGE_SEED_STD,
                                                                                       seeds)
    return several_verdicts(*t_intervals(difference), above=True)


def test_table1_average_at_a_tie_contradicts_at_most_5_percent() -> None:
    """S3Attention's Average equal to the best other model's (Transformer-LS, 62.03; Luna 62.02 beside it)."""
    rng = np.random.default_rng(14)
    best = max(np.mean(PAPER_TABLE1[m]) for m in OTHERS)
    for seeds in (3, 10):
        assert (_averages(rng, best, seeds) == CONTRADICTED).mean() <= at_most(0.05), seeds


def test_table1_average_on_the_papers_own_table_needs_ten_seeds() -> None:
    """64.11 against 62.03 and 62.02: a 2.1-point margin, against a paired spread of 1.43 · √2 a seed. At the `paper`
    profile's three seeds the rule almost never establishes it (t(0.975, 2) = 4.3), and never contradicts it; ten
    seeds reproduce it most of the time."""
    rng = np.random.default_rng(15)
    s3 = float(np.mean(PAPER_TABLE1["s3attention"]))
    assert (_averages(rng, s3, 3) == CONTRADICTED).mean() <= at_most(0.05)
    assert (_averages(rng, s3, 10) == REPRODUCED).mean() > 0.5


def _image(rng: np.random.Generator, s3: float, seeds: int) -> np.ndarray:
    """The Image rule's verdicts: S3Attention's relative margin over each other model, paired by seed, above
    :data:`IMAGE_MARGIN_BOUND`, when S3Attention's true Image accuracy is ``s3``."""
    others = np.array([PAPER_TABLE1[m][3] for m in OTHERS])
    mine = _draw(rng, np.float64(s3), IMAGE_SEED_STD, seeds)[:, None]
    theirs = _draw(rng, others, IMAGE_SEED_STD, seeds)
    return several_verdicts(*t_intervals(100 * (mine - theirs) / theirs), above=True, bound=IMAGE_MARGIN_BOUND)


def test_table1_image_margin_at_its_bound_contradicts_at_most_5_percent() -> None:
    rng = np.random.default_rng(16)
    at_bound = PAPER_IMAGE["luna"] * (1 + IMAGE_MARGIN_BOUND / 100)
    for seeds in (3, 10):
        assert (_image(rng, at_bound, seeds) == CONTRADICTED).mean() <= at_most(0.05), seeds


def test_table1_image_margin_on_the_papers_own_table_is_reproduced_most_of_the_time() -> None:
    """53.90 against Luna's 47.86 (+12.6%, twice the bound) at the `paper` profile's three seeds."""
    rng = np.random.default_rng(17)
    verdicts = _image(rng, PAPER_IMAGE["s3attention"], 3)
    assert (verdicts == REPRODUCED).mean() > 0.5
    assert (verdicts == CONTRADICTED).mean() <= at_most(0.05)
