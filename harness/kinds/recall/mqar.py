"""Multi-query associative recall (MQAR), generated as Zoology generates it, deterministic from a seed (no download).

Arora, Eyuboglu et al., "Zoology: Measuring and Improving Recall in Efficient Language Models", ICLR 2024,
https://arxiv.org/abs/2312.04927; the definition followed is the authors' ``zoology/data/multiquery_ar.py``
(``multiquery_ar``, with Figure 2's settings in ``experiments/paper_configs/iclr24_zoology_figure2/configs.py``).

A sequence of ``seq_len`` tokens opens with ``num_kv_pairs`` key-value pairs ``k1 v1 k2 v2 ...``: keys drawn without
replacement from ids ``1 .. V/2 - 1``, values from ``V/2 .. V - 1`` (disjoint halves of the vocabulary ``V``). The
rest holds every key once more as a query, at even offsets ``2·g`` of the query region, the gaps ``g`` drawn without
replacement from ``0 .. space - 1`` (``space = (seq_len - 2·pairs) / 2``) with probability proportional to
``a·(g + 1)^(a - 1)`` (``power_a`` = a = 0.01: short gaps far more likely, as repeated bigrams in text). The target at a
query position is the value paired with its key (the next token a language model predicts there); every other
position's target is :data:`IGNORE`, and the loss and the accuracy are counted at the query positions only. Figure 2
leaves the rest of the query region 0 (``random_non_queries=False``), as here by default; ``random_non_queries=True``
fills it with uniform random ids, as the repository's default does.

Deviation from the authors' code, none in distribution: their draws are numpy's legacy ``np.random.choice`` row by
row; here the same distributions come from torch's seeded generator in whole batches (a key set is the ``pairs``
largest of uniform numbers, one per candidate id: a uniform random subset in random order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.errors import UserError

#: Zoology's vocabulary (8,192 ids: keys in the lower half, values in the upper).
VOCAB_SIZE = 8192
#: Zoology's power-law exponent of the query gaps (``power_a``).
POWER_A = 0.01
#: The target of a position that is not a query (``torch.nn.functional.cross_entropy``'s ``ignore_index``).
IGNORE = -100
#: Of the generator's output: a change of it names new data sources (in every cell's data_source).
MQAR_VERSION = 1
FILLER_ID = 0  # the token between queries (Figure 2's zeros): a token like any other, not padding
ROWS_PER_DRAW = 4096  # rows whose key and value draws are made at once (a draw is rows x V/2 uniform numbers)


@dataclass(frozen=True)
class Mqar:
    """A batch of MQAR sequences.

    Attributes:
        inputs: int64 [S, L] token ids.
        targets: int64 [S, L]: the value to predict at each query position, :data:`IGNORE` elsewhere.
    """

    inputs: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


def check_mqar(seq_len: int, num_kv_pairs: int, vocab_size: int = VOCAB_SIZE) -> None:
    """A UserError (exit 2, one line) where the task cannot be generated: an odd length, pairs and their queries not
    fitting in the sequence, or a vocabulary too small for the keys and values."""
    if seq_len < 2 or seq_len % 2:
        raise UserError(f"MQAR needs an even sequence length of at least 2 (queries sit at even offsets), got "
                        f"{seq_len}")
    if num_kv_pairs < 1 or 4 * num_kv_pairs > seq_len:
        raise UserError(f"num_kv_pairs={num_kv_pairs} does not fit a sequence of {seq_len} tokens: the pairs take "
                        f"2 tokens each and their queries need 2 more each (at most {seq_len // 4} pairs); lower "
                        f"num_kv_pairs or raise seq_len")
    if vocab_size // 2 - 1 < num_kv_pairs:
        raise UserError(f"vocab_size={vocab_size} is too small for {num_kv_pairs} distinct keys and values (keys come "
                        f"from ids 1..{vocab_size // 2 - 1}, values from the upper half); use a vocabulary of at "
                        f"least {2 * (num_kv_pairs + 1)}")


def gap_probabilities(space: int, power_a: float = POWER_A) -> torch.Tensor:
    """float64 [space]: the probability of each query gap 0 .. space - 1, proportional to ``a·(g + 1)^(a - 1)``."""
    p = power_a * torch.arange(1, space + 1, dtype=torch.float64) ** (power_a - 1)
    return p / p.sum()


def _distinct(rows: int, low: int, high: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """int64 [rows, count]: per row, ``count`` distinct ids of ``low .. high - 1`` in random order."""
    out = torch.empty(rows, count, dtype=torch.long)
    for start in range(0, rows, ROWS_PER_DRAW):
        stop = min(rows, start + ROWS_PER_DRAW)
        u = torch.rand(stop - start, high - low, generator=gen)  # [r, candidates]
        out[start:stop] = u.topk(count, dim=1).indices + low  # the largest `count`: a uniform subset, shuffled
    return out


def generate_mqar(n: int, *, seq_len: int, num_kv_pairs: int, seed: int, vocab_size: int = VOCAB_SIZE,
                  power_a: float = POWER_A, random_non_queries: bool = False) -> Mqar:
    """``n`` MQAR sequences of ``seq_len`` tokens with ``num_kv_pairs`` pairs each (see the module docstring)."""
    check_mqar(seq_len, num_kv_pairs, vocab_size)
    gen = torch.Generator().manual_seed(seed)
    half = vocab_size // 2
    keys = _distinct(n, 1, half, num_kv_pairs, gen)  # [n, P]
    values = _distinct(n, half, vocab_size, num_kv_pairs, gen)  # [n, P]
    context = 2 * num_kv_pairs
    pairs = torch.stack((keys, values), dim=-1).reshape(n, context)  # [n, P, 2] -> [n, 2P]: k1 v1 k2 v2 ...
    space = (seq_len - context) // 2
    probs = gap_probabilities(space, power_a).to(torch.float32).expand(n, space)
    gaps = torch.multinomial(probs, num_kv_pairs, replacement=False, generator=gen)  # [n, P]: key j's query gap
    queries = torch.full((n, seq_len - context), FILLER_ID, dtype=torch.long)
    if random_non_queries:
        queries = torch.randint(vocab_size, queries.shape, generator=gen)
    queries.scatter_(1, 2 * gaps, keys)
    targets = torch.full((n, seq_len), IGNORE, dtype=torch.long)
    targets.scatter_(1, context + 2 * gaps, values)  # the value is the next token after its key's query
    return Mqar(torch.cat((pairs, queries), dim=1), targets)
