"""The ``approximates_softmax`` capability: every variant that declares it has a ``softmax_reference`` equal to an
independent O(n²) softmax attention through its own projections (Nyströmformer's plus its convolution residual on
V), and each approximation is exact at its limit
(Linformer k = n with identity projections, Nyström m = n, windows covering the sequence, one LSH bucket) — while the
error of a random-feature estimate falls as its features grow."""

from __future__ import annotations

import pytest
import torch

import attentions
from harness.kinds.approximation.error import output_errors
from tests.attentions.reference import masked_softmax_attention, merge_heads, module_qkv, split_heads

APPROXIMATIONS = [n for n in attentions.list_attentions() if attentions.spec(n).caps.approximates_softmax]
N, D, H = 128, 32, 2


def _layer(name: str, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return attentions.build(name, dim=D, heads=H, max_seq_len=N, dropout=0.0, **overrides).double().eval()


def _x(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, N, D, generator=g, dtype=torch.float64)
    mask = torch.ones(2, N, dtype=torch.bool)
    mask[1, 100:] = False
    return x, mask


def test_the_capability_is_declared_where_expected() -> None:
    assert {"performer", "nystromformer", "linformer", "reformer", "local", "bigbird"} <= set(APPROXIMATIONS)
    others = {"s3attention", "fnet", "none", "mean_pool", "linear_transformer", "cosformer", "synthesizer"}
    assert not others & set(APPROXIMATIONS)
    assert not any(attentions.spec(n).caps.exact for n in APPROXIMATIONS)


@pytest.mark.parametrize("name", APPROXIMATIONS)
def test_reference_is_softmax_through_the_layers_projections(name: str) -> None:
    layer = _layer(name)
    x, mask = _x()
    with torch.no_grad():
        got = layer.softmax_reference(x, mask)
        xz = x * mask[..., None]
        if name.startswith("reformer"):  # shared QK: scores q·k/‖k‖, self excluded (−1e5), no 1/√d
            qk, v = (split_heads(t, H) for t in (xz @ layer.qkv.weight.T + layer.qkv.bias).chunk(2, dim=-1))
            scores = qk @ torch.nn.functional.normalize(qk, dim=-1, eps=1e-6).transpose(-1, -2)
            scores = scores.masked_fill(torch.eye(N, dtype=torch.bool), -1e5)
            scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(x.dtype).min)
            y = scores.softmax(-1) @ v
        else:
            q, k, v = module_qkv(layer, xz)
            y = masked_softmax_attention(q, k, v, mask[:, None, None, :])
            conv = getattr(layer, "conv", None)
            if name.startswith("nystrom") and conv is not None:  # its depthwise conv residual on V, as torch's conv2d
                vz = v * mask[:, None, :, None]
                y = y + torch.nn.functional.conv2d(vz, conv.weight, padding=(conv.weight.shape[2] // 2, 0), groups=H)
        want = merge_heads(y) @ layer.out.weight.T + layer.out.bias
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-10, atol=1e-10)


def _error(layer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    with torch.no_grad():
        return output_errors(layer(x, mask), layer.softmax_reference(x, mask), mask)["rel_fro"]


@pytest.mark.parametrize(("name", "overrides"), [
    ("local", {"window": N}),
    ("local", {"window": 2 * N + 1, "mode": "sliding"}),
    ("longformer", {"window": 2 * N + 2}),
    ("reformer", {"bucket_size": N}),  # one bucket: every query sees every key
    ("h_transformer_1d", {"block_size": N}),
    ("bigbird", {"block_size": 32, "window_blocks": 7}),  # the window covers the 4 blocks
    ("nystromformer", {"num_landmarks": N, "conv_kernel": 0, "pinv_iterations": 40}),
    ("sparse_transformer", {"stride": N, "summary": 32}),
    ("sinkhorn", {"block_size": N}),  # one block: the sorted block is the block itself
    ("scatterbrain", {"bucket_size": N}),  # one bucket: the sparse part is exact everywhere, the low-rank part 0
    ("nystromformer", {"num_landmarks": N, "pinv_iterations": 40}),  # its conv residual is in the reference too
    ("probsparse", {"factor": 100}),  # u = min(L, c ⌈ln L⌉) = L: every query active
])
def test_exact_at_the_limit(name: str, overrides: dict[str, object]) -> None:
    x, mask = _x()
    layer = _layer(name, **overrides)
    assert _error(layer, x) < 1e-9
    assert _error(layer, x, mask) < 1e-9


def test_linformer_is_exact_with_identity_projections() -> None:
    layer = _layer("linformer", k=N)
    with torch.no_grad():
        layer.proj_k.copy_(torch.eye(N))
        layer.proj_v.copy_(torch.eye(N))
    x, _ = _x()
    assert _error(layer, x) < 1e-12
    assert _error(_layer("linformer", k=N), x) > 0.1  # the random E, F are what makes it approximate


def test_performer_error_falls_as_features_grow() -> None:
    x, _ = _x()
    errors = []
    for m in (16, 128, 1024):
        runs = []
        for seed in range(3):  # the features are random: average a few draws
            torch.manual_seed(seed)
            layer = attentions.build("performer", dim=D, heads=H, max_seq_len=N, dropout=0.0, nb_features=m)
            runs.append(_error(layer.double().eval(), x))
        errors.append(sum(runs) / len(runs))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.6 * errors[0]


def test_nystrom_error_falls_as_landmarks_grow() -> None:
    x, _ = _x()
    errors = [_error(_layer("nystromformer", num_landmarks=m, conv_kernel=0), x) for m in (8, 32, 128)]
    assert errors[0] > errors[1] > errors[2]
