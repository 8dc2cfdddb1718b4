"""Offline generators of the five Long Range Arena tasks, deterministic from a seed (no download).

Each generator returns raw examples (token-id lists, uint8 images or byte strings) plus int64 labels;
:mod:`harness.data` turns them into padded tensors. Lengths, sizes and difficulty are parameters, so small
profiles can shrink them. Every random draw comes from one ``numpy.random.Generator`` seeded by ``seed``.

* **ListOps** (:func:`generate_listops`) follows LRA's ``lra_benchmarks/data/listops.py``: operators MIN, MAX, MED,
  SM (sum mod 10) over values 0-9, depth <= ``max_depth``, 2..``max_args`` arguments, a node becomes a value when
  ``r > VALUE_P`` (so with probability 0.75) or at ``max_depth``, and only sequences with
  ``min_length < length < max_length`` tokens are kept, without duplicates (LRA keeps a set). MED is LRA's
  ``int(np.median(args))``: for an even count, the mean of the two middle values rounded down. The closing
  bracket ``]`` is kept as a token (LRA's tfds tokenizer keeps only alphanumeric tokens, which drops it and makes
  the expression ambiguous); the parentheses that LRA's ``to_string`` writes are never emitted, so the token count
  is exactly LRA's ``length``.
* **Pathfinder** (:func:`generate_pathfinder`): LRA's 32x32 ``curv_contour_length_14`` parameters on a pixel grid.
  Connectivity rule: lit pixels (value > 0) are linked when their Chebyshev distance is <= 2, i.e. 8-connectivity
  after closing dash gaps of one pixel. Label 1 iff the two marker dots are in the same component.
* **Image** (:func:`generate_images`): ten shape classes (:data:`IMAGE_CLASSES`) with random position, scale,
  rotation, contrast and noise; the two intensities of an image are exchangeable, so intensity statistics carry no
  class information.
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

from .errors import UserError

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


def _balanced_labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Labels 0..k-1 in consecutive blocks of k, each block a random permutation: any block-aligned cut is balanced."""
    blocks = -(-n // k)
    return np.argsort(rng.random((blocks, k)), axis=1).reshape(-1)[:n].astype(np.int64)  # [blocks, k] -> [n]


# ---------------------------------------------------------------------------------------------------------------------
# Pathfinder

PATHFINDER_MARKER = 255  # marker dots are the only pixels at full intensity
PATHFINDER_DASH = 191  # LRA paddle_contrast 0.75 of full intensity
# 8 compass directions in (row, col) order; a turn moves one index (45 degrees) left or right.
_DIRS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))
_LINK = 2  # the connectivity rule: lit pixels within Chebyshev distance 2 are linked


