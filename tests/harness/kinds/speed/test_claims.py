"""Table 4's claims on constructed results, and the claims file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.kinds.speed.claims import speed_claims
from harness.report.claims import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOISY,
    NOT_MEASURED,
    REPRODUCED,
    SMOKE,
    STRONGER,
    write_claims,
)


def test_speed_claims_and_claims_file(tmp_path: Path) -> None:
    def df(s3_speedups: tuple[tuple[float, float, float], ...], s3_mem: tuple[float, float]) -> pd.DataFrame:
        rows = []
        for (n, (value, lo, hi)), mem in zip(zip((1024, 4096), s3_speedups, strict=True), s3_mem, strict=True):
            rows += [{"attention": "vanilla", "seq_len": n, "status": "ok", "mode": "fwd", "peak_mem_bytes": 100.0,
                      "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0},
                     {"attention": "s3attention", "seq_len": n, "status": "ok", "mode": "fwd", "peak_mem_bytes": mem,
                      "speedup": value, "speedup_lo": lo, "speedup_hi": hi}]
        return pd.DataFrame(rows)

    sentence, *grows = speed_claims(df(((1.0, 0.9, 1.1), (3.0, 2.8, 3.2)), (50.0, 10.0)), "vanilla", ["mode"])
    assert sentence.verdict == NOT_MEASURED  # forward passes only: the sentence is about training steps
    assert "the sentence is about training steps (mode `train_step`), which this run did not time" in sentence.measured
    assert [c.verdict for c in grows] == [REPRODUCED, REPRODUCED] and "mode=fwd" in grows[0].claim
    shrinks = speed_claims(df(((3.0, 2.8, 3.2), (1.0, 0.9, 1.1)), (10.0, 50.0)), "vanilla", ["mode"])[1:]
    assert [c.verdict for c in shrinks] == [CONTRADICTED, CONTRADICTED]
    overlap = speed_claims(df(((1.0, 0.8, 1.3), (1.1, 0.9, 1.4)), (10.0, 10.0)), "vanilla", ["mode"])[1:]
    assert overlap[0].verdict == INCONCLUSIVE
    (path,) = write_claims(tmp_path, grows + shrinks, suite="speed")
    text = path.read_text()
    assert text.startswith("### The paper's claims — speed") and "2 reproduced, 2 contradicted" in text
    # no claim applies: the file still says so, and why (every suite writes one)
    (empty,) = write_claims(tmp_path / "none", [], suite="x", without="its paper makes no claim about it")
    assert empty.read_text() == ("### The paper's claims — x\n\nNo claim of the paper is checked here: its paper "
                                 "makes no claim about it.\n")
    # a smoke profile assesses nothing, whatever the figures say; the figures stay
    (path,) = write_claims(tmp_path / "smoke", grows + shrinks, suite="speed", smoke=True)
    text = path.read_text()
    assert f"4 {SMOKE}" in text and "reproduced**" not in text and "contradicted**" not in text
    assert grows[0].measured in text

    # one noisy timing behind the speed-up claim: inconclusive (noisy), both ways; the memory claim is exact
    noisy = df(((1.0, 0.9, 1.1), (3.0, 2.8, 3.2)), (50.0, 10.0))
    noisy.loc[(noisy["attention"] == "vanilla") & (noisy["seq_len"] == 1024), "noisy"] = True
    assert [c.verdict for c in speed_claims(noisy, "vanilla", ["mode"])[1:]] == [NOISY, REPRODUCED]
    noisy = df(((3.0, 2.8, 3.2), (1.0, 0.9, 1.1)), (10.0, 50.0))
    noisy.loc[noisy["attention"] == "s3attention", "noisy"] = True
    assert [c.verdict for c in speed_claims(noisy, "vanilla", ["mode"])[1:]] == [NOISY, CONTRADICTED]
    noisy = df(((1.0, 0.8, 1.3), (1.1, 0.9, 1.4)), (10.0, 10.0))
    noisy["noisy"] = True
    assert speed_claims(noisy, "vanilla", ["mode"])[1].verdict == INCONCLUSIVE  # no verdict to withhold


def test_a_speedup_whose_baseline_refaults_its_memory_says_so() -> None:
    """vanilla at 4K faulting its 1.5 GiB in again on every call: the figure is kept, with the § note beside it."""
    rows = []
    for n, faults in ((1024, 400.0), (4096, 400_000.0)):
        rows += [{"attention": "vanilla", "seq_len": n, "status": "ok", "peak_mem_bytes": 1.5 * 2**30,
                  "page_faults_per_call": faults, "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0},
                 {"attention": "s3attention", "seq_len": n, "status": "ok", "peak_mem_bytes": 40.0 * 2**20,
                  "page_faults_per_call": 0.0, "speedup": n / 300, "speedup_lo": n / 310, "speedup_hi": n / 290}]
    (sentence, claim, _) = speed_claims(pd.DataFrame(rows), "vanilla")  # no mode recorded: the sentence is judged
    assert "s3attention not run at n = 3072" in sentence.measured and "vanilla not run" in sentence.measured
    first, last = claim.measured.split("; n=4096")
    # the figure would reproduce, but it rests on a time that measures the allocator: no verdict from it
    assert "§" not in first and "§: a time at n=4096" in last and claim.verdict == NOISY


#: The paper's Table 4 (§IV-D) as printed: steps/s and peak memory (GB) at 1K, 2K, 3K, 4K (the Transformer: out of
#: memory at 4K). Performer's 3K multiplier is printed as 11.7x beside 8.7 steps/s; the steps/s are used.
PAPER_TABLE4 = {
    "vanilla": ((23.8, 7.8, 3.9, None), (3.7, 11.1, 22.1, None)),
    "linformer": ((37.0, 20.8, 14.9, 11.9), (2.3, 3.3, 4.3, 5.2)),
    "reformer": ((28.5, 15.1, 11.9, 9.1), (2.2, 3.2, 4.2, 4.9)),
    "nystromformer": ((33.3, 22.7, 17.2, 14.7), (1.6, 2.2, 2.4, 2.9)),
    "performer": ((29.4, 16.9, 8.7, 9.3), (2.3, 3.1, 4.0, 4.8)),
    "s3attention": ((32.2, 20.4, 15.9, 12.3), (1.8, 2.3, 2.8, 3.2)),
}


def _table4(steps: dict[str, tuple], spread: float = 0.02) -> pd.DataFrame:
    """Speed rows as the report makes them: speed-up = steps/s over vanilla's, with a ±``spread`` interval."""
    rows = []
    for attention, (rates, memory) in steps.items():
        for n, rate, mem, base in zip((1024, 2048, 3072, 4096), rates, memory, steps["vanilla"][0], strict=True):
            if rate is None:
                continue
            up = rate / base if base else float("nan")
            rows.append({"attention": attention, "seq_len": n, "status": "ok", "mode": "train_step",
                         "peak_mem_bytes": mem * 1e9, "speedup": up, "speedup_lo": up * (1 - spread),
                         "speedup_hi": up * (1 + spread)})
    return pd.DataFrame(rows)


