"""Which stored results the tables show: one per cell, measured under one setting, never silently mixed.

A store keeps every result of every run. A cell's *identity* is what a table shows of it (its suite, axis values and
device); its *key* adds everything that changes its numbers (code, data, settings: :class:`harness.core.cell.Cell`).
When one identity has results under several keys, the newest stands for it and the older ones are history.

The tables compare their rows with one another, so the rows must be measured alike: with the same thread count,
torch, libraries and malloc settings (a cell's ``setting``), and each dataset in the same version (a cell's
``data``). The setting of the newest result is the store's current one; a result measured under another setting, or on
other contents of the same data files, is left out of the tables, and one line says how many and how to bring them
back (rerun them under the current setting). A result stored by an attnbench whose keys did not cover the code's
imports, the data's contents and these settings is *stale*: shown only while nothing newer is stored, and always
said so.

No torch, no pandas: ``attnbench show`` reads stores with this module too.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

#: The note on results written before cells recorded their setting.
STALE = ("{n} stored by an earlier attnbench, whose keys did not cover the code a variant imports, the contents of its "
         "data or the software it ran with: stale{shown}; rerun the suite to measure {them} again")


@dataclass(frozen=True)
class Stored:
    """One stored result: its position in the query, run, finish time, suite and cell (as ``cell_json``)."""

    index: int
    run_id: int
    finished_utc: str
    suite: str
    cell: dict[str, Any]


def identity(suite: str, params: Any, device: str) -> str:
    """A cell as the tables show it: its suite, axis values and device (``cuda:0`` and ``cuda:1`` are one device)."""
    return json.dumps([suite, params, str(device).split(":")[0]], sort_keys=True, default=str)


def setting(cell: dict[str, Any]) -> dict[str, Any] | None:
    """What must be equal for two results to share a table (threads and software), or None for a result stored before
    cells recorded their software."""
    if "setting" not in cell:
        return None
    return {"threads": cell.get("threads"), **cell["setting"]}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def difference(other: dict[str, Any], current: dict[str, Any]) -> str:
    """How ``other`` differs from ``current``, in words: ``1 thread (now 2)``, ``torch 2.12.0 (now 2.13.0)``."""
    words = []
    for name in sorted(set(other) | set(current), key=lambda k: (k != "threads", k)):
        a, b = other.get(name), current.get(name)
        if a == b:
            continue
        if name == "threads":
            words.append(f"{a} thread{'s' * (a != 1)} (now {b})")
        elif name == "libraries":
            libs = sorted(set(a or {}) | set(b or {}))
            words += [f"{lib} {(a or {}).get(lib, 'absent')} (now {(b or {}).get(lib, 'absent')})" for lib in libs
                      if (a or {}).get(lib) != (b or {}).get(lib)]
        elif name == "malloc":
            words.append(f"malloc settings {a or 'default'!r} (now {b or 'default'!r})")
        else:
            words.append(f"{name} {a} (now {b})")
    return ", ".join(words) or "another setting"


def _order(row: Stored) -> tuple[int, str, int]:
    return row.run_id, row.finished_utc, row.index


def current(rows: list[Stored]) -> tuple[list[Stored], list[str]]:
    """The results the tables show (the newest of each identity, measured under the newest result's setting and data),
    and one line for each group left out (how many, why, how to bring them back)."""
    latest: dict[str, Stored] = {}
    for row in rows:
        key = identity(row.suite, row.cell.get("params"), row.cell.get("device", ""))
        if key not in latest or _order(row) > _order(latest[key]):
            latest[key] = row
    if not latest:
        return [], []
    by_age = sorted(latest.values(), key=_order)
    now = setting(by_age[-1].cell)
    # each dataset (a cell's data settings) as its newest result read it
    data_now = {_text(r.cell.get("fixed", {}).get("data")): r.cell.get("data", "") for r in by_age}
    kept: list[Stored] = []
    other_setting: Counter[str] = Counter()
    other_data: Counter[str] = Counter()
    stale = 0
    for row in latest.values():
        mine = setting(row.cell)
        if mine != now:
            if mine is None:
                stale += 1
            else:
                other_setting[difference(mine, now or {})] += 1
            continue
        data = row.cell.get("fixed", {}).get("data")
        if row.cell.get("data", "") != data_now[_text(data)]:
            where = data.get("dir") if isinstance(data, dict) else None
            other_data[str(where or "its data")] += 1
            continue
        kept.append(row)
    notes = []
    if now is None:  # nothing newer than the stale results: they are what there is, said so
        notes.append(STALE.format(n=_cells(len(kept)), shown=", shown", them="them"))
    elif stale:
        notes.append(STALE.format(n=_cells(stale), shown=", left out of the tables", them="them"))
    for words, n in sorted(other_setting.items()):
        notes.append(f"{_cells(n)} measured with {words} left out of the tables, which show one setting; rerun "
                     f"{'it' if n == 1 else 'them'} under the current one (`attnbench run ... --fresh --only NAME`)")
    for where, n in sorted(other_data.items()):
        notes.append(f"{_cells(n)} measured on earlier contents of {where} left out of the tables (the files changed "
                     f"since); rerun the suite to measure {'it' if n == 1 else 'them'} on the current files")
    return sorted(kept, key=lambda r: r.index), notes


def _cells(n: int) -> str:
    return f"{n} cell{'s' * (n != 1)}"
