"""Study tables (Table 5 noise robustness, Table 6 one-at-a-time sweeps, Table 7 ablation, Table S7 incoherence)
against golden text, with every number of the goldens checked by hand in the comments below."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.kinds.accuracy.incoherence_report import incoherence_ranks, incoherence_summary, pooled_mean_std, tableS7
from harness.kinds.accuracy.studies import (
    ablation_summary,
    noise_summary,
    sweep_parameters,
    table5,
    table6,
    table7,
    variant_sweep_summary,
    write_study_reports,
)

GOLDEN = Path(__file__).parent / "golden"
ENV = {"device_name": "cpu", "torch_version": "2.x"}


def cells(rows: list[tuple[Any, ...]], columns: list[str], **constant: Any) -> pd.DataFrame:
    """Accuracy cells as ``Store.dataframe()`` returns them, from (axis..., seed, status, test_acc) tuples."""
    df = pd.DataFrame(rows, columns=columns).assign(**constant)
    return df.assign(key=[f"k{i}" for i in range(len(df))], suite="s", kind="accuracy", device="cpu", message="",
                     best_dev_acc=df["test_acc"], steps_per_s=1.0)


# ---------------------------------------------------------------------------------------------------
# Table 5. Image task, seeds 0 and 1. Means (%) and relative changes against a = 0 of the same attention:
#   vanilla a=0: (41.00 + 41.78) / 2 = 41.39
#   vanilla a=2 train+test: 40.29 -> (40.29 - 41.39) / 41.39 = -1.10 / 41.39 = -2.66%
#   vanilla a=4 train+test: both seeds OOM -> "OOM"
#   vanilla a=2 test only: error + timeout -> "—"
#   vanilla a=4 test only: 40.00 (seed 1 failed, n = 1) -> (40.00 - 41.39) / 41.39 = -3.36%
#   s3attention a=0: (57 + 58) / 2 = 57.50; a=2: 56.50 -> -1.00 / 57.50 = -1.74%; a=4: 55.00 -> -2.50 / 57.50 = -4.35%
#   s3attention a=4 test only: (58 + 59) / 2 = 58.50 -> +1.00 / 57.50 = +1.74%; a=2 test only was not run -> "—"
# The a = 0 column is the same cells in both modes.

NOISE_ROWS = [
    ("vanilla", 0, "train+test", 0, "ok", 0.4100), ("vanilla", 0, "train+test", 1, "ok", 0.4178),
    ("vanilla", 2, "train+test", 0, "ok", 0.4029), ("vanilla", 2, "train+test", 1, "ok", 0.4029),
    ("vanilla", 4, "train+test", 0, "oom", None), ("vanilla", 4, "train+test", 1, "oom", None),
    ("vanilla", 2, "test", 0, "error", None), ("vanilla", 2, "test", 1, "timeout", None),
    ("vanilla", 4, "test", 0, "ok", 0.40), ("vanilla", 4, "test", 1, "error", None),
    ("s3attention", 0, "train+test", 0, "ok", 0.57), ("s3attention", 0, "train+test", 1, "ok", 0.58),
    ("s3attention", 2, "train+test", 0, "ok", 0.56), ("s3attention", 2, "train+test", 1, "ok", 0.57),
    ("s3attention", 4, "train+test", 0, "ok", 0.55), ("s3attention", 4, "train+test", 1, "ok", 0.55),
    ("s3attention", 4, "test", 0, "ok", 0.58), ("s3attention", 4, "test", 1, "ok", 0.59),
]


def noise_df() -> pd.DataFrame:
    return cells(NOISE_ROWS, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")


def test_table5_relative_change_is_against_clean_cell_of_same_attention() -> None:
    s = noise_summary(noise_df()).set_index(["attention", "noise", "noise_on"])
    assert math.isclose(s.loc[("vanilla", 2.0, "train+test"), "rel_change_pct"], 100 * (40.29 - 41.39) / 41.39)
    assert math.isclose(s.loc[("s3attention", 4.0, "test"), "rel_change_pct"], 100 * (58.5 - 57.5) / 57.5)
    assert math.isclose(s.loc[("vanilla", 0.0, "train+test"), "std"], np.std([41.0, 41.78], ddof=1))
    assert s.loc[("vanilla", 4.0, "train+test"), "n"] == 0 and s.loc[("vanilla", 4.0, "train+test"), "failed"] == 2
    # A change in one attention's clean cell moves only that attention's relative changes.
    df = noise_df()
    df.loc[(df["attention"] == "vanilla") & (df["noise"] == 0), "test_acc"] = 0.50
    moved = noise_summary(df).set_index(["attention", "noise", "noise_on"])
    assert math.isclose(moved.loc[("vanilla", 2.0, "train+test"), "rel_change_pct"], 100 * (40.29 - 50) / 50)
    assert math.isclose(moved.loc[("s3attention", 2.0, "train+test"), "rel_change_pct"], -100 / 57.5)


def test_table5_clean_cells_shared_by_both_modes() -> None:
    """The clean cells appear once (noise_on "train+test") and head both tables, whatever noise_on they carry."""
    df = noise_df()
    df.loc[df["noise"] == 0, "noise_on"] = None  # a suite whose clean cells have no noise_on
    md = table5(df, fmt="md")
    train_test, test_only = md.split("#### Noise on test only (test only)")
    assert "| Transformer |     41.39 |     40.29 (−2.66%) |" in train_test
    assert "| Transformer |     41.39 |     — |     40.00 (−3.36%) |" in test_only
    assert len(noise_summary(df).query("noise == 0")) == 2  # one row per attention, not per mode


def test_table5_without_noise_axis_is_the_clean_column() -> None:
    df = noise_df().query("noise == 0").drop(columns=["noise", "noise_on"])
    md = table5(df, fmt="md")
    assert md.startswith("#### Noise on train and test (train+test)") and "test only" not in md
    assert "| Transformer |     41.39 |" in md and "| S3Attention | **57.50** |" in md  # best of the column bold


# ---------------------------------------------------------------------------------------------------
# Table 6. s3attention, tasks ListOps and Text, seeds 0 and 1, base r = s1 = s2 = 8.
#   base:  ListOps 38, 38 -> 38.00; Text 69, 70 -> 69.50; per-seed averages 53.5, 54.0 -> 53.75
#   r=1:   37.00; (65 + 66) / 2 = 65.50; averages 51.0, 51.5 -> 51.25
#   r=16:  38.00 (ties the base); (70 + 71) / 2 = 70.50; averages 54.0, 54.5 -> 54.25
#   r=32:  every run OOM -> "OOM", and no average -> "—"
#   s1=32: 39.00; (71 + 72) / 2 = 71.50; averages 55.0, 55.5 -> 55.25
# (a) r: ListOps best 38.00 shared by r = 8 and 16 (bold), second 37.00 (underlined); Text best 70.50, second
# 69.50; Average best 54.25, second 53.75. (b) s1: s1 = 32 best everywhere, the base second.
# "r=1,s1=32" changes two settings and "no_row_attention" switches a component off: neither is a sweep row.

SWEEP_VARIANTS = {
    "base": {"r": 8, "s1": 8, "s2": 8}, "r=1": {"r": 1, "s1": 8, "s2": 8}, "r=16": {"r": 16, "s1": 8, "s2": 8},
    "r=32": {"r": 32, "s1": 8, "s2": 8}, "s1=32": {"r": 8, "s1": 32, "s2": 8}, "r=1,s1=32": {"r": 1, "s1": 32, "s2": 8},
    "no_row_attention": {"r": 8, "s1": 8, "s2": 8, "row_attention": False},
}
SWEEP_ACC = {  # variant: ((ListOps seed 0, seed 1), (Text seed 0, seed 1))
    "base": ((0.38, 0.38), (0.69, 0.70)), "r=1": ((0.37, 0.37), (0.65, 0.66)), "r=16": ((0.38, 0.38), (0.70, 0.71)),
    "s1=32": ((0.39, 0.39), (0.71, 0.72)), "r=1,s1=32": ((0.1, 0.1), (0.1, 0.1)),
    "no_row_attention": ((0.3, 0.3), (0.3, 0.3)),
}


def variant_rows(accuracies: dict[str, tuple[tuple[float, float], ...]]) -> list[tuple[Any, ...]]:
    return [(v, task, seed, "ok", acc) for v, per_task in accuracies.items()
            for task, pair in zip(("listops", "text"), per_task, strict=True) for seed, acc in enumerate(pair)]


def sweep_df() -> pd.DataFrame:
    rows = [*variant_rows(SWEEP_ACC), *(("r=32", t, s, "oom", None) for t in ("listops", "text") for s in (0, 1))]
    return cells(rows, ["variant", "task", "seed", "status", "test_acc"], attention="s3attention")


def test_sweep_parameters_expands_paper_grid() -> None:
    """The paper's grid around r = s1 = s2 = 8: 3 sub-tables of 5 rows, the base row in each."""
    vary = {"r": [1, 8, 16, 32, 64], "s1": [8, 32, 64, 128, 256], "s2": [1, 4, 8, 16, 32]}
    base = {"r": 8, "s1": 8, "s2": 8}
    variants = {"base": base, **{f"{p}={v}": {**base, p: v} for p, values in vary.items() for v in values if v != 8},
                "no_fourier_conv": {**base, "fourier_conv": False}}
    sweeps = sweep_parameters(variants, "base")
    assert list(sweeps) == ["r", "s1", "s2"]
    for p, values in vary.items():
        assert [v for v, _ in sweeps[p]] == values
        assert (8, "base") in sweeps[p]
    assert sweep_parameters(variants, "missing") == {}


