r"""The curvature where a chain goes, for steps that only the discretisation limits.

A chain on minibatches takes steps that the gradient noise keeps well below
what the curvature allows. A chain on the full data's gradient
(:data:`~pymc_sgmcmc.tuning.measure.FULL_DATA`) has no noise, and its step is
the largest that keeps the discretisation's variance inflation within the
budget at the largest curvature measured, at the mode or at the tune draws'
mean. On a posterior that is not Gaussian the curvature changes with the
position: in a funnel's neck, where a hierarchical scale is small, the group
effects' curvature grows as the inverse square of that scale. There the step
inflates the variance far beyond the budget, which moves the means (on a
centred hierarchical model of 85 groups, the scale's mean by 0.24 sd at a
step chosen for the draws' mean).

:func:`largest_curvature` measures the largest curvature at a window's
draws, in the metric's coordinates, by power iteration on Hessian-vector
products (central differences of the full-data gradient, one pair per
iteration); the chain's stiffness then counts it and the tuner chooses the
step for it.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.estimators import Probe

__all__ = [
    "CURVATURE_DRAWS",
    "CURVATURE_MARGIN",
    "POWER_ITERATIONS",
    "largest_curvature",
    "tightest_draws",
]

#: Draws of a window at which the curvature is measured.
CURVATURE_DRAWS = 8
#: Power iterations per draw.
POWER_ITERATIONS = 20
#: Factor by which the curvature at the draws must exceed the largest measured
#: to count: within it the two estimates differ by their differencing error and
#: the step's inflation stays near the budget.
CURVATURE_MARGIN = 1.1
#: Central-difference step, in the metric's coordinates (posterior sds).
DIFFERENCE_STEP = 1e-4


def largest_curvature(
    probe: Probe, draws: np.ndarray, factor: np.ndarray, rng, iterations: int = POWER_ITERATIONS
) -> float:
    """Return the largest curvature of the log posterior at ``draws``, in coordinates ``z``.

    Parameters
    ----------
    probe : Probe
        The compiled gradients; the full data's gradient is used.
    draws : ndarray, shape (n, D)
        Positions in the model's coordinates.
    factor : ndarray, shape (D, D)
        ``A`` of the coordinates ``theta = theta_0 + A z``.
    rng : numpy.random.Generator
        Draws each power iteration's starting direction.
    iterations : int
        Power iterations per draw.

    Returns
    -------
    float
        The largest Rayleigh quotient ``v' (-A' H A) v`` over the draws, for
        the direction ``v`` the iterations reach (at most the true largest
        eigenvalue); 0 where no curvature is positive.
    """
    largest = 0.0
    for draw in np.asarray(draws, dtype=float):
        direction = rng.standard_normal(draw.size)
        direction /= np.linalg.norm(direction)
        for _ in range(iterations):
            move = DIFFERENCE_STEP * (factor @ direction)
            _, plus, _ = probe.full(draw + move)
            _, minus, _ = probe.full(draw - move)
            product = -factor.T @ (plus - minus) / (2.0 * DIFFERENCE_STEP)
            if not np.all(np.isfinite(product)):
                break
            largest = max(largest, float(direction @ product))
            norm = np.linalg.norm(product)
            if norm == 0.0:
                break
            direction = product / norm
    return largest


def tightest_draws(draws: np.ndarray, log_density: np.ndarray, count: int = CURVATURE_DRAWS):
    """Return ``count`` draws: half of highest log density, half spread over the window.

    Where the density is highest, a funnel is narrowest (its neck) and its
    curvature largest; the draws spread over the window cover the rest.
    """
    draws = np.asarray(draws)
    highest = np.argsort(log_density)[::-1][: count // 2]
    spread = np.linspace(0, len(draws) - 1, count - highest.size).astype(int)
    return draws[np.unique(np.concatenate([highest, spread]))]
