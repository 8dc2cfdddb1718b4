"""The accuracy studies' claims (Tables 5, 6, 7, S7) on constructed results: each reproduced, contradicted,
inconclusive."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.kinds.accuracy.claims import table5_claims, table6_claims, table7_claims, tableS7_claims
from harness.report.claims import CONTRADICTED, INCONCLUSIVE, REPRODUCED
from tests.harness.kinds.accuracy.test_studies import cells


def _noise(drops: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    """Image cells at a = 0 (accuracy 0.50) and a = 8, three seeds; ``drops`` = each model's accuracy loss per seed."""
    rows = []
    for attention, per_seed in drops.items():
        for seed, drop in enumerate(per_seed):
            rows += [(attention, 0, "train+test", seed, "ok", 0.50),
                     (attention, 8, "train+test", seed, "ok", 0.50 - drop)]
    return cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")


def _variants(accuracy: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    rows = [("s3attention", variant, task, seed, "ok", acc) for variant, per_seed in accuracy.items()
            for seed, acc in enumerate(per_seed) for task in ("text", "image")]
    return cells(rows, ["attention", "variant", "task", "seed", "status", "test_acc"])


@pytest.mark.parametrize(("drops", "s3_verdict", "vanilla_verdict"), [
    ({"vanilla": (0.10, 0.11, 0.12), "s3attention": (0.01, 0.02, 0.015), "linformer": (0.05, 0.06, 0.05)},
     REPRODUCED, REPRODUCED),
    ({"vanilla": (0.01, 0.02, 0.015), "s3attention": (0.10, 0.11, 0.12), "linformer": (0.05, 0.06, 0.05)},
     CONTRADICTED, CONTRADICTED),
    ({"vanilla": (0.05, 0.01, 0.09), "s3attention": (0.01, 0.09, 0.05), "linformer": (0.09, 0.05, 0.01)},
     INCONCLUSIVE, INCONCLUSIVE),
])
def test_table5_claims(drops: dict[str, tuple[float, float, float]], s3_verdict: str, vanilla_verdict: str) -> None:
    claims = {c.claim.split("Rule: ")[1].split()[0]: c for c in table5_claims(_noise(drops))}
    assert claims["s3attention"].verdict == s3_verdict and claims["vanilla"].verdict == vanilla_verdict
    assert "a = 8" in claims["s3attention"].claim and "vs linformer" in claims["s3attention"].measured
    assert claims["s3attention"].claim.startswith("“S3Attention remains robust with a high level of noise injection.”")
    assert "no `none` control ran" in claims["s3attention"].measured


def _with_control(models: dict[str, tuple[float, tuple[float, float, float]]]) -> pd.DataFrame:
    """Image cells at a = 0 and a = 8, three seeds: each model's accuracy at a = 0 and its loss per seed."""
    rows = []
    for attention, (clean, drops) in models.items():
        for seed, drop in enumerate(drops):
            jitter = 0.002 * seed  # seeds a little apart at a = 0
            rows += [(attention, 0, "train+test", seed, "ok", clean + jitter),
                     (attention, 8, "train+test", seed, "ok", clean + jitter - drop)]
    return cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")


def test_table5_compares_only_the_models_that_learned() -> None:
    """The review's case: the `none` control at chance loses nothing to noise, so "S3Attention loses the least" was
    `contradicted` by a model that never learned. Only models above the control at a = 0 take part now."""
    df = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "fnet": (0.101, (0.0, 0.001, 0.0)),
                        "s3attention": (0.50, (0.02, 0.03, 0.025)), "vanilla": (0.55, (0.10, 0.11, 0.12)),
                        "linformer": (0.52, (0.05, 0.06, 0.05))})
    claims = {c.claim.split("Rule: ")[1].split()[0]: c for c in table5_claims(df)}
    assert set(claims) == {"s3attention", "vanilla"}  # the control is no model of the claim
    for claim in claims.values():
        assert claim.verdict == REPRODUCED, claim
        assert "did not learn (not above the `none` control at a = 0 by more than the seed spread), left out: fnet" \
            in claim.measured and "vs none" not in claim.measured and "vs fnet" not in claim.measured


