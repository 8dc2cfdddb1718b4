"""Registry behaviour: listing, specs, presets, papers, helpful errors, duplicate names, config validation,
and the capability rules of ``AttentionSpec.cannot_run``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

import pytest
import torch
from torch import nn

import attentions
from attentions import registry
from tests.conftest import REPO_ROOT


def test_list_patterns_and_presets() -> None:
    names = attentions.list_attentions()
    assert names == sorted(names, key=registry._natural_key)
    assert {"vanilla", "vanilla_sdpa", "vanilla_xformers", "s3attention", "s3attention_released"} <= set(names)
    assert attentions.list_attentions("vanilla*") == ["vanilla", "vanilla_sdpa", "vanilla_xformers"]
    assert attentions.list_attentions("nothing*") == []
    assert attentions.list_attentions("s3*") == ["s3attention", "s3attention_released"]


def test_natural_order_compares_digit_runs_as_integers() -> None:
    names = ["performer_m256", "s3attention_released", "performer_m64", "performer", "s3attention", "x10", "x9",
             "x09", "2b", "10a"]
    assert sorted(names, key=registry._natural_key) == [
        "2b", "10a", "performer", "performer_m64", "performer_m256", "s3attention", "s3attention_released",
        "x09", "x9", "x10",
    ]


@pytest.mark.parametrize("name", [n for n in attentions.list_attentions() if attentions.spec(n).family != n])
def test_preset_differs_from_its_base(name: str) -> None:
    """A preset identical to its base would only be a second name for the same cells."""
    entry = attentions.spec(name)
    base = attentions.spec(entry.family)
    assert (entry.config, entry.caps, entry.extra_check) != (base.config, base.caps, base.extra_check)


@pytest.mark.parametrize("name", attentions.list_attentions())
def test_every_variant_links_its_paper(name: str) -> None:
    entry = attentions.spec(name)
    url = urlparse(entry.paper)
    assert url.scheme in ("http", "https") and url.netloc, entry.paper
    assert entry.paper == attentions.spec(entry.family).paper  # presets share their base's paper


def test_register_requires_a_paper_link() -> None:
    with pytest.raises(attentions.RegistryError, match="paper must be an http"):
        attentions.register("_no_paper", attentions.AttentionConfig, attentions.Capabilities(causal_note="a test"),
                            paper="")
    assert "_no_paper" not in attentions.list_attentions()


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
        attentions.register(
            "vanilla", attentions.AttentionConfig, attentions.Capabilities(causal_note="a test"),
            paper="https://example.org/toy"
        )(nn.Identity)
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
        attentions.register("_toy", ToyConfig, attentions.Capabilities(complexity="n", causal_note="a test"),
                            paper="https://example.org/toy")(Toy)
        attentions.register_preset("_toy_s2", "_toy", scale=2.0)
        assert attentions.build("_toy_s2")(torch.ones(1, 2, 64)).sum().item() == 256.0
        assert attentions.build("_toy_s2", scale=3.0).cfg.scale == 3.0  # overrides beat the preset
        assert attentions.spec("_toy_s2").description == "Toy mixer."
        assert attentions.spec("_toy_s2").paper == "https://example.org/toy"
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
        # One positive-integer check (AttentionConfig._require_positive_ints) for every variant's fields.
        ("vanilla", {"heads": True}, "heads must be a positive integer, got True"),
        ("vanilla", {"dim": 64.0}, "dim must be a positive integer, got 64.0"),
        ("vanilla", {"dim": -64}, "dim must be a positive integer, got -64"),
        ("s3attention", {"s1": 0}, "s1 must be a positive integer, got 0"),
        ("linformer", {"k": 0}, "k must be a positive integer, got 0"),
        ("performer", {"nb_features": "64"}, "nb_features must be a positive integer, got '64'"),
        ("nystromformer", {"num_landmarks": 0}, "num_landmarks must be a positive integer, got 0"),
        ("reformer", {"bucket_size": 0}, "bucket_size must be a positive integer, got 0"),
        ("fsat", {"m_per_key": 0}, "m_per_key must be a positive integer, got 0"),
    ],
)
def test_config_validation(name: str, overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attentions.make_config(name, **overrides)




def test_cannot_run_padded_inputs_without_mask_support(throwaway: Callable[..., attentions.AttentionSpec]) -> None:
    entry = throwaway(supports_mask=False)
    reason = entry.cannot_run(128, padded=True)
    assert reason is not None and entry.name in reason and "padding mask" in reason
    assert entry.cannot_run(128, padded=False) is None
    assert throwaway().cannot_run(128, padded=True) is None


def test_cannot_run_length_off_the_multiple_unless_padded_inside(
    throwaway: Callable[..., attentions.AttentionSpec],
) -> None:
    strict = throwaway(seq_len_multiple_of=64)
    reason = strict.cannot_run(100, padded=False)
    assert reason is not None and strict.name in reason and "multiple of 64, got 100" in reason
    assert strict.cannot_run(192, padded=False) is None
    assert throwaway(seq_len_multiple_of=64, pads_to_multiple=True).cannot_run(100, padded=False) is None


def test_cannot_run_beyond_a_fixed_length(throwaway: Callable[..., attentions.AttentionSpec]) -> None:
    fixed = throwaway(needs_fixed_length=True)
    reason = fixed.cannot_run(2048, padded=False, max_seq_len=1024)
    assert reason is not None and fixed.name in reason and "max_seq_len=1024" in reason and "2048" in reason
    assert fixed.cannot_run(1024, padded=False, max_seq_len=1024) is None
    assert fixed.cannot_run(512, padded=True, max_seq_len=1024) is None  # shorter inputs are handled inside
    assert fixed.cannot_run(2048, padded=False) is None  # max_seq_len unknown: not checked
    assert throwaway().cannot_run(2048, padded=False, max_seq_len=1024) is None


def test_throwaway_variants_do_not_leak() -> None:
    assert not attentions.list_attentions("_throwaway_*")


@pytest.mark.parametrize("n", [64, 192, 4096])
@pytest.mark.parametrize("name", attentions.list_attentions())
def test_every_variant_runs_on_padded_multiples_of_64(name: str, n: int) -> None:
    assert attentions.spec(name).cannot_run(n, padded=True, max_seq_len=n) is None


def test_importing_the_zoo_does_not_import_the_compiler() -> None:
    """torch._dynamo costs over a second of every process that imports it (each isolated worker, each CLI run); a
    variant that must run eagerly under torch.compile says so with ``eager_only``, which imports it at the first call
    only."""
    code = "import sys, attentions; print('torch._dynamo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert done.stdout.strip() == "False", done.stderr
