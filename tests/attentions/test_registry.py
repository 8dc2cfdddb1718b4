"""Registry behaviour: listing, specs, presets, helpful errors, duplicate names, config validation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import attentions
from attentions import registry


def test_list_patterns_and_presets() -> None:
    names = attentions.list_attentions()
    assert names == sorted(names)
    assert {"vanilla", "vanilla_sdpa", "vanilla_xformers", "s3attention", "s3attention_released"} <= set(names)
    assert attentions.list_attentions("vanilla*") == ["vanilla", "vanilla_sdpa", "vanilla_xformers"]
    assert attentions.list_attentions("nothing*") == []


def test_spec_capabilities_are_data() -> None:
    v = attentions.spec("vanilla")
    assert v.caps.exact and v.caps.complexity == "n^2" and v.backend == "math"
    s3 = attentions.spec("s3attention")
    assert not s3.caps.exact and s3.caps.needs_fixed_length
    assert attentions.spec("vanilla_sdpa").backend == "sdpa"


def test_xformers_unavailable_on_cpu_with_reason() -> None:
    entry = attentions.spec("vanilla_xformers")
    assert not entry.available("cpu")
    assert "cuda" in entry.unavailable_reason("cpu")


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(attentions.UnknownAttentionError) as err:
        attentions.build("s3atention")
    msg = str(err.value)
    assert "Did you mean s3attention" in msg and "Registered:" in msg and "vanilla_sdpa" in msg


def test_unknown_config_key_rejected_by_name() -> None:
    with pytest.raises(attentions.UnknownConfigKeyError, match="rr") as err:
        attentions.build("s3attention", rr=4)
    assert "valid fields" in str(err.value) and "s1" in str(err.value)


def test_duplicate_name_is_an_error() -> None:
    with pytest.raises(attentions.DuplicateNameError, match="already registered"):
        attentions.register("vanilla", attentions.AttentionConfig, attentions.Capabilities())(nn.Identity)
    with pytest.raises(attentions.DuplicateNameError):
        attentions.register_preset("s3attention_released", "s3attention")


def test_register_and_preset_new_variant() -> None:
    @dataclass(frozen=True)
    class ToyConfig(attentions.AttentionConfig):
        scale: float = 1.0

    class Toy(nn.Module):
        """Toy mixer."""

        def __init__(self, cfg: ToyConfig) -> None:
            super().__init__()
            self.cfg = cfg

        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return x * self.cfg.scale

    try:
        attentions.register("_toy", ToyConfig, attentions.Capabilities(complexity="n"))(Toy)
        attentions.register_preset("_toy_s2", "_toy", scale=2.0)
        assert attentions.build("_toy_s2")(torch.ones(1, 2, 64)).sum().item() == 256.0
        assert attentions.build("_toy_s2", scale=3.0).cfg.scale == 3.0  # overrides beat the preset
        assert attentions.spec("_toy_s2").description == "Toy mixer."
        with pytest.raises(attentions.UnknownConfigKeyError):
            attentions.register_preset("_toy_bad", "_toy", nope=1)
    finally:
        for name in ("_toy", "_toy_s2", "_toy_bad"):
            registry._REGISTRY.pop(name, None)


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("vanilla", {"dim": 30, "heads": 4}, "divisible"),
        ("vanilla", {"max_seq_len": 0}, "max_seq_len"),
        ("vanilla", {"dropout": 1.5}, "dropout"),
        ("vanilla", {"backend": "flash"}, "backend"),
        ("s3attention", {"r": 7}, "r=7"),
        ("s3attention", {"conv_kernel": 2}, "odd"),
        ("s3attention", {"row_attention": False, "col_attention": False}, "at least one"),
    ],
)
def test_config_validation(name: str, overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attentions.make_config(name, **overrides)