def test_table5_with_fewer_than_two_learners_is_inconclusive() -> None:
    df = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "vanilla": (0.10, (0.0, 0.001, 0.0)),
                        "s3attention": (0.50, (0.02, 0.03, 0.025))})
    claims = {c.claim.split("Rule: ")[1].split()[0]: c for c in table5_claims(df)}
    assert claims["s3attention"].verdict == INCONCLUSIVE
    assert claims["s3attention"].measured.startswith("fewer than two models learned")
    assert claims["vanilla"].verdict == INCONCLUSIVE  # vanilla itself did not learn


def test_table6_claims() -> None:
    sweeps = {"r": [(1, "r1"), (8, "base"), (16, "r16")], "s2": [(1, "s2_1"), (8, "base")]}
    df = _variants({"r1": (0.30, 0.31, 0.29), "base": (0.50, 0.52, 0.49), "r16": (0.51, 0.50, 0.52),
                    "s2_1": (0.60, 0.62, 0.61)})
    verdicts = {c.claim.split("Rule: ")[1].split()[0]: c.verdict for c in table6_claims(df, sweeps)}
    assert verdicts == {"r": REPRODUCED, "s2": CONTRADICTED}


def test_table7_claims() -> None:
    df = _variants({"base": (0.50, 0.52, 0.51), "no_col_attention": (0.30, 0.31, 0.29),
                    "no_row_attention": (0.45, 0.47, 0.46), "no_conv_stem": (0.49, 0.53, 0.52)})
    claims = table7_claims(df, ["base", "no_col_attention", "no_row_attention", "no_conv_stem"], "base")
    verdicts = {c.claim.split("Rule: ")[1].split(" (")[0]: c.verdict for c in claims}
    assert all(c.claim.startswith("“The performance-decreasing results indicate") for c in claims)
    # the stem removal is within noise of the base, so "every removal lowers" is not established
    assert verdicts == {"every removal lowers the Average": INCONCLUSIVE,
                        "removing column attention hurts most": REPRODUCED}


def test_tableS7_claims() -> None:
    def df(after: tuple[float, float, float]) -> pd.DataFrame:
        rows = [("s3attention", "text", seed, "ok", 0.5, 1.0, smooth) for seed, smooth in enumerate(after)]
        return cells(rows, ["attention", "task", "seed", "status", "test_acc", "mu_x_r8_mean", "mu_smooth_r8_mean"])

    assert tableS7_claims(df((0.70, 0.69, 0.71)), [8])[0].verdict == REPRODUCED  # 30% lower
    assert tableS7_claims(df((0.98, 0.97, 0.99)), [8])[0].verdict == CONTRADICTED  # 2% lower
    assert tableS7_claims(df((0.70, 0.95, 0.80)), [8])[0].verdict == INCONCLUSIVE


#: The paper's Table S7: μ_X and μ_X^smooth at ranks 32 and 16, per dataset (means over the validation examples).
PAPER_TABLE_S7 = {"text": {32: (2.75, 2.05), 16: (3.98, 3.23)}, "pathfinder": {32: (3.83, 1.99), 16: (4.88, 3.48)}}


def test_the_papers_own_table_S7_meets_its_sentence() -> None:
    """30.2% on average (Text 22.1%, Pathfinder 38.4%): reproduced, though Pathfinder at rank 32 alone (48%) lies
    outside [15, 45]% — the sentence speaks of the average, and the rule reads it so."""
    rows = [("s3attention", task, seed, "ok", 0.5, *(v for r in (32, 16) for v in (mu[r][0], mu[r][1] * _jitter(seed))))
            for task, mu in PAPER_TABLE_S7.items() for seed in range(3)]  # μ after smoothing a hair apart by seed
    columns = ["attention", "task", "seed", "status", "test_acc",
               "mu_x_r32_mean", "mu_smooth_r32_mean", "mu_x_r16_mean", "mu_smooth_r16_mean"]
    (claim,) = tableS7_claims(cells(rows, columns), [32, 16])
    assert claim.claim.startswith("“The average incoherence value was reduced 30%")
    assert claim.verdict == REPRODUCED, claim.measured
    for figure in ("average +30.26%", "pathfinder: +38.37%", "text: +22.15%"):
        assert figure in claim.measured


