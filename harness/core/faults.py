"""Fault injection for the crash-safety tests: make this process die at a named point of a sweep.

A test hook, not a setting: set ``ATTNBENCH_FAULT`` to ``POINT[:N[:ACTION[:MATCH]]]`` and the N-th pass (1-based,
default 1) through ``point(POINT, detail)`` in this process whose ``detail`` contains MATCH (default: every pass
counts) ends it with ACTION:

- ``kill`` (default): SIGKILL, as ``kill -9`` or the kernel's OOM killer would;
- ``exit``: ``os._exit(3)``, a process that quits without unwinding (no ``finally``, no atexit);
- ``segv``: SIGSEGV, as a crash in native code.

Unset (always, outside tests) a point costs one dictionary lookup. The variable is inherited by ``--isolate``
workers and by Ray workers started on this machine, so a point inside a cell fires in whichever process runs it.
The CLI checks a value it finds before anything runs (:func:`check_environment`): a malformed one is bad input
(exit 2), never a traceback in the middle of a sweep.
"""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from typing import NamedTuple

from .errors import UserError

ENV = "ATTNBENCH_FAULT"
ACTIONS = ("kill", "exit", "segv")
FORMAT = "POINT[:N[:ACTION[:MATCH]]]"
_hits: Counter[str] = Counter()


class Fault(NamedTuple):
    """A parsed ``ATTNBENCH_FAULT``: which point, its how-manieth pass, what to do, and what its detail must hold."""

    point: str
    count: int
    action: str
    match: str


@functools.lru_cache(maxsize=8)
def parse(spec: str) -> Fault:
    """``spec`` as a :class:`Fault`.

    Raises:
        ValueError: a part that is missing or malformed (an action that is not one of :data:`ACTIONS` must not kill
            the process as if it were the fault asked for).
    """
    target, _, rest = spec.partition(":")
    count, _, rest = rest.partition(":")
    action, _, match = rest.partition(":")
    action = action or "kill"
    if not target:
        raise ValueError(f"{ENV}={spec!r}: no point; write {FORMAT}")
    if action not in ACTIONS:
        raise ValueError(f"{ENV}={spec!r}: unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    if count and not (count.isascii() and count.isdigit() and int(count) > 0):
        raise ValueError(f"{ENV}={spec!r}: N must be a positive whole number, got {count!r}; write {FORMAT}")
    return Fault(target, int(count or 1), action, match)


def check_environment() -> None:
    """Refuse (exit 2) a malformed ``ATTNBENCH_FAULT`` before a command runs."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    try:
        parse(spec)
    except ValueError as exc:
        raise UserError(f"{exc} (a test hook of the crash-safety tests: unset it outside them)") from None


def point(name: str, detail: str = "") -> None:
    """A place where a test may make this process die (see the module docstring).

    Args:
        name: the point, e.g. "runner.before_cell".
        detail: what is happening there (a cell's label), so that a fault can target one cell.
    """
    spec = os.environ.get(ENV)
    if not spec:
        return
    fault = parse(spec)
    if fault.point != name or fault.match not in detail:
        return
    _hits[name] += 1
    if _hits[name] != fault.count:
        return
    if fault.action == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSEGV if fault.action == "segv" else signal.SIGKILL)
