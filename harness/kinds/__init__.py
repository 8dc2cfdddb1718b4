"""The table of suite kinds: a suite file's ``kind`` key names one, and the loader, the runner, the store's reports and
the CLI look it up here instead of branching on the kind (see :class:`harness.core.suite.SuiteKind`).

Adding a kind = one package whose ``kind`` module builds a ``SuiteKind`` as ``KIND``, and one line below. A kind's
package is imported when a suite of that kind is first looked up (:class:`harness.core.kind_table.KindTable`), so that
running one kind loads no other.
"""

from __future__ import annotations

from ..core.kind_table import KINDS
from ..core.suite import Axis

KINDS.declare("speed", "harness.kinds.speed.kind")
KINDS.declare("accuracy", "harness.kinds.accuracy.kind")
KINDS.declare("approximation", "harness.kinds.approximation.kind")
KINDS.declare("forecasting", "harness.kinds.forecasting.kind")
KINDS.declare("decode", "harness.kinds.decode.kind")
KINDS.declare("recall", "harness.kinds.recall.kind")
#: The kind of a suite file without a ``kind`` key.
DEFAULT_KIND = "speed"


def every_axis() -> dict[str, Axis]:
    """Every axis of every kind (what ``--set`` accepts before the suite's own kind is known)."""
    return {name: axis for kind in KINDS.values() for name, axis in kind.all_axes().items()}
