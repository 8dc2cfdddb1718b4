"""What ``attnbench list`` shows, without importing torch: the registry's facts about every variant, kept in
``attentions/catalog.json`` beside the variants' code.

Building the registry imports torch and every variant module (seconds); a listing needs only names and
capabilities. The catalogue is the registry written out (:func:`write`, ``make catalog``), with a digest of the
``attentions/*.py`` files it was written from. :func:`entries` reads it when the digest matches the files on disk and
builds it from the live registry otherwise (a variant added or edited since: correct, only slower), so a listing is
never stale. A test compares the file with the live registry.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).resolve().parent.parent / "attentions" / "catalog.json"
SOURCES = CATALOG.parent


def source_digest(folder: Path = SOURCES) -> str:
    """sha256 over the names and bytes of the variants' modules (``*.py``, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build() -> list[dict[str, Any]]:
    """The live registry's facts, one dict per registered name (imports torch and every variant)."""
    import attentions

    out = []
    for name in attentions.list_attentions():
        s = attentions.spec(name)
        out.append({
            "name": name, "family": s.family, "complexity": s.caps.complexity, "exact": s.caps.exact,
            "supports_mask": s.caps.supports_mask, "needs_fixed_length": s.caps.needs_fixed_length,
            "devices": list(s.caps.devices), "requires": getattr(s.extra_check, "requires", ""),
            "paper": s.paper, "description": s.description, "benchmark": s.benchmark,
            "causal": s.caps.causal, "decode": s.caps.decode, "causal_note": s.caps.causal_note,
            "decode_note": s.caps.decode_note, "display": s.display, "group": s.group,
        })
    return out


def write(path: Path = CATALOG) -> Path:
    """Write the catalogue from the live registry (``make catalog`` after adding or changing a variant)."""
    doc = {"digest": source_digest(path.parent), "attentions": build()}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def _shipped(path: Path) -> list[dict[str, Any]] | None:
    """The catalogue's entries when it was written from the code on disk, else None (stale, missing or damaged)."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("digest") == source_digest(path.parent):
            return list(doc["attentions"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def is_fresh(path: Path = CATALOG) -> bool:
    """Whether the catalogue was written from the code on disk (``make catalog`` since the last edit of the zoo)."""
    return _shipped(path) is not None


def entries(path: Path = CATALOG) -> list[dict[str, Any]]:
    """Every variant's facts: from the catalogue when it was written from the code on disk, else from the registry."""
    shipped = _shipped(path)
    return shipped if shipped is not None else build()


if __name__ == "__main__":
    print(write())
