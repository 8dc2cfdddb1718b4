"""The registry's catalogue (harness.catalog), which `attnbench list` reads without torch: written from the code on
disk, equal to the live registry, and never trusted when stale."""

from __future__ import annotations

import json
from pathlib import Path

from harness import catalog


def test_the_shipped_catalogue_is_the_live_registry() -> None:
    doc = json.loads(catalog.CATALOG.read_text())
    assert doc["digest"] == catalog.source_digest(), "attentions/*.py changed since the catalogue: run `make catalog`"
    assert doc["attentions"] == catalog.build()


def test_a_stale_or_damaged_catalogue_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "variant.py").write_text("x = 1\n")
    stale = tmp_path / "catalog.json"
    stale.write_text(json.dumps({"digest": "0" * 64, "attentions": [{"name": "gone"}]}))
    assert [e["name"] for e in catalog.entries(stale)] == [e["name"] for e in catalog.build()]
    stale.write_text("{not json")
    assert catalog.entries(stale) == catalog.build()
    fresh = {"digest": catalog.source_digest(tmp_path), "attentions": [{"name": "kept"}]}
    stale.write_text(json.dumps(fresh))
    assert catalog.entries(stale) == [{"name": "kept"}]  # written from these files: read as it is
