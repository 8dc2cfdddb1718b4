"""Scaling curves of time and memory against sequence length, fitted by an attention's complexity, and where two of
them cross: the numerical core of :mod:`harness.kinds.speed.crossover` (numpy only, pure functions).

**Model.** ``n^2`` → a + b·n + c·n², ``n log n`` → a + b·n + c·n·log₂n, ``n`` → a + b·n, all coefficients ≥ 0 (the
registry's ``Capabilities.complexity``); an unknown complexity gets the most general (n²) model. The n log n model
keeps a linear term because such variants have linear parts too (projections, bucketing, the FFT's pointwise
products); with b = 0 it is a + c·n·log₂n. The fit minimises the relative error Σ((y − f(n))/y)² (weighted least
squares with weights 1/y²): timing noise is multiplicative, and an absolute fit would let the milliseconds of the
longest length decide the curve and ignore the short lengths where crossovers lie. The non-negative least-squares
problem has at most three columns, so it is solved exactly by enumerating the column subsets (the optimum is the
unconstrained fit on its own support). A model needs as many distinct lengths as terms.

**Crossing.** On a geometric grid of 512 points over [lo, hi], the smallest n from which one curve stays below the
other up to hi, interpolated linearly in log n between grid points; beyond hi only where the orders make a crossing
certain (a curve of lower order than the other, whose leading coefficient is positive), searched up to 2^30 · hi.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The terms of each model, lowest order first, and how the reports write them.
MODEL_TERMS: dict[str, tuple[str, ...]] = {"n": ("1", "n"), "n log n": ("1", "n", "n log n"),
                                           "n^2": ("1", "n", "n^2")}
MODEL_LABELS: dict[str, str] = {"n": "a + b·n", "n log n": "a + b·n + c·n·log₂n", "n^2": "a + b·n + c·n²"}
DEFAULT_MODEL = "n^2"  # the registry's default complexity, and the most general model
_ORDER: dict[str, int] = {"n": 1, "n log n": 2, "n^2": 3}
_GRID = 512  # grid points over the range: neighbours 0.5% apart at 256–4096, then interpolated
_EXTRAPOLATE = 2.0**30
_REF_N = 1024.0  # columns are scaled to n/1024 so that the least-squares problems stay well conditioned
_TOL = 1e-9  # "below" must beat rounding: identical curves are not a crossover


def model_of(complexity: object) -> str:
    """The model key (``"n"``, ``"n log n"`` or ``"n^2"``) of a complexity string; unknown ones get ``"n^2"``."""
    key = " ".join(str(complexity).split()).replace("²", "^2")
    return key if key in MODEL_TERMS else DEFAULT_MODEL


def design(seq_len: Sequence[float] | np.ndarray, model: str) -> np.ndarray:
    """The model's columns at ``seq_len``, shape [len(seq_len), terms], each scaled to n/1024 (positive scales keep
    the coefficients' signs, so non-negativity means the same)."""
    n = np.asarray(seq_len, dtype=float)
    x = n / _REF_N
    columns = {"1": np.ones_like(x), "n": x, "n^2": x**2, "n log n": x * np.log2(n) / math.log2(_REF_N)}
    return np.stack([columns[t] for t in MODEL_TERMS[model]], axis=-1)


@dataclass(frozen=True)
class ScalingFit:
    """Fitted curves of one variant and metric: one coefficient row per replicate (1 for a point fit).

    Attributes:
        model: The model key (see :func:`model_of`).
        coef: Non-negative coefficients, shape [replicates, terms], in the units of :func:`design`.
    """

    model: str
    coef: np.ndarray

    def __call__(self, seq_len: Sequence[float] | np.ndarray) -> np.ndarray:
        """The curves at ``seq_len``, shape [replicates, len(seq_len)]."""
        return self.coef @ design(seq_len, self.model).T

    @property
    def leading(self) -> np.ndarray:
        """The highest-order coefficient of each replicate: a crossing beyond the range needs it positive."""
        return self.coef[:, -1]


