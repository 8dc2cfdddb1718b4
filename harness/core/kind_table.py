"""The registry of suite kinds: :mod:`harness.kinds` declares each kind here (one line per kind there: its name and
the module that builds it), and the core, the runner and the report primitives look kinds up here, so that none of
them imports a kind. A kind's package is imported the first time it is looked up: a worker that runs one speed cell
loads the speed kind alone, not the training code of the accuracy and forecasting kinds."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

from .cell import Cell
from .suite import SuiteKind


class KindTable(MutableMapping[str, SuiteKind]):
    """Suite kinds by name, in the order they were declared; each built by its module on first use.

    Iterating gives the names without importing anything; looking a name up (or ``values()``) imports its module.
    Setting an entry registers a kind that is already built (a test's made-up kind)."""

    def __init__(self) -> None:
        self._modules: dict[str, str | None] = {}  # name -> module with a KIND (None: given built)
        self._built: dict[str, SuiteKind] = {}

    def declare(self, name: str, module: str) -> None:
        """``module`` (absolute) builds the kind ``name`` as its ``KIND``; a name declared twice is an error."""
        if self._modules.get(name, module) != module:
            raise ValueError(f"suite kind {name!r} is declared twice ({self._modules[name]}, {module})")
        self._modules[name] = module

    def _declared(self) -> dict[str, str | None]:
        importlib.import_module("harness.kinds")  # its table declares every kind (a no-op once imported)
        return self._modules

    def __getitem__(self, name: str) -> SuiteKind:
        if name not in self._built:
            module = self._declared()[name]  # KeyError: an unknown kind
            assert module is not None
            kind = importlib.import_module(module).KIND
            if not isinstance(kind, SuiteKind) or name != kind.name:
                raise ValueError(f"{module}.KIND is not the suite kind {name!r}")
            self._built[name] = kind
        return self._built[name]

    def __setitem__(self, name: str, kind: SuiteKind) -> None:
        self._declared()
        self._modules.setdefault(name, None)
        self._built[name] = kind

    def __delitem__(self, name: str) -> None:
        del self._declared()[name]
        self._built.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._declared()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._declared()))

    def __len__(self) -> int:
        return len(self._declared())

    def built(self) -> list[str]:
        """The kinds whose modules have been imported so far."""
        return list(self._built)


#: The suite kinds by name, declared by :mod:`harness.kinds` (one line per kind there). The core and the report
#: primitives read kinds from here, never import one.
KINDS = KindTable()


def is_timed(cell: Cell) -> bool:
    """A cell whose figures are times (see :attr:`SuiteKind.timed`)."""
    timed = KINDS[cell.kind].timed if cell.kind in KINDS else None
    return bool(timed and timed(cell) and not cell.skip_reason)