def test_the_papers_own_table_4_meets_its_sentence() -> None:
    sentence = speed_claims(_table4(PAPER_TABLE4), "vanilla", ["mode"])[0]
    assert sentence.claim.startswith("“S3Attention achieves a 4x time speed advantage and 87% memory reduction")
    assert sentence.verdict == REPRODUCED, sentence.measured
    assert "speed-up 4.08×" in sentence.measured and "a reduction of 87.3%" in sentence.measured
    assert "the fastest baseline, nystromformer, at 1.08×" in sentence.measured


def test_a_baseline_far_faster_than_s3attention_is_not_neck_to_neck() -> None:
    """The H200 run: at 3K S3Attention 2.3x vanilla, Linformer 1.9x faster than S3Attention; the old rule (growth
    alone) read `reproduced`."""
    h200 = {**PAPER_TABLE4, "s3attention": ((32.2, 20.4, 3.9 * 2.3, 12.3), (1.8, 2.3, 2.8, 3.2)),
            "linformer": ((37.0, 20.8, 3.9 * 2.3 * 1.9, 11.9), (2.3, 3.3, 4.3, 5.2)),
            "nystromformer": ((33.3, 22.7, 3.9 * 2.0, 14.7), (1.6, 2.2, 2.4, 2.9))}
    sentence = speed_claims(_table4(h200), "vanilla", ["mode"])[0]
    assert sentence.verdict == CONTRADICTED
    assert "the fastest baseline, linformer, at 1.90×" in sentence.measured and "speed-up 2.30×" in sentence.measured


