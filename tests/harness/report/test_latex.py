"""Tables sized for the page (harness.report.latex, harness.report.tabular): a table that fits a column is a ``table``
at its own size, a wider one a ``table*``, scaled only where LaTeX finds it wider than the text and never below
0.85, split by columns where even that is too narrow; a float taller than a page is split; the caption is the title
and the notes go under the table; the long table of every row breaks across pages.

Where pdflatex is installed, the layouts are compiled and the engine's own measurements are checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.report.format import booktabs, dropped_note, sub_tables, tex_float, tex_longtable, write_table_files
from harness.report.latex import COLUMN_MIN_SCALE, COLUMN_PT, MIN_SCALE, TEXT_PT, tex_escape
from harness.report.tabular import cell_width, parse
from tests.latex import ENGINE, compile_report

needs_latex = pytest.mark.skipif(ENGINE is None, reason="no pdflatex")


def _tabular(columns: int, rows: int = 3, cell: str = "12.3 (1.4$\\times$)", name: str = "Nyströmformer") -> str:
    head = [" & ".join(["Model", *(f"{1 << i}K" for i in range(columns))]) + r" \\"]
    return booktabs("l" + "r" * columns, head, [[name, *([cell] * columns)] for _ in range(rows)])


def _unboxed(tex: str) -> str:
    """A float's LaTeX without the box that scales a tabular, for :func:`harness.report.tabular.parse`."""
    return tex.replace("\\sbox0{%\n", "").replace("\\end{tabular}%\n}", "\\end{tabular}\n")


def _env(tex: str) -> list[str]:
    return re.findall(r"\\begin\{(table\*?)\}", tex)


def test_a_table_that_fits_a_column_is_a_table_at_its_own_size() -> None:
    tex = tex_float(_tabular(2, cell="12.3"), caption="Title", label="t")
    assert _env(tex) == ["table"] and r"\resizebox" not in tex


def test_a_table_wider_than_a_column_spans_both_at_its_own_size() -> None:
    tex = tex_float(_tabular(5), caption="Title", label="t")
    assert _env(tex) == ["table*"] and r"\resizebox" not in tex


def test_value_note_cells_go_on_two_lines_where_that_fits_a_column() -> None:
    tex = tex_float(_tabular(4), caption="Title", label="t")
    assert _env(tex) == ["table"]
    assert "Nyströmformer & 12.3 & 12.3 & 12.3 & 12.3 \\\\\n & (1.4$\\times$) & (1.4$\\times$)" in tex


def test_a_table_a_little_wider_than_the_text_is_scaled_by_latex_only_where_it_must() -> None:
    """Scaled to the line only where LaTeX measures it wider (``\\ifdim``): never enlarged, whatever the estimate."""
    tex = tex_float(_tabular(7), caption="Title", label="t")
    (table,), _ = parse(_unboxed(tex))
    assert TEXT_PT < table.width() <= TEXT_PT / MIN_SCALE
    assert _env(tex) == ["table*"] and r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else" in tex


def test_a_table_far_wider_than_the_text_is_split_by_columns_not_shrunk() -> None:
    tex = tex_float(_tabular(16, cell="12.3 (1.4$\\times$) 12.3"), caption="Title", label="t")
    tables, _ = parse(_unboxed(tex))
    assert len(tables) >= 2 and all(t.width() <= TEXT_PT for t in tables)
    assert all(t.body[0].startswith("Nyströmformer & ") for t in tables)  # the label column on every part
    assert sum(len(t.spec) - 1 for t in tables) == 16  # every column once
    assert abs(len(tables[0].spec) - len(tables[-1].spec)) <= 1  # parts of even width