def test_table6_repeats_base_numbers_in_each_sub_table() -> None:
    s = variant_sweep_summary(sweep_df(), SWEEP_VARIANTS)
    base = s[(s["variant"] == "base") & (s["task"] == "avg")]
    assert list(base["parameter"]) == ["r", "s1"] and list(base["value"]) == [8, 8]
    assert np.allclose(base["mean"], 53.75)
    assert set(s["variant"]) == {"base", "r=1", "r=16", "r=32", "s1=32"}


def md_cells(md: str) -> dict[str, list[str]]:
    """First cell -> the other cells of each body row of a Markdown table, padding stripped."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    return {r[0]: r[1:] for r in rows[1:]}


def test_table6_ties_share_marks() -> None:
    """Three rows equal at the top of ListOps are all bold and the next value is the underlined second; two rows
    equal in second place of Text are both underlined."""
    acc = {"base": ((0.40, 0.40), (0.60, 0.60)), "r=1": ((0.40, 0.40), (0.50, 0.50)),
           "r=16": ((0.40, 0.40), (0.55, 0.55)), "r=32": ((0.30, 0.30), (0.55, 0.55))}
    df = cells(variant_rows(acc), ["variant", "task", "seed", "status", "test_acc"], attention="s3attention")
    rows = md_cells(table6(df, fmt="md", variants={k: SWEEP_VARIANTS[k] for k in acc}))
    # Averages: base (40 + 60) / 2 = 50, r=1 45, r=16 47.5, r=32 42.5.
    assert rows == {"1": ["**40.00**", "50.00", "45.00"], "8": ["**40.00**", "**60.00**", "**50.00**"],
                    "16": ["**40.00**", "<u>55.00</u>", "<u>47.50</u>"],
                    "32": ["<u>30.00</u>", "<u>55.00</u>", "42.50"]}
    tex = table6(df, fmt="tex", variants={k: SWEEP_VARIANTS[k] for k in acc})
    assert r"32 & \underline{30.00} & \underline{55.00} & 42.50 \\" in tex


# ---------------------------------------------------------------------------------------------------
# Table 7. Baseline: ListOps 38.30, Text 69.20, Average (38.30 + 69.20) / 2 = 53.75.
#   no_fourier_conv: 37.80 - 38.30 = -0.50; 65.20 - 69.20 = -4.00; (37.80 + 65.20) / 2 = 51.50 - 53.75 = -2.25
#   no_row_attention: 38.60 - 38.30 = +0.30; 69.00 - 69.20 = -0.20; 53.80 - 53.75 = +0.05
#   custom (shown as is): ListOps OOM on both seeds; Text 70.00 - 69.20 = +0.80; no average -> "—"

ABLATION_VARIANTS = {"base": {}, "no_fourier_conv": {"fourier_conv": False},
                     "no_row_attention": {"row_attention": False}, "custom": {"x": 1}}
ABLATION_ACC = {"base": ((0.383, 0.383), (0.692, 0.692)), "no_fourier_conv": ((0.378, 0.378), (0.652, 0.652)),
                "no_row_attention": ((0.386, 0.386), (0.690, 0.690))}


def ablation_df() -> pd.DataFrame:
    rows = [*variant_rows(ABLATION_ACC), *(("custom", "listops", s, "oom", None) for s in (0, 1)),
            *(("custom", "text", s, "ok", 0.70) for s in (0, 1))]
    return cells(rows, ["variant", "task", "seed", "status", "test_acc"], attention="s3attention")


def test_table7_signs_order_and_baseline_row() -> None:
    s = ablation_summary(ablation_df(), ABLATION_VARIANTS).query("task == 'avg'").set_index("model")
    # the paper's component names, saying what each row removed
    assert list(s.index) == ["Baseline", "w/o Four. Conv.", "w/o Row Attn."]
    assert math.isclose(s.loc["Baseline", "mean"], 53.75) and s.loc["Baseline", "diff"] == 0
    assert math.isclose(s.loc["w/o Four. Conv.", "diff"], -2.25) and math.isclose(s.loc["w/o Row Attn.", "diff"], 0.05)
    # Without options the rows follow the base variant, then the others sorted.
    assert list(md_cells(table7(ablation_df(), fmt="md"))) == ["Baseline", "custom", "w/o Four. Conv.",
                                                               "w/o Row Attn."]


# ---------------------------------------------------------------------------------------------------
# Table S7. s3attention, base variant; per seed n samples, each μ given as cell mean and population std.
#   Text (seed 0 n = 100, seed 1 n = 300):
#     μ_X rank 32: means 2.70, 2.78, stds 0.03, 0.02 -> mean (270 + 834) / 400 = 2.76;
#       var = (100 (0.03² + 0.06²) + 300 (0.02² + 0.02²)) / 400 = (0.45 + 0.24) / 400 = 0.001725 -> std 0.042
#     μ_smooth rank 32: both 2.05 (0.01) -> 2.05 (0.010)
#     μ_X rank 16: means 4.00, 3.96, stds 0.05, 0.01 -> mean (400 + 1188) / 400 = 3.97;
#       var = (100 (0.0025 + 0.0009) + 300 (0.0001 + 0.0001)) / 400 = 0.40 / 400 = 0.001 -> std 0.032
#     μ_smooth rank 16: means 3.20, 3.24, stds 0.04 -> mean 3.23;
#       var = (100 (0.0016 + 0.0009) + 300 (0.0016 + 0.0001)) / 400 = 0.76 / 400 = 0.0019 -> std 0.044
#   Pathfinder: seed 0 only (seed 1 ran out of memory): the paper's numbers 3.83 (0.221) 1.99 (0.001) ...
#   ListOps: every seed out of memory -> OOM in each column.

MU_COLUMNS = ["mu_x_r32_mean", "mu_x_r32_std", "mu_smooth_r32_mean", "mu_smooth_r32_std", "mu_x_r16_mean",
              "mu_x_r16_std", "mu_smooth_r16_mean", "mu_smooth_r16_std", "mu_count"]
S7_ROWS = [
    ("text", 0, "ok", 0.6, 2.70, 0.03, 2.05, 0.01, 4.00, 0.05, 3.20, 0.04, 100),
    ("text", 1, "ok", 0.6, 2.78, 0.02, 2.05, 0.01, 3.96, 0.01, 3.24, 0.04, 300),
    ("pathfinder", 0, "ok", 0.7, 3.83, 0.221, 1.99, 0.001, 4.88, 0.264, 3.48, 0.001, 50),
    ("pathfinder", 1, "oom", None, *[None] * 9),
    ("listops", 0, "oom", None, *[None] * 9), ("listops", 1, "oom", None, *[None] * 9),
]


def s7_df() -> pd.DataFrame:
    return cells(S7_ROWS, ["task", "seed", "status", "test_acc", *MU_COLUMNS], attention="s3attention",
                 variant="base")


def test_tableS7_labels_several_attentions() -> None:
    df = pd.concat([s7_df().query("task == 'text'"), s7_df().query("task == 'text'").assign(attention="other")])
    assert list(md_cells(tableS7(df, fmt="md", baseline="s3attention"))) == ["Text (s3attention)", "Text (other)"]


def test_incoherence_pooled_against_numpy() -> None:
    """Pooled mean and std from per-seed (mean, population std, n) equal numpy's over the concatenated samples."""
    rng = np.random.default_rng(0)
    samples = {seed: {(w, r): rng.normal(2 + r / 16, 0.1 + seed, size=20 + 7 * seed) for w in ("x", "smooth")
                      for r in (8, 64)} for seed in range(3)}
    rows = []
    for seed, per in samples.items():
        row: dict[str, Any] = {"task": "text", "seed": seed, "status": "ok", "test_acc": 0.5, "attention": "s3",
                               "mu_count": len(per["x", 8])}
        for (w, r), x in per.items():
            row |= {f"mu_{w}_r{r}_mean": x.mean(), f"mu_{w}_r{r}_std": x.std()}
        rows.append(row)
    df = pd.DataFrame(rows)
    assert incoherence_ranks(df) == [64, 8]
    s = incoherence_summary(df).set_index("rank")
    for (w, r) in samples[0]:
        everything = np.concatenate([samples[seed][w, r] for seed in samples])
        assert math.isclose(s.loc[r, f"mu_{w}_mean"], everything.mean(), rel_tol=1e-12)
        assert math.isclose(s.loc[r, f"mu_{w}_std"], everything.std(), rel_tol=1e-12)
    assert s.loc[8, "n_samples"] == 20 + 27 + 34 and s.loc[8, "n_seeds"] == 3
    assert math.isclose(s.loc[8, "reduction"], 1 - s.loc[8, "mu_smooth_mean"] / s.loc[8, "mu_x_mean"])
    with pytest.raises(ValueError):
        pooled_mean_std([1.0], [0.0], [0])


