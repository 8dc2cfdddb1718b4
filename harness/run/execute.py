"""One cell, whichever executor runs it: run it with its kind's code, and record its result through the recorder.

Every executor (in-process, ``--isolate`` workers, Ray tasks) calls :func:`execute_cell` where the cell runs and
:class:`Recorder` in the runner's process, the only one that writes the store.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import faults
from ..cell import Cell, CellResult, Context
from ..kinds import KINDS
from ..store import Store


def execute_cell(cell: Cell, ctx: Context) -> CellResult:
    """Run one cell in this process with the code of its kind; every failure is the result's status."""
    return KINDS[cell.kind].run(cell, ctx)


@dataclass
class RunSummary:
    out_dir: Path
    total: int
    skipped_done: int
    statuses: dict[str, int] = field(default_factory=dict)
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
    bar: Any  # tqdm
    tty: bool
    total: int
    done: int = 0

    def starting(self, cell: Cell) -> None:
        self.bar.set_postfix_str(cell.label)
        faults.point("runner.before_cell", cell.label)

    def __call__(self, cell: Cell, result: CellResult) -> None:
        faults.point("runner.before_put", cell.label)
        self.store.put(self.run_id, cell, result.status, result.message, result.metrics, result.curve)
        faults.point("runner.after_put", cell.label)
        kind = KINDS[cell.kind]
        kind.finished(cell, self.ctx)
        self.summary.statuses[result.status] = self.summary.statuses.get(result.status, 0) + 1
        self.done += 1
        self.bar.update()
        if not self.tty:
            print(f"[{self.done}/{self.total}] {cell.label}: {kind.describe(result)}", file=sys.stderr, flush=True)
