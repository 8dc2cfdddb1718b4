"""Linear Transformer against the quadratic form of its own equation (Katharopoulos et al. 2020, eq. 4-6):
V'_i = Σ_j φ(Q_i)ᵀφ(K_j) V_j / Σ_j φ(Q_i)ᵀφ(K_j), φ(x) = elu(x) + 1, written with an explicit n×n matrix; its causal
form (§3.4, j ≤ i) and the chunked causal product of ``attentions._kernels`` it runs on, across chunks."""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

import pytest
import torch

import attentions
from attentions import _kernels
from attentions._kernels import CAUSAL_CHUNK, causal_kernel_attention_terms, causal_kernel_step
from attentions.linear_transformer import LinearTransformerAttention
from tests.attentions.reference import assert_dropout_unused, assert_matches_reference, assert_padded_row_outputs_bias

CFG = {"dim": 16, "heads": 2, "max_seq_len": 32, "dropout": 0.0}


def _build(seed: int = 0, **overrides: object) -> LinearTransformerAttention:
    torch.manual_seed(seed)
    return attentions.build("linear_transformer", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _phi(x: torch.Tensor) -> torch.Tensor:
    """elu(x) + 1 written out: x + 1 for x > 0, exp(x) otherwise."""
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp_max(0.0)))


def _reference(
    module: LinearTransformerAttention, x: torch.Tensor, mask: torch.Tensor | None = None, phi: Callable = _phi,
    *, causal: bool = False, eps: float = 0.0,
) -> torch.Tensor:
    """The O(n²) form, one head at a time: A = φ(Q)φ(K)ᵀ with padded key columns zeroed (and, ``causal``, the keys
    after each query: §3.4 eq. 8-9), V' = A V / (A 1 + eps)."""
    b, n, d = x.shape
    h = module.cfg.heads
    dh = d // h
    w, bias = module.proj.qkv.weight, module.proj.qkv.bias
    heads = []
    for i in range(h):
        rows = [slice(part * d + i * dh, part * d + (i + 1) * dh) for part in range(3)]
        q, k, v = (x @ w[r].T + bias[r] for r in rows)  # [B, N, dh] each
        sim = phi(q) @ phi(k).transpose(-1, -2)  # [B, N, N]
        if mask is not None:
            sim = sim * mask[:, None, :]
        if causal:
            sim = sim * torch.ones(n, n, dtype=torch.bool).tril()
        heads.append((sim / (sim.sum(-1, keepdim=True) + eps)) @ v)
    return torch.cat(heads, -1) @ module.out.weight.T + module.out.bias


