"""Offline generators of the two pixel tasks of Long Range Arena, deterministic from a seed: Pathfinder-style contour
images and a 10-class image set of ordered intensity strips. The rules of each are in
:mod:`harness.kinds.accuracy.generators`' docstring (which covers all five tasks); this module holds the pixel-grid
code so that neither file grows past a reader's patience.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from ...core.errors import UserError
from .generators import balanced_labels, check_probability

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


def _free_cells(canvas: _Canvas, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a contour may go: inside [lo, hi]^2 and away from ``canvas.blocked``, as a grid with a one-pixel border
    of False (so that steps off the image need no bounds checks; its (r, c) are padded coordinates), and the flat
    indices of its free cells. Taken once per contour and shared by its tries, since the canvas does not change
    between them."""
    free = np.zeros((canvas.size + 2, canvas.size + 2), dtype=bool)
    free[lo + 1 : hi + 2, lo + 1 : hi + 2] = ~canvas.blocked[lo : hi + 1, lo : hi + 1]
    return free, np.flatnonzero(free)


def _walk(
    rng: np.random.Generator,
    cells: tuple[np.ndarray, np.ndarray],
    n_px: int,
    period: int,
    turn_p: float,
    start_ok: Callable[[tuple[int, int]], bool] | None = None,
) -> list[tuple[int, int]] | None:
    """One contour's chain of 8-connected pixels on the free ``cells`` (``_free_cells``), or None.

    The heading turns by 45 degrees (left or right) at the start of a dash with probability ``turn_p``. When the next
    pixel is not free the walk steers (straight, then the other turns) rather than give up: a blind walk of 41 pixels
    fits a 30-pixel box only a few % of the time. Consecutive headings differ by at most 45 degrees, so a pixel is
    always at Chebyshev distance 2 from the one two steps back; the chain never comes within one pixel of its own
    older pixels, so a contour does not touch itself.

    ``start_ok`` (image coordinates) rejects a start the caller would reject as an end anyway, before the walk: every
    random draw of a walk is taken first, so the stream, and every image, is what walking to the end gives.
    """
    free, starts = cells
    if starts.size == 0:
        return None
    r, c = divmod(int(starts[rng.integers(starts.size)]), free.shape[1])  # as rng.choice(starts) draws, faster
    heading = int(rng.integers(8))
    u = rng.random((2, n_px))
    if start_ok is not None and not start_ok((r - 1, c - 1)):
        return None
    free = free.copy()
    # -1, 0, +1 with turn_p / 2, 1 - turn_p, turn_p / 2; and which way to steer first when straight ahead is not free
    turns = ((u[0] > 1 - turn_p / 2).astype(int) - (u[0] < turn_p / 2)).tolist()
    sides = np.where(u[1] < 0.5, -1, 1).tolist()
    chain = [(r, c)]
    for i in range(1, n_px):
        turn = turns[i] if i % period == 0 else 0
        options = (turn, 0, -turn) if turn else (0, sides[i], -sides[i])
        for t in options:
            dr, dc = _DIRS[(heading + t) % 8]
            if free[r + dr, c + dc]:
                # the own-chain rule: the last pixel and its neighbours (never below index 0: the border) are taken
                free[r - 1 : r + 2, c - 1 : c + 2] = False
                heading, r, c = (heading + t) % 8, r + dr, c + dc
                break
        else:
            return None
        chain.append((r, c))
    return [(r - 1, c - 1) for r, c in chain]


def _square(centre: tuple[int, int], radius: int) -> tuple[slice, slice]:
    """Index of the (2 radius + 1)-pixel square around ``centre`` (clipped at the top/left image edge)."""
    r, c = centre
    return slice(max(r - radius, 0), r + radius + 1), slice(max(c - radius, 0), c + radius + 1)


def _lit(i: int, dash: int, period: int) -> bool:
    """Whether pixel ``i`` of a chain is on a dash (``dash`` on, ``period - dash`` off, from the chain's start)."""
    return i % period < dash


