"""The ``flex`` backend (attentions/_flex.py) computes what the ``blocks`` backend computes, for every pattern variant
of the registry, padded and causal, in float64; its BlockMask is built once per shape; what FlexAttention cannot do
here is ``unsupported`` with the reason, not an error."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._inductor.utils import fresh_cache

import attentions
from attentions import _flex
from attentions._flex import PatternConfig
from harness.core.cell import classify_exception
from harness.measure.flops import count_work
from harness.measure.timing import build_plans

#: Every registered pattern variant on its blocks backend (bases and presets): each has a flex twin.
PATTERNS = [n for n in attentions.list_attentions()
            if isinstance(attentions.spec(n).config, PatternConfig) and attentions.spec(n).backend == "blocks"]
#: Small patterns, so that a 70-token input is cut into many blocks and windows (70 is off every block size, so
#: the variants that pad do) and no key set is the whole sequence.
SMALL_PATTERN = {"local": {"window": 8}, "longformer": {"window": 8, "dilation": 2, "global_tokens": 2},
                 "bigbird": {"block_size": 8, "num_random_blocks": 1},
                 "sparse_transformer": {"stride": 8, "summary": 2}}
DIM, HEADS, N = 32, 2, 70

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def _pair(name: str, causal: bool, dtype: torch.dtype = torch.float64) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The variant on each backend, with the same weights (and BigBird's same random blocks)."""
    cfg = {"dim": DIM, "heads": HEADS, "max_seq_len": N, "dropout": 0.0, "causal": causal,
           **SMALL_PATTERN[attentions.spec(name).family]}
    torch.manual_seed(0)
    blocks = attentions.build(name, **cfg).to(dtype).eval()
    flex = attentions.build(name, **cfg, backend="flex").to(dtype).eval()
    flex.load_state_dict(blocks.state_dict())
    return blocks, flex


def _input(padded: bool, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, N, DIM, generator=g, dtype=dtype)
    if not padded:
        return x, None
    mask = torch.ones(2, N, dtype=torch.bool)
    mask[1, 45:] = False  # the second sequence has 45 real tokens
    mask[1, 3] = False  # and a padded key inside a window
    return x, mask


def _check_sparse(module: torch.nn.Module, causal: bool) -> None:
    """The test is not vacuous: the pattern leaves out at least a fifth of the (causal) query-key pairs."""
    n = module.flex_length(N)
    idx = torch.arange(n)
    allowed = module.flex_pattern(n, torch.device("cpu"), causal)(torch.tensor(0), torch.tensor(0), idx[:, None],
                                                                   idx[None, :])  # [n, n]
    possible = (idx[None, :] <= idx[:, None]) if causal else torch.ones(n, n, dtype=torch.bool)
    assert (~allowed & possible).sum() >= possible.sum() / 5


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", PATTERNS)
def test_flex_computes_what_the_blocks_compute(name: str, causal: bool, padded: bool) -> None:
    """Float64, every real output position: the two backends sum the same terms in another order, so they differ
    by rounding only, a few units of float64's roundoff per term of a softmax over at most N keys."""
    if causal and not attentions.spec(name).caps.causal:
        pytest.skip(f"{name} has no causal form")
    blocks, flex = _pair(name, causal)
    _check_sparse(flex, causal)
    x, mask = _input(padded)
    with torch.no_grad():
        want, got = blocks(x, mask), flex(x, mask)
    real = torch.ones(2, N, dtype=torch.bool) if mask is None else mask
    tol = 8 * N * torch.finfo(torch.float64).eps * want.abs().max().item()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=tol)


@pytest.mark.parametrize("name", [n for n in PATTERNS if attentions.spec(n).caps.decode])
def test_flex_prefill_then_steps_equal_its_causal_forward(name: str) -> None:
    """The flex backend's prefill (its causal form over a prompt) continues into the same decoding steps."""
    _, flex = _pair(name, causal=True)
    x, _ = _input(padded=False)
    with torch.no_grad():
        whole = flex(x)
        y, state = flex.prefill(x[:, :30], capacity=N)
        steps = [flex.step(x[:, t : t + 1], state)[0] for t in range(30, N)]
    tol = 8 * N * torch.finfo(torch.float64).eps * whole.abs().max().item()
    torch.testing.assert_close(torch.cat([y, *steps], dim=1), whole, rtol=0, atol=tol)


def _count_masks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    built: list[int] = []
    real = _flex.create_block_mask

    def counting(*args: object, **kwargs: object) -> object:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_flex, "create_block_mask", counting)
    return built


def test_the_block_mask_is_built_once_per_shape_and_ahead_by_build_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """``build_plan`` builds the BlockMask a call without padding reads (so a speed cell times it apart); a padded
    batch builds its own (the mask then depends on the data); a new length builds a new one."""
    built = _count_masks(monkeypatch)
    _, flex = _pair("sparse_transformer", causal=False)
    flex.build_plan(N, 2)
    assert len(built) == 1
    x, mask = _input(padded=True)
    with torch.no_grad():
        flex(x)
        flex(x)
        assert len(built) == 1
        flex(x, mask)
        assert len(built) == 2
        flex(x[:, :40])
        assert len(built) == 3


