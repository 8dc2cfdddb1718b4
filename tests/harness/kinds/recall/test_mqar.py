"""The MQAR generator against Zoology's definition: keys and values from disjoint halves of the vocabulary, every
query answered exactly once, the query gaps drawn from the power law, determinism under a seed, bad input refused."""

from __future__ import annotations

import math

import pytest
import torch

from harness.core.errors import UserError
from harness.kinds.recall.mqar import FILLER_ID, IGNORE, VOCAB_SIZE, check_mqar, gap_probabilities, generate_mqar


@pytest.mark.parametrize(("seq_len", "pairs"), [(64, 4), (128, 8), (256, 16), (16, 4)])
def test_keys_and_values_come_from_disjoint_halves_and_each_is_distinct(seq_len: int, pairs: int) -> None:
    data = generate_mqar(500, seq_len=seq_len, num_kv_pairs=pairs, seed=0)
    keys, values = data.inputs[:, 0:2 * pairs:2], data.inputs[:, 1:2 * pairs:2]
    half = VOCAB_SIZE // 2
    assert ((keys >= 1) & (keys < half)).all() and ((values >= half) & (values < VOCAB_SIZE)).all()
    for row in range(len(data)):
        assert len(set(keys[row].tolist())) == pairs and len(set(values[row].tolist())) == pairs


@pytest.mark.parametrize(("seq_len", "pairs", "random_non_queries"), [(64, 4, False), (256, 16, False),
                                                                     (64, 4, True), (16, 4, False)])
def test_every_query_has_exactly_one_answer(seq_len: int, pairs: int, random_non_queries: bool) -> None:
    """Each target sits on a key's second occurrence, after every pair, and is the value that followed that key; each
    key is queried once; nothing else is a target."""
    data = generate_mqar(300, seq_len=seq_len, num_kv_pairs=pairs, seed=1, random_non_queries=random_non_queries)
    assert data.inputs.shape == data.targets.shape == (300, seq_len)
    for row in range(len(data)):
        x, y = data.inputs[row].tolist(), data.targets[row].tolist()
        answer = dict(zip(x[0:2 * pairs:2], x[1:2 * pairs:2], strict=True))
        queried = [t for t in range(seq_len) if y[t] != IGNORE]
        assert len(queried) == pairs
        assert all(t >= 2 * pairs and (t - 2 * pairs) % 2 == 0 for t in queried)
        assert sorted(x[t] for t in queried) == sorted(answer)  # every key once
        assert all(y[t] == answer[x[t]] for t in queried)
        if not random_non_queries:  # the rest of the query region is Figure 2's filler
            rest = [x[t] for t in range(2 * pairs, seq_len) if t not in queried]
            assert set(rest) <= {FILLER_ID}


@pytest.mark.parametrize(("seq_len", "pairs"), [(64, 1), (64, 4), (256, 16)])
def test_the_first_key_s_query_gap_follows_the_power_law(seq_len: int, pairs: int) -> None:
    """Gaps are drawn without replacement in key order, so the first key's gap has the power law's own distribution:
    a·(g+1)^(a-1) normalised. Each gap's count must be within 5 binomial standard deviations of its expectation, and
    the whole histogram passes a chi-square test at a 1e-4 false-alarm rate."""
    n = 40_000
    data = generate_mqar(n, seq_len=seq_len, num_kv_pairs=pairs, seed=2)
    first_key = data.inputs[:, 0]
    region = data.inputs[:, 2 * pairs:]  # [n, L - 2P]
    offset = (region == first_key[:, None]).float().argmax(dim=1)  # the first key's query offset in the region
    assert (offset % 2 == 0).all()
    space = (seq_len - 2 * pairs) // 2
    counts = torch.bincount(offset // 2, minlength=space).double()
    p = gap_probabilities(space)
    expected = n * p
    sd = (n * p * (1 - p)).sqrt()
    assert ((counts - expected).abs() <= 5 * sd + 1).all(), (counts[:5], expected[:5])
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = space - 1
    # Wilson-Hilferty: the chi-square quantile at 1 - 1e-4 (z = 3.719)
    bound = dof * (1 - 2 / (9 * dof) + 3.719 * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < bound, (chi2, bound)


def test_the_power_law_favours_short_gaps() -> None:
    p = gap_probabilities(28)
    assert torch.isclose(p.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert (p[:-1] > p[1:]).all()
    assert math.isclose(float(p[0] / p[1]), 2 ** 0.99) and math.isclose(float(p[0] / p[9]), 10 ** 0.99)  # ~ 1/(g+1)


def test_the_generator_is_deterministic_under_a_seed() -> None:
    a = generate_mqar(64, seq_len=64, num_kv_pairs=4, seed=3)
    b = generate_mqar(64, seq_len=64, num_kv_pairs=4, seed=3)
    c = generate_mqar(64, seq_len=64, num_kv_pairs=4, seed=4)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize(("seq_len", "pairs", "vocab", "message"), [
    (64, 17, VOCAB_SIZE, "num_kv_pairs=17 does not fit a sequence of 64 tokens"),
    (64, 0, VOCAB_SIZE, "num_kv_pairs=0 does not fit"),
    (63, 4, VOCAB_SIZE, "even sequence length"),
    (64, 4, 8, "vocab_size=8 is too small for 4 distinct keys and values"),
])
def test_bad_settings_are_one_line_errors(seq_len: int, pairs: int, vocab: int, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        check_mqar(seq_len, pairs, vocab)
    assert "\n" not in str(info.value)


def test_the_smallest_vocabulary_that_fits_works() -> None:
    data = generate_mqar(50, seq_len=16, num_kv_pairs=4, seed=0, vocab_size=10)
    assert data.inputs.max() < 10 and (data.inputs[:, 0:8:2] < 5).all()