class _Canvas:
    """Occupancy of one image being built: which cells are too close to contours placed so far."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.blocked = np.zeros((size, size), dtype=bool)

    def block_around(self, cells: list[tuple[int, int]], radius: int) -> None:
        for cell in cells:
            self.blocked[_square(cell, radius)] = True


def _walk(
    rng: np.random.Generator,
    canvas: _Canvas,
    n_px: int,
    period: int,
    turn_p: float,
    lo: int,
    hi: int,
) -> list[tuple[int, int]] | None:
    """One contour's chain of 8-connected pixels inside [lo, hi]^2 and away from ``canvas.blocked``, or None.

    The heading turns by 45 degrees (left or right) at the start of a dash with probability ``turn_p``. When the next
    pixel is not free the walk steers (straight, then the other turns) rather than give up: a blind walk of 41 pixels
    fits a 30-pixel box only a few % of the time. Consecutive headings differ by at most 45 degrees, so a pixel is
    always at Chebyshev distance 2 from the one two steps back; the chain never comes within one pixel of its own
    older pixels, so a contour does not touch itself.
    """
    # One-pixel border of False so that steps off the image need no bounds checks; (r, c) are padded coordinates.
    free = np.zeros((canvas.size + 2, canvas.size + 2), dtype=bool)
    free[lo + 1 : hi + 2, lo + 1 : hi + 2] = ~canvas.blocked[lo : hi + 1, lo : hi + 1]
    starts = np.flatnonzero(free)
    if starts.size == 0:
        return None
    r, c = divmod(int(rng.choice(starts)), canvas.size + 2)
    heading = int(rng.integers(8))
    u = rng.random((2, n_px))
    turns = (u[0] > 1 - turn_p / 2).astype(int) - (u[0] < turn_p / 2)  # -1, 0, +1 with turn_p / 2, 1 - turn_p, ...
    sides = np.where(u[1] < 0.5, -1, 1)  # which way to steer first when straight ahead is not free
    chain = [(r, c)]
    for i in range(1, n_px):
        turn = int(turns[i]) if i % period == 0 else 0
        options = (turn, 0, -turn) if turn else (0, int(sides[i]), -int(sides[i]))
        for t in options:
            dr, dc = _DIRS[(heading + t) % 8]
            if free[r + dr, c + dc]:
                heading, r, c = (heading + t) % 8, r + dr, c + dc
                break
        else:
            return None
        free[_square(chain[-1], 1)] = False  # the own-chain rule: older pixels and their neighbours
        chain.append((r, c))
    return [(r - 1, c - 1) for r, c in chain]


def _square(centre: tuple[int, int], radius: int) -> tuple[slice, slice]:
    """Index of the (2 radius + 1)-pixel square around ``centre`` (clipped at the top/left image edge)."""
    r, c = centre
    return slice(max(r - radius, 0), r + radius + 1), slice(max(c - radius, 0), c + radius + 1)


def _dash_cells(chain: list[tuple[int, int]], dash: int, period: int) -> list[tuple[int, int]]:
    """The lit pixels of a chain: ``dash`` on, ``period - dash`` off, starting and ending on a dash."""
    return [p for i, p in enumerate(chain) if i % period < dash]


def _pathfinder_image(
    rng: np.random.Generator,
    label: int,
    *,
    size: int,
    contour_length: int,
    distractor_length: int,
    num_distractors: int,
    dash_length: int,
    dash_gap: int,
    marker_radius: int,
    padding: int,
    turn_prob: float,
    min_marker_distance: int,
    max_tries: int,
) -> np.ndarray | None:
    """One image, or None when the contours could not be placed (the caller resamples)."""
    period = dash_length + dash_gap
    canvas = _Canvas(size)
    # Marker dots must fit inside the padding, so contour ends stay marker_radius further in; chains use the rest.
    lo, hi = padding, size - 1 - padding
    img = np.zeros((size, size), dtype=np.uint8)
    mains: list[list[tuple[int, int]]] = []
    lengths = [contour_length] * 2 + [distractor_length] * num_distractors
    for k, n_dashes in enumerate(lengths):
        n_px = n_dashes * period - dash_gap
        for _ in range(max_tries):
            chain = _walk(rng, canvas, n_px, period, turn_p=turn_prob, lo=lo, hi=hi)
            if chain is None:
                continue
            ends = [chain[0], chain[-1]]
            if k < 2:
                # Both ends of both main contours get room for a marker whatever the label, so the geometry of the
                # two classes is the same; only where the markers are drawn differs.
                inner = all(lo + marker_radius <= v <= hi - marker_radius for e in ends for v in e)
                far = max(abs(ends[0][0] - ends[1][0]), abs(ends[0][1] - ends[1][1])) >= min_marker_distance
                if not (inner and far) or any(canvas.blocked[_square(e, marker_radius)].any() for e in ends):
                    continue
                mains.append(chain)
            break
        else:
            return None
        for r, c in _dash_cells(chain, dash_length, period):
            img[r, c] = PATHFINDER_DASH
        # Everything within _LINK of this contour (and of its marker room) is off limits to later contours, which
        # therefore stay at Chebyshev distance >= _LINK + 1 and never link to it.
        room = marker_radius if k < 2 else 0
        canvas.block_around(chain, _LINK)
        canvas.block_around(ends, _LINK + room)
    # Positive: both ends of contour A; negative: a random end of A and a random end of B.
    a, b = mains
    pick_a, pick_b = rng.integers(0, 2, size=2) * -1  # index 0 or -1
    markers = [a[0], a[-1]] if label == 1 else [a[pick_a], b[pick_b]]
    for end in markers:
        img[_square(end, marker_radius)] = PATHFINDER_MARKER
    return img


def generate_pathfinder(
    n: int,
    *,
    seed: int = 0,
    size: int = 32,
    contour_length: int = 14,
    distractor_length: int = 4,
    num_distractors: int = 5,
    dash_length: int = 2,
    dash_gap: int = 1,
    marker_radius: int = 1,
    padding: int = 1,
    turn_prob: float = 0.8,
    min_marker_distance: int = 4,
) -> tuple[np.ndarray, np.ndarray]:
    """Pathfinder images: two marked dashed contours plus distractors; label 1 iff the markers share a contour.

    Defaults are LRA's pathfinder32 ``curv_contour_length_14`` settings where a pixel grid can express them:
    contour_length 14 dashes, distractor_length 14 // 3 = 4 dashes, 20 // 4 = 5 distractors, paddle_length 2
    (dash_length), paddle_margin 1 (dash_gap), padding 1, marker_radius 1.5 (a 3x3 dot: the pixels within 1.5 of
    the centre), paddle_contrast 0.75 (dash intensity 191, markers 255, background 0). LRA's antialiasing,
    paddle_thickness 0.5, continuity 1.0 and seed_distance 7 are not reproduced; instead each dash may turn by
    45 degrees with probability ``turn_prob`` and the two ends of a main contour are ``min_marker_distance`` apart.

    Connectivity: lit pixels (> 0) within Chebyshev distance 2 of each other are linked (8-connectivity after closing
    gaps of one pixel). Each contour, its markers included, is one component (dash gaps are one pixel), and every
    contour stays at distance >= 3 from every other one, so the label is exactly "the two markers are in the same
    component". Placements that would break this are rejected and resampled.

    Args:
        n: number of images.
        seed: seed of the random stream.
        size: image side in pixels.
        contour_length, distractor_length: dashes per main contour and per distractor.
        num_distractors: unmarked distractor contours.
        dash_length, dash_gap: pixels on and off along a contour (a gap of 0 or 1 keeps a contour linked).
        marker_radius: marker dots are (2 r + 1) x (2 r + 1) squares centred on a contour end.
        padding: blank border in pixels.
        turn_prob: probability that a dash turns by 45 degrees (left or right equally).
        min_marker_distance: minimum Chebyshev distance between the two ends of a main contour.

    Returns:
        (images, labels): uint8 [n, size, size] and int64 [n], balanced in consecutive pairs.

    Raises:
        UserError: parameters that break the connectivity rule or do not fit in the image.
    """
    if dash_gap not in (0, 1) or dash_length < 1 or marker_radius < 1:
        raise UserError(
            f"pathfinder: need dash_gap 0 or 1 (the linking rule closes one-pixel gaps), dash_length >= 1 and "
            f"marker_radius >= 1, got dash_gap={dash_gap}, dash_length={dash_length}, marker_radius={marker_radius}"
        )
    rng = np.random.default_rng(seed)
    labels = _balanced_labels(rng, n, 2)
    images = np.zeros((n, size, size), dtype=np.uint8)
    params = dict(
        size=size, contour_length=contour_length, distractor_length=distractor_length,
        num_distractors=num_distractors, dash_length=dash_length, dash_gap=dash_gap, marker_radius=marker_radius,
        padding=padding, turn_prob=turn_prob, min_marker_distance=min_marker_distance, max_tries=200,
    )
    max_images = 50
    for i in range(n):
        for _ in range(max_images):
            img = _pathfinder_image(rng, int(labels[i]), **params)
            if img is not None:
                images[i] = img
                break
        else:
            raise UserError(
                f"pathfinder: could not place 2 contours of {contour_length} dashes and {num_distractors} distractors "
                f"of {distractor_length} in a {size}x{size} image; lower contour_length or num_distractors"
            )
    return images, labels


# ---------------------------------------------------------------------------------------------------------------------
# Image classification

IMAGE_CLASSES: tuple[str, ...] = (
    "disc", "ring", "square", "triangle", "cross", "bar", "stripes", "checker", "two_discs", "half_disc",
)
_SQRT3 = float(np.sqrt(3.0))


def _shape_masks(u: np.ndarray, v: np.ndarray, upx: np.ndarray, vpx: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Foreground masks of every class: [10, S, H, W] from shape coordinates (u, v) and pixel coordinates.

    (u, v) are rotated coordinates in units of the shape radius; (upx, vpx) the same in pixels, for the textures.
    """
    r2 = u**2 + v**2
    stripes = np.cos(2 * np.pi * upx / period)
    return np.stack([
        r2 <= 1.0,
        (r2 >= 0.55**2) & (r2 <= 1.0),
        np.maximum(abs(u), abs(v)) <= 0.8,
        (v >= -0.6) & (_SQRT3 * u + v <= 1.2) & (-_SQRT3 * u + v <= 1.2),
        ((abs(u) <= 0.28) & (abs(v) <= 1.0)) | ((abs(v) <= 0.28) & (abs(u) <= 1.0)),
        (abs(u) <= 1.0) & (abs(v) <= 0.35),
        stripes > 0,
        stripes * np.cos(2 * np.pi * vpx / period) > 0,
        ((u - 0.55) ** 2 + v**2 <= 0.42**2) | ((u + 0.55) ** 2 + v**2 <= 0.42**2),
        (r2 <= 1.0) & (u >= 0),
    ])


