"""Table 1 (mean(std) over seeds, the average's own std across seeds, best in bold) against golden text."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from harness.kinds.accuracy.summary import row_label
from harness.kinds.accuracy.table1 import accuracy_summary, table1, write_accuracy_reports
from tests.harness.kinds.accuracy.test_studies import SWEEP_VARIANTS, noise_df, s7_df, sweep_df

ROWS = [
    # attention, task, seed, status, test_acc
    ("vanilla", "listops", 0, "ok", 0.36), ("vanilla", "listops", 1, "ok", 0.38),
    ("vanilla", "text", 0, "ok", 0.60), ("vanilla", "text", 1, "ok", 0.64),
    ("vanilla", "image", 0, "oom", None), ("vanilla", "image", 1, "oom", None),
    ("s3attention", "listops", 0, "ok", 0.40), ("s3attention", "listops", 1, "ok", 0.36),
    ("s3attention", "text", 0, "ok", 0.70), ("s3attention", "text", 1, "error", None),
    ("s3attention", "image", 0, "ok", 0.45), ("s3attention", "image", 1, "ok", 0.47),
]


def _df() -> pd.DataFrame:
    df = pd.DataFrame(ROWS, columns=["attention", "task", "seed", "status", "test_acc"])
    return df.assign(key=[f"k{i}" for i in range(len(df))], best_dev_acc=df["test_acc"])


def test_summary_mean_std_and_per_seed_average() -> None:
    s = accuracy_summary(_df()).set_index(["attention", "task"])
    assert math.isclose(s.loc[("vanilla", "listops"), "mean"], 37.0)
    assert math.isclose(s.loc[("vanilla", "listops"), "std"], math.sqrt(2.0))  # sample std of 36, 38
    assert s.loc[("vanilla", "image"), "n"] == 0 and s.loc[("vanilla", "image"), "failed"] == 2
    # s3attention's average exists only for seed 0 (seed 1 lost its text run): (40 + 70 + 45) / 3
    assert s.loc[("s3attention", "avg"), "n"] == 1
    assert math.isclose(s.loc[("s3attention", "avg"), "mean"], 155 / 3)
    assert ("vanilla", "avg") not in s.index or s.loc[("vanilla", "avg"), "n"] == 0


GOLDEN = Path(__file__).parent / "golden"


def test_table1_markdown_golden() -> None:
    """Exact text (checked by hand: e.g. s3attention's Avg is seed 0's (40 + 70 + 45) / 3 = 51.67 because seed 1
    lost its Text run; vanilla has no Avg since Image ran out of memory on every seed)."""
    assert table1(_df(), fmt="md") + "\n" == (GOLDEN / "table1.md").read_text()


def test_table1_latex_golden() -> None:
    tex = table1(_df(), fmt="tex")
    assert tex + "\n" == (GOLDEN / "table1.tex").read_text()
    assert tex.count("{") == tex.count("}")


def test_table1_drops_rows_that_ran_nowhere_with_a_footnote() -> None:
    nowhere = pd.DataFrame([("vanilla_xformers", t, 0, "unsupported", float("nan")) for t in ("listops", "text")],
                           columns=["attention", "task", "seed", "status", "test_acc"])
    df = pd.concat([_df(), nowhere.assign(key=["x0", "x1"], best_dev_acc=float("nan"))], ignore_index=True)
    tex = table1(df, fmt="tex")
    assert "Transformer (xFormers) &" not in tex  # no empty row
    assert r"\multicolumn{5}{l}{\footnotesize Not run here (unsupported): Transformer (xFormers).}" in tex
    md = table1(df, fmt="md")  # the same rows and the same note in Markdown
    assert "| Transformer (xFormers) |" not in md and md.endswith("Not run here (unsupported): Transformer (xFormers).")
    # a row whose every run ran out of memory is a result: it stays
    oom = df.assign(status=lambda d: d["status"].where(d["attention"] != "vanilla_xformers", "oom"))
    assert "Transformer (xFormers) & OOM" in table1(oom, fmt="tex")


def test_write_accuracy_reports(tmp_path: Path) -> None:
    written = write_accuracy_reports(_df(), _curves(), tmp_path, env={"device_name": "cpu"}, suite="acc")
    names = {p.name for p in written}
    assert {"results.csv", "env.json", "table1.md", "table1.tex", "table1.csv", "curves.csv",
            "curves_listops.png", "curves_listops.pdf"} <= names
    assert (tmp_path / "curves_listops.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "mean(std) over seeds 0, 1" in (tmp_path / "table1.md").read_text()


def test_table1_keeps_variants_and_noise_levels_apart() -> None:
    """Cells of different variants or noise levels are separate rows labelled "attention (variant, a=noise)";
    a column with a single value adds nothing to the labels."""
    base = _df().query("attention == 's3attention'")
    df = pd.concat([base.assign(variant="base"), base.assign(variant="r=1", test_acc=base["test_acc"] - 0.1)])
    md = table1(df, fmt="md")
    assert [line.split("|")[1].strip() for line in md.splitlines()[2:]] == ["S3Attention (base)", "S3Attention (r=1)"]
    assert "| S3Attention (r=1)  |     28.00(2.83) |     60.00 |     36.00(1.41) |     41.67 |" in md
    noisy = pd.concat([_df().assign(noise=0.0, noise_on="train+test"), _df().assign(noise=2.0, noise_on="test")])
    labels = [line.split("|")[1].strip() for line in table1(noisy, fmt="md").splitlines()[2:]]
    assert labels == ["Transformer (a=0)", "Transformer (a=2, test only)", "S3Attention (a=0)",
                      "S3Attention (a=2, test only)"]
    summary = accuracy_summary(noisy, ["attention", "noise"]).set_index(["attention", "noise", "task"])
    assert math.isclose(summary.loc[("vanilla", 2.0, "listops"), "mean"], 37.0)  # not averaged over noise levels


def _curves(**axes: object) -> pd.DataFrame:
    return pd.DataFrame({"key": ["k0", "k0", "k6", "k6"], "step": [1, 2, 1, 2], "train_loss": [1.0, 0.5, 1.1, 0.6],
                         "train_acc": [0.5] * 4, "dev_loss": [1.0] * 4, "dev_acc": [0.3, 0.4, 0.35, 0.45],
                         "attention": ["vanilla", "vanilla", "s3attention", "s3attention"],
                         "task": ["listops"] * 4, "seed": [0] * 4, **axes})


def test_learning_curves_labelled_like_table1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.kinds.accuracy.table1

    seen: list[pd.DataFrame] = []
    orders: list[list[str]] = []

    def spy(sub: pd.DataFrame, *args: object, order: list[str], **kwargs: object) -> list[Path]:
        seen.append(sub)
        orders.append(order)
        return []

    monkeypatch.setattr(harness.kinds.accuracy.table1, "plot_learning_curves", spy)
    df = pd.concat([_df().assign(variant="base"), _df().assign(variant="r=1")])
    curves = pd.concat([_curves(variant="base"), _curves(variant="r=1")])
    write_accuracy_reports(df, curves, tmp_path, env={}, suite="acc")
    # display names, as the paper prints them, in Table 1's row order: the baseline first
    assert sorted(set(seen[0]["model"])) == ["S3Attention (base)", "S3Attention (r=1)", "Transformer (base)",
                                              "Transformer (r=1)"]
    assert orders[0] == ["Transformer (base)", "Transformer (r=1)", "S3Attention (base)", "S3Attention (r=1)"]


def test_write_accuracy_reports_rejects_unknown_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="table9"):
        write_accuracy_reports(_df(), _curves(), tmp_path, env={}, suite="acc", options={"tables": ["table9"]})


DIFF = ("_diff.md", "_diff.tex", "_diff.csv")  # differences from the reference row, with intervals
STUDY_FILES = {
    "table1": ["table1.md", "table1.tex", "table1.csv", *(f"table1{d}" for d in DIFF), "claims.md"],
    "table5": ["table5.md", "table5.tex", "table5.csv", "table5_noise.png", "table5_noise.pdf",
               *(f"table5{d}" for d in DIFF), "claims.md"],
    "table6": ["table6.md", "table6.tex", "table6.csv", "table6_r.png", "table6_r.pdf", "table6_s1.png",
               "table6_s1.pdf", *(f"table6{d}" for d in DIFF), "claims.md"],
    "table7": ["table7.md", "table7.tex", "table7.csv", "table7_ablation.png", "table7_ablation.pdf",
               *(f"table7{d}" for d in DIFF), "claims.md"],
    "tableS7": ["tableS7.md", "tableS7.tex", "tableS7.csv", "tableS7_incoherence.png", "tableS7_incoherence.pdf",
                "claims.md"],
}


@pytest.mark.parametrize("tables", [None, ["table5"], ["table6", "table7"], ["tableS7", "table1"]])
def test_write_accuracy_reports_writes_the_tables_asked(tmp_path: Path, tables: list[str] | None) -> None:
    """Exactly the asked tables (default: Table 1) with their figures, plus the raw files and learning curves."""
    frames = {"table1": _df, "table5": noise_df, "table6": sweep_df, "table7": sweep_df, "tableS7": s7_df}
    df = pd.concat([frames[t]() for t in tables or ["table1"]], ignore_index=True)
    options = {"variants": SWEEP_VARIANTS, "baseline_variant": "base", "tables": tables}
    written = write_accuracy_reports(df, _curves(), tmp_path, env={"device_name": "cpu"}, suite="acc",
                                     options=options)
    expected = {"results.csv", "env.json", "curves.csv", "curves_listops.png", "curves_listops.pdf",
                *(name for t in tables or ["table1"] for name in STUDY_FILES[t])}
    assert sorted(p.name for p in written) == sorted(expected)
    assert {p.name for p in tmp_path.iterdir()} == expected
    for path in written:
        data = path.read_bytes()
        assert data and (path.suffix != ".png" or data.startswith(b"\x89PNG")) and (
            path.suffix != ".pdf" or data.startswith(b"%PDF"))


def test_every_csv_names_its_data_on_every_row(tmp_path: Path) -> None:
    """Each CSV a report writes has a ``data_source`` column, so that any of its rows, pasted alone, says that it
    was measured on a generated stand-in; where tasks differ in their data, each row names its own task's."""
    df = pd.concat([_df(), noise_df(), sweep_df(), s7_df()], ignore_index=True)
    df = df.assign(key=[f"k{i}" for i in range(len(df))])  # one key per cell, as in a store; _df's keep theirs
    sources = {task: f"generated stand-in (attnbench {task} stand-in v6: {{}})" for task in set(df["task"])}
    df = df.assign(data_source=df["task"].map(sources).where(df["status"] == "ok"))  # failed cells record none
    options = {"variants": SWEEP_VARIANTS, "baseline_variant": "base",
               "tables": ["table1", "table5", "table6", "table7", "tableS7"]}
    written = write_accuracy_reports(df, _curves(), tmp_path, env={}, suite="acc", options=options, plots=False)
    csvs = sorted(p.name for p in written if p.suffix == ".csv")
    assert {"table1.csv", "table1_diff.csv", "table5.csv", "table5_diff.csv", "table6.csv", "table6_diff.csv",
            "table7.csv", "table7_diff.csv", "tableS7.csv", "curves.csv", "results.csv"} <= set(csvs)
    for name in csvs:
        csv = pd.read_csv(tmp_path / name, keep_default_na=False)
        if name == "results.csv":  # one row per cell: a failed cell measured nothing
            csv = csv[csv["status"] == "ok"]
        assert len(csv) and csv["data_source"].str.contains("generated stand-in").all(), name
        if "task" in csv.columns:  # a task's rows name that task's data
            for task, source in csv.loc[csv["task"].isin(sources), ["task", "data_source"]].to_numpy():
                assert source == sources[task], (name, task, source)