def causal_reference(module: LinearTransformerAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form's quadratic masked form, with the module's eps (``tests/attentions/test_causal.py``)."""
    return _reference(module, x, mask, causal=True, eps=module.cfg.eps)


def _masks(b: int, n: int) -> dict[str, torch.Tensor | None]:
    suffix = torch.ones(b, n, dtype=torch.bool)
    suffix[1, n // 2 :] = False
    scattered = torch.ones(b, n, dtype=torch.bool)
    scattered[0, ::3] = False  # padding need not be a suffix
    scattered[1, -5:] = False
    return {"none": None, "suffix": suffix, "scattered": scattered}


@pytest.mark.parametrize("case", ["none", "suffix", "scattered"])
def test_matches_quadratic_form_forward_and_backward(case: str) -> None:
    module = _build(eps=1e-300)  # the paper's formula has no eps; see the next test for the default one
    x = torch.randn(2, 20, 16, dtype=torch.float64, requires_grad=True)
    mask = _masks(2, 20)[case]
    real = torch.ones(2, 20, dtype=torch.bool) if mask is None else mask
    g = torch.randn(2, 20, 16, dtype=torch.float64) * real[..., None]  # a loss over real positions only
    grads = assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), real, g)
    if mask is not None:
        assert torch.count_nonzero(grads[0][~mask]) == 0  # padded inputs reach no real output


def test_default_eps_is_a_negligible_shift() -> None:
    module = _build()
    assert module.cfg.eps == 1e-6
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    y, ref = module(x), _reference(module, x)
    torch.testing.assert_close(y, ref, rtol=1e-6, atol=1e-6)
    assert not torch.equal(y, ref)


def test_feature_map_matters() -> None:
    """The reference can fail: φ = relu (cosFormer's map without re-weighting) gives another output."""
    module = _build(eps=1e-300)
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    other = _reference(module, x, phi=torch.relu)
    assert not torch.allclose(module(x), other, rtol=1e-3, atol=1e-3)


def test_padded_equals_short_and_fully_padded_row_outputs_the_bias() -> None:
    module = _build()
    x = torch.randn(2, 24, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[0, 15:] = False
    mask[1] = False
    y = module(x, mask)
    torch.testing.assert_close(y[0, :15], module(x[:1, :15])[0])
    # No real key: the normaliser is 0 + eps and the numerator 0, so the attention output is 0.
    assert_padded_row_outputs_bias(module, x, y, 1)


def test_dropout_is_unused_and_capabilities() -> None:
    module = _build(dropout=0.5)
    assert_dropout_unused(module, torch.randn(1, 12, 16, dtype=torch.float64))
    caps = attentions.spec("linear_transformer").caps
    assert caps.complexity == "n" and caps.supports_mask and not caps.exact and not caps.needs_fixed_length
    with pytest.raises(ValueError, match="eps"):
        attentions.build("linear_transformer", eps=0.0)


def _dense_causal_terms(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                        state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ_{j<=i, j real} φ(q_i)ᵀφ(k_j)[v_j, 1] + φ(q_i)ᵀ·state, and the state after, with an explicit N×N matrix."""
    n = phi_q.shape[2]
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # [B, H, N, d+1]
    a = phi_q @ phi_k.transpose(-1, -2) * (torch.ones(n, n, dtype=torch.bool).tril() & mask[:, None, None, :])
    return a @ v1 + phi_q @ state, state + (phi_k * mask[:, None, :, None]).transpose(-1, -2) @ v1


@pytest.mark.parametrize("chunk", [1, 3, 7, 30, 64])
def test_the_chunked_causal_product_is_the_masked_quadratic_one_and_steps_continue_it(chunk: int) -> None:
    """Any chunk size (several chunks, a padded tail, one chunk longer than the sequence), after a state, with padded
    keys in several chunks; then steps from the state it returns, token by token."""
    g = torch.Generator().manual_seed(0)
    phi_q, phi_k = (torch.rand(2, 2, 30, 5, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, 30, 4, generator=g, dtype=torch.float64)
    state = torch.rand(2, 2, 5, 5, generator=g, dtype=torch.float64)  # [B, H, f, d+1]
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, ::4] = False
    num, den, last = causal_kernel_attention_terms(phi_q[:, :, :20], phi_k[:, :, :20], v[:, :, :20], mask[:, :20],
                                                   state=state, chunk=chunk)
    want = _dense_causal_terms(phi_q, phi_k, v, mask, state)[0]
    torch.testing.assert_close(torch.cat([num, den], dim=-1), want[:, :, :20])
    torch.testing.assert_close(last, _dense_causal_terms(phi_q[:, :, :20], phi_k[:, :, :20], v[:, :, :20],
                                                         mask[:, :20], state)[1])
    mask[:, 20:] = True  # a step adds a real token
    want, want_state = _dense_causal_terms(phi_q, phi_k, v, mask, state)
    for t in range(20, 30):
        num, den = causal_kernel_step(phi_q[:, :, t : t + 1], phi_k[:, :, t : t + 1], v[:, :, t : t + 1], last)
        torch.testing.assert_close(torch.cat([num, den], dim=-1), want[:, :, t : t + 1])
    torch.testing.assert_close(last, want_state)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_the_causal_products_backward_is_its_gradient(chunk: int) -> None:
    """The hand-written backward against finite differences (``gradcheck``, float64): features, values and the state
    before, with padded keys, over several chunks and groups of chunks (one group of whole chunks at chunk 64)."""
    g = torch.Generator().manual_seed(1)
    phi_q, phi_k = (torch.rand(1, 2, 37, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 2, 37, 2, generator=g, dtype=torch.float64, requires_grad=True)
    state = torch.rand(1, 2, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)  # [B, H, f, d+1]
    mask = torch.ones(1, 37, dtype=torch.bool)
    mask[0, 5:9] = False

    def terms(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return causal_kernel_attention_terms(*inputs[:3], mask, state=inputs[3], chunk=chunk)

    assert torch.autograd.gradcheck(terms, (phi_q, phi_k, v, state))


def assert_causal_form_holds_across_chunks(module: torch.nn.Module, reference: Callable, prompt: int = 70) -> None:
    """The registry-wide causal tests run one chunk (N = 40); here N spans three chunks of ``CAUSAL_CHUNK`` (the last
    one short), padding in two of them: the causal forward equals ``reference`` (the quadratic masked form) forward
    and backward, and prefill of ``prompt`` tokens + one step per token equals the forward. ``module``: float64,
    eval, with max_seq_len >= 2·CAUSAL_CHUNK + 11."""
    n = 2 * CAUSAL_CHUNK + 11
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, n, module.cfg.dim, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, :5] = False
    mask[1, CAUSAL_CHUNK + 2 : CAUSAL_CHUNK + 6] = False
    for groups in (1, _kernels.GROUPS):  # one group of chunks, or a group per chunk (a state carried between)
        with mock.patch.object(_kernels, "GROUPS", groups), mock.patch.object(_kernels, "MIN_GROUP_CHUNKS", 1):
            assert_matches_reference(module, x, module(x, mask), reference(module, x, mask), mask)
    mask[:, prompt:] = True  # the tokens a step adds are real
    with torch.no_grad():
        y = module(x, mask)
        out, state = module.prefill(x[:, :prompt], mask[:, :prompt], capacity=n)
        pieces = [out] + [module.step(x[:, t : t + 1], state)[0] for t in range(prompt, n)]
    torch.testing.assert_close(torch.cat(pieces, dim=1)[mask], y[mask])


def test_causal_form_across_chunks() -> None:
    assert_causal_form_holds_across_chunks(_build(causal=True, max_seq_len=160), causal_reference)
