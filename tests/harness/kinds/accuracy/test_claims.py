"""The accuracy studies' claims (Tables 5, 6, 7, S7) on constructed results: each reproduced, contradicted,
inconclusive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.kinds.accuracy.claims import (
    QUOTE_TABLE5,
    QUOTE_TABLE6,
    QUOTE_TABLE7,
    table1_claims,
    table5_claims,
    table6_claims,
    table7_claims,
    tableS7_claims,
)
from harness.kinds.accuracy.table1 import write_accuracy_reports
from harness.report.claims import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, REPRODUCED, STRONGER
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


@pytest.mark.parametrize(("drops", "verdict"), [
    ({"vanilla": (0.10, 0.11, 0.12), "s3attention": (0.01, 0.02, 0.015)}, REPRODUCED),  # −2% to −4%
    ({"vanilla": (0.01, 0.02, 0.015), "s3attention": (0.10, 0.11, 0.12)}, CONTRADICTED),  # −20% to −24%
    ({"vanilla": (0.05, 0.01, 0.09), "s3attention": (0.01, 0.09, 0.05)}, INCONCLUSIVE),  # −2% to −18%
])
def test_table5_claims(drops: dict[str, tuple[float, float, float]], verdict: str) -> None:
    (claim,) = table5_claims(_noise(drops))  # S3Attention's robustness alone: the sentence names no other model
    assert claim.verdict == verdict, claim.measured
    assert claim.claim.startswith("“S3Attention remains robust with a high level of noise injection.” (§IV-E, Table 5)")
    assert "a = 8" in claim.claim and "more than -7.38%" in claim.claim
    assert "no `none` control ran, so whether S3Attention learned is not known" in claim.measured


def _with_control(models: dict[str, tuple[float, tuple[float, float, float]]]) -> pd.DataFrame:
    """Image cells at a = 0 and a = 8, three seeds: each model's accuracy at a = 0 and its loss per seed."""
    rows = []
    for attention, (clean, drops) in models.items():
        for seed, drop in enumerate(drops):
            jitter = 0.002 * seed  # seeds a little apart at a = 0
            rows += [(attention, 0, "train+test", seed, "ok", clean + jitter),
                     (attention, 8, "train+test", seed, "ok", clean + jitter - drop)]
    return cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")


def test_table5_needs_s3attention_to_have_learned() -> None:
    """A model at chance loses nothing to noise: S3Attention no better than the `none` control at a = 0 is no
    evidence of robustness, whoever else learned. The old words said "fewer than two models learned" though vanilla
    and Linformer had, and "no `none` control ran" (``all()`` of no model) though it ran."""
    df = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "vanilla": (0.55, (0.10, 0.11, 0.12)),
                        "linformer": (0.52, (0.05, 0.06, 0.05)), "s3attention": (0.101, (0.0, 0.001, 0.0))})
    (claim,) = table5_claims(df)
    assert claim.verdict == INCONCLUSIVE
    assert claim.measured.startswith("S3Attention did not learn: at a = 0 not above the `none` control")
    assert "fewer than two" not in claim.measured and "no `none` control ran" not in claim.measured
    nobody = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "vanilla": (0.10, (0.0, 0.001, 0.0)),
                            "s3attention": (0.101, (0.0, 0.001, 0.0))})  # no model learned; the control ran
    (claim,) = table5_claims(nobody)
    assert claim.verdict == INCONCLUSIVE and "no `none` control ran" not in claim.measured


def test_table5_with_the_control_says_s3attention_learned() -> None:
    df = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "fnet": (0.101, (0.0, 0.001, 0.0)),
                        "s3attention": (0.50, (0.02, 0.025, 0.022))})
    (claim,) = table5_claims(df)
    assert claim.verdict == REPRODUCED, claim.measured  # −4% to −5% of 0.50: above −7.38%
    assert "above the `none` control at a = 0 by more than the seed spread" in claim.measured
    assert "no `none` control ran" not in claim.measured


