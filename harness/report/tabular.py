"""Booktabs tabulars as data: how wide and how tall one prints, and the two ways to narrow one without shrinking its
text — cells of ``value (multiplier)`` on two lines, and the columns split into several tabulars that repeat the
label columns.

Every LaTeX table of the harness is written by :func:`booktabs` and read back here (:func:`parse`), so the layout
decisions of :mod:`harness.report.latex` are taken once for every kind, on the tables as they were written.

Widths are estimated from the glyph widths of Latin Modern (the default font of pdflatex documents, and among the
widest of the fonts papers use: Times is narrower) at the ``\\small`` size the floats set, with LaTeX's column
gaps. The estimate is a sum of glyph widths, not a typesetting, so the smoke tests compile every generated file with
a real LaTeX engine where one is installed (tests/latex.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

#: The size (pt) of a float's ``\\small`` text in a 10-pt paper, its line height, and the gap either side of a column.
FONT_PT = 9.0
LINE_PT = 11.0
TABCOLSEP_PT = 6.0
#: Height of a booktabs rule with the space around it (top and bottom rules, mid rules), and of a sub-table heading.
RULE_PT = 6.0
HEADING_PT = 15.0

#: Glyph widths of Latin Modern Roman at its 9-pt design size (T1; thousandths of an em) for the printable ASCII
#: characters, space to tilde.
_ADVANCE = [int(w) for w in (
    "343 286 387 856 514 856 799 286 400 400 514 799 286 343 286 514 514 514 514 514 514 514 514 514 514 514 286 286 "
    "799 799 799 485 799 771 728 742 785 699 671 806 771 371 528 799 642 942 771 799 699 799 756 571 742 771 771 "
    "1056 771 771 628 286 514 286 556 771 286 514 571 457 571 457 314 514 571 286 314 542 286 856 571 514 571 542 "
    "402 405 400 571 542 742 542 542 457 514 286 514 556").split()]
#: Bold glyphs are about this much wider; a superscript is set this much smaller, with this space (em) after it.
BOLD, SCRIPT, SCRIPT_SPACE_EM = 1.15, 0.7, 0.06
#: The widths (em) of the commands a cell uses for one glyph; an unknown command counts as a digit.
_COMMAND_EM = {r"\times": 0.8, r"\pm": 0.8, r"\to": 1.0, r"\rightarrow": 1.0, r"\cdot": 0.278, r"\dagger": 0.444,
               r"\ddagger": 0.444, r"\S": 0.444, r"\circ": 0.5, r"\textdagger": 0.444, r"\textdaggerdbl": 0.444,
               r"\dots": 1.03, r"\%": 0.856, r"\&": 0.8, r"\_": 0.514, r"\#": 0.856, r"\$": 0.5, r"\{": 0.5,
               r"\}": 0.5, r"\,": 0.167, r"\ ": 0.333, r"\textasciitilde": 0.5, r"\textbackslash": 0.5, r"\|": 0.5,
               r"\textasciicircum": 0.5, r"\surd": 0.833, r"\infty": 1.0, r"\geq": 0.778, r"\leq": 0.778}
#: Commands that print nothing themselves (a style for the group that follows, or a size).
_NO_GLYPH = {r"\textbf", r"\underline", r"\emph", r"\texttt", r"\textit", r"\textsuperscript", r"\footnotesize",
             r"\small", r"\itshape", r"\bfseries", r"\multicolumn", r"\mathrm"}
_TOKEN = re.compile(r"\\[a-zA-Z]+\*?|\\.|---|--|.", re.S)
_MULTICOLUMN = re.compile(r"^\\multicolumn\{(\d+)\}\{([^}]*)\}\{(.*)\}$", re.S)
_CMIDRULE = re.compile(r"\\cmidrule(\([a-z]*\))?\{(\d+)-(\d+)\}")

#: The first line of a sub-table's heading in a LaTeX body (:func:`heading_line`), and the start of a footnote row
#: (:func:`footnote_row`): the float writer shows the one above its tabular and moves the other under the float.
HEADING_MARK = "% heading: "
_FOOTNOTE = r"\footnotesize "


def cell_width(cell: str, font_pt: float = FONT_PT) -> float:
    """The printed width (pt) of one cell's LaTeX at ``font_pt``: glyph widths, bold and superscripts included."""
    em, stack, scale, pending = 0.0, [], 1.0, None
    for token in _TOKEN.findall(cell):
        if token == "{":
            stack.append(scale)
            scale, pending = (pending if pending is not None else scale), None
            continue
        if token == "}":
            scale = stack.pop() if stack else 1.0
            continue
        if token in (r"\textbf", r"\bfseries"):
            pending = scale * BOLD
        elif token in ("^", r"\textsuperscript"):
            pending = scale * SCRIPT
            em += SCRIPT_SPACE_EM
        if token in _NO_GLYPH or token in ("$", "^", "_"):
            continue
        size = pending if pending is not None else scale
        pending = None
        if token.startswith("\\") or token in ("---", "--"):
            em += size * _COMMAND_EM.get(token, {"---": 1.03, "--": 0.514}.get(token, 0.514))
        else:
            em += size * (_ADVANCE[ord(token) - 32] / 1000 if 32 <= ord(token) < 127 else 0.514)
    return em * font_pt