# ---------------------------------------------------------------------------------------------------
# Every golden file, rendered from the frames above.

GOLDEN_CASES = {
    "table5": lambda fmt: table5(noise_df(), fmt=fmt),
    "table6": lambda fmt: table6(sweep_df(), fmt=fmt, variants=SWEEP_VARIANTS),
    "table7": lambda fmt: table7(ablation_df(), fmt=fmt, variants=ABLATION_VARIANTS),
    "tableS7": lambda fmt: tableS7(s7_df(), fmt=fmt),
}


@pytest.mark.parametrize("fmt", ["md", "tex"])
@pytest.mark.parametrize("table", list(GOLDEN_CASES))
def test_golden(table: str, fmt: str) -> None:
    """Exact text of each study table; the numbers are checked by hand in the comments above each frame."""
    text = GOLDEN_CASES[table](fmt)
    assert text + "\n" == (GOLDEN / f"{table}.{fmt}").read_text()
    assert text.count("{") == text.count("}")


# ---------------------------------------------------------------------------------------------------
# Files.


def test_write_study_reports_files(tmp_path: Path) -> None:
    df = pd.concat([sweep_df(), s7_df().assign(variant="base")], ignore_index=True)
    written = write_study_reports(df, tmp_path, tables=["table6", "tableS7"], env=ENV, suite="study",
                                  options={"variants": SWEEP_VARIANTS, "baseline_variant": "base"})
    assert [p.name for p in written] == [
        "table6.md", "table6.tex", "table6.csv", "table6_diff.md", "table6_diff.tex", "table6_diff.csv",
        "table6_r.png", "table6_r.pdf", "table6_s1.png", "table6_s1.pdf",
        "tableS7.md", "tableS7.tex", "tableS7.csv", "tableS7_incoherence.png", "tableS7_incoherence.pdf",
        "claims.md"]
    assert all(p.stat().st_size > 0 for p in written)
    md = (tmp_path / "table6.md").read_text()
    assert md.startswith("### Table 6 — study: varying one setting at a time\n\n#### (a) r\n")
    assert "_Environment: cpu · torch 2.x" in md
    tex = (tmp_path / "table6.tex").read_text()
    comments = [line for line in tex.splitlines() if line.startswith("%")]
    assert comments[0].startswith("% Needs \\usepackage{booktabs}") and comments[1].startswith("% cpu · torch 2.x")
    # the caption is the title; the notes are under the table; each sub-table's heading is shown over it
    assert "\\caption{Study: varying one setting at a time}" in tex and "\\label{tab:table6}" in tex
    assert "\\textit{(a) r}" in tex and "\\textit{(b) s1}" in tex and "\\footnotesize" in tex
    assert len(comments) <= 3
    with pytest.raises(ValueError, match="table1"):
        write_study_reports(df, tmp_path, tables=["table1"], env=ENV, suite="study")