def test_entries_that_do_not_beat_the_none_control_are_marked() -> None:
    """Margin over the control against the seed spread: listops 37.0 vs 36.5 (std 1.41) is below the spread and
    marked; text 62.0 vs 50.0 beats it; s3attention's single-seed text 70.0 beats 50.0 by more than the std of 0."""
    control = [("none", "listops", 0, "ok", 0.365), ("none", "listops", 1, "ok", 0.365),
               ("none", "text", 0, "ok", 0.50), ("none", "text", 1, "ok", 0.50)]
    df = pd.DataFrame(ROWS + control, columns=["attention", "task", "seed", "status", "test_acc"])
    df = df.assign(key=[f"k{i}" for i in range(len(df))], best_dev_acc=df["test_acc"])
    md = table1(df, fmt="md").splitlines()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in md[2:]}
    control = "none (no mixing, control)"
    assert list(rows) == ["Transformer", "S3Attention", control]  # the baseline first, the control last
    assert rows["Transformer"][:2] == ["37.00(1.41)°", "62.00(2.83)"]
    assert rows["S3Attention"][:2] == ["**38.00(2.83)**°", "**70.00**"] and "°" not in "".join(rows[control])
    assert r"\textbf{38.00(2.83)}$^\circ$" in table1(df, fmt="tex")
    assert "°" not in table1(_df(), fmt="md")  # no control ran: nothing is marked


