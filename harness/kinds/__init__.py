"""The table of suite kinds: a suite file's ``kind`` key names one, and the loader, the runner, the store's reports and
the CLI look it up here instead of branching on the kind (see :class:`harness.core.suite.SuiteKind`).

Adding a kind = one package that builds a ``SuiteKind`` and one entry below; the kinds register into
:data:`harness.core.kind_table.KINDS`, which the core, the runner and the report primitives read (none imports a kind).
"""

from __future__ import annotations

from ..core.kind_table import KINDS, register_kind
from ..core.suite import Axis
from .accuracy.kind import KIND as ACCURACY
from .approximation.kind import KIND as APPROXIMATION
from .decode.kind import KIND as DECODE
from .forecasting.kind import KIND as FORECASTING
from .speed.kind import KIND as SPEED

for _kind in (SPEED, ACCURACY, APPROXIMATION, FORECASTING, DECODE):  # one entry per kind
    register_kind(_kind)
DEFAULT_KIND = SPEED.name


def every_axis() -> dict[str, Axis]:
    """Every axis of every kind (what ``--set`` accepts before the suite's own kind is known)."""
    return {name: axis for kind in KINDS.values() for name, axis in kind.all_axes().items()}
