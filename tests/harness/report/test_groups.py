"""Every registered variant carries its display name and its group where it is registered (one file is the truth),
and the paper order puts baselines first and the controls last."""

from __future__ import annotations

import pytest

import attentions
from attentions.registry import list_attentions, spec
from harness import catalog
from harness.report.format import display_name
from harness.report.groups import OTHER, PAPER_ORDER, group_of, paper_order


@pytest.mark.parametrize("name", list_attentions())
def test_every_variant_names_its_group_and_how_a_paper_prints_it(name: str) -> None:
    entry = spec(name)
    assert entry.group in attentions.GROUPS and entry.group != OTHER, f"{name}: register(..., group=...)"
    assert entry.display and entry.display != name, f"{name}: register(..., display=...)"
    assert display_name(name) == entry.display
    assert display_name(name, {name: "Mine"}) == "Mine"  # a suite's report.row_names wins


def test_the_listing_carries_them_without_torch() -> None:
    assert {e["name"]: (e["display"], e["group"]) for e in catalog.build()} == {
        n: (spec(n).display, spec(n).group) for n in list_attentions()}


def test_a_known_family_is_listed_once_in_the_paper_order() -> None:
    assert len(PAPER_ORDER) == len(set(PAPER_ORDER))
    assert {spec(n).family for n in list_attentions()} <= set(PAPER_ORDER)


def test_paper_order() -> None:
    order = paper_order(["none", "performer", "zzz_unknown", "linformer", "vanilla_sdpa", "vanilla", "fnet"],
                        baselines=["vanilla", "vanilla_sdpa"])
    assert order == ["vanilla", "vanilla_sdpa", "linformer", "performer", "fnet", "zzz_unknown", "none"]
    assert group_of("zzz_unknown") == OTHER
    assert display_name("zzz_unknown") == "zzz_unknown"  # a name an older store holds


def test_a_registration_with_an_unknown_group_or_a_control_character_is_refused() -> None:
    with pytest.raises(attentions.RegistryError, match="group 'lowrank' is not one of"):
        attentions.register("_bad_group", attentions.AttentionConfig, attentions.Capabilities(causal_note="test"),
                            paper="https://example.org/x", group="lowrank")
    with pytest.raises(attentions.RegistryError, match="control character"):
        attentions.register("_bad_display", attentions.AttentionConfig, attentions.Capabilities(causal_note="test"),
                            paper="https://example.org/x", display="My\nAttention")
    with pytest.raises(attentions.RegistryError, match="paper must be an http"):  # the template's placeholder
        attentions.register("_placeholder", attentions.AttentionConfig, attentions.Capabilities(causal_note="test"),
                            paper="https://arxiv.org/abs/XXXX.YYYYY")
    assert not {"_bad_group", "_bad_display", "_placeholder"} & set(list_attentions())