def generate_images(
    n: int,
    *,
    seed: int = 0,
    size: int = 32,
    min_contrast: int = 60,
    noise_max: float = 20.0,
) -> tuple[np.ndarray, np.ndarray]:
    """A 10-class grayscale image set (:data:`IMAGE_CLASSES`) that intensity statistics cannot separate.

    Each image is one shape or texture at a random centre (middle 40% of the image), radius (20-38% of the side),
    rotation, and texture period (6-10 px), drawn with intensity ``a`` on background ``b`` plus Gaussian noise of a
    random std in [3, noise_max]. ``a`` and ``b`` are drawn from the same distribution (uniform on 0..255 with
    ``|a - b| >= min_contrast``), so foreground and background are exchangeable: the expected intensity histogram,
    and the mean intensity, is the same for every class whatever its area.

    Args:
        n: number of images; classes are balanced in consecutive blocks of 10.
        seed: seed of the random stream.
        size: image side in pixels.
        min_contrast: minimum difference between the two intensities of an image.
        noise_max: maximum standard deviation of the additive noise.

    Returns:
        (images, labels): uint8 [n, size, size] and int64 [n] in 0..9.
    """
    rng = np.random.default_rng(seed)
    labels = _balanced_labels(rng, n, len(IMAGE_CLASSES))
    # Exchangeable (a, b) pairs with enough contrast: draw, keep the valid pairs, draw again if too few survived.
    pairs = np.empty((0, 2))
    while len(pairs) < n:
        draw = rng.uniform(0, 255, size=(2 * n + 16, 2))
        pairs = np.concatenate([pairs, draw[abs(draw[:, 0] - draw[:, 1]) >= min_contrast]])
    fg, bg = pairs[:n, 0, None, None], pairs[:n, 1, None, None]  # [n, 1, 1]
    cy, cx = (rng.uniform(0.3, 0.7, size=(2, n)) * size)[..., None, None]  # [n, 1, 1] each
    radius = rng.uniform(0.2, 0.38, size=n)[:, None, None] * size
    theta = rng.uniform(0, 2 * np.pi, size=n)[:, None, None]
    period = rng.uniform(6, 10, size=n)[:, None, None]
    noise_std = rng.uniform(3, noise_max, size=n)[:, None, None]
    ys, xs = np.mgrid[0:size, 0:size] + 0.5  # pixel centres, [H, W] each
    dy, dx = ys[None] - cy, xs[None] - cx  # [n, H, W]
    upx = dx * np.cos(theta) + dy * np.sin(theta)
    vpx = -dx * np.sin(theta) + dy * np.cos(theta)
    masks = _shape_masks(upx / radius, vpx / radius, upx, vpx, period)  # [10, n, H, W]
    mask = masks[labels, np.arange(n)]  # each image's own class, [n, H, W]
    pixels = np.where(mask, fg, bg) + rng.normal(size=(n, size, size)) * noise_std
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8), labels


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
    labels = _balanced_labels(rng, n, 2)
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
    labels = _balanced_labels(rng, n, 2)
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
