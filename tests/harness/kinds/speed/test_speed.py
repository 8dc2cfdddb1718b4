"""Tests of harness.report: slopes, Table 4 formatting (Markdown and LaTeX) and the written files."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.core.suite import SKIPPED_BY_RULE
from harness.kinds.speed.report import (
    GROUP_COLUMNS,
    group_slug,
    table4,
    table4_tex,
    write_speed_reports,
)
from harness.kinds.speed.slopes import fit_loglog_slope, slope_fit, slope_flag
from harness.run.runner import run_suite
from harness.run.suitefile import load_suite
from tests.conftest import tiny_doc

MIB = 2**20
ENV: dict[str, object] = {
    "device": "cpu", "device_name": "Test CPU", "cpu_model": "Test CPU", "torch_version": "2.13.0",
    "cuda_version": None, "threads": 4, "git_commit": "abc1234", "time_utc": "2025-01-01T00:00:00Z",
}


def _row(attention: str, seq_len: int, status: str, time_ms: float, mem_mib: float, mode: str) -> dict:
    ok = status == "ok"
    time = time_ms if ok else math.nan
    return {
        "key": f"{attention}-{seq_len}-{mode}", "suite": "synthetic", "attention": attention,
        "backend": "math" if attention == "vanilla" else "",
        "complexity": "n^2" if attention == "vanilla" else "n",
        "seq_len": seq_len, "batch_size": 4, "heads": 2, "dim": 64, "mode": mode, "dtype": "float32",
        "device": "cpu", "status": status, "message": "" if ok else status, "time_ms_median": time,
        "time_ms_iqr": time / 10, "time_ms_mean": time, "n_calls": 10, "threads": 4,
        "peak_mem_bytes": mem_mib * MIB if ok else math.nan, "gflops": 1.0, "gflops_per_s": 1000 / time,
        "gemm_peak_fraction": 0.1, "steps_per_s": 1000 / time, "params": 0, "extra_note": "kept",
    }


def make_results(lengths: Sequence[int] = (512, 1024, 2048, 4096), mode: str = "fwd+bwd") -> pd.DataFrame:
    """Synthetic group: vanilla time and memory ∝ n² (OOM at 4K), s3attention ∝ n (error at 512).

    At 1K vanilla takes 40 ms / 64 MiB and s3attention 10 ms / 8 MiB: 4.0× faster, 8.0× less memory.
    """
    rows = []
    for n in lengths:
        r = n / 1024
        rows.append(_row("vanilla", n, "oom" if n == 4096 else "ok", 40 * r**2, 64 * r**2, mode))
        rows.append(_row("s3attention", n, "error" if n == 512 else "ok", 10 * r, 8 * r, mode))
    # Rows in an order the report has to sort.
    return pd.DataFrame(rows[::-1])


def _md_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _body_rows(tex: str) -> list[str]:
    lines = tex.splitlines()
    return lines[lines.index(r"\midrule") + 1:lines.index(r"\bottomrule")]


def test_fit_loglog_slope_recovers_power_laws() -> None:
    n = [1024, 2048, 4096, 8192]
    assert fit_loglog_slope(n, [3.7e-6 * x**2 for x in n]) == pytest.approx(2.0, abs=1e-12)
    assert fit_loglog_slope(n, [0.01 * x for x in n]) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("seq_len", "values"), [([1024], [1.0]), ([1024, 1024], [1.0, 2.0]),
                                                 ([1024, 2048], [1.0, 0.0]), ([1024, 2048], [1.0])])
def test_fit_loglog_slope_rejects_degenerate_input(seq_len: list[int], values: list[float]) -> None:
    with pytest.raises(ValueError):
        fit_loglog_slope(seq_len, values)


def test_group_slug() -> None:
    group = {"device": "cpu", "dtype": "float32", "mode": "fwd+bwd", "batch_size": 4, "heads": 2, "dim": 64}
    assert group_slug(group) == "cpu_float32_fwdpbwd_b4_h2_d64"
    train = {**group, "device": "cuda", "mode": "train_step"}
    assert group_slug(train) == "cuda_float32_train_step_b4_h2_d64"


def test_markdown_table_golden() -> None:
    md = table4(make_results(lengths=(512, 1024, 4096)), baseline="vanilla", fmt="md")
    assert md == (
        "| Attention   | Time (ms) 512 |      Time (ms) 1K | Time (ms) 4K | Peak memory (MiB) 512 "
        "| Peak memory (MiB) 1K | Peak memory (MiB) 4K |\n"
        "|:------------|--------------:|------------------:|-------------:|----------------------:"
        "|---------------------:|---------------------:|\n"
        "| Transformer |    10.0 ±5.0% |        40.0 ±5.0% |          OOM |                  16.0 "
        "|                 64.0 |                  OOM |\n"
        "| S3Attention |             — | 10.0 ±5.0% (4.0×) |   40.0 ±5.0% |                     — "
        "|          8.00 (8.0×) |                 32.0 |"
    )


def test_markdown_table_markers_and_multipliers() -> None:
    md = table4(make_results(), baseline="vanilla", fmt="md")
    vanilla, s3 = (_md_cells(line) for line in md.splitlines()[2:])
    # ±: half the IQR (time / 10 here) relative to the median: 5.0%
    # display names, as a paper prints them (results.csv keeps the registry's)
    assert vanilla == ["Transformer", "10.0 ±5.0%", "40.0 ±5.0%", "160 ±5.0%", "OOM", "16.0", "64.0", "256", "OOM"]
    assert s3[0] == "S3Attention" and s3[1] == s3[5] == "—"  # the error cell at 512
    assert s3[2:4] == ["10.0 ±5.0% (4.0×)", "20.0 ±5.0% (8.0×)"]  # 40/10 and 160/20 ms speed-ups (unpaired)
    assert s3[6:8] == ["8.00 (8.0×)", "16.0 (16×)"]  # 64/8 and 256/16 MiB savings, two significant digits
    assert s3[4] == "40.0 ±5.0%" and s3[8] == "32.0"  # baseline OOM at 4K: value without multiplier


@pytest.mark.parametrize(("faults", "peak_mib", "marked"), [
    (0.0, 64, False),
    (1600.0, 64, False),  # 6.25 MiB per call: under a tenth of the 64 MiB peak
    (1700.0, 64, True),  # 6.6 MiB: over a tenth
    (400_000.0, 1548, True),  # vanilla at 4K on the Intel CPU: 1.5 GiB per call
    (20_000.0, None, True),  # no memory measured: 78 MiB per call is over the 64 MiB floor
    (10_000.0, None, False),
    (None, 64, False),  # a CUDA cell or an older store: no count, no mark
])
def test_a_time_that_refaults_its_memory_is_marked(faults: float | None, peak_mib: float | None, marked: bool) -> None:
    df = make_results(lengths=(1024,))
    s3 = df["attention"] == "s3attention"
    df.loc[s3, "page_faults_per_call"] = math.nan if faults is None else faults
    df.loc[s3, "peak_mem_bytes"] = math.nan if peak_mib is None else peak_mib * MIB
    _, s3_md = (_md_cells(line) for line in table4(df, baseline="vanilla", fmt="md").splitlines()[2:])
    assert ("§" in s3_md[1]) is marked and "§" not in s3_md[2]  # the time only, never the memory
    s3_tex = next(r for r in _body_rows(table4_tex(df, baseline="vanilla")) if r.startswith("S3"))
    assert (r"$^\S$" in s3_tex) is marked


def test_a_multiplier_inherits_its_baselines_marks() -> None:
    """vanilla's 1K time noisy (†) and its 2K time refaulting (§): S3Attention's 1K multiplier carries the †, its 2K
    time has none; its own times carry no mark; memory multipliers carry none (the marks are about time)."""
    df = make_results()
    base = df["attention"] == "vanilla"
    df.loc[base & (df["seq_len"] == 1024), "noisy"] = True
    df.loc[base & (df["seq_len"] == 2048), "page_faults_per_call"] = 400_000.0  # 1.6 GB a call: over 0.1 x 256 MiB
    vanilla, s3 = (_md_cells(line) for line in table4(df, baseline="vanilla", fmt="md").splitlines()[2:])
    assert vanilla[2] == "40.0 ±5.0%†" and vanilla[3] == "160 ±5.0%§"
    # † is inherited; against a § baseline time no multiplier is shown at all (it would measure the page faults)
    assert s3[2] == "10.0 ±5.0% (4.0×†)" and s3[3] == "20.0 ±5.0%"
    assert "†" not in s3[6] and "§" not in s3[7] and s3[7] == "16.0 (16×)"  # memory multipliers stay
    s3_tex = next(r for r in _body_rows(table4_tex(df, baseline="vanilla")) if r.startswith("S3"))
    assert r"(4.0$\times$$^\dagger$)" in s3_tex and r"\textbf{20.0} &" in s3_tex


def test_table_without_baseline_has_no_multipliers() -> None:
    df = make_results()
    md = table4(df[df["attention"] != "vanilla"], baseline="vanilla", fmt="md")
    assert "×" not in md
    assert len(md.splitlines()) == 3


def test_train_step_shows_throughput_ratio_variant_over_baseline() -> None:
    md = table4(make_results(lengths=(1024,), mode="train_step"), baseline="vanilla", fmt="md")
    assert "Throughput (steps/s) 1K" in md
    # 1000/40 = 25 steps/s for vanilla, 1000/10 = 100 steps/s for s3attention.
    assert _md_cells(md.splitlines()[-1]) == ["S3Attention", "100 ±5.0% (4.0×)", "8.00 (8.0×)"]


def test_unmeasured_metric_block_is_dropped() -> None:
    df = make_results().assign(time_ms_median=math.nan)
    md = table4(df, baseline="vanilla", fmt="md")
    assert "Time (ms)" not in md and "Peak memory (MiB) 1K" in md


def test_table4_rejects_duplicate_cells_and_mixed_groups() -> None:
    df = make_results()
    with pytest.raises(ValueError, match="several rows"):
        table4(pd.concat([df, df.iloc[:1]]), baseline="vanilla", fmt="md")
    with pytest.raises(ValueError, match="single group"):
        table4(pd.concat([df, df.assign(heads=8)]), baseline="vanilla", fmt="md")


def test_latex_table() -> None:
    df = pd.concat([make_results(), make_results().query("attention == 's3attention'")
                   .assign(attention="linformer_k128"),
                    make_results().query("attention == 's3attention'").assign(attention="vanilla_xformers",
                                                                               status="unsupported")])
    tex = table4_tex(df, baseline="vanilla")
    time_table, memory_table = tex.split("\n\n")  # one tabular per metric: each fits a column
    for table in (time_table, memory_table):
        assert table.count(r"\toprule") == 1 and table.count(r"\bottomrule") == 1
        depth = 0
        for char in table:
            depth += {"{": 1, "}": -1}.get(char, 0)
            assert depth >= 0
        assert depth == 0
    # the metric over the lengths (a label in the first column would widen it), the lengths under it
    assert r" & \multicolumn{4}{c}{Time (ms)} \\" in time_table and r"\cmidrule(lr){2-5}" in time_table
    assert r" & \multicolumn{4}{c}{Peak memory (MiB)} \\" in memory_table
    assert r"Attention & 512 & 1K & 2K & 4K \\" in time_table
    body = _body_rows(time_table)
    # display names, the baseline first; the variant that ran nowhere is dropped with a footnote row
    # the paper's order: the baseline, then by group (S3Attention before the other low-rank methods)
    assert [row.split(" & ")[0] for row in body[:3]] == ["Transformer", "S3Attention", "Linformer (k = 128)"]
    assert "xFormers" in body[-1] and r"\multicolumn{5}{l}" in body[-1] and "unsupported" in body[-1]
    assert all("xFormers" not in row for row in body[:-1])
    # no spread in LaTeX (it would double a cell's width; the caption says where it is)
    assert r"(4.0$\times$)" in body[1] and "---" in body[1] and "×" not in tex and "±" not in tex
    # the best (lowest) time of each column is bold: the value, not its multiplier
    assert sum(row.count(r"\textbf{") for row in body) >= 4 and r"\textbf{10.0} (4.0$\times$)" in body[1]


def test_write_reports(tmp_path: Path) -> None:
    df = make_results()
    df.loc[0, ["time_ms_median", "gflops"]] = [1 / 3, 2 / 3]  # must survive the CSV bit for bit
    other = make_results().assign(dtype="bfloat16", mode="fwd")
    written = write_speed_reports(pd.concat([df, other]), tmp_path, env=ENV, suite="synthetic", plots=False)

    slugs = ["cpu_bfloat16_fwd_b4_h2_d64", "cpu_float32_fwdpbwd_b4_h2_d64"]
    expected = ["results.csv", "env.json",
                *(f"{t}_{s}.{ext}" for s in slugs for t in ("table4", "ratios", "throughput") for ext in ("md", "tex")),
                # claims.md: the paper's Table 4 claims (s3attention and vanilla ran)
                "slopes.csv", "slopes.md", "crossover.csv", "crossover.md", "claims.md"]
    assert [p.name for p in written] == expected
    assert all(p.parent == tmp_path and p.stat().st_size > 0 for p in written)

    back = pd.read_csv(tmp_path / "results.csv")
    speedups = ["speedup", "speedup_lo", "speedup_hi", "speedup_paired"]
    # results stored without a compile or causal axis are eager and bidirectional
    rates = ["tflops_per_s", "gbytes_per_s", "peak_fraction", "peak_against"]
    assert len(back) == 16 and list(back.columns) == [*df.columns, "compile", "causal", *speedups, *rates]
    assert set(back["compile"]) == {"eager"} and not back["causal"].any()
    key = df.loc[0, "key"]
    cell = back[(back["key"] == key) & (back["dtype"] == "float32")].iloc[0]
    assert cell["time_ms_median"] == 1 / 3 and cell["gflops"] == 2 / 3
    order = [*GROUP_COLUMNS, "attention", "seq_len"]
    assert back[order].equals(back.sort_values(order)[order].reset_index(drop=True))

    assert json.loads((tmp_path / "env.json").read_text()) == ENV

    md = (tmp_path / "table4_cpu_float32_fwdpbwd_b4_h2_d64.md").read_text()
    assert md.startswith("### Table 4 — synthetic: CPU · float32 · forward + backward · eager · batch 4 · 2 heads · "
                         "dim 64\n")
    assert md.endswith("\n_Environment: Test CPU · torch 2.13.0 · CUDA n/a · 4 threads · commit abc1234 · "
                       "2025-01-01T00:00:00Z_\n")
    tex = (tmp_path / "table4_cpu_float32_fwdpbwd_b4_h2_d64.tex").read_text()
    assert "commit abc1234" in tex and "torch 2.13.0" in tex
    assert sum(line.startswith("%") for line in tex.splitlines()) <= 3  # a fragment to \input, not a log


def test_cells_a_skip_rule_left_out_are_in_the_csv_but_in_no_table(tmp_path: Path) -> None:
    """A profile that compiles only at 4K: its skipped compiled cells make no column (1K) and no group (fwd)."""
    eager = make_results(lengths=(1024, 4096))
    compiled = make_results(lengths=(1024, 4096)).assign(compile="inductor", key=lambda d: d["key"] + "-c")
    compiled_fwd = make_results(lengths=(1024,), mode="fwd").assign(compile="inductor", key=lambda d: d["key"] + "-c")
    rule = f"{SKIPPED_BY_RULE}compiled at n = 4096 only"
    compiled.loc[compiled["seq_len"] == 1024, ["status", "message"]] = ["unsupported", rule]
    compiled_fwd[["status", "message"]] = ["unsupported", rule]
    write_speed_reports(pd.concat([eager, compiled, compiled_fwd]), tmp_path, env=ENV, suite="synthetic",
                        plots=False)
    assert len(pd.read_csv(tmp_path / "results.csv")) == 10
    assert not list(tmp_path.glob("*_fwd_*"))
    md = (tmp_path / "table4_cpu_float32_fwdpbwd_inductor_b4_h2_d64.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Attention"))
    assert "4K" in header and "1K" not in header
    assert "1K" in (tmp_path / "table4_cpu_float32_fwdpbwd_b4_h2_d64.md").read_text()


def test_slopes_files(tmp_path: Path) -> None:
    write_speed_reports(make_results(), tmp_path, env=ENV, suite="synthetic", plots=False)
    slopes = pd.read_csv(tmp_path / "slopes.csv")
    assert list(slopes.columns) == [*GROUP_COLUMNS, "attention", "metric", "slope", "slope_lo", "slope_hi", "r2",
                                    "flag", "n_points", "seq_len_min", "seq_len_max"]
    fits = slopes.set_index(["attention", "metric"])
    # vanilla: 1K and 2K (4K is OOM); s3attention: 1K to 4K. 512 is below slope_min_seq_len.
    assert fits.loc[("vanilla", "time_ms_median"), "slope"] == pytest.approx(2.0, abs=1e-12)
    assert fits.loc[("vanilla", "peak_mem_bytes"), "slope"] == pytest.approx(2.0, abs=1e-12)
    assert fits.loc[("s3attention", "time_ms_median"), "slope"] == pytest.approx(1.0, abs=1e-12)
    assert fits.loc[("vanilla", "time_ms_median"), ["n_points", "seq_len_min", "seq_len_max"]].tolist() == [
        2, 1024, 2048]
    assert fits.loc[("s3attention", "peak_mem_bytes"), "n_points"] == 3
    # exact power laws: R² 1, a zero-width interval from three points, no flag
    assert fits.loc[("s3attention", "time_ms_median"), ["slope_lo", "slope_hi", "r2"]].tolist() == pytest.approx(
        [1.0, 1.0, 1.0], abs=1e-9)
    assert fits["flag"].isna().all()
    md_rows = [_md_cells(line)[-7:] for line in (tmp_path / "slopes.md").read_text().splitlines()
               if line.startswith("| cpu")]
    assert ["vanilla", "time_ms_median", "2.00 (2 points)", "1.000", "2", "1K–2K", ""] in md_rows
    assert len(md_rows) == 4


@pytest.mark.parametrize(("points", "complexity", "flag"), [
    ({1024: 10.0, 2048: 13.0, 4096: 16.9}, "n", "below linear"),  # the 0.37 of a launch-bound forward
    ({1024: 10.0, 2048: 40.0, 4096: 160.0}, "n", "above n"),  # quadratic from a variant declared linear
    ({1024: 10.0, 2048: 40.0, 4096: 160.0}, "n^2", ""),
    ({1024: 10.0, 2048: 21.0, 4096: 43.0}, "n log n", ""),
    ({1024: 10.0, 2048: 90.0, 4096: 95.0, 8192: 100.0}, "n^2", "poor fit"),  # a jump, then flat
])
def test_a_slope_is_flagged_where_it_does_not_fit_the_declared_class(points: dict[int, float], complexity: str,
                                                                    flag: str) -> None:
    slope, lo, hi, r2 = slope_fit(list(points), list(points.values()))
    found = slope_flag(slope, lo, hi, r2, complexity)
    assert (flag in found) if flag else found == "", (slope, lo, hi, r2, found)


def test_the_slope_interval_covers_the_true_exponent() -> None:
    """A power law n^1.5 with 5% multiplicative noise at six lengths: the 95% interval holds 1.5 in about 95% of
    draws (here at least 85 of 100, a loose bound on a binomial(100, 0.95))."""
    rng = np.random.default_rng(0)
    n = np.array([512, 1024, 2048, 4096, 8192, 16384], dtype=float)
    covered = 0
    for _ in range(100):
        _, lo, hi, _ = slope_fit(n, n**1.5 * np.exp(rng.normal(0, 0.05, n.size)))
        covered += lo <= 1.5 <= hi
    assert covered >= 85


def test_slopes_need_two_points(tmp_path: Path) -> None:
    write_speed_reports(make_results(), tmp_path, env=ENV, suite="synthetic", slope_min_seq_len=4096, plots=False)
    assert pd.read_csv(tmp_path / "slopes.csv").empty
    assert "No (group, attention)" in (tmp_path / "slopes.md").read_text()


def test_row_names_name_the_rows_of_table4(tmp_path: Path) -> None:
    """The suite's ``report.row_names`` (validated with the suite) names Table 4's rows in Markdown and LaTeX."""
    write_speed_reports(make_results(), tmp_path, env=ENV, suite="synthetic", plots=False,
                        row_names={"vanilla": "Transformer", "s3attention": "S3Attention (ours)"})
    md = (tmp_path / "table4_cpu_float32_fwdpbwd_b4_h2_d64.md").read_text()
    tex = (tmp_path / "table4_cpu_float32_fwdpbwd_b4_h2_d64.tex").read_text()
    for text in (md, tex):
        assert "Transformer" in text and "S3Attention (ours)" in text
    assert "| vanilla " not in md and "| s3attention " not in md


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_the_causal_axis_times_causal_forms_in_tables_of_their_own(write_yaml: Callable[..., Path],
                                                                   tmp_path: Path) -> None:
    doc = tiny_doc(axes={"attention": ["vanilla_sdpa", "linformer"], "seq_len": [32], "mode": ["fwd"],
                         "causal": [False, True]}, metrics=["time", "flops"])
    suite = load_suite(write_yaml(doc))
    cells = {(c.params["attention"], c.params["causal"]): c for c in suite.expand("cpu")}
    assert cells[("vanilla_sdpa", True)].config["causal"] and not cells[("vanilla_sdpa", False)].config["causal"]
    assert cells[("linformer", True)].skip_reason.startswith("unsupported by linformer: linformer has no causal form")
    assert cells[("linformer", False)].skip_reason is None
    run_suite(suite, out=tmp_path, progress=False)
    directory = tmp_path / "tiny" / "quick"
    csv = pd.read_csv(directory / "results.csv").set_index(["attention", "causal"])
    # SDPA's causal kernel computes the lower triangle of the scores (33 of every 64 at n = 32): QKᵀ and PV,
    # 4·B·H·N²·d FLOPs in full, lose 31/64 of it; the projections are the same
    full, causal = csv.loc[("vanilla_sdpa", False), "gflops"], csv.loc[("vanilla_sdpa", True), "gflops"]
    assert math.isclose((full - causal) * 1e9, 4 * 1 * 2 * 32**2 * 8 * 31 / 64)
    assert (directory / "table4_cpu_float32_fwd_causal_b1_h2_d16.md").is_file()
    assert "causal" not in (directory / "table4_cpu_float32_fwd_b1_h2_d16.md").read_text().split("\n")[0]
