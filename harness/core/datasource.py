"""What data a result came from, as one line that every training cell stores (its ``data_source`` metric) and every
table, CSV file and figure of the accuracy and forecasting kinds repeats: a number measured on a generated stand-in
must never read as one measured on LRA or on a forecasting dataset once it is pasted into a paper.

- Generated: ``generated stand-in (GENERATOR vVERSION: {parameters as JSON})``.
- The user's files: ``files in DIR: NAME sha256:HEX16, ...`` (or, for a folder of many files such as aclImdb, their
  count and one sha256 over their names and contents in name order).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

GENERATED = "generated stand-in"
#: Files listed one by one under this count; more are summarised by one digest.
LISTED_FILES = 8
#: What a cell stored before cells recorded their data (its results stay valid: the data did not change).
NOT_RECORDED = "not recorded (measured before attnbench recorded data sources)"


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
        listed = ", ".join(f"{name(p)} sha256:{digest_of(p)[:16]}" for p in paths)
        return f"files in {root}: {listed}"
    digest = hashlib.sha256()
    for path in paths:
        digest.update(name(path).encode() + b"\0" + bytes.fromhex(digest_of(path)))
    return f"files in {root}: {len(paths):,} files, sha256 of their names and contents {digest.hexdigest()[:16]}"


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
    return f"Data: {head} — " + "; ".join(found)


def title_mark(values: Iterable[object], real: str) -> str:
    """What a title adds so that generated data is never titled with a bare dataset name: ``" (generated
    stand-ins, not LRA)"``, or nothing for the user's files."""
    return f" (generated stand-ins, not {real})" if any_generated(values) else ""
