"""Cells, whichever executor runs them: group them, run a group with its kind's code, record each result.

Every executor (in-process, ``--isolate`` workers, Ray tasks) calls :func:`execute_group` where the cells run and
:class:`Recorder` in the runner's process, the only one that writes the store.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..core import faults
from ..core.cell import Cell, CellResult, Context
from ..core.errors import first_line
from ..core.kind_table import is_timed
from ..core.store import Store
from ..core.suite import SuiteKind
from ..kinds import KINDS
from ..measure.quiet import BUSY_CORES
from .progress import EARLY_BUSY_S, Console

#: Distinct warnings kept with a cell (its ``warnings`` metric), the first line of each.
MAX_WARNINGS = 3


def execute_group(cells: list[Cell], ctx: Context) -> list[CellResult]:
    """Run a group of cells (see :func:`groups`) in this process: together if the kind runs groups, else in turn.

    The libraries' warnings (torch's, numpy's) raised meanwhile are kept with the cells, as their ``warnings``
    metric (results.csv), instead of reaching the console among the progress lines; a group's go to each of its
    cells, since they ran together."""
    kind = KINDS[cells[0].kind]
    if cells[0].threads and torch.get_num_threads() != cells[0].threads:
        torch.set_num_threads(cells[0].threads)  # what the cell's key says it is measured with, in any worker
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # each distinct warning once per place, as Python shows them
        results = _run(kind, cells, ctx)
    seen = list(dict.fromkeys(f"{w.category.__name__}: {first_line(w.message)}" for w in caught))
    if seen:
        text = "; ".join(seen[:MAX_WARNINGS]) + (f"; and {len(seen) - MAX_WARNINGS} more" if len(seen) > MAX_WARNINGS
                                                  else "")
        for result in results:
            result.metrics["warnings"] = text
    return results


def _run(kind: SuiteKind, cells: list[Cell], ctx: Context) -> list[CellResult]:
    """The results of ``cells``: together if the kind runs groups, else in turn.

    ``sys.exit()`` inside a cell raises SystemExit, which the kinds' ``except Exception`` lets through: it would end
    the run with exit code 0 and nothing stored. It is the cell's ``error``; a group that raised it is run again one
    cell at a time, so that it stays in the cell that called it.
    """
    if kind.run_group is not None and len(cells) > 1:
        try:
            return kind.run_group(cells, ctx)
        except SystemExit:
            pass
    return [_run_one(kind, cell, ctx) for cell in cells]


def _run_one(kind: SuiteKind, cell: Cell, ctx: Context) -> CellResult:
    try:
        return kind.run(cell, ctx)
    except SystemExit as exc:
        return CellResult("error", f"SystemExit: the cell called sys.exit({exc.code!r:.300})")


def groups(todo: list[Cell], every_cell: list[Cell] = (), baseline: str | None = None) -> list[list[Cell]]:
    """The cells to run, in the groups their kind runs together (cells with equal ``group_key``), in the order their
    first cells come. A kind without a group key (or without a group runner) runs one cell at a time.

    A group whose ``baseline`` cell is not among the cells to run (it finished earlier: a variant edited since, or
    ``--only``) gets it back from ``every_cell``, so that every speed-up is measured in the same interleaved rounds;
    the baseline's new result is stored too. A group is measured as a whole and its cells are stored once it is
    done, one transaction each: a run killed while a group is measured measures the whole group again when it
    resumes (killed between two of its stores, the rest of the group is measured again beside the baseline).
    """
    out: dict[Any, list[Cell]] = {}
    for cell in todo:
        kind = KINDS[cell.kind]
        together = kind.group_key is not None and kind.run_group is not None
        out.setdefault(("group", kind.group_key(cell)) if together else cell.key, []).append(cell)  # type: ignore[misc]
    for key, members in out.items():
        if key[0] != "group" or any(c.params["attention"] == baseline for c in members):
            continue
        group_key = KINDS[members[0].kind].group_key
        reference = next((c for c in every_cell if c.params["attention"] == baseline and not c.skip_reason
                          and group_key(c) == key[1]), None)  # type: ignore[misc]
        timed = any(is_timed(c) for c in members)  # memory and FLOPs are not paired
        if reference is not None and timed:
            members.insert(0, reference)
    return list(out.values())


@dataclass
class RunSummary:
    out_dir: Path
    total: int
    skipped_done: int
    statuses: dict[str, int] = field(default_factory=dict)
    references: int = 0  # finished baseline cells timed again beside the cells that ran, for paired ratios
    noisy: list[str] = field(default_factory=list)  # "label: reason" of each cell timed while the machine was busy
    load: list[float] = field(default_factory=list)  # other processes' CPU use (cores) over each timed cell
    written: list[Path] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class Recorder:
    """The one place a finished cell is recorded, whichever executor ran it.

    ``starting`` runs before a cell is measured or submitted, ``__call__`` once its result is in: the store row
    (one transaction), what the cell's kind does once the row is stored (drop a checkpoint), the status count and
    the progress line.
    """

    store: Store
    run_id: int
    ctx: Context
    summary: RunSummary
    console: Console

    def starting(self, cell: Cell) -> None:
        self.console.starting(cell.label)  # the bar shows it escaped, as Console.write: a label quotes input
        faults.point("runner.before_cell", cell.label)

    def in_group(self, fraction: float, load_so_far: Callable[[], float | None]) -> None:
        """A timed group of this process has done ``fraction`` of its blocks (:func:`harness.measure.group.listening`):
        the ETA moves, and a busy machine is said once the group has been timed long enough to tell."""
        self.console.group_progress(fraction)
        if not self.console.busy_said and self.console.group_elapsed() >= EARLY_BUSY_S:
            self._check_load(load_so_far())

    def _check_load(self, load: object) -> None:
        """Say a busy machine (once: :meth:`Console.busy`) when other processes used more than
        :data:`~harness.measure.quiet.BUSY_CORES` while cells were timed."""
        if isinstance(load, int | float) and load > BUSY_CORES:
            self.console.busy(float(load), os.cpu_count() or 1)

    def __call__(self, cell: Cell, result: CellResult) -> None:
        faults.point("runner.before_put", cell.label)
        self.store.put(self.run_id, cell, result.status, result.message, result.metrics, result.curve, result.samples)
        faults.point("runner.after_put", cell.label)
        kind = KINDS[cell.kind]
        kind.finished(cell, self.ctx)
        self.summary.statuses[result.status] = self.summary.statuses.get(result.status, 0) + 1
        if isinstance(result.metrics.get("load_other_cores"), int | float):
            self.summary.load.append(float(result.metrics["load_other_cores"]))
            self._check_load(result.metrics["load_other_cores"])
        if result.metrics.get("noisy"):
            self.summary.noisy.append(f"{cell.label}: {result.metrics.get('noisy_reason', '')}")
        if result.metrics.get("warnings"):
            self.console.warned[str(result.metrics["warnings"])] += 1
        self.console.finished(cell.label, result.status, result.message, kind.describe(result))

    def group_done(self) -> None:
        """Every cell of a group is recorded: move the store's new rows from its write-ahead log into the file itself,
        so that a copy of ``results.db`` alone, taken during or after a killed run, holds them."""
        self.store.checkpoint()