@dataclass(frozen=True)
class Cell:
    """One cell of a row: its LaTeX, the columns it spans and, for a ``\\multicolumn``, its column spec."""

    text: str
    span: int = 1
    spec: str = ""

    def latex(self) -> str:
        return rf"\multicolumn{{{self.span}}}{{{self.spec}}}{{{self.text}}}" if self.spec else self.text


def cells(line: str) -> list[Cell] | None:
    """The cells of a row line (``a & b \\\\``), or None for a line that is not a row (a rule)."""
    stripped = line.rstrip()
    if not stripped.endswith(r"\\"):
        return None
    out = []
    for text in stripped.removesuffix(r"\\").rstrip().split(" & "):
        found = _MULTICOLUMN.match(text.strip())
        out.append(Cell(found.group(3), int(found.group(1)), found.group(2)) if found else Cell(text.strip()))
    return out


def row_line(row: Sequence[Cell]) -> str:
    return " & ".join(c.latex() for c in row) + r" \\"


def booktabs(columns: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A LaTeX booktabs ``tabular`` with column spec ``columns``, ``head`` lines (already LaTeX) above the mid rule."""
    return "\n".join([
        rf"\begin{{tabular}}{{{columns}}}",
        r"\toprule",
        *head,
        r"\midrule",
        *(" & ".join(row) + r" \\" for row in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ])


def footnote_row(text: str, n_columns: int) -> list[str]:
    """A row holding a footnote (LaTeX) under a tabular's body, which the float writer moves under the float: a
    footnote inside a tabular would set the width of its last column."""
    return [rf"\multicolumn{{{n_columns}}}{{l}}{{{_FOOTNOTE}{text}}}"]


def heading_line(text: str) -> str:
    """The line naming a sub-table (LaTeX, one line), put before its tabular; the float shows it above the tabular."""
    return HEADING_MARK + " ".join(text.split())


@dataclass(frozen=True)
class Tabular:
    """A booktabs tabular: its column letters (``l``, ``c``, ``r``), the lines above its mid rule and below it (rows
    and rules), the footnotes taken out of its body and the heading over it (LaTeX; "" for none)."""

    spec: str
    head: tuple[str, ...]
    body: tuple[str, ...]
    notes: tuple[str, ...] = ()
    heading: str = ""

    def latex(self) -> str:
        return "\n".join([rf"\begin{{tabular}}{{{self.spec}}}", r"\toprule", *self.head, r"\midrule", *self.body,
                          r"\bottomrule", r"\end{tabular}"])

    def column_widths(self) -> list[float]:
        """Each column's printed width (pt, without its gaps): its widest cell, widened where a ``\\multicolumn``
        needs more than the columns it spans."""
        widths = [0.0] * len(self.spec)
        spans = []
        for row in filter(None, map(cells, (*self.head, *self.body))):
            col = 0
            for cell in row:
                if cell.span == 1 and col < len(widths):
                    widths[col] = max(widths[col], cell_width(cell.text))
                elif cell.span > 1:
                    spans.append((col, cell.span, cell_width(cell.text)))
                col += cell.span
        for col, span, need in spans:
            have = sum(widths[col:col + span]) + 2 * TABCOLSEP_PT * (span - 1)
            if need > have and col + span <= len(widths):
                widths[col + span - 1] += need - have
        return widths

    def width(self) -> float:
        """The tabular's printed width (pt): its columns and the gap either side of each."""
        return sum(self.column_widths()) + 2 * TABCOLSEP_PT * len(self.spec)

    def height(self) -> float:
        """The tabular's printed height (pt): its rows, its rules and its heading."""
        lines = [*self.head, *self.body]
        rows = sum(cells(line) is not None for line in lines)
        return rows * LINE_PT + (3 + len(lines) - rows) * RULE_PT + (HEADING_PT if self.heading else 0.0)

    def two_line(self, keys: int) -> Tabular:
        """The tabular with each body cell of the form ``value (note)`` on two lines, the note under the value: the
        columns narrow to the wider of the two (Table 4's multipliers, Table 5's relative changes)."""
        body = []
        for line in self.body:
            row = cells(line)
            parts = [_split_note(c.text) if i >= keys and c.span == 1 else (c.text, "") for i, c in
                     enumerate(row or [])]
            if row is None or not any(note for _, note in parts):
                body.append(line)
                continue
            body.append(row_line([replace(c, text=top) for c, (top, _) in zip(row, parts, strict=True)]))
            body.append(row_line([replace(c, text=note) for c, (_, note) in zip(row, parts, strict=True)]))
        return replace(self, body=tuple(body))

    def split(self, max_width: float, keys: int) -> list[Tabular]:
        """The tabular as several, each of its first ``keys`` columns and some of the others: as few as fit
        ``max_width`` (pt), as even as can be, cut only where no ``\\multicolumn`` spans the cut; one tabular where
        it fits."""
        if self.width() <= max_width or len(self.spec) <= keys + 1:
            return [self]
        widths = [w + 2 * TABCOLSEP_PT for w in self.column_widths()]
        groups = [(g, sum(widths[c] for c in g)) for g in self._groups(keys)]
        room = max_width - sum(widths[:keys])
        count = len(_pack(groups, room))
        low, high = max(w for _, w in groups), max(room, max(w for _, w in groups))
        for _ in range(30):  # the narrowest room that packs into as few parts: parts of even width
            mid = (low + high) / 2
            low, high = (low, mid) if len(_pack(groups, mid)) <= count else (mid, high)
        return [self._columns([*range(keys), *part], n) for n, part in enumerate(_pack(groups, high))]

    def chunks(self, max_height: float) -> list[Tabular]:
        """The tabular as several with the same head, each of as many body rows as fit ``max_height`` (pt)."""
        per = max(1, math.floor((max_height - replace(self, body=()).height()) / LINE_PT))
        rows = list(self.body)
        if len(rows) <= per:
            return [self]
        return [replace(self, body=tuple(rows[i:i + per]), heading=self.heading if i == 0 else "",
                        notes=self.notes if i + per >= len(rows) else ()) for i in range(0, len(rows), per)]

    def _groups(self, keys: int) -> Iterator[list[int]]:
        """The columns after the first ``keys`` in runs that a ``\\multicolumn`` ties together."""
        tied, data = set(), len(self.spec) - keys
        for row in filter(None, map(cells, (*self.head, *self.body))):
            col = 0
            for cell in row:
                if cell.span < data:  # no cut before these columns; a title over all of them repeats on each part
                    tied |= set(range(col + 1, col + cell.span))
                col += cell.span
        group: list[int] = []
        for col in range(keys, len(self.spec)):
            if group and col not in tied:
                yield group
                group = []
            group.append(col)
        if group:
            yield group

    def _columns(self, keep: Sequence[int], part: int) -> Tabular:
        """The tabular of the columns ``keep`` (indices; whole ``\\multicolumn`` spans), its heading kept on the
        first part only."""
        index = {c: i for i, c in enumerate(keep)}
        head, body = ([line for line in (_keep_columns(line, index) for line in lines) if line]
                      for lines in (self.head, self.body))
        return Tabular("".join(self.spec[c] for c in keep), tuple(head), tuple(body), self.notes,
                       self.heading if part == 0 else "")


def _keep_columns(line: str, index: dict[int, int]) -> str:
    """A row or rule line with only the columns of ``index`` (old -> new): a ``\\multicolumn`` over kept and
    dropped columns spans its kept ones, a ``\\cmidrule`` is renumbered and narrowed the same way; "" for a rule
    line left with no rule."""
    row = cells(line)
    if row is not None:
        kept = [(c, sum(col in index for col in range(start, start + c.span))) for c, start in zip(row, _starts(row),
                                                                                                   strict=True)]
        return row_line([replace(c, span=n) for c, n in kept if n])
    rules = list(_CMIDRULE.finditer(line))
    if not rules:
        return line
    out = []
    for m in rules:
        inside = [index[c] for c in range(int(m.group(2)) - 1, int(m.group(3))) if c in index]
        if inside:
            out.append(rf"\cmidrule{m.group(1) or ''}{{{min(inside) + 1}-{max(inside) + 1}}}")
    return " ".join(out)


def _pack(groups: Sequence[tuple[list[int], float]], room: float) -> list[list[int]]:
    """Column groups (columns, width) packed in order into parts of at most ``room`` wide (a wider group alone)."""
    parts: list[list[int]] = [[]]
    used = 0.0
    for columns, width in groups:
        if parts[-1] and used + width > room:
            parts.append([])
            used = 0.0
        parts[-1] += columns
        used += width
    return parts


def _starts(row: Sequence[Cell]) -> Iterator[int]:
    col = 0
    for cell in row:
        yield col
        col += cell.span


def _split_note(text: str) -> tuple[str, str]:
    """``value (note)`` as (value, (note)) where the parenthesis opens outside any brace group; else (text, "")."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0 and text.startswith(" (", i):
            return text[:i], text[i + 1:]
    return text, ""


_TABULAR = re.compile(r"\\begin\{tabular\}\{([lcr]+)\}\n\\toprule\n(.*?)\\midrule\n(.*?)\\bottomrule\n"
                      r"\\end\{tabular\}", re.S)


def parse(body: str) -> tuple[list[Tabular], list[str]]:
    """The tabulars of a LaTeX body written by :func:`booktabs` (each with the heading line before it and its
    footnote rows taken out), and the lines of the body that are neither (comments)."""
    tables, other, heading, at = [], [], "", 0
    for found in _TABULAR.finditer(body):
        for line in body[at:found.start()].splitlines():
            if line.startswith(HEADING_MARK):
                heading = line.removeprefix(HEADING_MARK)
            elif line.strip():
                other.append(line)
        at = found.end()
        rows, notes = [], []
        for line in found.group(3).splitlines():
            row = cells(line)
            if row is not None and len(row) == 1 and row[0].span == len(found.group(1)) and \
                    row[0].text.startswith(_FOOTNOTE):
                notes.append(row[0].text.removeprefix(_FOOTNOTE))
            else:
                rows.append(line)
        tables.append(Tabular(found.group(1), tuple(found.group(2).splitlines()), tuple(rows), tuple(notes), heading))
        heading = ""
    other += [line for line in body[at:].splitlines() if line.strip() and not line.startswith(HEADING_MARK)]
    return tables, other
