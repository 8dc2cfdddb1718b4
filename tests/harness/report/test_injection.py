"""No user string is injected into a CSV or LaTeX file: every CSV cell a spreadsheet would run as a formula is made
inert, and every string reaching LaTeX goes through one complete escaper. Fed through the table writers end to end:
an accuracy suite's variant label (Table 1, the study tables, their CSVs) and a forecasting suite's row names
(Table 2's header)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from harness.kinds.speed.report import table4
from harness.report.format import csv_safe, escape, tex_escape, write_csv
from tests.conftest import CliResult
from tests.harness.kinds.accuracy.test_kind import ACC
from tests.harness.kinds.speed.test_speed import make_results

#: Every LaTeX special character and a formula, in one label.
HOSTILE = "=cmd|' /C calc'!A0 \\input secret.tex \\relax & 50% #1 x_y {z} ~ ^ $"
SPECIALS = "\\&%$#_{}~^"


def _csv_cells(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return [cell for row in csv.reader(f) for cell in row]


def test_the_latex_escaper_prints_every_special_character_literally() -> None:
    out = tex_escape(HOSTILE)
    assert "\\input" not in out and "\\relax" not in out
    stripped = out
    for literal in (r"\textbackslash{}", r"\textasciitilde{}", r"\textasciicircum{}", r"\&", r"\%", r"\$", r"\#",
                    r"\_", r"\{", r"\}"):
        stripped = stripped.replace(literal, "")
    assert not any(ch in stripped for ch in SPECIALS), stripped


@pytest.mark.parametrize("value", ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"])
def test_a_formula_start_is_made_inert_and_numbers_stay_numbers(value: str, tmp_path: Path) -> None:
    assert csv_safe(value) == "'" + value and csv_safe(-2.0) == -2.0 and csv_safe("ok") == "ok"
    if not value[0].isprintable():  # a tab or carriage return: the check above; a CSV reader reads them otherwise
        return
    write_csv(pd.DataFrame({value: [value, "ok"], "n": [-1.5, 2.0]}), tmp_path / "x.csv")
    back = pd.read_csv(tmp_path / "x.csv")
    assert list(back.columns)[0] == "'" + value and back.iloc[0, 0] == "'" + value and back["n"].tolist() == [-1.5, 2.0]


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_a_hostile_variant_label_reaches_no_table_as_code(cli: Callable[..., CliResult],
                                                         write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    doc = {**ACC, "axes": {"attention": ["vanilla"], "task": ["listops"], "seed": [0]},
           "variants": {"base": {}, HOSTILE: {"dropout": 0.0}},
           "report": {"tables": ["table1", "table7"]}}
    result = cli("run", write_yaml(doc), "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    assert result.code == 0, result.err
    out = tmp_path / "out" / "acc" / "smoke"
    tex = [p for p in out.glob("*.tex")]
    csvs = [p for p in out.glob("*.csv")]
    assert tex and csvs
    for path in tex:
        text = path.read_text()
        assert "\\input" not in text and "\\relax" not in text, path.name
    for path in csvs:
        assert not any(cell.startswith(("=", "+", "@")) for cell in _csv_cells(path)), path.name


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_a_hostile_row_name_keeps_table_2s_columns(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    import yaml

    from tests.conftest import REPO_ROOT

    doc = yaml.safe_load((REPO_ROOT / "suites" / "forecasting.yaml").read_text())
    doc["report"] = {**doc.get("report", {}), "row_names": {"s3attention": "A & B 50% #1 x_y"}}
    result = cli("run", write_yaml(doc), "--out", tmp_path / "out", "--profile", "smoke", "--device", "cpu")
    assert result.code == 0, result.err
    tex = next((tmp_path / "out").rglob("table2.tex")).read_text()
    models = next(line for line in tex.splitlines() if line.startswith(" &  & \\multicolumn"))
    assert r"\multicolumn{2}{c}{A \& B 50\% \#1 x\_y}" in models
    header = next(line for line in tex.splitlines() if line.startswith("Dataset"))
    body = next(line for line in tex.splitlines() if line.strip() and line[0].isalpha() and line != header
                and "&" in line and not line.startswith("\\"))
    assert header.count(" & ") == body.count(" & ")  # the name added no column


def test_no_raw_html_or_cell_break_reaches_a_markdown_table() -> None:
    """A row name is shown as text in a rendered .md: its ``<script>`` as entities, its ``|`` escaped (LaTeX has its
    own escaper, above)."""
    assert escape("<script>alert(1)</script> a|b", "md") == r"&lt;script&gt;alert(1)&lt;/script&gt; a\|b"
    md = table4(make_results(), baseline="vanilla", fmt="md", row_names={"s3attention": "<script>x</script>|y"})
    assert "<script>" not in md and r"&lt;script&gt;x&lt;/script&gt;\|y" in md
    assert len({line.count(" | ") for line in md.splitlines() if line.startswith("| ")}) == 1  # the columns hold
