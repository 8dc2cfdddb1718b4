"""The verdict logic of claims.md on constructed results: each claim reproduced, contradicted and inconclusive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.report.claims import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_MEASURED,
    REPRODUCED,
    all_of,
    band_verdict,
    sign_verdict,
    speed_claims,
    table5_claims,
    table6_claims,
    table7_claims,
    tableS7_claims,
    write_claims,
)
from harness.report.stats import Interval, t_interval
from tests.harness.kinds.accuracy.test_studies import cells


@pytest.mark.parametrize(("iv", "above", "verdict"), [
    (Interval(2.0, 1.0, 3.0, 3), True, REPRODUCED),
    (Interval(2.0, 1.0, 3.0, 3), False, CONTRADICTED),
    (Interval(0.5, -1.0, 2.0, 3), True, INCONCLUSIVE),
    (Interval(2.0, float("nan"), float("nan"), 1), True, INCONCLUSIVE),  # one seed: no interval
    (None, True, NOT_MEASURED),
])
def test_sign_verdict(iv: Interval | None, above: bool, verdict: str) -> None:
    assert sign_verdict(iv, above) == verdict


def test_band_verdict_and_all_of() -> None:
    assert band_verdict(Interval(30, 25, 35, 3), 30) == REPRODUCED
    assert band_verdict(Interval(5, 2, 8, 3), 30) == CONTRADICTED  # wholly below 15%
    assert band_verdict(Interval(20, 5, 35, 3), 30) == INCONCLUSIVE
    assert all_of([REPRODUCED, REPRODUCED]) == REPRODUCED
    assert all_of([REPRODUCED, INCONCLUSIVE]) == INCONCLUSIVE
    assert all_of([REPRODUCED, CONTRADICTED, INCONCLUSIVE]) == CONTRADICTED
    assert all_of([NOT_MEASURED]) == NOT_MEASURED


def test_t_interval_matches_the_closed_form() -> None:
    iv = t_interval([1.0, 2.0, 3.0])  # mean 2, s = 1, t(0.975, 2) = 4.303
    assert iv is not None and iv.mean == 2.0 and np.isclose(iv.hi - 2.0, 4.303 / np.sqrt(3))
    assert t_interval([5.0]).n == 1 and t_interval([]) is None


def _noise(drops: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    """Image cells at a = 0 (accuracy 0.50) and a = 8, three seeds; ``drops`` = each model's accuracy loss per seed."""
    rows = []
    for attention, per_seed in drops.items():
        for seed, drop in enumerate(per_seed):
            rows += [(attention, 0, "train+test", seed, "ok", 0.50),
                     (attention, 8, "train+test", seed, "ok", 0.50 - drop)]
    return cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")


@pytest.mark.parametrize(("drops", "s3_verdict", "vanilla_verdict"), [
    ({"vanilla": (0.10, 0.11, 0.12), "s3attention": (0.01, 0.02, 0.015), "linformer": (0.05, 0.06, 0.05)},
     REPRODUCED, REPRODUCED),
    ({"vanilla": (0.01, 0.02, 0.015), "s3attention": (0.10, 0.11, 0.12), "linformer": (0.05, 0.06, 0.05)},
     CONTRADICTED, CONTRADICTED),
    ({"vanilla": (0.05, 0.01, 0.09), "s3attention": (0.01, 0.09, 0.05), "linformer": (0.09, 0.05, 0.01)},
     INCONCLUSIVE, INCONCLUSIVE),
])
def test_table5_claims(drops: dict[str, tuple[float, float, float]], s3_verdict: str, vanilla_verdict: str) -> None:
    claims = {c.claim.split()[0]: c for c in table5_claims(_noise(drops))}
    assert claims["s3attention"].verdict == s3_verdict and claims["vanilla"].verdict == vanilla_verdict
    assert "a = 8" in claims["s3attention"].claim and "vs linformer" in claims["s3attention"].measured