# ---------------------------------------------------------------------------------------------------------------------
# The paper's own Tables 5, 6 and 7 (§IV-E, §IV-F) through the rules: three seeds a hair apart around each printed mean

TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
#: Table 5: accuracy (%) at a = 0 and the relative change (%) at a = 8, as printed.
PAPER_TABLE5 = {"vanilla": (41.39, -32.18), "linformer": (38.43, -4.97), "reformer": (38.04, -8.37),
                "nystromformer": (41.52, -8.99), "performer": (42.66, -9.15), "s3attention": (57.47, -4.92)}
#: Table 6 (a) and (c), and Table 7's baseline and removals: accuracy (%) per task in LRA's order, as printed.
PAPER_TABLE6 = {
    "r1": (37.30, 65.25, 78.65, 51.36, 71.23), "base": (38.30, 69.27, 83.26, 53.90, 75.82),
    "r16": (38.62, 70.02, 83.21, 54.20, 76.15), "r32": (38.19, 69.27, 82.05, 53.73, 75.58),
    "r64": (37.89, 69.73, 81.79, 51.28, 75.52), "s2_1": (37.32, 55.28, 57.37, 40.97, 66.25),
    "s2_4": (37.82, 52.05, 72.58, 46.74, 73.17), "s2_16": (37.77, 70.24, 83.42, 54.11, 77.92),
    "s2_32": (37.62, 68.32, 80.11, 51.66, 78.18),
}
PAPER_TABLE7 = {"no_fourier_conv": (-0.47, -4.04, -13.98, -5.64, -6.59),
                "no_conv_stem": (-0.13, -0.55, -1.51, -1.76, -0.47),
                "no_col_attention": (-1.16, -8.00, -9.16, -10.63, -12.45),
                "no_row_attention": (-0.38, -1.92, -1.97, -2.64, -2.56)}


def _jitter(seed: int) -> float:
    return 1 + 1e-4 * (seed - 1)


def test_the_papers_own_table_5() -> None:
    """S3Attention −4.92% against Linformer's −4.97% at a = 8: "loses the least" by 0.05 points.

    The printed changes are means of per-replicate changes (as the rule computes them), so the fixture uses them;
    the printed accuracies alone (57.47 → 54.70, 38.43 → 36.65) give −4.82% and −4.63%, the opposite order.
    """
    rows = []
    for i, (attention, (clean, change)) in enumerate(PAPER_TABLE5.items()):
        for seed in range(3):
            acc0 = clean / 100 * _jitter(seed)
            wobble = 1e-5 * (seed - 1) * (i + 1)  # each model's seeds apart in their own way
            rows += [(attention, 0, "train+test", seed, "ok", acc0),
                     (attention, 8, "train+test", seed, "ok", acc0 * (1 + change / 100 + wobble))]
    df = cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")
    claims = {c.claim.split("Rule: ")[1].split()[0]: c for c in table5_claims(df)}
    assert claims["s3attention"].verdict == REPRODUCED and claims["vanilla"].verdict == REPRODUCED
    assert "vs linformer: +0.05 pts" in claims["s3attention"].measured


def test_the_papers_own_tables_6_and_7() -> None:
    variants = {**PAPER_TABLE6, **{v: tuple(b + d for b, d in zip(PAPER_TABLE6["base"], diffs, strict=True))
                                   for v, diffs in PAPER_TABLE7.items()}}
    rows = [("s3attention", variant, task, seed, "ok", acc / 100 * _jitter(seed))
            for variant, accs in variants.items() for task, acc in zip(TASKS, accs, strict=True) for seed in range(3)]
    df = cells(rows, ["attention", "variant", "task", "seed", "status", "test_acc"])
    sweeps = {"r": [(1, "r1"), (8, "base"), (16, "r16"), (32, "r32"), (64, "r64")],
              "s2": [(1, "s2_1"), (4, "s2_4"), (8, "base"), (16, "s2_16"), (32, "s2_32")]}
    assert {c.verdict for c in table6_claims(df, sweeps)} == {REPRODUCED}
    claims = table7_claims(df, ["base", *PAPER_TABLE7], "base")
    assert [c.verdict for c in claims] == [REPRODUCED, REPRODUCED]