def test_table5_says_which_of_the_two_has_no_clean_result() -> None:
    """The control's row is in the table (it ran at a = 8), but its clean cells failed: the claim must say that,
    not that no control ran."""
    df = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "s3attention": (0.50, (0.02, 0.025, 0.022))})
    df.loc[(df["attention"] == "none") & (df["noise"] == 0), "status"] = "error"
    (claim,) = table5_claims(df)
    assert "the `none` control has no ok result at a = 0 (error)" in claim.measured
    assert "no `none` control ran" not in claim.measured
    (claim,) = table5_claims(df[df["attention"] != "none"])
    assert "no `none` control ran, so whether S3Attention learned is not known" in claim.measured


def test_claims_a_profile_cannot_judge_say_so_and_name_what_can() -> None:
    """A hyperparams smoke run varies r and s2 over 4 and 8 only: Table 6's claims are rows saying so (and naming
    the profiles that vary them from 1), never an absent claims.md."""
    sweeps = {"r": [(4, "r4"), (8, "base")], "s2": [(4, "s2_4"), (8, "base")]}
    df = _variants({"r4": (0.30, 0.31, 0.29), "base": (0.50, 0.52, 0.49), "s2_4": (0.60, 0.62, 0.61)})
    claims = table6_claims(df, sweeps)
    assert [c.verdict for c in claims] == [NOT_MEASURED, NOT_MEASURED]
    assert "the sweep holds no r = 1 (here r: 4, 8)" in claims[0].measured
    assert "suites/hyperparams.yaml vary r from 1" in claims[0].measured
    (row,) = table7_claims(df, ["base"], "base")
    assert row.verdict == NOT_MEASURED and "suites/ablation.yaml" in row.measured
    (row,) = tableS7_claims(df, [8])
    assert row.verdict == NOT_MEASURED and "suites/incoherence.yaml" in row.measured
    clean = _with_control({"none": (0.10, (0.0, 0.0, 0.0)), "s3attention": (0.5, (0.0, 0.0, 0.0))})
    (row,) = table5_claims(clean[clean["noise"] == 0])
    assert row.verdict == NOT_MEASURED and "suites/robustness.yaml" in row.measured


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
    assert tableS7_claims(df((0.40, 0.41, 0.39)), [8])[0].verdict == STRONGER  # 60% lower: more than the paper's


def test_tableS7_applies_the_band_to_each_dataset() -> None:
    """"In both datasets": Text 1% lower and Pathfinder 59% lower average 30%, and each is above 0, which read
    `reproduced`; Text is nowhere near 30%."""
    rows = [("s3attention", task, seed, "ok", 0.5, 1.0, smooth) for task, after in
            (("text", (0.990, 0.989, 0.991)), ("pathfinder", (0.41, 0.40, 0.42))) for seed, smooth in enumerate(after)]
    (claim,) = tableS7_claims(cells(rows, ["attention", "task", "seed", "status", "test_acc", "mu_x_r8_mean",
                                           "mu_smooth_r8_mean"]), [8])
    assert claim.verdict == CONTRADICTED, claim.measured
    assert "text: +1.00% [+0.75, +1.25]" in claim.measured and "2 datasets" in claim.measured
    assert "in each dataset" in claim.claim


#: The paper's Table S7: μ_X and μ_X^smooth at ranks 32 and 16, per dataset (means over the validation examples).
PAPER_TABLE_S7 = {"text": {32: (2.75, 2.05), 16: (3.98, 3.23)}, "pathfinder": {32: (3.83, 1.99), 16: (4.88, 3.48)}}


def test_the_papers_own_table_S7_meets_its_sentence() -> None:
    """Text 22.1% and Pathfinder 38.4%, each within [15, 45]%: reproduced, though Pathfinder at rank 32 alone (48%)
    lies outside the band — the sentence speaks of each dataset's average, and the rule reads it so."""
    rows = [("s3attention", task, seed, "ok", 0.5, *(v for r in (32, 16) for v in (mu[r][0], mu[r][1] * _jitter(seed))))
            for task, mu in PAPER_TABLE_S7.items() for seed in range(3)]  # μ after smoothing a hair apart by seed
    columns = ["attention", "task", "seed", "status", "test_acc",
               "mu_x_r32_mean", "mu_smooth_r32_mean", "mu_x_r16_mean", "mu_smooth_r16_mean"]
    (claim,) = tableS7_claims(cells(rows, columns), [32, 16])
    assert claim.claim.startswith("“The average incoherence value was reduced 30%")
    assert claim.verdict == REPRODUCED, claim.measured
    for figure in ("pathfinder: +38.37%", "text: +22.15%"):
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


