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
iteration), checked by a difference over a tenth of an sd where the
likelihood has kinks; the chain's stiffness then counts it and the tuner
chooses the step for it.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.kinks import differences_disagree

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
    probe: Probe,
    draws: np.ndarray,
    factor: np.ndarray,
    rng,
    iterations: int = POWER_ITERATIONS,
    config: TuningConfig | None = None,
) -> float:
    """Return the largest curvature of the log posterior at ``draws``, in coordinates ``z``.

    At each draw, power iteration on differences over ``DIFFERENCE_STEP``
    finds the steepest direction. The curvature along it is differenced
    again over ``config.kink_step`` sds: a likelihood with kinks (Laplace or
    quantile regression) has all its curvature at them, and a fine
    difference that straddles one reads the gradient's jump as a curvature
    without bound, while over the posterior's own scale the kinks average
    into a smooth one. Where the two differences disagree
    (:func:`~pymc_sgmcmc.tuning.kinks.differences_disagree`), the coarse one
    counts; a smooth log density's curvature, a funnel's neck included,
    changes little over a tenth of an sd.

    Parameters
    ----------
    probe : Probe
        The compiled gradients; the full data's gradient is used.
    draws : ndarray, shape (n, D)
        Positions in the model's coordinates.
    factor : ndarray, shape (D, D) or (D,)
        ``A`` of the coordinates ``theta = theta_0 + A z``, or a diagonal
        preconditioner ``P`` with ``A = diag(sqrt(P))``.
    rng : numpy.random.Generator
        Draws each power iteration's starting direction.
    iterations : int
        Power iterations per draw.
    config : TuningConfig, optional
        Its ``kink_step`` and ``kink_tolerance`` set the coarse difference.

    Returns
    -------
    float
        The largest Rayleigh quotient ``v' (-A' H A) v`` over the draws, for
        the direction ``v`` the iterations reach (at most the true largest
        eigenvalue); 0 where no curvature is positive.
    """
    config = config or TuningConfig()
    largest = 0.0
    for draw in np.asarray(draws, dtype=float):
        direction = rng.standard_normal(draw.size)
        direction /= np.linalg.norm(direction)
        steepest, steepest_direction = 0.0, None
        for _ in range(iterations):
            product = _curvature_product(probe, draw, factor, direction, DIFFERENCE_STEP)
            if not np.all(np.isfinite(product)):
                break
            quotient = float(direction @ product)
            if quotient > steepest:
                steepest, steepest_direction = quotient, direction
            norm = np.linalg.norm(product)
            if norm == 0.0:
                break
            direction = product / norm
        if steepest_direction is None:
            continue
        product = _curvature_product(probe, draw, factor, steepest_direction, config.kink_step)
        coarse = float(steepest_direction @ product)
        if np.isfinite(coarse) and differences_disagree(steepest, coarse, config):
            steepest = max(coarse, 0.0)
        largest = max(largest, steepest)
    return largest


def _curvature_product(probe: Probe, draw, factor, direction, step: float) -> np.ndarray:
    """Return ``-A' H A v`` at ``draw``, the full-data gradient differenced over ``step`` sds."""
    factor = np.asarray(factor, dtype=float)
    scale = np.sqrt(factor) if factor.ndim == 1 else None
    move = step * (scale * direction if scale is not None else factor @ direction)
    _, plus, _ = probe.full(draw + move)
    _, minus, _ = probe.full(draw - move)
    difference = (plus - minus) / (2.0 * step)
    return -(scale * difference if scale is not None else factor.T @ difference)


def tightest_draws(draws: np.ndarray, log_density: np.ndarray, count: int = CURVATURE_DRAWS):
    """Return ``count`` draws: half of highest log density, half spread over the window.

    Where the density is highest, a funnel is narrowest (its neck) and its
    curvature largest; the draws spread over the window cover the rest.
    """
    draws = np.asarray(draws)
    highest = np.argsort(log_density)[::-1][: count // 2]
    spread = np.linspace(0, len(draws) - 1, count - highest.size).astype(int)
    return draws[np.unique(np.concatenate([highest, spread]))]
