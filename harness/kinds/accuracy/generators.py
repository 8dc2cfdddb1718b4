"""Offline generators of the five Long Range Arena tasks, deterministic from a seed (no download).

Each generator returns raw examples (token-id lists, uint8 images or byte strings) plus int64 labels;
:mod:`harness.kinds.accuracy.data` turns them into padded tensors. Lengths, sizes and difficulty are parameters, so
small profiles can shrink them. Every random draw comes from one ``numpy.random.Generator`` seeded by ``seed``.

* **ListOps** (:func:`generate_listops`) follows LRA's ``lra_benchmarks/data/listops.py``: operators MIN, MAX, MED,
  SM (sum mod 10) over values 0-9, depth <= ``max_depth``, 2..``max_args`` arguments, a node becomes a value when
  ``r > VALUE_P`` (so with probability 0.75) or at ``max_depth``, and only sequences with
  ``min_length < length < max_length`` tokens are kept, without duplicates (LRA keeps a set). MED is LRA's
  ``int(np.median(args))``: for an even count, the mean of the two middle values rounded down. The closing
  bracket ``]`` is kept as a token (LRA's tfds tokenizer keeps only alphanumeric tokens, which drops it and makes
  the expression ambiguous); the parentheses that LRA's ``to_string`` writes are never emitted, so the token count
  is exactly LRA's ``length``. The root operator (the first token) alone predicts the value far above the majority
  class, as in LRA: MIN is mostly 0, MAX mostly 9, so the most frequent value per root operator is a baseline every
  ListOps score must beat (measured: docs/lra.md, and the results files it links).
* **Pathfinder** (:func:`harness.kinds.accuracy.pixels.generate_pathfinder`): LRA's 32x32 ``curv_contour_length_14``
  parameters on a pixel grid. Connectivity rule: lit pixels (value > 0) are linked when their Chebyshev distance is
  <= 2, i.e. 8-connectivity after closing dash gaps of one pixel. Label 1 iff the two marker dots are in the same
  component. The markers sit on both ends of one of two alike main contours, chosen at random; a negative leaves a
  dash out of it, a positive out of the other one, so marker distances, pixel counts and where pixels are lit do
  not differ by label.
* **Image** (:func:`harness.kinds.accuracy.pixels.generate_images`): ten classes of images made of four-pixel strips
  on a torus; the class is the order of the four intensities along every strip, so each class has the same intensity
  histogram and the same distribution at each pixel: only neighbouring pixels tell classes apart.
* **Text** (:func:`generate_text`): documents of words; label = the dialect the content words are spelled in. The
  two dialects (:func:`dialect_lexicons`) spell each word with the same letters, in ascending or descending
  order, so no bag of bytes (nor the byte at any one position) carries the label: only letter order does.
* **Retrieval** (:func:`generate_retrieval`): document pairs, each written in one of such dialects (2 by default, up
  to 4) and, by default, made of content words only; label 1 iff both use the same dialect. Related pairs favour
  dialect 1 (``related_dialect_p``), which gives each document's dialect a first-order cue to the label; a uniform
  prior leaves a pure same/different relation that no model here leaves chance on (README, "What the quick stand-ins
  show").

Labels of the balanced tasks come in consecutive blocks holding each class once (pairs for the binary tasks, blocks
of 10 for Image), so a split of the stream that starts at a multiple of the block is balanced to within one block.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from ...core.errors import UserError

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
    max_trees = check_listops(n, min_length=min_length, max_length=max_length, max_depth=max_depth, max_args=max_args)
    u = _Uniforms(np.random.default_rng(seed))
    seen: set[tuple[int, ...]] = set()
    seqs: list[list[int]] = []
    labels: list[int] = []
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


def check_listops(n: int, *, min_length: int, max_length: int, max_depth: int, max_args: int) -> int:
    """How many trees :func:`generate_listops` may draw for ``n`` expressions; a UserError at once for parameters that
    are impossible, or that make expressions longer than ``min_length`` so rare that even a bound on their chance
    expects fewer than ``n`` in that many trees (else the generator draws them all, for minutes, before it says so)."""
    if max_args < 2 or max_depth < 1 or min_length + 1 >= max_length:
        raise UserError(
            f"listops: need max_args >= 2, max_depth >= 1 and min_length + 1 < max_length, got max_args={max_args}, "
            f"max_depth={max_depth}, min_length={min_length}, max_length={max_length}"
        )
    # Generous cap: with LRA's parameters about one tree in ten is kept; a cap only stops hopeless settings.
    max_trees = 2000 * n + 100_000
    expected = max_trees * math.exp(_log_tail_bound(min_length, max_depth, max_args))
    if expected < n:
        raise UserError(f"listops: expressions of more than min_length={min_length} tokens are too rare with "
                        f"max_depth={max_depth}, max_args={max_args}: at most {expected:.3g} of the {n} needed are "
                        f"expected in {max_trees} trees; lower seq_len (min_length is seq_len / 4) or min_length")
    return max_trees


def _log_tail_bound(length: int, max_depth: int, max_args: int) -> float:
    """log of a bound on P(a tree has more than ``length`` tokens): Chernoff's E[z^X] / z^(length+1), E[z^X] exact over
    the levels (a value: one token; an operator: two and 2..max_args subtrees), the best z of a grid; in logs."""
    best, log_value, log_op = 0.0, math.log(1 - LISTOPS_VALUE_P), math.log(LISTOPS_VALUE_P)
    for c in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0):
        log_z = math.log1p(c / (length + 1))
        log_g = log_z  # at max_depth every node is a value
        for _ in range(max_depth - 1):
            log_mean = np.logaddexp.reduce([k * log_g for k in range(2, max_args + 1)]) - math.log(max_args - 1)
            log_g = np.logaddexp(log_value + log_z, log_op + 2 * log_z + log_mean)
        best = min(best, float(log_g) - (length + 1) * log_z)
    return best


# ---------------------------------------------------------------------------------------------------------------------
# Shared helpers


def check_probability(task: str, name: str, value: float) -> None:
    """A UserError naming ``task`` and the parameter ``name`` unless ``value`` is in [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise UserError(f"{task}: {name} must be in [0, 1], got {value!r}")


def balanced_labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Labels 0..k-1 in consecutive blocks of k, each block a random permutation: any block-aligned cut is balanced."""
    blocks = -(-n // k)
    return np.argsort(rng.random((blocks, k)), axis=1).reshape(-1)[:n].astype(np.int64)  # [blocks, k] -> [n]


# ---------------------------------------------------------------------------------------------------------------------
# Text and Retrieval: byte documents in "dialects" that share every letter count

_LEXICON_SEED = 20201  # the lexicons are part of the task definition, not of a dataset's seed
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
_MIN_BUDGET = 16  # the shortest document budget in bytes: room for a word or two


@functools.lru_cache(maxsize=4)
def neutral_lexicon(size: int = 2000) -> tuple[bytes, ...]:
    """The fixed lexicon of neutral pseudo-words (2-9 lowercase letters), the same for every dataset seed."""
    rng = np.random.default_rng(_LEXICON_SEED)
    words: dict[bytes, None] = {}  # insertion-ordered set
    while len(words) < size:
        words[_LETTERS[rng.integers(0, 26, size=int(rng.integers(2, 10)))].tobytes()] = None
    return tuple(words)


#: How each dialect orders the letters of a content word: ascending, descending, then each rotated left by one.
DIALECT_ORDERS: tuple[str, ...] = ("ascending", "descending", "ascending_rotated", "descending_rotated")


def _spell(letters: bytes, dialect: int) -> bytes:
    """A content word's letters in dialect ``dialect``'s order (:data:`DIALECT_ORDERS`)."""
    word = bytes(sorted(letters, reverse=dialect % 2 == 1))
    return word[1:] + word[:1] if dialect >= 2 else word


@functools.lru_cache(maxsize=8)
def dialect_lexicons(num_dialects: int, size: int = 64) -> tuple[tuple[bytes, ...], ...]:
    """``num_dialects`` spellings of one lexicon of ``size`` content words: word i of every dialect is an anagram.

    Base words are sets of 4-7 distinct lowercase letters; dialect d writes them in the order of
    :data:`DIALECT_ORDERS`[d] (letters ascending, descending, or either rotated left by one). So every dialect uses
    each letter equally often, and only the order of neighbouring letters inside words tells dialects apart, by one
    rule for all words (e.g. "each letter is followed by a later one in the alphabet").

    Returns:
        ``num_dialects`` tuples of ``size`` byte words; entry [d][i] is dialect d's spelling of word i, all distinct
        and none in :func:`neutral_lexicon`.
    """
    if not 2 <= num_dialects <= len(DIALECT_ORDERS):
        raise UserError(f"num_dialects must be in 2..{len(DIALECT_ORDERS)}, got {num_dialects}")
    if size < 1:
        raise UserError(f"lexicon_size must be a positive integer, got {size}")
    rng = np.random.default_rng(_LEXICON_SEED + 1)
    taken = set(neutral_lexicon())
    spellings: list[list[bytes]] = [[] for _ in range(num_dialects)]
    while len(spellings[0]) < size:
        letters = rng.choice(_LETTERS, size=int(rng.integers(4, 8)), replace=False).tobytes()  # distinct letters
        words = [_spell(letters, d) for d in range(num_dialects)]
        if taken.isdisjoint(words):
            taken.update(words)
            for d, word in enumerate(words):
                spellings[d].append(word)
    return tuple(tuple(words) for words in spellings)


@functools.lru_cache(maxsize=8)
def _document_words(dialect: tuple[bytes, ...]) -> tuple[tuple[bytes, ...], np.ndarray]:
    """A dialect's words then the neutral ones, and the bytes each takes with its space (cached per dialect)."""
    words = (*dialect, *neutral_lexicon())  # indices 0..len(dialect)-1 are content words
    return words, np.array([len(w) + 1 for w in words], dtype=np.int64)


def _fill(draw: Callable[[int], np.ndarray], words: Sequence[bytes], lens: np.ndarray, budget: int) -> list[bytes]:
    """Words ``words[i]`` for i drawn by ``draw(k)`` (k indices) while the space-separated text fits ``budget``;
    ``lens[i]`` is the bytes word i takes with its space."""
    out: list[bytes] = []
    used = 0
    while True:
        idx = draw(max(budget // 4, 8))
        # Cumulative bytes of the drawn words, each followed by a space (the last space is not written).
        ends = used + np.cumsum(lens[idx])
        keep = int(np.searchsorted(ends, budget + 1, side="right"))
        out.extend(words[i] for i in idx[:keep].tolist())
        if keep < len(idx):
            return out
        used = int(ends[-1])


def _dialect_document(rng: np.random.Generator, dialect: Sequence[bytes], length: int, content_rate: float,
                      min_fill: float) -> bytes:
    """One document: a window of ``budget`` bytes (uniform in [min_fill * length, length], at least 16) cut at a
    uniformly random point of an endless stream of space-separated words, each from ``dialect`` with probability
    ``content_rate``, else neutral.

    Why a window at a random point of the stream: a document must look the same at every position whatever its
    dialect, so that only the order of its bytes tells the dialect. A stream seen from a uniformly random point is
    stationary: the word under the first byte is drawn with probability proportional to the bytes it takes (a
    length-biased draw) and the window starts uniformly inside it, so the byte at every position (the first and the
    last included) has the same distribution in both dialects (every word has the same letters in each). Documents
    that end on a word's last letter, as before, leak the dialect: that letter is a word's highest in the alphabet in
    one dialect and its lowest in the other, and a model without token mixing read it (measured: docs/results/
    2026-11-25-amd-epyc-2core.md, "Generator leaks found and removed").
    """
    words, lens = _document_words(tuple(dialect))
    n_neutral = len(words) - len(dialect)
    budget = max(int(rng.integers(int(min_fill * length), length + 1)), _MIN_BUDGET)  # room for a word or two

    def draw(k: int) -> np.ndarray:
        content = rng.random(k) < content_rate
        return np.where(content, rng.integers(0, len(dialect), k), len(dialect) + rng.integers(0, n_neutral, k))

    longest = int(lens.max())
    while True:  # the length-biased first word: accept word i with probability lens[i] / longest
        first = int(draw(1)[0])
        if rng.random() * longest < lens[first]:
            break
    start = int(rng.integers(0, lens[first]))  # the window's first byte: a letter of that word or its space
    # _fill keeps whole words within its budget, so ask for one longest word more than the window needs.
    rest = _fill(draw, words, lens, budget + start - int(lens[first]) + longest)
    return b" ".join([words[first], *rest])[start : start + budget]


def generate_text(
    n: int,
    *,
    seed: int = 0,
    length: int = 4000,
    content_rate: float = 1.0,
    lexicon_size: int = 64,
    min_fill: float = 0.5,
) -> tuple[list[bytes], np.ndarray]:
    """Byte documents whose label is their dialect, which no bag of bytes reveals: letters must be read in order.

    Label 1 documents write the content words of :func:`dialect_lexicons` in dialect 1 (letters descending), label 0
    in dialect 0 (ascending): the two spell every word with the same letters, so the byte histogram of a document
    has the same distribution under both labels, and since a document is a window cut at a random point of a word
    stream (:func:`_dialect_document`), so does the byte at each position. The label is carried by which letters
    follow which (bigrams), all along the document: a model must relate neighbouring bytes, which a model without
    token mixing cannot.

    Why every word is a content word by default (``content_rate`` 1): the more words carry the dialect, the sooner
    vanilla attention (learned absolute positions) finds the bigrams: at the quick profile's short lengths vanilla
    leaves chance only with every word a content word (probes in docs/results, "From the code: the generators").

    Args:
        n: number of documents, balanced in consecutive pairs.
        seed: seed of the random stream.
        length: maximum document size in bytes.
        content_rate: probability that a word is a content word (else a neutral word shared by both labels).
        lexicon_size: content words per dialect.
        min_fill: document byte budgets are uniform in [min_fill * length, length].

    Returns:
        (documents, labels): ``n`` byte strings of at most ``length`` bytes and int64 [n] in {0, 1}.
    """
    _check_document_params(length, content_rate)
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, 2)
    dialects = dialect_lexicons(2, lexicon_size)
    docs = [_dialect_document(rng, dialects[label], length, content_rate, min_fill) for label in labels.tolist()]
    return docs, labels


def generate_retrieval(
    n: int,
    *,
    seed: int = 0,
    length: int = 4000,
    num_dialects: int = 2,
    content_rate: float = 1.0,
    lexicon_size: int = 64,
    min_fill: float = 0.5,
    related_dialect_p: float = 0.8,
) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """Pairs of byte documents; label 1 iff both are written in the same dialect (:func:`dialect_lexicons`).

    Each document draws its own words; related pairs share a dialect, unrelated ones have two distinct dialects.
    All dialects use every letter equally often, so each document's byte histogram (and byte at each position) has
    the same distribution whatever its dialect: two bags of bytes say nothing about the label, and the match is
    spread over every content word of both documents (their bigrams).

    Why related pairs favour one dialect: with every dialect equally likely, the label is an XOR of two per-document
    features, and a dual encoder gets no gradient towards either feature until the other tower already encodes it.
    On this project's CPU budget no model left chance on that relation (probe: docs/results/
    2026-11-25-amd-epyc-2core.md, "From the code: the generators"), so the column measured nothing. With
    ``related_dialect_p`` = 0.8 (2 dialects), a first document in dialect 1 is related to its partner 62% of the time
    (0.4 / 0.65) and one in dialect 0 29% (0.1 / 0.35), against 50% each under a uniform prior: a cue each tower can
    learn on its own, after which the match itself is one product away in the dual head. Reading both dialects without
    matching them ("related iff both are in dialect 1") scores 90%; the last 10% needs the match.
    ``related_dialect_p`` = 1 / ``num_dialects`` restores the pure relation.

    Why every word is a content word by default (``content_rate`` 1, as in Text): the cue above reaches each tower
    through the label only weakly, and vanilla attention (learned absolute positions) needs every word's evidence to
    find it within the CPU budget; the window length sets how soon vanilla leaves chance and whether the no-mixing
    control can read both documents' dialects (probes in docs/results, "From the code: the generators").

    Args:
        n: number of pairs, balanced in consecutive pairs.
        seed: seed of the random stream.
        length: maximum size of each document in bytes.
        num_dialects: number of dialects, 2..4 (:data:`DIALECT_ORDERS`).
        content_rate: probability that a word is a content word (else a neutral word shared by all dialects).
        lexicon_size: content words per dialect.
        min_fill: document byte budgets are uniform in [min_fill * length, length].
        related_dialect_p: probability that a related pair is written in dialect 1; otherwise it takes one of the
            other dialects uniformly. Unrelated pairs draw their first dialect uniformly.

    Returns:
        (first documents, second documents, labels): two lists of ``n`` byte strings, int64 [n] in {0, 1}.
    """
    _check_document_params(length, content_rate)
    check_probability("retrieval", "related_dialect_p", related_dialect_p)
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, 2)
    dialects = dialect_lexicons(num_dialects, lexicon_size)
    first: list[bytes] = []
    second: list[bytes] = []

    def other(d: int) -> int:
        """A dialect other than ``d``, uniformly: shift by 1..K-1 modulo K."""
        return (d + int(rng.integers(1, num_dialects))) % num_dialects

    for label in labels.tolist():
        if label == 1:  # dialect 1 with probability related_dialect_p, else another one
            d0 = d1 = 1 if rng.random() < related_dialect_p else other(1)
        else:
            d0 = int(rng.integers(num_dialects))
            d1 = other(d0)
        first.append(_dialect_document(rng, dialects[d0], length, content_rate, min_fill))
        second.append(_dialect_document(rng, dialects[d1], length, content_rate, min_fill))
    return first, second, labels


def _check_document_params(length: int, content_rate: float) -> None:
    if length < 2 * _MIN_BUDGET:
        raise UserError(f"length must be at least {2 * _MIN_BUDGET} bytes (a few words), got {length}")
    if not 0.0 < content_rate <= 1.0:
        raise UserError(f"content_rate must be in (0, 1], got {content_rate!r}")
