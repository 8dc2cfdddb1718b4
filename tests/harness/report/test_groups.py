"""The zoo's groups (harness.report.groups): every registered variant has one, and the paper order puts baselines
first and the controls last."""

from __future__ import annotations

import pytest

from attentions.registry import list_attentions, spec
from harness.report.groups import GROUPS, OTHER, group_of, paper_order


@pytest.mark.parametrize("name", list_attentions())
def test_every_variant_has_a_group(name: str) -> None:
    assert group_of(name) != OTHER, f"{name} (family {spec(name).family}) is in no group of GROUPS"


def test_each_family_in_one_group() -> None:
    families = [f for fs in GROUPS.values() for f in fs]
    assert len(families) == len(set(families))


def test_paper_order() -> None:
    order = paper_order(["none", "performer", "zzz_unknown", "linformer", "vanilla_sdpa", "vanilla", "fnet"],
                        baselines=["vanilla", "vanilla_sdpa"])
    assert order == ["vanilla", "vanilla_sdpa", "linformer", "performer", "fnet", "zzz_unknown", "none"]
    assert group_of("zzz_unknown") == OTHER


@pytest.mark.parametrize("name", list_attentions())
def test_every_variant_has_a_display_name(name: str) -> None:
    from harness.report.format import DISPLAY_NAMES

    assert DISPLAY_NAMES.get(name, name) != name, f"{name} has no display name in harness/report/format.py"
