"""Least squares for the step model, and the interval its residuals give.

A fit is ordinary least squares (``numpy.linalg.lstsq``) of ``y = X @ theta`` with every
coefficient kept at its floor or above: a cost (a fixed per-round cost) cannot be
negative, and a link cannot move bytes faster than its rate (the wire's coefficient is
at least 1). A fit that puts one below its floor on three points is fitting the noise:
that term is held at its floor and the rest refitted (an active-set step; with two or
three terms this is what ``scipy.optimize.nnls`` would find, without adding SciPy).
A term the cells cannot tell from the others (its column in the span of theirs: the
wire's N x B on one link, beside a parameter server's round and per-peer costs) is held
at its floor from the start, the last term first: the ideal wire, the rest the CPU's.

The interval is the classical prediction interval of a linear model: the residuals'
variance ``s**2 = RSS / (n - p)`` and the leverage of the point predicted,
``x (X'X)^-1 x'``, which grows as the point moves past the fitted device counts, so a
prediction at 100 devices from cells at 2-4 is honestly wide. Student's t at 90% (two
sided) for n - p degrees of freedom. With no degree of freedom left (as many distinct
points as terms) there is no interval: ``half_width`` is None.

``expected_max_normal(n)``: E[max of n standard normal draws], the straggler term of a
synchronous round (every worker waits for the slowest of n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# Student's t, 0.95 quantile (a two-sided 90% interval), by degrees of freedom.
_T90 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
        9: 1.833, 10: 1.812, 12: 1.782, 15: 1.753, 20: 1.725, 30: 1.697}
Z90 = 1.645
LEVEL = 0.90


def t90(dof: int) -> float:
    """The t quantile for ``dof`` (the next smaller tabled one: a slightly wider interval)."""
    if dof > 30:
        return Z90
    return _T90[max(d for d in _T90 if d <= dof)]


@dataclass(frozen=True)
class LinearFit:
    """``theta`` over the named terms (a term held at its floor is not in ``kept``), the
    residuals' ``s`` and the inverse normal matrix of the kept terms (for leverage)."""

    names: tuple[str, ...]
    theta: tuple[float, ...]
    kept: tuple[int, ...]
    s: float | None  # residual standard deviation (None: no degree of freedom)
    dof: int
    xtx_inv: np.ndarray
    residuals: tuple[float, ...]

    def predict(self, x) -> float:
        return float(np.dot(self.theta, x))

    def half_width(self, x) -> float | None:
        """Half the 90% prediction interval at ``x`` (None: no degree of freedom)."""
        if self.s is None:
            return None
        xk = np.asarray(x, dtype=float)[list(self.kept)]
        leverage = float(xk @ self.xtx_inv @ xk) if len(xk) else 0.0
        return t90(self.dof) * self.s * math.sqrt(1.0 + leverage)

    def term(self, name: str) -> float:
        return self.theta[self.names.index(name)]


def _rank(X: np.ndarray) -> int:
    # Relative to the largest singular value: columns in ms and in peers differ in scale.
    return int(np.linalg.matrix_rank(X / np.abs(X).max(axis=0), tol=1e-9 * len(X)))


def fit_nonnegative(names: tuple[str, ...], rows: list[list[float]],
                    y: list[float], floors: tuple[float, ...] | None = None) -> LinearFit:
    """Least squares of ``y`` on ``rows`` (one per point, one value per term), every
    coefficient at its floor (default 0) or above (one below is held at its floor and
    the rest refitted)."""
    X = np.asarray(rows, dtype=float)
    floor = np.zeros(X.shape[1]) if floors is None else np.asarray(floors, dtype=float)
    # theta = floor + t with t >= 0: fit t on what the floors leave of y.
    Y = np.asarray(y, dtype=float) - X @ floor
    kept = [j for j in range(X.shape[1]) if np.any(X[:, j] != 0)]
    for j in reversed(list(kept)):
        others = [k for k in kept if k != j]
        if others and _rank(X[:, others]) == _rank(X[:, kept]):
            kept.remove(j)  # the others explain its column: it cannot be fitted apart
    while True:
        theta_k = np.linalg.lstsq(X[:, kept], Y, rcond=None)[0] if kept else np.zeros(0)
        negative = [kept[i] for i, v in enumerate(theta_k) if v < 0]
        if not negative:
            break
        # Drop the most negative first (relative to its column's scale), then refit.
        worst = min(negative, key=lambda j: theta_k[kept.index(j)] * np.abs(X[:, j]).max())
        kept.remove(worst)
    excess = np.zeros(X.shape[1])
    excess[kept] = theta_k
    residuals = Y - X @ excess
    theta = floor + excess
    dof = len(Y) - len(kept)
    s = math.sqrt(float(residuals @ residuals) / dof) if dof > 0 else None
    Xk = X[:, kept]
    xtx_inv = np.linalg.pinv(Xk.T @ Xk) if kept else np.zeros((0, 0))
    return LinearFit(tuple(names), tuple(float(v) for v in theta), tuple(kept), s, dof,
                     xtx_inv, tuple(float(r) for r in residuals))


@lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1), by integrating
    x * n * phi(x) * Phi(x)**(n-1) on a fine grid (exact to ~1e-6 for n <= 10,000)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-8.0, 8.0, 8001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    density = n * phi * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))
