"""Fault injection for the crash-safety tests: make this process die at a named point of a sweep.

Set ``ATTNBENCH_FAULT`` to ``POINT[:N[:ACTION[:MATCH]]]`` and the N-th pass (1-based, default 1) through
``point(POINT, detail)`` in this process whose ``detail`` contains MATCH (default: every pass counts) ends it
with ACTION:

- ``kill`` (default): SIGKILL, as ``kill -9`` or the kernel's OOM killer would;
- ``exit``: ``os._exit(3)``, a process that quits without unwinding (no ``finally``, no atexit);
- ``segv``: SIGSEGV, as a crash in native code.

Unset (always, outside tests) a point costs one dictionary lookup. The variable is inherited by ``--isolate``
workers and by Ray workers started on this machine, so a point inside a cell fires in whichever process runs it.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "ATTNBENCH_FAULT"
ACTIONS = ("kill", "exit", "segv")
_hits: Counter[str] = Counter()


def point(name: str, detail: str = "") -> None:
    """A place where a test may make this process die (see the module docstring).

    Args:
        name: the point, e.g. "runner.before_cell".
        detail: what is happening there (a cell's label), so that a fault can target one cell.
    """
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, rest = spec.partition(":")
    count, _, rest = rest.partition(":")
    action, _, match = rest.partition(":")
    action = action or "kill"
    if action not in ACTIONS:  # a typo must not kill the process as if it were the fault asked for
        raise ValueError(f"{ENV}={spec!r}: unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    if target != name or match not in detail:
        return
    _hits[name] += 1
    if _hits[name] != int(count or 1):
        return
    if action == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSEGV if action == "segv" else signal.SIGKILL)
