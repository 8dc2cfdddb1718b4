"""Offline generators of the five Long Range Arena tasks, deterministic from a seed (no download).

Each generator returns raw examples (token-id lists, uint8 images or byte strings) plus int64 labels;
:mod:`harness.lra.load` turns them into padded tensors. Lengths, sizes and difficulty are parameters, so small
profiles can shrink them. Every random draw comes from one ``numpy.random.Generator`` seeded by ``seed``.

* **ListOps** (:func:`generate_listops`) follows LRA's ``lra_benchmarks/data/listops.py``: operators MIN, MAX, MED,
  SM (sum mod 10) over values 0-9, depth <= ``max_depth``, 2..``max_args`` arguments, a node becomes a value when
  ``r > VALUE_P`` (so with probability 0.75) or at ``max_depth``, and only sequences with
  ``min_length < length < max_length`` tokens are kept, without duplicates (LRA keeps a set). MED is LRA's
  ``int(np.median(args))``: for an even count, the mean of the two middle values rounded down. The closing
  bracket ``]`` is kept as a token (LRA's tfds tokenizer keeps only alphanumeric tokens, which drops it and makes
  the expression ambiguous); the parentheses that LRA's ``to_string`` writes are never emitted, so the token count
  is exactly LRA's ``length``.
* **Pathfinder** (:func:`harness.lra.pixels.generate_pathfinder`): LRA's 32x32 ``curv_contour_length_14``
  parameters on a pixel grid. Connectivity rule: lit pixels (value > 0) are linked when their Chebyshev distance is
  <= 2, i.e. 8-connectivity after closing dash gaps of one pixel. Label 1 iff the two marker dots are in the same
  component.
* **Image** (:func:`harness.lra.pixels.generate_images`): ten shape classes (:data:`IMAGE_CLASSES`) with random
  position, scale, rotation, contrast and noise; the two intensities of an image are exchangeable, so intensity
  statistics carry no class information.
* **Text** (:func:`generate_text`): words separated by single spaces; label 1 iff positive marker words outnumber
  negative ones over the whole document (never a tie, the margin is 1..``max_margin`` of many markers).
* **Retrieval** (:func:`generate_retrieval`): document pairs drawn from latent topics (topic words mixed with shared
  background words); label 1 iff both documents have the same topic.

Labels of the balanced tasks come in consecutive blocks holding each class once (pairs for the binary tasks, blocks
of 10 for Image), so a split of the stream that starts at a multiple of the block is balanced to within one block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..errors import UserError

# ---------------------------------------------------------------------------------------------------------------------
# ListOps

#: The ListOps vocabulary: PAD = 0, digit d -> d + 1, operators 11..14, closing bracket 15.
LISTOPS_TOKENS: tuple[str, ...] = ("<pad>", *(str(d) for d in range(10)), "[MIN", "[MAX", "[MED", "[SM", "]")
LISTOPS_VOCAB: dict[str, int] = {tok: i for i, tok in enumerate(LISTOPS_TOKENS)}
LISTOPS_VALUE_P = 0.25  # LRA's VALUE_P: a node is an operator when r <= VALUE_P
_DIGIT_ID0 = LISTOPS_VOCAB["0"]
_OP_IDS = tuple(LISTOPS_VOCAB[op] for op in ("[MIN", "[MAX", "[MED", "[SM"))
_END_ID = LISTOPS_VOCAB["]"]


def _listops_median(args: list[int]) -> int:
    """LRA's ``int(np.median(args))`` for non-negative ints, without numpy's per-call overhead."""
    s = sorted(args)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2


_LISTOPS_APPLY: dict[int, Callable[[list[int]], int]] = {
    LISTOPS_VOCAB["[MIN"]: min,
    LISTOPS_VOCAB["[MAX"]: max,
    LISTOPS_VOCAB["[MED"]: _listops_median,
    LISTOPS_VOCAB["[SM"]: lambda args: sum(args) % 10,
}


class _TooLong(Exception):
    """Raised to abandon a tree as soon as it has max_length tokens: it would be rejected anyway."""


class _Uniforms:
    """U[0, 1) draws from a Generator in blocks: one numpy call per scalar would dominate the ListOps time."""

    def __init__(self, rng: np.random.Generator, block: int = 1 << 16) -> None:
        self._rng, self._block = rng, block
        self._buf: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        if self._i == len(self._buf):
            self._buf, self._i = self._rng.random(self._block).tolist(), 0
        self._i += 1
        return self._buf[self._i - 1]


def _listops_tree(u: _Uniforms, depth: int, max_depth: int, max_args: int, limit: int, out: list[int]) -> int:
    """Append the tokens of one LRA ``generate_tree`` subtree to ``out``; return its value."""
    r = u() if depth < max_depth else 1.0
    if r > LISTOPS_VALUE_P:  # LRA: a value, with probability 1 - VALUE_P (always at max_depth)
        value = int(u() * 10)
        out.append(_DIGIT_ID0 + value)
        if len(out) >= limit:
            raise _TooLong
        return value
    slot = len(out)
    out.append(0)  # the operator token; LRA draws the operator after the arguments
    num_values = 2 + int(u() * (max_args - 1))  # random.randint(2, max_args)
    args = [_listops_tree(u, depth + 1, max_depth, max_args, limit, out) for _ in range(num_values)]
    op = _OP_IDS[int(u() * len(_OP_IDS))]
    out[slot] = op
    out.append(_END_ID)
    if len(out) >= limit:
        raise _TooLong
    return _LISTOPS_APPLY[op](args)


def generate_listops(
    n: int,
    *,
    seed: int = 0,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
) -> tuple[list[list[int]], np.ndarray]:
    """ListOps expressions by LRA's rules, as token ids of :data:`LISTOPS_VOCAB`.

    Args:
        n: number of distinct expressions.
        seed: seed of the random stream.
        min_length, max_length: keep expressions with ``min_length < tokens < max_length`` (LRA: 500, 2000).
        max_depth: maximum tree depth; the root has depth 1 (LRA: 10).
        max_args: maximum number of arguments per operator, at least 2 (LRA: 10).

    Returns:
        (sequences, labels): ``n`` token-id lists (no padding) and their values, int64 [n] in 0..9.

    Raises:
        UserError: impossible parameters, or too few expressions within the bounds after many trees.
    """
    if max_args < 2 or max_depth < 1 or min_length + 1 >= max_length:
        raise UserError(
            f"listops: need max_args >= 2, max_depth >= 1 and min_length + 1 < max_length, got max_args={max_args}, "
            f"max_depth={max_depth}, min_length={min_length}, max_length={max_length}"
        )
    u = _Uniforms(np.random.default_rng(seed))
    seen: set[tuple[int, ...]] = set()
    seqs: list[list[int]] = []
    labels: list[int] = []
    # Generous cap: with LRA's parameters about one tree in ten is kept; a cap only stops hopeless settings.
    max_trees = 2000 * n + 100_000
    for _ in range(max_trees):
        if len(seqs) == n:
            break
        out: list[int] = []
        try:
            value = _listops_tree(u, 1, max_depth, max_args, max_length, out)
        except _TooLong:
            continue
        key = tuple(out)
        if min_length < len(out) < max_length and key not in seen:
            seen.add(key)
            seqs.append(out)
            labels.append(value)
    if len(seqs) < n:
        raise UserError(
            f"listops: only {len(seqs)} of {n} distinct expressions with {min_length} < length < {max_length} after "
            f"{max_trees} trees (max_depth={max_depth}, max_args={max_args}); widen min_length/max_length"
        )
    return seqs, np.asarray(labels, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------------
# Shared helpers


def balanced_labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Labels 0..k-1 in consecutive blocks of k, each block a random permutation: any block-aligned cut is balanced."""
    blocks = -(-n // k)
    return np.argsort(rng.random((blocks, k)), axis=1).reshape(-1)[:n].astype(np.int64)  # [blocks, k] -> [n]


# ---------------------------------------------------------------------------------------------------------------------
# Text and Retrieval: byte documents over a fixed lexicon

#: Marker words of the Text stand-in; neutral words never equal them.
POSITIVE_WORDS: tuple[str, ...] = ("good", "great", "superb", "lovely", "brilliant", "excellent", "wonderful", "fine")
NEGATIVE_WORDS: tuple[str, ...] = ("bad", "awful", "poor", "dull", "boring", "terrible", "weak", "dreadful")
_LEXICON_SEED = 20201  # the lexicon is part of the task definition, not of a dataset's seed
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


@functools.lru_cache(maxsize=4)
def neutral_lexicon(size: int = 2000) -> tuple[bytes, ...]:
    """The fixed lexicon of neutral pseudo-words (2-9 lowercase letters), the same for every dataset seed."""
    rng = np.random.default_rng(_LEXICON_SEED)
    markers = {w.encode() for w in POSITIVE_WORDS + NEGATIVE_WORDS}
    words: dict[bytes, None] = {}  # insertion-ordered set
    while len(words) < size:
        word = _LETTERS[rng.integers(0, 26, size=int(rng.integers(2, 10)))].tobytes()
        if word not in markers:
            words[word] = None
    return tuple(words)


@functools.lru_cache(maxsize=4)
def _word_costs(size: int = 2000) -> np.ndarray:
    """Bytes taken by each lexicon word followed by its separating space."""
    return np.array([len(w) + 1 for w in neutral_lexicon(size)], dtype=np.int64)


def _fill(draw: Callable[[int], np.ndarray], budget: int) -> list[bytes]:
    """Lexicon words drawn by ``draw(k)`` (k indices) while the space-separated text fits in ``budget`` bytes."""
    lexicon, lens = neutral_lexicon(), _word_costs()
    words: list[bytes] = []
    used = 0
    while True:
        idx = draw(max(budget // 4, 8))
        # Cumulative bytes of the drawn words, each followed by a space (the last space is not written).
        ends = used + np.cumsum(lens[idx])
        keep = int(np.searchsorted(ends, budget + 1, side="right"))
        words.extend(lexicon[i] for i in idx[:keep].tolist())
        if keep < len(idx):
            return words
        used = int(ends[-1])


def _doc_budget(rng: np.random.Generator, length: int, min_fill: float) -> int:
    """A document's byte budget, uniform in [min_fill * length, length]; the words stop just below it."""
    return int(rng.integers(int(min_fill * length), length + 1))


def generate_text(
    n: int,
    *,
    seed: int = 0,
    length: int = 4000,
    marker_rate: float = 0.1,
    max_margin: int = 3,
    min_fill: float = 0.5,
) -> tuple[list[bytes], np.ndarray]:
    """Byte documents whose label needs the whole sequence: do positive marker words outnumber negative ones?

    A document is single-space-separated words: about ``marker_rate`` of them markers (from
    :data:`POSITIVE_WORDS` / :data:`NEGATIVE_WORDS`), the rest neutral words of :func:`neutral_lexicon`, in random
    order. The positive-minus-negative count is +d (label 1) or -d (label 0) with d uniform in 1..``max_margin``,
    small against the number of markers, so no fixed window decides the label.

    Args:
        n: number of documents, balanced in consecutive pairs.
        seed: seed of the random stream.
        length: maximum document size in bytes (documents end at a word boundary).
        marker_rate: expected fraction of marker words.
        max_margin: largest difference between the two marker counts.
        min_fill: document byte budgets are uniform in [min_fill * length, length].

    Returns:
        (documents, labels): ``n`` byte strings of at most ``length`` bytes and int64 [n] in {0, 1}.
    """
    longest_marker = max(len(w) for w in POSITIVE_WORDS + NEGATIVE_WORDS)
    if length < (longest_marker + 1) * max_margin:
        raise UserError(f"text: length {length} cannot hold {max_margin} marker words; raise length or lower it")
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, 2)
    lexicon = neutral_lexicon()
    mean_word = float(_word_costs().mean())  # bytes per neutral word, with its space
    pos_words = [w.encode() for w in POSITIVE_WORDS]
    neg_words = [w.encode() for w in NEGATIVE_WORDS]
    docs: list[bytes] = []
    for label in labels.tolist():
        budget = max(_doc_budget(rng, length, min_fill), (longest_marker + 1) * max_margin)
        margin = int(rng.integers(1, max_margin + 1))
        markers = max(margin, round(marker_rate * budget / mean_word))
        markers += (markers - margin) % 2  # the two counts are (markers +- margin) / 2
        big, small = (markers + margin) // 2, (markers - margin) // 2
        n_pos, n_neg = (big, small) if label == 1 else (small, big)
        chosen = [pos_words[i] for i in rng.integers(0, len(pos_words), n_pos)]
        chosen += [neg_words[i] for i in rng.integers(0, len(neg_words), n_neg)]
        # The markers must all fit: drop matching pairs (which keeps the margin) until they do.
        while sum(len(w) + 1 for w in chosen) > budget + 1:
            chosen = _drop_pair(chosen, n_pos)
            n_pos -= 1
        rest = budget - sum(len(w) + 1 for w in chosen)
        words = chosen + (_fill(lambda k: rng.integers(0, len(lexicon), k), rest) if rest > 0 else [])
        docs.append(b" ".join(words[i] for i in rng.permutation(len(words))))
    return docs, labels


def _drop_pair(chosen: list[bytes], n_pos: int) -> list[bytes]:
    """Remove one positive and one negative marker (the first ``n_pos`` entries are the positive ones)."""
    return chosen[1:n_pos] + chosen[n_pos + 1 :]


def generate_retrieval(
    n: int,
    *,
    seed: int = 0,
    length: int = 4000,
    num_topics: int = 20,
    topic_words: int = 30,
    topic_p: float = 0.25,
    min_fill: float = 0.5,
) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """Pairs of byte documents; label 1 iff both were written from the same latent topic.

    The run's topics are ``num_topics`` disjoint sets of ``topic_words`` words of :func:`neutral_lexicon`; the other
    words are the shared background. Each word of a topic-t document is a uniform topic-t word with probability
    ``topic_p``, else a uniform background word. Related pairs share a topic; unrelated ones have two distinct
    topics. Topics are drawn once per call, so all splits cut from one call share them.

    Args:
        n: number of pairs, balanced in consecutive pairs.
        seed: seed of the random stream.
        length: maximum size of each document in bytes (documents end at a word boundary).
        num_topics: number of latent topics (at least 2).
        topic_words: words per topic.
        topic_p: probability that a word comes from the document's topic.
        min_fill: document byte budgets are uniform in [min_fill * length, length].

    Returns:
        (first documents, second documents, labels): two lists of ``n`` byte strings, int64 [n] in {0, 1}.
    """
    lexicon = neutral_lexicon()
    if num_topics < 2 or num_topics * topic_words >= len(lexicon):
        raise UserError(
            f"retrieval: need 2 <= num_topics and num_topics * topic_words < {len(lexicon)} (the lexicon size), got "
            f"num_topics={num_topics}, topic_words={topic_words}"
        )
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, 2)
    order = rng.permutation(len(lexicon))
    topics = order[: num_topics * topic_words].reshape(num_topics, topic_words)  # [T, words per topic]
    background = order[num_topics * topic_words :]

    def document(topic: int) -> bytes:
        def draw(k: int) -> np.ndarray:
            from_topic = rng.random(k) < topic_p
            return np.where(from_topic, rng.choice(topics[topic], k), rng.choice(background, k))

        return b" ".join(_fill(draw, _doc_budget(rng, length, min_fill)))

    first: list[bytes] = []
    second: list[bytes] = []
    for label in labels.tolist():
        t0 = int(rng.integers(num_topics))
        # A different topic: shift by 1..T-1 modulo T.
        t1 = t0 if label == 1 else (t0 + int(rng.integers(1, num_topics))) % num_topics
        first.append(document(t0))
        second.append(document(t1))
    return first, second, labels