def _variants(accuracy: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    rows = [("s3attention", variant, task, seed, "ok", acc) for variant, per_seed in accuracy.items()
            for seed, acc in enumerate(per_seed) for task in ("text", "image")]
    return cells(rows, ["attention", "variant", "task", "seed", "status", "test_acc"])


def test_table6_claims() -> None:
    sweeps = {"r": [(1, "r1"), (8, "base"), (16, "r16")], "s2": [(1, "s2_1"), (8, "base")]}
    df = _variants({"r1": (0.30, 0.31, 0.29), "base": (0.50, 0.52, 0.49), "r16": (0.51, 0.50, 0.52),
                    "s2_1": (0.60, 0.62, 0.61)})
    verdicts = {c.claim.split()[0]: c.verdict for c in table6_claims(df, sweeps)}
    assert verdicts == {"r": REPRODUCED, "s2": CONTRADICTED}


def test_table7_claims() -> None:
    df = _variants({"base": (0.50, 0.52, 0.51), "no_col_attention": (0.30, 0.31, 0.29),
                    "no_row_attention": (0.45, 0.47, 0.46), "no_conv_stem": (0.49, 0.53, 0.52)})
    claims = table7_claims(df, ["base", "no_col_attention", "no_row_attention", "no_conv_stem"], "base")
    verdicts = {c.claim.split(" (")[0]: c.verdict for c in claims}
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


def test_speed_claims_and_claims_file(tmp_path: Path) -> None:
    def df(s3_speedups: tuple[tuple[float, float, float], ...], s3_mem: tuple[float, float]) -> pd.DataFrame:
        rows = []
        for (n, (value, lo, hi)), mem in zip(zip((1024, 4096), s3_speedups, strict=True), s3_mem, strict=True):
            rows += [{"attention": "vanilla", "seq_len": n, "status": "ok", "mode": "fwd", "peak_mem_bytes": 100.0,
                      "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0},
                     {"attention": "s3attention", "seq_len": n, "status": "ok", "mode": "fwd", "peak_mem_bytes": mem,
                      "speedup": value, "speedup_lo": lo, "speedup_hi": hi}]
        return pd.DataFrame(rows)

    grows = speed_claims(df(((1.0, 0.9, 1.1), (3.0, 2.8, 3.2)), (50.0, 10.0)), "vanilla", ["mode"])
    assert [c.verdict for c in grows] == [REPRODUCED, REPRODUCED] and "mode=fwd" in grows[0].claim
    shrinks = speed_claims(df(((3.0, 2.8, 3.2), (1.0, 0.9, 1.1)), (10.0, 50.0)), "vanilla", ["mode"])
    assert [c.verdict for c in shrinks] == [CONTRADICTED, CONTRADICTED]
    overlap = speed_claims(df(((1.0, 0.8, 1.3), (1.1, 0.9, 1.4)), (10.0, 10.0)), "vanilla", ["mode"])
    assert overlap[0].verdict == INCONCLUSIVE
    (path,) = write_claims(tmp_path, grows + shrinks, suite="speed")
    text = path.read_text()
    assert text.startswith("### The paper's claims — speed") and "2 reproduced, 2 contradicted" in text
    assert write_claims(tmp_path / "none", [], suite="x") == []


def test_a_speedup_whose_baseline_refaults_its_memory_says_so() -> None:
    """vanilla at 4K faulting its 1.5 GiB in again on every call: the figure is kept, with the § note beside it."""
    rows = []
    for n, faults in ((1024, 400.0), (4096, 400_000.0)):
        rows += [{"attention": "vanilla", "seq_len": n, "status": "ok", "peak_mem_bytes": 1.5 * 2**30,
                  "page_faults_per_call": faults, "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0},
                 {"attention": "s3attention", "seq_len": n, "status": "ok", "peak_mem_bytes": 40.0 * 2**20,
                  "page_faults_per_call": 0.0, "speedup": n / 300, "speedup_lo": n / 310, "speedup_hi": n / 290}]
    (claim, _) = speed_claims(pd.DataFrame(rows), "vanilla")
    first, last = claim.measured.split("; n=4096")
    assert "§" not in first and "§: a time at n=4096" in last and claim.verdict == REPRODUCED
