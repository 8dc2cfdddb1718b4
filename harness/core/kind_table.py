"""The registry of suite kinds: :mod:`harness.kinds` registers each kind here (one entry per kind there), and the
core, the runner and the report primitives look kinds up here, so that none of them imports a kind."""

from __future__ import annotations

from .cell import Cell
from .suite import SuiteKind

#: The registered suite kinds by name, filled by :mod:`harness.kinds` (one line per kind there). The core and the
#: report primitives read kinds from here, never import one.
KINDS: dict[str, SuiteKind] = {}


def register_kind(kind: SuiteKind) -> SuiteKind:
    """Add ``kind`` to :data:`KINDS` (a name registered twice is an error)."""
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"suite kind {kind.name!r} is registered twice")
    KINDS[kind.name] = kind
    return kind


def is_timed(cell: Cell) -> bool:
    """A cell whose figures are times (see :attr:`SuiteKind.timed`)."""
    timed = KINDS[cell.kind].timed if cell.kind in KINDS else None
    return bool(timed and timed(cell) and not cell.skip_reason)