def test_row_names_give_the_papers_row_order_and_names() -> None:
    names = {"vanilla": "Transformer", "s3attention": "S3Attention", "none": "No mixing"}
    md = table1(_df(), fmt="md", row_names={"s3attention": "S3Attention", "vanilla": "Transformer"})
    rows = [line.split("|")[1].strip() for line in md.splitlines()[2:]]
    assert rows == ["Transformer", "S3Attention"]  # the baseline first, then the paper's order
    df = _df().assign(attention=lambda d: d["attention"].replace({"vanilla": "linformer"}))
    rows = [line.split("|")[1].strip() for line in table1(df, fmt="md", baseline=None, row_names=names)
            .splitlines()[2:]]
    assert rows == ["S3Attention", "Linformer"]  # named rows in the given order, unnamed ones after


def test_learning_curves_name_the_ablated_variants_as_table_7_does() -> None:
    """The ablation suite's curves said ``no_col_attention`` where Table 7 and its figure say "w/o Col. Attn.": the
    displayed label is the table's; Markdown and CSV keep the name the user types."""
    values = {"attention": "s3attention", "variant": "no_col_attention"}
    assert row_label(values, display=True) == "S3Attention (w/o Col. Attn.)"
    assert row_label(values) == "s3attention (no_col_attention)"