def test_bigbird_rebuilds_its_block_mask_when_its_random_blocks_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random pattern lives in a buffer that ``load_state_dict`` overwrites in place: the kept BlockMask must not
    outlive it."""
    blocks, flex = _pair("bigbird", causal=False)
    x, _ = _input(padded=False)
    with torch.no_grad():
        flex(x)
        torch.manual_seed(9)
        other = attentions.build("bigbird", dim=DIM, heads=HEADS, max_seq_len=N, **SMALL_PATTERN["bigbird"]).double()
        other.load_state_dict(blocks.state_dict() | {"rand_scores": torch.rand_like(blocks.rand_scores)})
        flex.load_state_dict(other.state_dict())
        torch.testing.assert_close(flex(x), other.eval()(x), rtol=0, atol=1e-12)


def test_what_flex_cannot_do_on_the_cpu_is_an_unsupported_cell() -> None:
    """A backward on the CPU (torch has none for FlexAttention there) and dropout in training (FlexAttention has
    none) raise UnsupportedError, which a benchmark cell records as ``unsupported`` with the reason."""
    _, flex = _pair("local", causal=False, dtype=torch.float32)
    x, _ = _input(padded=False, dtype=torch.float32)
    with pytest.raises(attentions.UnsupportedError, match="no backward on the CPU") as info:
        flex(x.requires_grad_())
    result = classify_exception(info.value)
    assert result.status == "unsupported" and "backward" in result.message
    dropping = attentions.build("local_flex", dim=DIM, heads=HEADS, max_seq_len=N, dropout=0.1).train()
    with torch.no_grad(), pytest.raises(attentions.UnsupportedError, match="dropout"):
        dropping(x.detach())
    assert "cpu" not in attentions.spec("local_flex").caps.trains_on


def test_a_torch_without_flex_attention_makes_the_flex_presets_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_flex, "flex_attention", None)
    for name in attentions.list_attentions("*_flex"):
        reason = attentions.spec(name).unavailable_reason("cpu")
        assert reason is not None and "no FlexAttention" in reason
    with pytest.raises(attentions.UnsupportedError, match="no FlexAttention"):
        _pair("local", causal=False)[1](_input(padded=False)[0])


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend must be 'blocks' or 'flex'"):
        attentions.build("longformer", backend="triton")


def test_every_pattern_variant_has_a_flex_preset() -> None:
    """A user picks the backend for one run from the command line (``--set attention=local_flex``)."""
    for name in PATTERNS:
        if attentions.spec(name).family == name or name.endswith("_sliding") or name.endswith("_strided"):
            assert attentions.spec(f"{name}_flex").backend == "flex", name


def test_compiled_flex_equals_the_blocks_forward() -> None:
    """The fused kernel (torch.compile; the CPU's C++ template, float32, forward only) computes the same function:
    float32 rounding over at most N keys. Where Inductor has no CPU template (no AVX2, or ATen's portable kernels, as
    CI's second pass runs), the call is unsupported with the reason."""
    blocks, flex = _pair("local", causal=True, dtype=torch.float32)
    x, _ = _input(padded=False, dtype=torch.float32)
    flex.build_plan(N, 2)
    # a cache of its own: Inductor's FX graph cache key leaves out ATEN_CPU_CAPABILITY, so CI's second pass (the
    # portable kernels) loaded the first pass's vectorised C++ and failed to build it
    with torch.no_grad(), warnings.catch_warnings(), fresh_cache():
        want = blocks(x)
        reason = _flex.compiled_cpu_unsupported(torch.float32)
        if reason is not None:
            with pytest.raises(attentions.UnsupportedError, match="AVX2"):
                torch.compile(flex)(x)
            return
        got = torch.compile(flex)(x)
    tol = 8 * N * torch.finfo(torch.float32).eps * want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=0, atol=tol)


def test_a_speed_cell_times_the_block_mask_as_plan_ms_only_on_flex() -> None:
    """``plan_ms`` (harness/measure/timing.py ``build_plans``) is the BlockMask's construction on ``flex``, and absent
    on ``blocks``, which has nothing to build."""
    blocks, flex = _pair("bigbird", causal=False, dtype=torch.float32)
    cpu = torch.device("cpu")
    assert build_plans(blocks, N, 2, cpu) is None
    plan_ms = build_plans(flex, N, 2, cpu)
    assert plan_ms is not None and plan_ms > 0
    assert len(flex.__dict__["_flex_masks"]) == 1


def test_the_counters_count_the_blocks_flex_computes_and_leave_it_working() -> None:
    """FLOPs of a flex call are SDPA's over the blocks its BlockMask computes: at n = 1024 the causal local pattern
    computes 15 of FlexAttention's 64 blocks of 128², where SDPA computes them all; counting under the dispatch modes
    leaves eager FlexAttention working (torch's eager path compiles, and a failed compile under a mode marks its code
    skipped for the rest of the process)."""
    n = 1024
    torch.manual_seed(0)
    flex = attentions.build("local_flex", dim=DIM, heads=HEADS, max_seq_len=n, causal=True, window=64)
    sdpa = attentions.build("vanilla_sdpa", dim=DIM, heads=HEADS, max_seq_len=n, causal=True)
    x = torch.randn(2, n, DIM)
    with torch.no_grad():
        flops, moved = count_work(lambda: flex(x))
        dense, _ = count_work(lambda: sdpa(x))
        projections = 2 * 2 * n * DIM * 4 * DIM  # Q, K, V and the output projection
        assert moved > 0
        assert flops - projections == pytest.approx((dense - projections) * 15 / 64, rel=0.01)
        want = attentions.build("local", dim=DIM, heads=HEADS, max_seq_len=n, causal=True, window=64)
        want.load_state_dict(flex.state_dict())
        torch.testing.assert_close(flex(x), want.eval()(x), rtol=0, atol=1e-4)