#: Seed noise of an Image accuracy (points) as our runs measure it: the largest spread over seeds on the Image task of
#: a model that left its plateau in the quick Table 1 (docs/results/2026-11-25-amd-epyc-2core.md, vanilla 99.70
#: (0.42)). The paper's own Table 1 prints 1.54 for S3Attention on Image.
IMAGE_SEED_STD = 0.42
#: Five values of mean 0 and sample standard deviation 1, and another order of them: seeds spread as a sample of
#: realistic noise is, without a random draw (the a = 8 cells are not the a = 0 cells shifted).
SPREAD = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / np.sqrt(2.5)
SPREAD_OTHER = SPREAD[[3, 0, 4, 2, 1]]


def test_the_papers_own_table_5_with_realistic_seed_noise() -> None:
    """The paper's Table 5 over its five replicates, each accuracy spread over the seeds by our Image seed noise.
    The old rule asked S3Attention to lose the least of all models, which its 0.05-point margin over Linformer (and
    the printed accuracies, which order them the other way) cannot show: `inconclusive`; its test passed on seeds
    1e-5 apart. The sentence says S3Attention remains robust, and its −4.92% does."""
    rows = []
    for attention, (clean, change) in PAPER_TABLE5.items():
        for seed, (z0, z8) in enumerate(zip(SPREAD, SPREAD_OTHER, strict=True)):
            rows += [(attention, 0, "train+test", seed, "ok", (clean + IMAGE_SEED_STD * z0) / 100),
                     (attention, 8, "train+test", seed, "ok", (clean * (1 + change / 100) + IMAGE_SEED_STD * z8) / 100)]
    df = cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")
    (claim,) = table5_claims(df)
    assert claim.verdict == REPRODUCED, claim.measured
    assert "change at a = 8: -4.92%" in claim.measured


def test_the_quotes_cite_the_papers_sections() -> None:
    """Table 5's sentence is in §IV-E (Robustness Analysis), Table 7's in §IV-H (Ablation Study)."""
    assert QUOTE_TABLE5.endswith("(§IV-E, Table 5)") and QUOTE_TABLE7.endswith("(§IV-H, Table 7)")
    assert all(q.endswith("Table 6(a))") or q.endswith("Table 6(c))") for q in QUOTE_TABLE6.values())
    assert "(§IV-F" in QUOTE_TABLE6["r"]


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


# ---------------------------------------------------------------------------------------------------------------------
# Table 1 (§IV-A): the headline claims

#: The paper's Table 1 as printed: accuracy (%) per task in LRA's order, per model under its registered name.
PAPER_TABLE1 = {
    "vanilla": (36.37, 64.27, 57.46, 42.44, 71.40), "local": (15.82, 52.98, 53.39, 41.46, 66.63),
    "sparse_transformer": (17.07, 63.58, 59.59, 44.24, 71.71), "longformer": (35.63, 62.85, 56.89, 42.22, 69.71),
    "linformer": (35.70, 53.94, 52.27, 38.56, 76.34), "reformer": (37.27, 56.10, 53.40, 38.07, 68.50),
    "sinkhorn": (33.67, 61.20, 53.83, 41.23, 67.45), "synthesizer": (36.99, 61.68, 54.67, 41.61, 69.45),
    "bigbird": (36.05, 64.02, 59.29, 40.83, 74.87), "linear_transformer": (16.13, 65.90, 53.09, 42.34, 75.30),
    "performer": (18.01, 65.40, 53.82, 42.77, 77.05), "nystromformer_lra": (37.34, 65.75, 81.29, 41.58, 70.94),
    "h_transformer_1d": (49.53, 78.69, 63.99, 46.05, 68.78), "transformer_ls": (38.36, 68.40, 81.85, 45.05, 76.48),
    "fnet": (35.33, 65.11, 59.61, 38.67, 77.08), "luna": (38.01, 65.78, 79.56, 47.86, 78.89),
    "fmmformer": (36.74, 67.84, 81.88, 45.10, 72.12), "ponet": (38.80, 69.82, 80.35, 46.88, 70.39),
    "cosformer": (37.9, 63.41, 61.36, 43.17, 70.33), "scatterbrain": (38.6, 64.55, 80.22, 43.65, 69.91),
    "s3attention": (38.30, 69.27, 83.26, 53.90, 75.82),
}