def test_table5_marks_entries_that_do_not_beat_the_control() -> None:
    control = [("none", a, "train+test", seed, "ok", acc) for a in (0, 2) for seed, acc in ((0, 0.395), (1, 0.405))]
    df = pd.concat([noise_df(), cells(control, ["attention", "noise", "noise_on", "seed", "status", "test_acc"],
                                      task="image")], ignore_index=True)
    md = table5(df, fmt="md")
    # a = 2: 40.29 - 40.00 is within the control's seed spread (0.71); a = 0: 41.39 - 40.00 is beyond both spreads
    assert "| Transformer               |     41.39 |    40.29° (−2.66%) |" in md and "| none " in md


def test_table5_figure_lists_models_in_the_tables_row_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline first and the control last, as Table 5's rows in every table's order (the figure listed them by
    name: `none` second)."""
    import harness.kinds.accuracy.study_figures as study_figures

    seen: list[list[str]] = []
    monkeypatch.setattr(study_figures, "plot_noise_robustness",
                        lambda summary, *a, **k: seen.append(list(dict.fromkeys(summary["label"]))) or [])
    rows = [(a, noise, "train+test", seed, "ok", 0.5) for a in ("s3attention", "none", "vanilla", "linformer")
            for noise in (0, 2) for seed in (0, 1)]
    df = cells(rows, ["attention", "noise", "noise_on", "seed", "status", "test_acc"], task="image")
    write_study_reports(df, tmp_path, tables=["table5"], env=ENV, suite="study")
    assert seen == [["Transformer", "S3Attention", "Linformer", "none (no mixing, control)"]]  # every table's order
