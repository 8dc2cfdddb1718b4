"""What data a result came from, as one line that every training cell stores (its ``data_source`` metric) and every
table, CSV file and figure of the accuracy and forecasting kinds repeats: a number measured on a generated stand-in
must never read as one measured on LRA or on a forecasting dataset once it is pasted into a paper.

- Generated: ``generated stand-in (GENERATOR vVERSION: {parameters as JSON})``.
- The user's files: ``files in DIR: NAME sha256:HEX, ...`` (or, for a folder of many files such as aclImdb, their
  count and one sha256 over their names and contents in name order).

The line stored and written to every CSV file holds each sha256 in full (64 hex digits), so that a reader can check
their own copy of the data against it; a table's footer shows the first :data:`FOOTER_HEX` digits of each, and says
so. Stores written before the full digest hold 16-digit prefixes; they are read, and shown, as such.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

GENERATED = "generated stand-in"
#: Files listed one by one under this count; more are summarised by one digest.
LISTED_FILES = 8
#: What a cell stored before cells recorded their data (its results stay valid: the data did not change).
NOT_RECORDED = "not recorded (measured before attnbench recorded data sources)"
#: Hex digits of a sha256 that a table's footer shows (the data source line itself holds all 64).
FOOTER_HEX = 16
#: A digest in a data source line: after ``sha256:`` (a listed file) or after the phrase that introduces the one
#: digest of many files; 64 hex digits, or the 16-digit prefix that stores written before the full digest hold.
_DIGEST = re.compile(r"(sha256:|sha256 of their names and contents )([0-9a-f]{16})(?:[0-9a-f]{48})?(?![0-9a-f])")


def generated(generator: str, version: int, params: Mapping[str, Any]) -> str:
    """The source of data drawn by ``generator`` (its ``version``) with ``params``."""
    return f"{GENERATED} ({generator} v{version}: {json.dumps(dict(params), sort_keys=True, default=str)})"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files(root: str | Path, paths: Sequence[str | Path], contents: Sequence[bytes] | None = None) -> str:
    """The source of data read from ``paths`` under ``root``, with their checksums; ``contents``: the files' bytes
    where the reader already holds them (aclImdb's 50,000 reviews), so they are not read a second time."""
    root = Path(root)
    held = dict(zip(map(Path, paths), contents, strict=True)) if contents is not None else {}
    paths = sorted(Path(p) for p in paths)

    def digest_of(path: Path) -> str:
        return hashlib.sha256(held[path]).hexdigest() if path in held else _sha256(path)

    def name(path: Path) -> str:
        try:
            return str(path.relative_to(root))
        except ValueError:
            return str(path)

    if len(paths) <= LISTED_FILES:
        listed = ", ".join(f"{name(p)} sha256:{digest_of(p)}" for p in paths)
        return f"files in {root}: {listed}"
    digest = hashlib.sha256()
    for path in paths:
        digest.update(name(path).encode() + b"\0" + bytes.fromhex(digest_of(path)))
    return f"files in {root}: {len(paths):,} files, sha256 of their names and contents {digest.hexdigest()}"


def is_generated(source: object) -> bool:
    """Whether ``source`` is generated data (the older ``generated:TASK:PARAMS`` form included)."""
    return isinstance(source, str) and source.startswith("generated")


def sources(values: Iterable[object]) -> list[str]:
    """The distinct sources among a column's values, a missing one as :data:`NOT_RECORDED`."""
    return sorted({v if isinstance(v, str) and v else NOT_RECORDED for v in values})


def any_generated(values: Iterable[object]) -> bool:
    return any(is_generated(v) for v in values)


def of_ok_cells(df: Any) -> list[object]:
    """The ``data_source`` of every ``ok`` cell of a results frame (None where a cell did not record one)."""
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    return list(ok["data_source"]) if "data_source" in ok.columns else [None] * len(ok)


def all_real(values: Iterable[object]) -> bool:
    """Whether every value names the user's files (none generated, none unrecorded): only then may a verdict speak
    of the paper's data."""
    found = sources(values)
    return bool(found) and not any(is_generated(s) or s == NOT_RECORDED for s in found)


def data_line(values: Iterable[object], real: str) -> str:
    """One line for a table's footer: whether the numbers come from generated stand-ins (and which), from the
    user's files (and their checksums) or both. ``real`` names the real data the stand-ins stand in for."""
    found = sources(values)
    generated_ = [s for s in found if is_generated(s)]
    if generated_ and len(generated_) == len(found):
        head = f"generated stand-ins, not {real}"
    elif generated_:
        head = f"partly generated stand-ins (not {real}), partly the user's files"
    else:
        head = "the user's files" if NOT_RECORDED not in found else "as recorded per cell"
    return f"Data: {head} — " + shortened("; ".join(found))


def shortened(line: str) -> str:
    """``line`` with each sha256 cut to its first :data:`FOOTER_HEX` hex digits and a mark (``…``), and a note
    saying so at the end: a footer stays readable beside a table, and never passes a prefix off as a whole digest
    (the CSV files and the store hold the digests in full). A line without a digest is returned as it is."""
    cut, count = _DIGEST.subn(lambda m: f"{m[1]}{m[2]}…", line)
    return f"{cut} (sha256 digests: first {FOOTER_HEX} hex digits shown; in full in the CSV files)" if count else cut


def title_mark(values: Iterable[object], real: str) -> str:
    """What a title adds so that generated data is never titled with a bare dataset name: ``" (generated
    stand-ins, not LRA)"``, or nothing for the user's files."""
    return f" (generated stand-ins, not {real})" if any_generated(values) else ""


def with_sources(frame: pd.DataFrame, results: pd.DataFrame,
                 by: str | Sequence[str] = ("key", "task", "dataset")) -> pd.DataFrame:
    """``frame`` (a table's summary, its differences, the learning curves) with a ``data_source`` column, so that
    every row of a CSV file, pasted alone, still says what its numbers were measured on (``generated stand-in`` where
    they were).

    ``by``: columns that say which cells of ``results`` (a results frame) a row of ``frame`` comes from, best first;
    the first that both frames have is matched (the default: a curve point's cell key, else a table row's task or
    dataset). A row gets the sources of the ``ok`` cells with its value, joined by "; " in :func:`sources`' order; a
    row that no ok cell shares its value with (a task average, a failed cell's curve), and every row where no column
    of ``by`` is in both frames, gets the sources of every ok cell.
    """
    ok = results[results["status"] == "ok"] if "status" in results.columns else results
    every = "; ".join(sources(of_ok_cells(results)))
    candidates = [by] if isinstance(by, str) else list(by)
    column = next((c for c in candidates if c in frame.columns and c in ok.columns), None)
    if column is None:
        return frame.assign(data_source=every)
    values = pd.Series(of_ok_cells(results), index=ok.index, dtype=object)
    per_value = {value: "; ".join(sources(group)) for value, group in values.groupby(ok[column], sort=False)}
    return frame.assign(data_source=[per_value.get(value, every) for value in frame[column]])