def _table1(table: dict[str, tuple[float, ...]]) -> pd.DataFrame:
    """Three seeds around each printed accuracy, each model's a hair apart in its own way (so that paired
    differences have some width)."""
    rows = [(attention, task, seed, "ok", (acc + 1e-3 * (seed - 1) * (i + 1)) / 100)
            for i, (attention, accs) in enumerate(table.items())
            for task, acc in zip(TASKS, accs, strict=True) for seed in range(3)]
    return cells(rows, ["attention", "task", "seed", "status", "test_acc"])


def test_the_papers_own_table_1_meets_its_headline_sentences() -> None:
    """64.11 against Transformer-LS's 62.03 (the best other average), and on Image 53.90 against Luna's 47.86,
    +12.6% relative: both sentences of §IV-A hold on their own table (seeds a hair apart around it)."""
    average, image = table1_claims(_table1(PAPER_TABLE1))
    assert average.claim.startswith("“S3Attention achieves the highest 66.08% average accuracy with tuned parameters")
    assert average.verdict == REPRODUCED and "vs transformer_ls: +2.08 pts" in average.measured
    assert "20 comparisons over 3 seeds" in average.measured
    assert image.claim.startswith("“In particular, S3Attention significantly outperforms the benchmarks on Image")
    assert image.verdict == REPRODUCED and "vs luna: +12.62%" in image.measured
    assert "more than 6.3% relative" in image.claim


def test_table1_claims_are_contradicted_by_a_better_model_but_not_by_controls_or_presets() -> None:
    better = {**PAPER_TABLE1, "luna": (48.0, 75.0, 85.0, 60.0, 80.0)}  # above S3Attention everywhere
    assert [c.verdict for c in table1_claims(_table1(better))] == [CONTRADICTED, CONTRADICTED]
    others = {"s3attention": PAPER_TABLE1["s3attention"], "vanilla": PAPER_TABLE1["vanilla"],
              "s3attention_released": (48.0, 75.0, 85.0, 60.0, 80.0), "none": (48.0, 75.0, 85.0, 60.0, 80.0)}
    average, _ = table1_claims(_table1(others))
    assert average.verdict == REPRODUCED and "vs vanilla" in average.measured and "vs none" not in average.measured
    (alone,) = table1_claims(_table1({"s3attention": PAPER_TABLE1["s3attention"]}))
    assert alone.verdict == NOT_MEASURED and "not judged: needs S3Attention and another model" in alone.measured


def test_table1_claims_are_written_with_the_table_and_two_seeds_say_no_verdict(tmp_path: Path) -> None:
    """An accuracy suite's report writes Table 1's claims into claims.md; a run of two seeds (every quick profile)
    says once that it cannot reach a verdict, and which profile can."""
    two = _table1(PAPER_TABLE1).query("seed < 2")
    write_accuracy_reports(two, pd.DataFrame(), tmp_path, env={}, suite="acc", plots=False)
    text = (tmp_path / "claims.md").read_text()
    assert text.count("| Table 1 |") == 2 and text.count("These results rest on 2 seeds") == 1
    assert "`paper` profile" in text and "**inconclusive**" in text
    write_accuracy_reports(_table1(PAPER_TABLE1), pd.DataFrame(), tmp_path, env={}, suite="acc", plots=False)
    assert "These results rest on" not in (tmp_path / "claims.md").read_text()