def test_a_split_keeps_a_spanning_header_together_or_repeats_a_title() -> None:
    """A ``\\multicolumn`` over a model's MSE and MAE ties them; one over every data column is a title, repeated."""
    models = " & ".join(rf"\multicolumn{{2}}{{c}}{{Model {i}}}" for i in range(8))
    head = [f" & & {models} \\\\", " & ".join(["Dataset", "H", *(["MSE", "MAE"] * 8)]) + r" \\"]
    wide = booktabs("lr" + "cc" * 8, head, [["Electricity", "720", *(["0.123$^\\ddagger$"] * 16)]])
    for table in parse(tex_float(wide, caption="T", label="t", keys=2))[0]:
        assert re.search(r"multicolumn\{1\}", table.latex()) is None  # no model cut from its pair
        assert table.body[0].startswith("Electricity & 720 & ")
    titled = booktabs("l" + "r" * 16, [r" & \multicolumn{16}{c}{Time (ms)} \\", r"\cmidrule(lr){2-17}",
                                       " & ".join(["Model", *map(str, range(16))]) + r" \\"],
                      [["Name", *(["123.4 (1.2$\\times$)"] * 16)]])
    parts = parse(tex_float(titled, caption="T", label="t"))[0]
    assert len(parts) >= 2 and all("{Time (ms)}" in p.head[0] and r"\cmidrule(lr){2-" in p.head[1] for p in parts)


def test_a_float_taller_than_a_page_is_split_into_floats_that_fit() -> None:
    tex = tex_float(_tabular(2, rows=120, cell="1.0"), caption="Tall", label="tall", notes="A note.")
    assert tex.count(r"\begin{table}") >= 3 and r"\caption{Tall (continued)}" in tex
    assert r"\label{tab:tall}" in tex and r"\label{tab:tall-2}" in tex
    assert tex.count("A note.") == 1 and tex.rindex("A note.") > tex.rindex(r"\begin{table}")  # under the last part


def test_the_caption_is_the_title_and_the_notes_go_under_the_table() -> None:
    """A short caption (a blank line in a caption's argument is a LaTeX error: ranking.tex's notes had them); the
    notes, paragraphs kept, in footnote size under the table; footnote rows of the tabular with them."""
    body = booktabs("lr", ["Model & 1K \\\\"], [["A", "1.0"], dropped_note(["Transformer (xFormers)"],
                                                                               ["unsupported"], 2)])
    tex = tex_float(body, caption="Table 4 — speed: what\n\nit is", label="t", notes="First note.\n\nSecond.")
    caption = re.search(r"\\caption\{(.*)\}\n", tex).group(1)
    assert caption == "Speed: what it is"
    assert re.search(r"\\footnotesize\\raggedright\nFirst note.\\par Second.\\par Not run here \(unsupported\): "
                     r"Transformer \(xFormers\).\n\\end\{minipage\}", tex)
    assert "multicolumn" not in tex  # the footnote no longer widens the last column


def test_sub_table_headings_are_shown_over_their_tabulars() -> None:
    body = sub_tables([("Noise on train and test (train+test)", _tabular(1)), ("Noise on test only (test only)",
                                                                                _tabular(1))], "tex")
    tex = tex_float(body, caption="T", label="t")
    assert r"\textit{Noise on train and test (train+test)}\par\smallskip" in tex
    assert r"\textit{Noise on test only (test only)}\par\smallskip" in tex


def test_the_long_table_of_every_row_breaks_across_pages(tmp_path: Path) -> None:
    written = write_table_files(tmp_path, "t4", title="Table 4 — speed: x", note="n", md_body="|a|", env={},
                                tex_body=_tabular(2, rows=2), tex_full=_tabular(2, rows=90))
    assert [p.name for p in written] == ["t4.md", "t4.tex", "t4_full.tex"]
    full = (tmp_path / "t4_full.tex").read_text()
    assert full.startswith(r"% Needs \usepackage{booktabs}, \usepackage{longtable} in the preamble.")
    assert r"\if@twocolumn\onecolumn\fi" in full and full.count("Nyströmformer &") == 90
    assert r"\caption{Speed: x: every row}\label{tab:t4_full}\\" in full and r"\endhead" in full
    assert "Every row: t4_full.tex" in (tmp_path / "t4.tex").read_text()


def test_a_long_table_wider_than_the_text_is_split_by_columns() -> None:
    full = tex_longtable(_tabular(16, cell="12.3 (1.4$\\times$) 12.3"), caption="T", label="t")
    assert full.count(r"\begin{longtable}") >= 2 and r"\addtocounter{table}{-1}" in full


