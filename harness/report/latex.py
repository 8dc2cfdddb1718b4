"""LaTeX that pastes into a paper: the one escaper of text, and every table as a complete float (caption, label, the
packages it needs named on its first line) that fits the column it is meant for.

Width. A two-column paper's column (241 pt in a 10-pt article) holds about 48 characters of ``\\small`` digits,
fewer in bold; :data:`COLUMN_CHARS` and :data:`TEXT_CHARS` leave a margin for that. :func:`tex_width` estimates a
tabular's width from its longest cell per column (the text a reader sees: commands and math markup removed). A table
that fits a column is a ``table``; a wider one a ``table*`` across both columns; one wider than that is scaled to the
text width with ``\\resizebox`` (graphicx) rather than run into the margin. The estimate is a character count, so the
smoke tests compile every generated file with a real LaTeX engine where one is installed and fail on an overfull box
(tests/latex.py).
"""

from __future__ import annotations

import re
import unicodedata

#: The packages every generated ``.tex`` needs, named in its first line.
PACKAGES = ("booktabs", "graphicx")
COLUMN_CHARS = 46
TEXT_CHARS = 84

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
                "\u0303": ""}
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
    """Prose for a caption: escaped, the symbols of :data:`_TEX_SYMBOLS` in LaTeX, Markdown's `code` as
    ``\\texttt``, ``**bold**`` as bold."""
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", str(text))):
        escaped = tex_escape(part)
        out.append(rf"\texttt{{{escaped}}}" if i % 2 else re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", escaped))
    return "".join(out)


def tex_comment(text: str) -> str:
    """A one-line LaTeX comment: a newline inside ``text`` would end the comment and leak text into the document."""
    return "% " + " ".join(str(text).splitlines())


def _visible(cell: str) -> str:
    """What a reader sees of a cell: commands, braces and math shifts removed, a command for a symbol as one char."""
    cell = re.sub(r"\\(textbf|underline|texttt|textsuperscript|emph)\{", "{", cell)
    cell = re.sub(r"\\multicolumn\{\d+\}\{[^}]*\}", "", cell)
    cell = re.sub(r"\\[a-zA-Z]+\*?(\{\})?", "x", cell)  # \pm, \dagger, \times, \S: one glyph each
    return re.sub(r"[{}$^_]", "", cell).replace(r"\%", "%").strip()


def tex_width(tabular: str) -> int:
    """The estimated width of a tabular in characters: per column its longest visible cell, plus the column gaps
    (rows of ``\\multicolumn`` headers are left out: they span columns counted already)."""
    widths: list[int] = []
    for line in tabular.splitlines():
        if not line.rstrip().endswith(r"\\") or r"\multicolumn" in line:
            continue
        cells = line.rstrip().removesuffix(r"\\").split(" & ")
        widths += [0] * (len(cells) - len(widths))
        for i, cell in enumerate(cells):
            widths[i] = max(widths[i], len(_visible(cell)))
    return sum(widths) + 3 * max(len(widths) - 1, 0)  # a gap (2 \tabcolsep) is about 3 characters


def tex_float(tabular: str, *, caption: str, label: str, comments: tuple[str, ...] = ()) -> str:
    """A complete table float around ``tabular`` (LaTeX already): ``caption`` (prose, escaped here), ``\\label``
    ``tab:<label>``, a ``table`` where it fits a column, else ``table*``, scaled down only where even that is too
    narrow; ``comments`` (e.g. where it was measured) as comment lines under the packages line."""
    caption = re.sub(r"^Table \S+ — ", "", caption)  # LaTeX numbers the table itself
    width = tex_width(tabular)
    env = "table" if width <= COLUMN_CHARS else "table*"
    fits = width <= (COLUMN_CHARS if env == "table" else TEXT_CHARS)
    span = r"\columnwidth" if env == "table" else r"\textwidth"
    body = tabular if fits else f"\\resizebox{{{span}}}{{!}}{{%\n{tabular}%\n}}"
    safe_label = re.sub(r"[^A-Za-z0-9:._-]+", "-", label)
    packages = ", ".join(r"\usepackage{" + p + "}" for p in PACKAGES)
    return "\n".join([
        f"% Needs {packages} in the preamble.",
        *(tex_comment(c) for c in comments),
        rf"\begin{{{env}}}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{tex_text(caption)}}}",
        rf"\label{{tab:{safe_label}}}",
        body,
        rf"\end{{{env}}}",
    ]) + "\n"
