"""LaTeX that pastes into a paper: the one escaper of text, every table as a complete float (caption, label, the
packages it needs named on its first line) sized for the page, and the supplementary long table of every row.

Width, once for every table of the harness (the tabulars are read back with :mod:`harness.report.tabular`, which
estimates how wide and tall each prints). A table that fits a column is a ``table``; one whose ``value (note)``
cells fit a column on two lines is set that way; one that fits a column at 8-pt text or more is scaled to it. Any
other is a ``table*`` across both columns: at its own size where it fits, scaled to the text width where that takes
no less than :data:`MIN_SCALE`, else split by columns (the label columns repeated) rather than shrunk further. A
scaled tabular is scaled by LaTeX itself, and only where it is wider than its line: a table is never enlarged. A
float taller than a page is split into floats that each fit one. The caption is the title; the notes go under the
table in ``\footnotesize``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence

from .tabular import FONT_PT, LINE_PT, Tabular, cell_width, parse

#: The packages every generated float needs, named in its first line; the supplementary long tables need these.
PACKAGES = ("booktabs", "graphicx")
LONG_PACKAGES = ("booktabs", "longtable")
#: The page of a 10-pt two-column article (pt): a column's width, the text's, and the text's height. Narrower than the
#: columns of the IEEE (252 pt) and ACM (241 pt) classes, so a table that fits here fits those too.
COLUMN_PT = 229.5
TEXT_PT = 469.0
PAGE_PT = 550.0
#: The smallest scale of a table across both columns; a one-column table keeps its text at 8 pt or more.
MIN_SCALE = 0.85
COLUMN_MIN_SCALE = 8.0 / FONT_PT
#: An estimated width is trusted to within this share; a tabular estimated wider than ``FIT_CHECK`` of its line is
#: set in a box LaTeX scales down where the real width needs it.
MARGIN = 1.03
FIT_CHECK = 0.9

#: Every character LaTeX gives a meaning to in text, and how it is written literally (the one escaper every user
#: string reaching a .tex file goes through: a variant label ``\input secret.tex`` must print, never run).
_TEX_LITERAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
#: The symbols our notes and names use that a LaTeX text font may lack, as LaTeX writes them.
_TEX_SYMBOLS = {"†": r"\textdagger{}", "‡": r"\textdaggerdbl{}", "§": r"\S{}", "±": r"$\pm$", "×": r"$\times$",
                "°": r"$^\circ$", "—": "---", "–": "--", "≥": r"$\geq$", "≤": r"$\leq$", "→": r"$\rightarrow$",
                "−": "$-$", "²": r"\textsuperscript{2}", "μ": r"$\mu$", "·": r"$\cdot$", "≈": r"$\approx$",
                "…": r"\dots{}", "“": "``", "”": "''", "’": "'", "‘": "`", "ⁿ": r"\textsuperscript{n}",
                "ˢ": r"\textsuperscript{s}", "₂": r"$_2$", "√": r"$\surd$", "÷": r"$\div$", "‖": r"$\|$",
                "ᵀ": r"$^\top$", "ᵢ": r"$_i$", "⌊": r"$\lfloor$", "⌋": r"$\rfloor$", "⁻": r"$^-$", "¹": r"$^1$",
                "³": r"$^3$", "⁴": r"$^4$", "½": r"$\frac12$", "∞": r"$\infty$", "∈": r"$\in$", "✕": r"$\times$",
                "ʳ": r"\textsuperscript{r}", "\u0303": ""}
#: Greek capitals that look like Latin ones have no LaTeX command: they are written as the Latin letter.
_LATIN_LOOKING = {"ALPHA": "A", "BETA": "B", "EPSILON": "E", "ZETA": "Z", "ETA": "H", "IOTA": "I", "KAPPA": "K",
                  "MU": "M", "NU": "N", "OMICRON": "O", "RHO": "P", "TAU": "T", "CHI": "X"}


def _symbol(ch: str) -> str | None:
    """LaTeX for a symbol of :data:`_TEX_SYMBOLS` or a Greek letter; None for any other character."""
    if ch in _TEX_SYMBOLS:
        return _TEX_SYMBOLS[ch]
    name = unicodedata.name(ch, "")
    if name.startswith(("GREEK SMALL LETTER ", "GREEK CAPITAL LETTER ")) and len(name.split()) == 4:
        letter = name.split()[-1]
        if name.startswith("GREEK CAPITAL"):
            return _LATIN_LOOKING.get(letter) or rf"$\{letter.capitalize()}$"
        return "o" if letter == "OMICRON" else rf"$\{'varsigma' if letter == 'FINAL' else letter.lower()}$"
    return None


def tex_escape(text: str) -> str:
    """``text`` as LaTeX prints it literally (names, labels: anything a user wrote): LaTeX's special characters
    escaped, the symbols of :data:`_TEX_SYMBOLS` and Greek letters as LaTeX writes them, and any other character
    beyond Latin Extended (which a pdflatex document with T1 fonts cannot typeset: CJK, emoji) as ``?``."""
    return "".join(_TEX_LITERAL.get(ch) or _symbol(ch) or (ch if ord(ch) <= 0x24F else "?") for ch in str(text))


def tex_text(text: str) -> str:
    """Prose for a caption or a note: escaped, the symbols of :data:`_TEX_SYMBOLS` in LaTeX, Markdown's `code` as
    ``\\texttt``, ``**bold**`` as bold; one paragraph (a blank line would end a caption's argument)."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", " ".join(str(text).split()))):
        escaped = tex_escape(part)
        out.append(rf"\texttt{{{escaped}}}" if i % 2 else re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", escaped))
    return "".join(out)


def tex_comment(text: str) -> str:
    """A one-line LaTeX comment: a newline inside ``text`` would end the comment and leak text into the document."""
    return "% " + " ".join(str(text).splitlines())


def tex_notes(text: str) -> list[str]:
    """The paragraphs of a table's notes (blank-line separated), each as LaTeX prose."""
    return [tex_text(p) for p in re.split(r"\n\s*\n", str(text)) if p.strip()]


def label_columns(spec: str) -> int:
    """How many leading columns name a row (the left-aligned ones): a split tabular repeats them."""
    return max(1, len(spec) - len(spec.lstrip("l")))


def _caption(title: str) -> str:
    """A title as a caption: without its "Table N — " (LaTeX numbers the table), a capital first."""
    text = re.sub(r"^Table \S+ — ", "", title)
    return tex_text(text[:1].upper() + text[1:])


def _tightest(tables: Sequence[Tabular], keys: int | None) -> tuple[str, list[Tabular]]:
    """The float environment and tabulars of the narrowest setting that keeps the text large (see the module
    docstring)."""
    def widest(ts: Sequence[Tabular]) -> float:
        return MARGIN * max(t.width() for t in ts)

    two = [t.two_line(keys or label_columns(t.spec)) for t in tables]
    for floor in (1.0, COLUMN_MIN_SCALE):
        for option in (list(tables), two):
            if widest(option) <= COLUMN_PT / floor:
                return "table", option
    if widest(tables) <= TEXT_PT / MIN_SCALE:
        return "table*", list(tables)
    return "table*", [p for t in tables for p in t.split(TEXT_PT / MARGIN, keys or label_columns(t.spec))]


def _text_height(text: str, width: float, font_pt: float) -> float:
    """The height (pt) of a paragraph of ``text`` (LaTeX) at ``width``: its lines (ragged, a tenth longer than the
    glyphs' width) at 1.2 times the font size."""
    return math.ceil(1.1 * cell_width(text, font_pt) / width) * 1.2 * font_pt if text else 0.0


def _pages(tables: Sequence[Tabular], width: float, reserved: float) -> list[list[Tabular]]:
    """The tabulars in floats that each fit a page with ``reserved`` pt of caption and notes: whole tabulars where
    they fit, a tabular taller than a page in parts of its rows (its head repeated)."""
    room = 0.95 * PAGE_PT - reserved
    pages: list[list[Tabular]] = [[]]
    used = 0.0
    for table in tables:
        for part in table.chunks(room):
            if pages[-1] and used + part.height() > room:
                pages.append([])
                used = 0.0
            pages[-1].append(part)
            used += part.height() + LINE_PT / 2
    return pages


def _fitted(table: Tabular, width: float) -> list[str]:
    """A tabular's lines under its heading, in a box LaTeX scales down to the line where its estimate is close to
    or beyond the line's width (never up)."""
    heading = [rf"\textit{{{table.heading}}}\par\smallskip"] if table.heading else []
    if MARGIN * table.width() <= FIT_CHECK * width:
        return [*heading, table.latex()]
    return [*heading, r"\sbox0{%", table.latex() + "%",
            r"}\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi"]


def _header(packages: Sequence[str], comments: Sequence[str], why: str = "") -> list[str]:
    needs = ", ".join(r"\usepackage{" + p + "}" for p in packages)
    return [f"% Needs {needs} in the preamble.{why}", *(tex_comment(c) for c in comments)]


def tex_float(body: str, *, caption: str, label: str, notes: str = "", comments: Sequence[str] = (),
              keys: int | None = None) -> str:
    """Complete table floats around ``body`` (the tabulars :func:`harness.report.tabular.booktabs` wrote, with the
    headings of sub-tables): ``caption`` (prose, escaped here), ``\\label`` ``tab:<label>``, ``notes`` (prose) and
    the footnote rows of the tabulars under the table; ``comments`` (e.g. where it was measured) as comment lines
    under the packages line. ``keys``: the label columns a split tabular repeats (default: the left-aligned ones).
    One float where it fits a page, else several (``(continued)``, labels ``tab:<label>-2``, ...)."""
    tables, other = parse(body)
    caption = _caption(caption)
    paragraphs = list(dict.fromkeys([*tex_notes(notes), *(n for t in tables for n in t.notes)]))
    safe_label = re.sub(r"[^A-Za-z0-9:._-]+", "-", label)
    env, tables = _tightest(tables, keys) if tables else ("table", [])
    width = COLUMN_PT if env == "table" else TEXT_PT
    # the notes as wide as the table, at least a column
    note_width = width if env == "table" else min(TEXT_PT, max(COLUMN_PT, *(t.width() for t in tables)))
    reserved = (_text_height(caption, width, FONT_PT) + _text_height(" ".join(paragraphs), note_width, 8.0)
                + 2 * LINE_PT)
    pages = _pages(tables, width, reserved) if tables else [[]]
    notes = _notes(paragraphs, note_width)
    lines = _header(PACKAGES, comments)
    for i, page in enumerate(pages):
        blocks = [_fitted(t, width) for t in page]
        lines += [rf"\begin{{{env}}}[t]", r"\centering", r"\small",
                  rf"\caption{{{caption}{' (continued)' if i else ''}}}",
                  rf"\label{{tab:{safe_label}{f'-{i + 1}' if i else ''}}}", r"\smallskip",
                  *(other if i == 0 else []),
                  *[line for n, block in enumerate(blocks) for line in ([r"\par\medskip"] if n else []) + block],
                  *(notes if i == len(pages) - 1 else []), rf"\end{{{env}}}"]
    return "\n".join(lines) + "\n"


def _notes(paragraphs: Sequence[str], width: float) -> list[str]:
    """The notes under a float, in ``\\footnotesize``, as wide as the table (at least a column), left-aligned."""
    if not paragraphs:
        return []
    return [r"\par\smallskip", rf"\begin{{minipage}}{{{min(width, TEXT_PT):.0f}pt}}\footnotesize\raggedright",
            r"\par ".join(paragraphs), r"\end{minipage}"]


def tex_longtable(body: str, *, caption: str, label: str, notes: str = "", comments: Sequence[str] = (),
                  keys: int | None = None) -> str:
    """Every row of ``body``'s tabulars as ``longtable`` s that break across pages, for a supplement: the caption
    over the first, each tabular split by columns where it is wider than the text, the notes under the last. In a
    two-column document the file starts a one-column page (longtable does not break pages in two columns)."""
    tables, other = parse(body)
    paragraphs = list(dict.fromkeys([*tex_notes(notes), *(n for t in tables for n in t.notes)]))
    parts = [p for t in tables for p in t.split(TEXT_PT / MARGIN, keys or label_columns(t.spec))]
    caption = _caption(caption)
    lines = [*_header(LONG_PACKAGES, comments, " Longtable breaks pages in one-column mode only: in a two-column "
                                              "document this starts a one-column page."),
             r"\makeatletter\if@twocolumn\onecolumn\fi\makeatother", *other, r"\begingroup\small"]
    for i, part in enumerate(parts):
        first = [rf"\caption{{{caption}}}\label{{tab:{re.sub(r'[^A-Za-z0-9:._-]+', '-', label)}}}\\"] if i == 0 else []
        heading = [rf"\multicolumn{{{len(part.spec)}}}{{l}}{{\textit{{{part.heading}}}}}\\"] if part.heading else []
        head = [r"\toprule", *part.head, r"\midrule"]
        more = rf"\multicolumn{{{len(part.spec)}}}{{r}}{{\footnotesize continued on the next page}}\\"
        lines += [rf"\begin{{longtable}}{{{part.spec}}}", *first, *heading, *head, r"\endfirsthead", *head,
                  r"\endhead", r"\midrule", more, r"\endfoot", r"\bottomrule", r"\endlastfoot", *part.body,
                  r"\end{longtable}", *([] if i == 0 else [r"\addtocounter{table}{-1}"])]  # no caption, no number
    lines += [r"\endgroup", *([r"{\footnotesize\noindent " + r"\par\noindent ".join(paragraphs) + r"\par}"]
                              if paragraphs else [])]
    return "\n".join(lines) + "\n"