def _pieces_apart(chain: list[tuple[int, int]], cut: int, dash: int, period: int, dot: int) -> bool:
    """Whether removing dash number ``cut`` splits the contour into two pieces that the linking rule keeps apart:
    every lit pixel before the cut at Chebyshev distance > _LINK from every lit pixel after it, counting a
    (2 ``dot`` + 1)-pixel marker square around each end when ``dot`` > 0."""
    def piece(indices: range, end: tuple[int, int]) -> np.ndarray:
        cells = [chain[i] for i in indices if _lit(i, dash, period)]
        if dot:
            r, c = end
            cells += [(r + dr, c + dc) for dr in range(-dot, dot + 1) for dc in range(-dot, dot + 1)]
        return np.array(cells)  # [cells, 2]

    before = piece(range(cut * period), chain[0])
    after = piece(range((cut + 1) * period, len(chain)), chain[-1])
    return bool(np.abs(before[:, None] - after[None]).max(-1).min() > _LINK)  # [before, after, 2] -> min distance


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
    """One image, or None when the contours could not be placed (the caller resamples).

    The two main contours are drawn alike (ends inside the marker room, ``min_marker_distance`` apart, either able
    to lose an inner dash and fall apart); one of them, chosen at random whatever the label, is marked at both ends,
    and one inner dash is left out of the marked one (label 0) or of the other (label 1). Which contour is drawn
    first (and so where it tends to lie) then says nothing about the label.
    """
    period = dash_length + dash_gap
    canvas = _Canvas(size)
    # Marker dots must fit inside the padding, so contour ends stay marker_radius further in; chains use the rest.
    lo, hi = padding, size - 1 - padding
    img = np.zeros((size, size), dtype=np.uint8)
    lengths = [contour_length] * 2 + [distractor_length] * num_distractors
    # Which main contour carries the markers, drawn independently of the label: the first one drawn is placed on an
    # emptier canvas, so always marking it let a model without token mixing read the label from where the lit
    # pixels lie (a linear model on the per-position pixels read it; see the docstring).
    marked_k = int(rng.integers(2))
    broken_k = marked_k if label == 0 else 1 - marked_k
    for k, n_dashes in enumerate(lengths):
        n_px = n_dashes * period - dash_gap
        main = k < 2  # a main contour (either may get the markers) rather than a distractor
        dot = marker_radius if main else 0  # room for marker dots around both ends
        cut = int(rng.integers(1, n_dashes - 1)) if main else -1  # an inner dash: the two ends stay on
        cells = _free_cells(canvas, lo, hi)

        def end_ok(end: tuple[int, int], dot: int = dot) -> bool:  # a main contour's end: in the marker room, dot free
            return all(lo + dot <= v <= hi - dot for v in end) and not canvas.blocked[_square(end, dot)].any()

        for _ in range(max_tries):
            chain = _walk(rng, cells, n_px, period, turn_p=turn_prob, start_ok=end_ok if main else None)
            if chain is None:
                continue
            ends = [chain[0], chain[-1]]
            if main:
                far = max(abs(ends[0][0] - ends[1][0]), abs(ends[0][1] - ends[1][1])) >= min_marker_distance
                if not (far and end_ok(ends[1])):
                    continue
                if not _pieces_apart(chain, cut, dash_length, period, dot):
                    continue
            break
        else:
            return None
        broken = k == broken_k
        for i, (r, c) in enumerate(chain):
            if _lit(i, dash_length, period) and not (broken and i // period == cut):
                img[r, c] = PATHFINDER_DASH
        # Everything within _LINK of this contour (and of its marker room) is off limits to later contours, which
        # therefore stay at Chebyshev distance >= _LINK + 1 and never link to it.
        canvas.block_around(chain, _LINK)
        canvas.block_around(ends, _LINK + dot)
        if k == marked_k:
            marked = ends
    for end in marked:
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
    """Pathfinder images: two dashed contours plus distractors, two marker dots; label 1 iff the dots are connected.

    Defaults are LRA's pathfinder32 ``curv_contour_length_14`` settings where a pixel grid can express them:
    contour_length 14 dashes, distractor_length 14 // 3 = 4 dashes, 20 // 4 = 5 distractors, paddle_length 2
    (dash_length), paddle_margin 1 (dash_gap), padding 1, marker_radius 1.5 (a 3x3 dot: the pixels within 1.5 of
    the centre), paddle_contrast 0.75 (dash intensity 191, markers 255, background 0). LRA's antialiasing,
    paddle_thickness 0.5, continuity 1.0 and seed_distance 7 are not reproduced; instead each dash may turn by
    45 degrees with probability ``turn_prob`` and the two ends of the marked contour are ``min_marker_distance``
    apart.

    How a negative differs from a positive (a deviation from LRA, where a negative marks one end of each of two
    contours): every image has two main contours of ``contour_length`` dashes, drawn alike; the markers sit on both
    ends of one of them, chosen at random whatever the label, and one inner dash is left out of one of them: of the
    unmarked contour in a positive, of the marked one in a negative, which then falls apart into two pieces, one
    under each marker. Both contours are drawn so that losing that dash splits them (the pieces stay farther apart
    than the linking rule reaches), whatever the label. So both labels have the same marker positions, the same
    distance between the markers, the same lit pixel count, the same number of pieces and the same distribution of
    lit pixels at every position; only whether the path between the markers is whole differs. Two designs leaked the
    label: LRA's way (the marker distance differs by label, and a model without token mixing read it), and always
    marking the first contour drawn (it is placed on an emptier canvas, so where pixels are lit told the label, to a
    linear model on the per-position pixels; with the marked contour drawn at random it is at chance). Measured at
    12x12 with two 3-dash contours (docs/results, "Generator leaks found and removed").

    What this does not remove: a model that sees all pixels at once can learn connectivity on a small grid without
    attention. An MLP on the 12x12 one-hot pixels (288 -> 64 -> 128 -> 2) learns it nearly perfectly from a few
    thousand images (same file), so this stand-in at that size needs token mixing only as far as the model has no such
    all-pixel path; the `none` control (a mean of per-position features and an MLP head) has a narrow one.

    Connectivity: lit pixels (> 0) within Chebyshev distance 2 of each other are linked (8-connectivity after closing
    gaps of one pixel). Each contour, its markers included, is one component (dash gaps are one pixel), a broken one
    two, and every contour stays at distance >= 3 from every other one, so the label is exactly "the two markers
    are in the same component". Placements that would break this are rejected and resampled.

    Args:
        n: number of images.
        seed: seed of the random stream.
        size: image side in pixels.
        contour_length, distractor_length: dashes per main contour (at least 3: one inner dash to leave out) and per
            distractor.
        num_distractors: unmarked distractor contours.
        dash_length, dash_gap: pixels on and off along a contour (a gap of 0 or 1 keeps a contour linked).
        marker_radius: marker dots are (2 r + 1) x (2 r + 1) squares centred on a contour end.
        padding: blank border in pixels.
        turn_prob: probability that a dash turns by 45 degrees (left or right equally).
        min_marker_distance: minimum Chebyshev distance between the two ends of the marked contour.

    Returns:
        (images, labels): uint8 [n, size, size] and int64 [n], balanced in consecutive pairs.

    Raises:
        UserError: parameters that break the connectivity rule or do not fit in the image.
    """
    if dash_gap not in (0, 1) or dash_length < 1 or marker_radius < 1 or contour_length < 3:
        raise UserError(
            f"pathfinder: need dash_gap 0 or 1 (the linking rule closes one-pixel gaps), dash_length >= 1, "
            f"marker_radius >= 1 and contour_length >= 3, got dash_gap={dash_gap}, dash_length={dash_length}, "
            f"marker_radius={marker_radius}, contour_length={contour_length}"
        )
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, 2)
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

