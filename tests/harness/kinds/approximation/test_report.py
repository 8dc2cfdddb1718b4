"""The approximation table's timings carry the marks of the evidence they rest on (harness.kinds.approximation.report):
a time its cell's, a speed-up its own and its reference's."""

from __future__ import annotations

import pandas as pd

from harness.kinds.approximation.report import _rows, attach_speedup


def _cells(reference_noisy: bool, variant_noisy: bool) -> pd.DataFrame:
    base = {"input": "gaussian", "seq_len": 256, "status": "ok", "budget": "default", "timing_group": "g",
            "rel_fro": 0.1, "max_abs": 0.1, "cos_mean": 0.99, "cos_min": 0.9, "attn_tv": 0.05}
    return pd.DataFrame([
        {**base, "attention": "vanilla_sdpa", "key": "ref", "time_ms_median": 2.0, "noisy": reference_noisy,
         "rel_fro": 0.0},
        {**base, "attention": "linformer", "key": "lin", "time_ms_median": 1.0, "noisy": variant_noisy},
    ])


def _speed_columns(reference_noisy: bool, variant_noisy: bool) -> list[tuple[str, str]]:
    samples = {("ref", "g"): [2.0, 2.1, 1.9, 2.0], ("lin", "g"): [1.0, 1.05, 0.95, 1.0]}
    df = attach_speedup(_cells(reference_noisy, variant_noisy), samples, "vanilla_sdpa")
    return [(row[-2], row[-1]) for row in _rows(df, "md")]


def test_a_speedup_carries_its_references_mark_and_a_time_only_its_own() -> None:
    (ref_time, ref_speedup), (time, speedup) = _speed_columns(reference_noisy=True, variant_noisy=False)
    assert ref_time.endswith("†") and ref_speedup.endswith("†")
    assert not time.endswith("†")  # the variant's own timing was quiet
    assert speedup.startswith("2.0×") and speedup.endswith("]†")  # but its ratio rests on the noisy reference too


def test_quiet_timings_carry_no_mark_and_a_noisy_one_marks_once() -> None:
    assert all("†" not in t + s for t, s in _speed_columns(False, False))
    (_, _), (time, speedup) = _speed_columns(True, True)
    assert time.endswith("†") and speedup.count("†") == 1
