"""Compiling generated ``.tex`` files with a real LaTeX engine, where one is installed (Debian:
``texlive-latex-recommended``, which has booktabs): every float in a two-column article, and the log checked for
errors and for boxes that run past the column or the page."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ENGINE = shutil.which("pdflatex")
#: An overfull box up to this much is a rounding of LaTeX's line breaking, not a table past its column.
OVERFULL_PT = 1.0

_PREAMBLE = r"""\documentclass[twocolumn,10pt]{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{lmodern}
\usepackage{booktabs}
\usepackage{graphicx}
\begin{document}
"""


def compile_tex(files: list[Path], workdir: Path) -> tuple[Path | None, str]:
    """(the PDF, the problems) of a two-column document ``\\input``-ing each of ``files`` on a page of its own;
    problems are LaTeX errors and overfull boxes (a table wider than its column or page), or "" when clean."""
    assert ENGINE is not None
    workdir.mkdir(parents=True, exist_ok=True)
    body = "\n".join(rf"\input{{{f.resolve().as_posix()}}}" + "\n\\clearpage" for f in files)
    (workdir / "doc.tex").write_text(_PREAMBLE + body + "\n\\end{document}\n")
    proc = subprocess.run([ENGINE, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=workdir,
                          capture_output=True, text=True, timeout=300)
    log = (workdir / "doc.log").read_text(errors="replace") if (workdir / "doc.log").exists() else proc.stdout
    problems = [line for line in log.splitlines() if line.startswith("!")]
    problems += [m.group(0) for m in re.finditer(r"Overfull \\hbox \(([\d.]+)pt too wide\)[^\n]*", log)
                 if float(m.group(1)) > OVERFULL_PT]
    pdf = workdir / "doc.pdf"
    return (pdf if proc.returncode == 0 and pdf.exists() else None), "\n".join(problems)
