"""Compiling generated ``.tex`` files with a real LaTeX engine, where one is installed (Debian:
``texlive-latex-recommended``, which has booktabs and longtable): every float in a two-column article, and the log
checked for errors, for floats taller than a page, for boxes that run past the column or the page and for tables
scaled below :data:`harness.report.latex.MIN_SCALE` or above 1.

The document records what each file set: its float environments and the scale LaTeX gave each scaled tabular (the
preamble wraps ``\\resizebox`` to log it), so a test can also ask which environment a table took.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness.report.latex import MIN_SCALE

ENGINE = shutil.which("pdflatex")
#: An overfull box up to this much is a rounding of LaTeX's line breaking, not a table past its column or page.
OVERFULL_PT = 1.0
#: A scale within this of a bound is the bound (LaTeX's arithmetic rounds to a few decimals).
SCALE_TOLERANCE = 1e-3

_PREAMBLE = r"""\documentclass[twocolumn,10pt]{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{lmodern}
\usepackage{booktabs}
\usepackage{graphicx}
\usepackage{longtable}
\AddToHook{env/table/begin}{\typeout{ATTNBENCH-ENV table}}
\AddToHook{env/table*/begin}{\typeout{ATTNBENCH-ENV table*}}
\AddToHook{env/longtable/begin}{\typeout{ATTNBENCH-ENV longtable}}
\AddToHook{env/tabular/after}{\ifhmode\setbox2\lastbox\typeout{ATTNBENCH-TABULAR \the\wd2}\box2\fi}
\let\attnbenchresizebox\resizebox
\renewcommand\resizebox[3]{\sbox4{#3}%
  \typeout{ATTNBENCH-SCALE \the\wd4 /\the\dimexpr#1\relax}\attnbenchresizebox{#1}{#2}{\usebox4}}
\begin{document}
"""


@dataclass
class Typeset:
    """What one file set: its float environments (``table``, ``table*``, ``longtable``) in order, the natural width
    (pt) of each tabular, and the scale of each tabular LaTeX scaled."""

    envs: list[str] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)


@dataclass
class Compiled:
    """The PDF (None where LaTeX failed), the problems found, and what each file set, by file name."""

    pdf: Path | None
    problems: list[str]
    files: dict[str, Typeset]


def _order(files: list[Path]) -> list[Path]:
    """The floats first, the supplementary long tables last: a long table switches a two-column document to one
    column for the rest of it."""
    return sorted(files, key=lambda f: (f.stem.endswith("_full"), str(f)))


def compile_report(files: list[Path], workdir: Path) -> Compiled:
    """Compile a two-column document ``\\input``-ing each of ``files`` on a page of its own, and read its log."""
    assert ENGINE is not None
    workdir.mkdir(parents=True, exist_ok=True)
    files = _order(files)
    body = "".join(rf"\typeout{{ATTNBENCH-FILE {i}}}\input{{{f.resolve().as_posix()}}}" + "\n\\clearpage\n"
                   for i, f in enumerate(files))
    (workdir / "doc.tex").write_text(_PREAMBLE + body + "\\end{document}\n")
    for _ in range(3):  # a long table settles its column widths over runs, as a paper's build does
        proc = subprocess.run([ENGINE, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=workdir,
                              capture_output=True, text=True, timeout=300)
        log = (workdir / "doc.log").read_text(errors="replace") if (workdir / "doc.log").exists() else proc.stdout
        if proc.returncode != 0 or "Rerun" not in log:
            break
    problems, typeset, current = [], {}, "(preamble)"
    for line in log.splitlines():
        if found := re.match(r"ATTNBENCH-FILE (\d+)", line):
            current = files[int(found.group(1))].name
            typeset[current] = Typeset()
        elif found := re.match(r"ATTNBENCH-ENV (\S+)", line):
            typeset[current].envs.append(found.group(1))
        elif found := re.match(r"ATTNBENCH-TABULAR ([\d.]+)pt", line):
            typeset[current].widths.append(float(found.group(1)))
        elif found := re.match(r"ATTNBENCH-SCALE ([\d.]+)pt ?/([\d.]+)pt", line):
            scale = float(found.group(2)) / float(found.group(1))
            typeset[current].scales.append(scale)
            if not MIN_SCALE - SCALE_TOLERANCE <= scale <= 1.0 + SCALE_TOLERANCE:
                problems.append(f"{current}: scaled by {scale:.3f}, outside [{MIN_SCALE}, 1]")
        elif line.startswith("!") or "Float too large" in line:
            problems.append(f"{current}: {line.strip()}")
        elif (found := re.search(r"Overfull \\hbox \(([\d.]+)pt too wide\)", line)) and \
                float(found.group(1)) > OVERFULL_PT:
            problems.append(f"{current}: {found.group(0)}")
    if proc.returncode != 0 and not problems:
        problems.append(f"pdflatex exited {proc.returncode}")
    pdf = workdir / "doc.pdf"
    return Compiled(pdf if proc.returncode == 0 and pdf.exists() else None, problems, typeset)


def compile_tex(files: list[Path], workdir: Path) -> tuple[Path | None, str]:
    """(the PDF, the problems) of :func:`compile_report`: errors, floats too large for a page, overfull boxes and
    scales outside [MIN_SCALE, 1], one per line, or "" when clean."""
    compiled = compile_report(files, workdir)
    return compiled.pdf, "\n".join(compiled.problems)