def test_a_result_beyond_the_papers_is_consistent_and_stronger() -> None:
    """An 8× speed-up with 94% less memory than vanilla read `contradicted`: the bands were two-sided. The sentence
    claims an advantage; more of it is consistent with the sentence, and stronger."""
    faster = {**PAPER_TABLE4, "s3attention": ((32.2, 20.4, 3.9 * 8, 12.3), (1.8, 2.3, 22.1 * 0.06, 3.2)),
              "nystromformer": ((33.3, 22.7, 3.9 * 8, 14.7), (1.6, 2.2, 2.4, 2.9))}
    sentence = speed_claims(_table4(faster), "vanilla", ["mode"])[0]
    assert sentence.verdict == STRONGER, sentence.measured
    assert "speed-up 8.00×" in sentence.measured and "a reduction of 94.0%" in sentence.measured
    # beyond on speed, within the band on memory: still stronger; below the band on speed: contradicted
    quicker = {**PAPER_TABLE4, "s3attention": ((32.2, 20.4, 3.9 * 8, 12.3), (1.8, 2.3, 2.8, 3.2)),
               "nystromformer": ((33.3, 22.7, 3.9 * 8, 14.7), (1.6, 2.2, 2.4, 2.9))}
    assert speed_claims(_table4(quicker), "vanilla", ["mode"])[0].verdict == STRONGER
    slower = {**PAPER_TABLE4, "s3attention": ((32.2, 20.4, 3.9 * 1.5, 12.3), (1.8, 2.3, 2.8, 3.2)),
              "nystromformer": ((33.3, 22.7, 3.9 * 1.5, 14.7), (1.6, 2.2, 2.4, 2.9))}
    assert speed_claims(_table4(slower), "vanilla", ["mode"])[0].verdict == CONTRADICTED


def test_the_sentence_is_judged_on_training_steps_only() -> None:
    """The same figures timed as forward passes and as training steps: only the training-step group carries the
    sentence (Table 4 reports training steps per second); both carry the scaling claims."""
    both = pd.concat([_table4(PAPER_TABLE4), _table4(PAPER_TABLE4).assign(mode="fwd")], ignore_index=True)
    claims = speed_claims(both, "vanilla", ["mode"])
    sentences = [c for c in claims if c.claim.startswith("“S3Attention achieves")]
    assert len(sentences) == 1 and "mode=train_step" in sentences[0].claim and "on training steps" in sentences[0].claim
    assert sum("memory ratio to vanilla falls with n" in c.claim for c in claims) == 2


def test_a_baseline_out_of_memory_at_3k_is_not_called_not_run() -> None:
    """vanilla ran at n = 3072 and ran out of memory: the old words said "not run at n = 3072"."""
    df = _table4(PAPER_TABLE4)
    failed = (df["attention"] == "vanilla") & (df["seq_len"] == 3072)
    df.loc[failed, "status"] = "oom"
    sentence = speed_claims(df, "vanilla", ["mode"])[0]
    assert sentence.verdict == NOT_MEASURED
    assert sentence.measured == "vanilla ran at n = 3072 and ended oom"


def test_without_s3attention_the_sentence_says_what_runs_it() -> None:
    rows = [{"attention": a, "seq_len": 3072, "mode": "train_step", "status": "ok", "time_ms_median": 1.0}
            for a in ("vanilla", "linformer")]
    (claim,) = speed_claims(pd.DataFrame(rows), "vanilla", ["mode"])
    assert claim.verdict == NOT_MEASURED
    assert claim.measured.startswith("not judged: S3Attention did not run here (attentions: linformer, vanilla)")
    assert "`paper` profile of suites/speed.yaml" in claim.measured