def test_the_width_of_a_cell_counts_glyphs_not_markup() -> None:
    assert cell_width(r"\textbf{12.3}") > cell_width("12.3") > 0
    assert cell_width(r"1.07$^\dagger$ (1.2$\times$$^\dagger$)") < cell_width("1.07+ (1.2x+)") + 10
    assert tex_escape("ʳ") == r"\textsuperscript{r}"  # the compile table's mark, not "?"


@needs_latex
def test_latex_measures_what_the_estimate_says(tmp_path: Path) -> None:
    """The estimate of a tabular's width is within a few percent of the engine's, bold, marks and rules included,
    and each layout compiles clean: the right float, scaled within [0.85, 1] (a column's table: 8 pt or more)."""
    cases = {"column": (_tabular(2, cell="\\textbf{12.3}$^\\dagger$"), "table"),
             "two_lines": (_tabular(4), "table"),
             "wide": (_tabular(5), "table*"),
             "scaled": (_tabular(7), "table*"),
             "split": (_tabular(16, cell="12.3 (1.4$\\times$) 12.3"), "table*"),
             "tall": (_tabular(2, rows=120, cell="1.0"), "table")}
    files, floats = [], {}
    for name, (body, _) in cases.items():
        files.append(tmp_path / f"{name}.tex")
        floats[name] = tex_float(body, caption=name, label=name, notes="A note under the table. " * 8)
        files[-1].write_text(floats[name])
    compiled = compile_report(files, tmp_path / "latex")
    assert compiled.pdf is not None and not compiled.problems, compiled.problems
    for name, (_, env) in cases.items():
        typeset = compiled.files[f"{name}.tex"]
        assert set(typeset.envs) == {env}, name
        floor = COLUMN_MIN_SCALE if env == "table" else MIN_SCALE
        assert all(floor - 1e-3 <= s <= 1.0 for s in typeset.scales), (name, typeset.scales)
        estimates = [t.width() for t in parse(_unboxed(floats[name]))[0]]
        pairs = list(zip(estimates, typeset.widths, strict=True))
        assert all(abs(e / m - 1) < 0.04 for e, m in pairs), (name, pairs)
    assert compiled.files["scaled.tex"].scales  # LaTeX found it wider than the text: scaled, by the bound above
    assert not compiled.files["wide.tex"].scales and not compiled.files["column.tex"].scales


@needs_latex
def test_the_compile_check_fails_on_what_does_not_print(tmp_path: Path) -> None:
    """A float taller than a page, a table scaled below 0.85 or above 1, an overfull box and a LaTeX error are each
    a problem (the old writers' Table 4 at 54% and Table 1 enlarged ×1.22 passed the old check)."""
    rows = "\n".join(f"r{i} & 1 \\\\" for i in range(80))
    bad = {"tall": rf"\begin{{table}}[t]\begin{{tabular}}{{lr}}{rows}\end{{tabular}}\end{{table}}",
           "shrunk": r"\begin{table*}[t]\resizebox{\textwidth}{!}{\begin{tabular}{l}" + "x" * 400
                     + r"\end{tabular}}\end{table*}",
           "enlarged": r"\begin{table*}[t]\resizebox{\textwidth}{!}{\begin{tabular}{l}x\end{tabular}}\end{table*}",
           "overfull": r"\begin{table}[t]\begin{tabular}{l}" + "x" * 120 + r"\end{tabular}\end{table}"}
    files = []
    for name, text in bad.items():
        files.append(tmp_path / f"{name}.tex")
        files[-1].write_text(text + "\n")
    problems = "\n".join(compile_report(files, tmp_path / "latex").problems)
    assert "tall.tex: LaTeX Warning: Float too large" in problems
    assert re.search(r"shrunk.tex: scaled by 0\.\d+, outside", problems)
    assert re.search(r"enlarged.tex: scaled by \d+\.\d+, outside", problems)
    assert "overfull.tex: Overfull" in problems
    (tmp_path / "error.tex").write_text("\\begin{table}\\undefinedcommand\\end{table}\n")
    assert any("error.tex: !" in p for p in compile_report([tmp_path / "error.tex"], tmp_path / "e").problems)
    assert COLUMN_PT < TEXT_PT
