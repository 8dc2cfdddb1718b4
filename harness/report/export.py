"""Which writer for which suite: every report of a store is written by its suite kind (:mod:`harness.kinds`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.kind_table import KINDS
from ..core.store import Store


def write_suite_reports(store: Store, name: str | None = None, options: Mapping[str, Any] | None = None, *,
                        keys: list[str] | None = None) -> list[Path]:
    """Export the store (optionally only ``keys``) as CSV/Markdown/LaTeX tables and plots beside it.

    Args:
        store: a suite's store of record.
        name: the suite's name (default: the one stored with the cells).
        options: the suite's report options (default: those stored with the latest run, so ``attnbench report``
            rewrites the tables the run wrote).
        keys: the cells to report (default: all).
    """
    df = store.dataframe(keys)
    for line in df.attrs.get("left_out", []):  # results the tables do not show, or show though stale
        print(f"attnbench: note: {store.path}: {line}", file=sys.stderr)
    if df.empty:
        return []
    kinds = set(df["kind"])
    if len(kinds) != 1:  # a store belongs to one suite, and a suite to one kind
        raise UserError(f"{store.path}: cells of several suite kinds ({', '.join(sorted(kinds))}) mixed in one store; "
                        f"move it aside and rerun each suite into its own --out")
    kind = kinds.pop()
    if kind not in KINDS:
        raise UserError(f"{store.path}: its cells are of suite kind {kind!r}, which this attnbench does not know "
                        f"({', '.join(KINDS)}); report them with the attnbench that wrote them")
    options = store.latest_env().get("report", {}) if options is None else options
    return KINDS[kind].write_reports(store, name or str(df["suite"].iloc[0]), options, keys)
