"""``--highlight``: which variants the figures colour, set around a run or a report, in a module without matplotlib
(the CLI checks the patterns before anything is written; importing matplotlib would create its cache under --out)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fnmatch import fnmatchcase

_HIGHLIGHT: ContextVar[tuple[str, ...]] = ContextVar("highlight", default=())


@contextmanager
def highlighting(patterns: Iterable[str]) -> Iterator[None]:
    """Inside, the figures colour the variants whose registry name matches one of the fnmatch ``patterns`` and draw
    every other one thin and grey (``--highlight``); set around a run or a report so no writer needs a parameter."""
    token = _HIGHLIGHT.set(tuple(patterns))
    try:
        yield
    finally:
        _HIGHLIGHT.reset(token)


def split_patterns(values: Iterable[str] | None) -> list[str]:
    """``["s3*,fsat", "luna"]`` -> ``["s3*", "fsat", "luna"]`` (a flag given several times, comma-separated)."""
    return [p.strip() for item in values or () for p in item.split(",") if p.strip()]


def is_highlighted(name: str) -> bool | None:
    """Whether ``name`` matches an active ``--highlight`` pattern; None when nothing is highlighted."""
    patterns = _HIGHLIGHT.get()
    return any(fnmatchcase(name, p) for p in patterns) if patterns else None
