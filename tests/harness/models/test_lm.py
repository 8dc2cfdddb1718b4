"""The MQAR language model: causal end to end for every zoo variant with a causal form (a later token moves no earlier
logit, in float64), logits at selected positions equal to the full logits there, the head tied to the embedding, and
the authors' initialisation."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from harness.models.lm import CausalLM
from tests.tolerance import LAMBDA, unit_roundoff

VOCAB, N, DIM = 50, 64, 16
CAUSAL = [n for n in attentions.list_attentions() if attentions.spec(n).caps.causal
          and attentions.spec(n).available("cpu")]


def _model(name: str, **kwargs: object) -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(name, vocab_size=VOCAB, max_seq_len=N, dim=DIM, heads=1, **kwargs).double().eval()


@pytest.mark.parametrize("name", CAUSAL)
def test_no_logit_depends_on_a_later_token(name: str) -> None:
    """Perturbing the tokens after t leaves every logit at or before t where it was, to float64 rounding over the
    model's reductions (the vocabulary's and the width's)."""
    model = _model(name)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(VOCAB, (2, N), generator=g)
    with torch.no_grad():
        logits = model(tokens).reshape(2, N, VOCAB)
        for t in (0, 17, N - 2):
            later = tokens.clone()
            later[:, t + 1:] = torch.randint(VOCAB, (2, N - t - 1), generator=g)
            moved = model(later).reshape(2, N, VOCAB)
            err = (moved[:, : t + 1] - logits[:, : t + 1]).abs().max()
            bound = LAMBDA * unit_roundoff(torch.float64) * math.sqrt(N * DIM) * logits.abs().max() * 4
            assert err <= bound, f"{name}: position <= {t} moved by {float(err):.3e} (bound {float(bound):.3e})"
            assert (moved[:, t + 1:] != logits[:, t + 1:]).any()  # the control: later logits do see later tokens


def test_selected_positions_give_the_full_logits_there() -> None:
    model = _model("vanilla")
    tokens = torch.randint(VOCAB, (3, N), generator=torch.Generator().manual_seed(2))
    select = torch.zeros(3, N, dtype=torch.bool)
    select[0, 5] = select[1, 40] = select[2, 63] = select[2, 8] = True
    with torch.no_grad():
        full = model(tokens).reshape(3, N, VOCAB)
        assert torch.equal(model(tokens, select), full[select])


def test_the_head_is_the_token_embedding_and_weights_start_as_the_authors() -> None:
    model = CausalLM("vanilla", vocab_size=8192, max_seq_len=N, dim=128, heads=1, layers=2).eval()
    assert abs(float(model.tok.weight.detach().std()) - 0.02) < 0.001
    # tied: one parameter, no separate head
    assert sum(p.numel() for p in model.parameters() if p.shape == (8192, 128)) == 8192 * 128
    for block in model.blocks:
        std = float(block.mixer.out.weight.detach().std())
        assert abs(std - 0.02 / math.sqrt(4)) < 0.1 * 0.02 / math.sqrt(4)  # 128 x 128 draws: within 10 %
        assert float(block.mixer.out.bias.detach().abs().max()) == 0.0
    x = torch.zeros(1, 3, dtype=torch.long)
    with torch.no_grad():
        before = model(x)
        model.tok.weight[7] += 1.0  # a token not in the input: only the head reads its row
        after = model(x)
    changed = (after != before).any(dim=0)
    assert changed[7] and not changed[torch.arange(8192) != 7].any()


def test_the_none_control_sees_only_its_own_token() -> None:
    """With the `none` mixer a position's logits are a function of its own token and position: the bound on what can
    be learned without mixing."""
    model = _model("none")
    tokens = torch.randint(VOCAB, (2, N), generator=torch.Generator().manual_seed(3))
    other = torch.randint(VOCAB, (2, N), generator=torch.Generator().manual_seed(4))
    other[:, 30] = tokens[:, 30]
    with torch.no_grad():
        a, b = model(tokens).reshape(2, N, VOCAB), model(other).reshape(2, N, VOCAB)
    assert torch.allclose(a[:, 30], b[:, 30], rtol=0, atol=1e-12)
