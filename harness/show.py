"""``attnbench show DIR``: what a results directory holds, without opening SQLite by hand and without torch — its runs
(the ids ``compare DIR@RUN`` takes, dates, profiles, commands), its cells by status, how many timings were flagged
noisy (†) and the files its reports wrote.

Cells are counted as the tables show them: one per (suite, axis values, device), its newest result under the store's
current setting (:mod:`harness.core.current`, as :meth:`harness.core.store.Store.dataframe`); a line says what was left
out, or that the results are stale.
"""

from __future__ import annotations

import shlex
import textwrap
from collections import Counter
from pathlib import Path

from .core.current import Stored, current
from .core.errors import UserError
from .core.schema import STATUSES, cell_column, loads_column, open_read_only

#: ``show`` stays within this many columns; a group of files wraps below its name.
SHOW_WIDTH = 120
#: The kinds of report files, in the order ``show`` lists them, by extension (a table's CSV is listed with the table).
FIGURES = ("png", "pdf", "svg")
TABLES = ("md", "tex")


def stores_under(path: Path, command: str = "show") -> list[Path]:
    """``path`` itself when it is a file (a store named directly: ``show results/speed/quick/results.db``),
    ``path/results.db``, or every ``results.db`` below ``path``; a UserError naming ``command`` when there is none."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"{command} {path}: no such file or directory; give a directory holding results.db (written "
                        f"by `attnbench run`)")
    own = path / "results.db"
    found = [own] if own.is_file() else sorted(path.rglob("results.db"))
    if not found:
        raise UserError(f"{command} {path}: no results.db here or below; give a directory written by `attnbench run`")
    return found


def _latest_cells(db: object, path: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(status, metrics_json) of each cell the tables show (:func:`harness.core.current.current`), and the lines on
    the results left out of them."""
    stored, extra = [], []
    for run_id, suite, cell_json, status, metrics, finished in db.execute(  # type: ignore[attr-defined]
            "SELECT run_id, suite, cell_json, status, metrics_json, finished_utc FROM cells"):
        stored.append(Stored(len(stored), int(run_id), finished, suite, cell_column(path, cell_json)))
        extra.append((status, metrics))
    kept, notes = current(stored)
    return [extra[row.index] for row in kept], notes


def _files(folder: Path) -> list[str]:
    """Every report file of ``folder``, one line per kind (data, tables, figures, claims, other), the formats of one
    file name together (``table1.{csv,md,tex}``), wrapped within :data:`SHOW_WIDTH` columns: a run ends by pointing
    here for the list of what it wrote."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                   and not p.name.startswith("results.db"))
    if not names:
        return ["  files: none yet (`attnbench report DIR` writes them)"]
    stems: dict[str, list[str]] = {}
    for name in names:
        stem, dot, ext = name.rpartition(".")
        stems.setdefault(stem if dot else name, []).append(ext if dot else "")
    groups: dict[str, list[str]] = {"data": [], "tables": [], "figures": [], "claims": [], "other": []}
    for stem, exts in stems.items():
        figures, rest = [e for e in exts if e in FIGURES], [e for e in exts if e not in FIGURES]
        if figures:  # a roofline's table and figure share a name
            groups["figures"].append(_formats(stem, figures))
        if rest:
            kind = ("claims" if stem == "claims" else "tables" if set(rest) & set(TABLES)
                    else "data" if set(rest) <= {"csv", "json"} else "other")
            groups[kind].append(_formats(stem, rest))
    lines = [f"  files: {len(names)}"]
    for kind, shown in groups.items():
        if shown:
            lines.append(textwrap.fill(", ".join(shown), width=SHOW_WIDTH, initial_indent=f"    {kind}: ",
                                       subsequent_indent=" " * (6 + len(kind)), break_on_hyphens=False))
    return lines


def _formats(stem: str, exts: list[str]) -> str:
    """``table1.md``, or ``table1.{csv,md,tex}`` for a name written in several formats (a name without one as is)."""
    if exts == [""]:
        return stem
    return f"{stem}.{exts[0]}" if len(exts) == 1 else f"{stem}.{{{','.join(exts)}}}"


def describe(path: Path) -> str:
    """The lines ``show`` prints for one store."""
    db = open_read_only(path)
    try:
        runs = db.execute("SELECT run_id, suite, profile, started_utc, finished_utc, argv, summary_json FROM runs "
                          "ORDER BY run_id").fetchall()
        cells, left_out = _latest_cells(db, path)
    finally:
        db.close()
    suites = sorted({r[1] for r in runs}) or ["(no run yet)"]
    lines = [f"{path.parent}  suite {', '.join(suites)}, {len(runs)} run{'s' * (len(runs) != 1)}"]
    for run_id, _suite, profile, started, finished, argv, _summary in runs:
        command = shlex.join(loads_column(path, argv, "argv", list)) if argv else ""
        end = finished or "did not finish (stopped, or still running)"
        lines.append(f"  run {run_id}  {profile:<6} {started} → {end}  {command}")
    counts = Counter(status for status, _ in cells)
    shown = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "none"
    lines.append(f"  cells: {sum(counts.values())} ({shown})")
    lines += [f"  note: {line}" for line in left_out]
    timed = [loads_column(path, m, "metrics_json") for s, m in cells if s == "ok"]
    timed = [m for m in timed if "noisy" in m]
    if timed:
        noisy = sum(1 for m in timed if m.get("noisy"))
        lines.append(f"  noisy: {noisy} of {len(timed)} timed ok cells flagged † (timed on a busy machine)")
    lines += _files(path.parent)
    return "\n".join(lines)


def show(directory: str | Path) -> str:
    """Every store under ``directory``, described (:func:`describe`), separated by blank lines."""
    return "\n\n".join(describe(p) for p in stores_under(Path(directory)))
