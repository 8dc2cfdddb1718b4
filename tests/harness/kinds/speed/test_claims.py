"""Table 4's claims on constructed results, and the claims file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.kinds.speed.claims import speed_claims
from harness.report.claims import CONTRADICTED, INCONCLUSIVE, REPRODUCED, write_claims


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
