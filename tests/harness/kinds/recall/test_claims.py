"""The recall claims (harness.kinds.recall.claims): each rule passes on Zoology's own Figure 2 and fails where the
finding does not hold."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.kinds.recall.claims import (
    FIGURE2,
    REDUCED,
    attention_everywhere,
    control_at_chance,
    figure2_frame,
    recall_claims,
    width_grows_with_length,
)
from harness.kinds.recall.summary import summarise
from harness.report.claims import CONTRADICTED, INCONCLUSIVE, REPRODUCED


def test_the_papers_attention_recalls_at_every_width() -> None:
    summary, _ = figure2_frame()
    (claim,) = attention_everywhere(summary)
    assert claim.verdict == REPRODUCED, claim.measured


def test_the_papers_gated_convolutions_fall_with_the_length() -> None:
    summary, runs = figure2_frame()
    claims = width_grows_with_length(summary, runs)
    assert {c.measured.split(" at d ")[0].lower() for c in claims} == set(FIGURE2) - {"attention"}
    assert all(c.verdict == REPRODUCED for c in claims), [c.measured for c in claims]


def test_attention_that_fails_at_one_width_is_contradicted() -> None:
    summary, _ = figure2_frame()
    low = (summary["attention"] == "vanilla") & (summary["seq_len"] == 256) & (summary["d_model"] == 64)
    summary.loc[low, ["mean", "lo", "hi"]] = [0.5, 0.45, 0.55]
    assert attention_everywhere(summary)[0].verdict == CONTRADICTED


def test_a_variant_as_flat_as_attention_is_not_reproduced() -> None:
    """A variant whose recall holds with the length, as attention's does, does not show "needs more width" (a fall
    of 0 within the seeds' noise is no contradiction either: the rule can only say it did not see the fall)."""
    summary, runs = figure2_frame()
    runs = runs[runs["attention"].isin(["vanilla", "hyena"])].copy()
    flat = runs["attention"] == "hyena"
    runs.loc[flat, "recall"] = runs.loc[flat, "seed"].map({0: 0.97, 1: 0.98, 2: 0.99})
    claims = width_grows_with_length(summarise(runs), runs)
    assert [c.verdict for c in claims] == [INCONCLUSIVE]


def test_one_seed_reaches_no_verdict() -> None:
    summary, runs = figure2_frame(seeds=1)
    assert attention_everywhere(summary)[0].verdict == INCONCLUSIVE
    assert {c.verdict for c in width_grows_with_length(summary, runs)} == {INCONCLUSIVE}


def test_the_control_at_chance_and_above_it() -> None:
    frame = pd.DataFrame({"attention": "none", "seq_len": 64, "num_kv_pairs": 4, "d_model": 64, "lr": 1e-3,
                          "seed": [0, 1, 2], "status": "ok", "recall": [0.0, 0.001, 0.0], "state_bytes": 0.0,
                          "step_ms": 1.0})
    assert control_at_chance(summarise(frame), 8192)[0].verdict == REPRODUCED
    frame["recall"] = [0.2, 0.25, 0.22]  # it learned something it cannot have learned: the pipeline leaks
    assert control_at_chance(summarise(frame), 8192)[0].verdict == CONTRADICTED


def test_a_reduced_budget_says_so_in_its_verdicts(tmp_path: Path) -> None:
    summary, runs = figure2_frame()
    recall_claims(summary, tmp_path, suite="recall", smoke=False, reduced=True, runs=runs)
    text = (tmp_path / "claims.md").read_text()
    assert REDUCED[REPRODUCED] in text and f"**{REPRODUCED}**" not in text
    recall_claims(summary, tmp_path, suite="recall", smoke=False, reduced=False, runs=runs)
    assert f"**{REPRODUCED}**" in (tmp_path / "claims.md").read_text()