def fit_scaling(seq_len: Sequence[float], values: Sequence[float] | np.ndarray, complexity: object) -> ScalingFit:
    """Non-negative least-squares fit of ``values`` against ``seq_len`` in relative error, by the model of
    ``complexity`` (see the module docstring).

    Args:
        seq_len: Distinct positive sequence lengths, shape [m].
        values: Positive values at those lengths, shape [m], or [replicates, m] to fit several replicates at once.
        complexity: Registry complexity string (``"n^2"``, ``"n"``, ``"n log n"``).

    Returns:
        The fit, with one coefficient row per replicate.

    Raises:
        ValueError: On mismatched shapes, non-positive or non-finite input, or fewer distinct lengths than terms.
    """
    model = model_of(complexity)
    n = np.asarray(seq_len, dtype=float)
    y = np.atleast_2d(np.asarray(values, dtype=float))
    if n.ndim != 1 or y.shape[1] != n.size:
        raise ValueError(f"seq_len [m] and values [m] or [replicates, m] must agree, got {n.shape} and {y.shape}")
    if not (np.all(np.isfinite(n) & (n > 0)) and np.all(np.isfinite(y) & (y > 0))):
        raise ValueError("the fit needs finite positive seq_len and values")
    terms = len(MODEL_TERMS[model])
    if np.unique(n).size < terms:
        raise ValueError(f"the {model} model has {terms} terms and needs as many distinct lengths, got {n.size}")
    return ScalingFit(model, _nnls_relative(design(n, model), y))


def _nnls_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin over c ≥ 0 of Σ((y − x·c)/y)² for each row of ``y`` [B, m]; ``x`` is [m, k] with k ≤ 3.

    Dividing each row of the system by its y turns the relative error into an ordinary one with target 1. The
    optimum is the unconstrained least-squares fit on its own support, so the feasible subset fit with the least
    residual is exact; subsets are tried from the smallest, and a larger one must fit strictly better, so exact
    data keeps the simplest curve.
    """
    a = x[None, :, :] / y[:, :, None]  # [B, m, k]
    ones = np.ones(y.shape[1])
    best = np.zeros((y.shape[0], x.shape[1]))
    best_residual = np.full(y.shape[0], np.inf)
    for size in range(1, x.shape[1] + 1):
        for subset in itertools.combinations(range(x.shape[1]), size):
            sub = a[:, :, list(subset)]  # [B, m, size]
            c = np.linalg.pinv(sub) @ ones  # [B, size]
            scale = np.abs(c).max(axis=1, keepdims=True)
            feasible = np.all(c >= -1e-12 * scale, axis=1)
            residual = np.sum((np.einsum("bms,bs->bm", sub, c) - 1.0) ** 2, axis=1)
            better = feasible & (residual < best_residual - 1e-12)
            best[better] = 0.0
            best[np.ix_(better, list(subset))] = np.clip(c[better], 0.0, None)
            best_residual[better] = residual[better]
    return best


def _first_ahead(grid: np.ndarray, variant: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Per row of the curves [B, G] on ``grid``: the smallest n from which ``variant`` stays below ``baseline`` to the
    end of the grid; ``grid[0]`` if below throughout, ``inf`` if not below at the end."""
    below = variant < baseline * (1.0 - _TOL)
    out = np.full(below.shape[0], np.inf)
    always = below.all(axis=1)
    out[always] = grid[0]
    cross = below[:, -1] & ~always
    if cross.any():
        last = below.shape[1] - 1 - np.argmax(~below[cross, ::-1], axis=1)  # last grid index not below
        diff = (variant - baseline)[cross]
        rows = np.arange(diff.shape[0])
        d0, d1 = diff[rows, last], diff[rows, last + 1]
        t = np.clip(d0 / np.where(d0 - d1 > 0, d0 - d1, 1.0), 0.0, 1.0)
        log_grid = np.log(grid)
        out[cross] = np.exp(log_grid[last] + t * (log_grid[last + 1] - log_grid[last]))
    return out


def crossing_lengths(variant: ScalingFit, baseline: ScalingFit, lo: float, hi: float) -> np.ndarray:
    """Per replicate, the smallest n in [``lo``, ``hi``] from which ``variant``'s curve stays below ``baseline``'s.

    Returns ``lo`` where it is below throughout, a length above ``hi`` where it is not below at ``hi`` but the
    orders make a later crossing certain (lower order than the baseline, whose leading coefficient is positive), and
    ``inf`` otherwise.
    """
    grid = np.geomspace(lo, hi, _GRID)
    out = _first_ahead(grid, variant(grid), baseline(grid))
    lower_order = _ORDER[variant.model] < _ORDER[baseline.model]
    far = np.isinf(out) & lower_order & (np.broadcast_to(baseline.leading, out.shape) > 0)
    if far.any():
        ext = np.geomspace(hi, hi * _EXTRAPOLATE, 2 * _GRID)
        v, b = (np.broadcast_to(f(ext), (out.size, ext.size)) for f in (variant, baseline))
        out[far] = _first_ahead(ext, v[far], b[far])
    return out