#: Intensities of a strip's four pixels, darkest to brightest; the background is 0.
STRIP_LEVELS: tuple[int, ...] = (70, 130, 190, 250)
_STRIP = len(STRIP_LEVELS)
_CLASS_SEED = 20202  # the class definitions are part of the task, not of a dataset's seed


def image_class_orders(num_classes: int = 10) -> np.ndarray:
    """int [num_classes, 4]: class c writes every strip with the levels ``STRIP_LEVELS[orders[c]]`` in order.

    Ten of the 24 orders of the four levels, drawn once with a fixed seed. Two orders never share all three of their
    neighbouring pairs, so a class is known from which level follows which along its strips.
    """
    orders = np.array(list(itertools.permutations(range(_STRIP))))
    if not 2 <= num_classes <= len(orders):
        raise UserError(f"image: num_classes must be in 2..{len(orders)}, got {num_classes}")
    return orders[np.random.default_rng(_CLASS_SEED).permutation(len(orders))[:num_classes]]


def generate_images(
    n: int,
    *,
    seed: int = 0,
    size: int = 32,
    strips: int | None = None,
    vertical_p: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """A 10-class grayscale image set where a class is a spatial relation between pixels, never a pixel statistic.

    An image holds ``strips`` strips of four pixels, horizontal (left to right) or vertical (top to bottom, with
    probability ``vertical_p``), at random places on the image seen as a torus (a strip leaving one edge continues
    at the opposite one), never touching each other (one background pixel apart, diagonals included). Every strip
    of a class-c image shows the four :data:`STRIP_LEVELS` in the order ``image_class_orders()[c]`` on background 0.

    So every class has the same intensity histogram (each strip holds each level once) and, the placement being
    uniform on the torus, the same intensity distribution at every pixel: neither a bag of pixels nor any single
    position tells classes apart. Only which level lies next to which (a pixel's left or upper neighbour) does:
    a model must relate pixels, which a model without token mixing cannot.

    Args:
        n: number of images; classes are balanced in consecutive blocks of 10.
        seed: seed of the random stream.
        size: image side in pixels (at least 5).
        strips: strips per image; None = about one pixel in ten lit (size² / 40, at least 1).
        vertical_p: probability that a strip is vertical.

    Returns:
        (images, labels): uint8 [n, size, size] and int64 [n] in 0..9.
    """
    if size < _STRIP + 1:
        raise UserError(f"image: size must be at least {_STRIP + 1}, got {size}")
    check_probability("image", "vertical_p", vertical_p)
    if strips is not None and strips < 1:
        raise UserError(f"image: strips must be a positive integer (or null for size^2 / 40), got {strips}")
    k = max(1, size * size // 40) if strips is None else strips
    orders = image_class_orders()
    levels = np.array(STRIP_LEVELS, dtype=np.uint8)
    rng = np.random.default_rng(seed)
    labels = balanced_labels(rng, n, len(orders))
    images = np.zeros((n, size, size), dtype=np.uint8)
    steps = np.arange(_STRIP)
    for i, label in enumerate(labels.tolist()):
        for _attempt in range(100):
            blocked = np.zeros((size, size), dtype=bool)  # strip pixels and their 8 neighbours, on the torus
            placed = 0
            for _try in range(50 * k):
                r, c = (int(v) for v in rng.integers(0, size, 2))
                vertical = bool(rng.random() < vertical_p)
                rows = (r + steps * vertical) % size  # [4]
                cols = (c + steps * (not vertical)) % size  # [4]
                if blocked[rows, cols].any():
                    continue
                images[i, rows, cols] = levels[orders[label]]
                near = np.arange(-1, 2)
                blocked[(rows[:, None, None] + near[:, None]) % size, (cols[:, None, None] + near) % size] = True
                placed += 1
                if placed == k:
                    break
            if placed == k:
                break
            images[i] = 0  # could not fit k strips this time: start the image again
        else:
            raise UserError(f"image: could not place {k} strips in a {size}x{size} image; lower strips")
    return images, labels
