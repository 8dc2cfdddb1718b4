"""Properties every registered variant must have (parametrised over the registry, so new variants are
tested without touching this file): shapes, finite outputs and gradients, padding invariance, determinism
under a seed, state-dict round trip, and linear peak memory for the non-quadratic ones."""

from __future__ import annotations

import pytest
import torch

import attentions
from harness.measure.memory import peak_memory_bytes

CPU_VARIANTS = [n for n in attentions.list_attentions() if attentions.spec(n).available("cpu")]
#: The variants with a backward pass on the CPU (FlexAttention's is CUDA only: ``Capabilities.trains_on``).
CPU_TRAINABLE = [n for n in CPU_VARIANTS if "cpu" in attentions.spec(n).caps.trains_on]
SMALL = {"dim": 32, "heads": 2, "max_seq_len": 128}


def _build(name: str, seed: int = 0, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return attentions.build(name, **{**SMALL, **overrides})


def _forward(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    torch.manual_seed(123)  # variants that draw randomness per call (LSH rotations) see the same draws
    return module(x, mask)


def _padded_batch(n: int = 128, real: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(2, n, SMALL["dim"])
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, real:] = False
    return x, mask


@pytest.mark.parametrize("name", CPU_TRAINABLE)
def test_shape_finite_and_gradients(name: str) -> None:
    module = _build(name).train()
    x = torch.randn(2, 128, SMALL["dim"], requires_grad=True)
    y = _forward(module, x)
    assert y.shape == x.shape
    assert torch.isfinite(y).all()
    y.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    if not attentions.spec(name).caps.mixes_tokens:  # the `none` control: zero whatever the input, zero gradient
        assert not y.any() and not x.grad.any()
        return
    assert x.grad.abs().sum() > 0
    for pname, p in module.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_padding_never_leaks(name: str) -> None:
    """Real positions must not depend on the content of padded positions."""
    module = _build(name).eval()
    x, mask = _padded_batch()
    noisy = x.clone()
    noisy[1, 96:] = 100.0 * torch.randn(32, SMALL["dim"])
    with torch.no_grad():
        a, b = _forward(module, x, mask), _forward(module, noisy, mask)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    torch.testing.assert_close(a[1, :96], b[1, :96], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CPU_TRAINABLE)
def test_real_outputs_send_no_gradient_to_padding(name: str) -> None:
    """The backward form of padding invariance: a loss over real positions has zero gradient at padded inputs."""
    module = _build(name).train()
    x, mask = _padded_batch()
    x.requires_grad_(True)
    y = _forward(module, x, mask)
    (y * mask[..., None]).square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.count_nonzero(x.grad[~mask]) == 0


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_short_input_equals_padded_input(name: str) -> None:
    """A sequence shorter than max_seq_len gives what the same sequence padded with a mask gives."""
    module = _build(name).eval()
    x, mask = _padded_batch()
    with torch.no_grad():
        padded = _forward(module, x[1:], mask[1:])[:, :96]
        short = _forward(module, x[1:, :96])
    torch.testing.assert_close(short, padded, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CPU_TRAINABLE)
def test_fully_padded_sequence_and_large_inputs_stay_finite(name: str) -> None:
    """A batch row with no real token, and inputs at 30x unit scale, give finite outputs and gradients."""
    module = _build(name).train()
    x = (30.0 * torch.randn(2, 128, SMALL["dim"])).requires_grad_()
    mask = torch.ones(2, 128, dtype=torch.bool)
    mask[1] = False
    y = _forward(module, x, mask)
    assert torch.isfinite(y).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_runs_where_capabilities_say_it_can(name: str, padded: bool) -> None:
    """What ``cannot_run`` allows really runs: 100 tokens (off every multiple of 64 and 32), built for 128."""
    n = 100
    reason = attentions.spec(name).cannot_run(n, padded=padded, max_seq_len=SMALL["max_seq_len"])
    if reason is not None:
        pytest.skip(reason)
    module = _build(name).eval()
    x = torch.randn(2, n, SMALL["dim"])
    mask = None
    if padded:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[1, 70:] = False
    with torch.no_grad():
        y = _forward(module, x, mask)
    assert y.shape == x.shape and torch.isfinite(y).all()


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_deterministic_under_seed(name: str) -> None:
    x = torch.randn(2, 128, SMALL["dim"])
    outs = []
    # forward only where there is no backward on the CPU: FlexAttention refuses inputs that require a gradient there
    grad = torch.enable_grad() if name in CPU_TRAINABLE else torch.no_grad()
    for _ in range(2):
        module = _build(name, seed=7).train()  # dropout on: the seed must fix it too
        with grad:
            outs.append(_forward(module, x))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_state_dict_round_trip(name: str) -> None:
    """Weights and buffers (e.g. sampled indices, random features) fully determine the function."""
    a, b = _build(name, seed=1).eval(), _build(name, seed=2).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 128, SMALL["dim"])
    with torch.no_grad():
        torch.testing.assert_close(_forward(a, x), _forward(b, x))


# Eager FlexAttention is torch's reference path, which materialises the n×n scores (attentions/_flex.py): linear in
# memory only compiled, so the flex backend is left out here.
LINEAR_VARIANTS = [n for n in CPU_VARIANTS if attentions.spec(n).caps.complexity != "n^2"
                   and attentions.spec(n).backend != "flex"]


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_peak_memory_grows_linearly(name: str) -> None:
    """Allocator-exact (profiler) peak memory of a forward at 2n stays below 2.5x that at n."""

    def peak(n: int) -> int:
        module = _build(name, max_seq_len=n).eval()
        x = torch.randn(1, n, SMALL["dim"])

        def fwd() -> torch.Tensor:
            with torch.inference_mode():
                return _forward(module, x)

        return peak_memory_bytes(fwd, torch.device("cpu"))

    small, large = peak(2048), peak(4096)
    assert large < 2.5 * small, (small, large)


def test_quadratic_baseline_is_not_linear() -> None:
    """The memory test above can fail: vanilla math's peak grows ~4x from n to 2n."""
    def peak(n: int) -> int:
        module = _build("vanilla", max_seq_len=n).eval()
        x = torch.randn(1, n, SMALL["dim"])
        return peak_memory_bytes(lambda: module(x), torch.device("cpu"))

    assert peak(2048) > 3.0 * peak(1024)
