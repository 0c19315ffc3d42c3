r"""Adaptation from the tune phase's draws: check the Laplace picture where the chain goes.

A chain's first settings come from the mode: the Laplace covariance and the
gradient noise at draws of the Laplace approximation. Skewed, heavy-tailed
and funnel-like posteriors spread differently from that picture. During
``tune`` the chain therefore collects its draws in windows (as Stan and PyMC
adapt NUTS's mass matrix) and, at the end of each, compares their covariance
with the metric's. In the metric's coordinates the draws' covariance
:math:`W` should be the identity; with :math:`n` roughly independent draws in
:math:`D` dimensions, sampling error alone spreads its eigenvalues over the
Marchenko-Pastur band :math:`[(1 - \sqrt{D/n})^2, (1 + \sqrt{D/n})^2]`.
Eigenvalues outside the band, widened by a margin, are real disagreement:
the metric keeps those directions at the variances the draws show and the
others at the Laplace picture (a spiked-covariance estimate, which a few
hundred draws support where a full sample covariance would not), the
gradient noise is measured again at the window's draws, and the tuner
chooses new settings. A window whose draws are worth fewer than ``2 D``
independent ones (a chain that relaxes more slowly than it draws) cannot
tell disagreement from autocorrelation and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import norm

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.metric import Metric
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.measure import Measurements, noise_again
from pymc_sgmcmc.tuning.tempering import FALSE_ALARM

__all__ = [
    "WindowCheck",
    "check_coordinates",
    "check_window",
    "decorrelated_draws",
    "independent_draws",
    "largest_lag_one",
    "refine",
    "slowness",
]


@dataclass(frozen=True)
class WindowCheck:
    """How a window's draws compare with the metric.

    Attributes
    ----------
    eigenvalues : ndarray
        Eigenvalues of the draws' covariance in the metric's coordinates.
    eigenvectors : ndarray
        Its eigenvectors (columns).
    band : (float, float)
        The eigenvalues sampling error alone explains.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    band: tuple[float, float]

    @property
    def outside(self) -> np.ndarray:
        """Whether each eigenvalue lies outside the band."""
        low, high = self.band
        return (self.eigenvalues < low) | (self.eigenvalues > high)

    @property
    def disagrees(self) -> bool:
        """Whether any direction's variance differs from the metric's beyond sampling error."""
        return bool(np.any(self.outside))

    @property
    def worst_ratio(self) -> float:
        """The variance ratio (draws / metric) farthest from 1, as a ratio >= 1 or <= 1."""
        index = np.argmax(np.abs(np.log(self.eigenvalues)))
        return float(self.eigenvalues[index])


def independent_draws(n_draws: int, steps_per_draw: int, relaxation: float) -> float:
    """Return roughly how many independent draws ``n_draws`` draws are worth.

    Draws one relaxation time apart count as half an independent draw each,
    closer ones proportionally less.
    """
    if not np.isfinite(relaxation) or relaxation <= 0:
        return 0.0
    return 0.5 * n_draws * min(1.0, steps_per_draw / relaxation)


def largest_lag_one(series: np.ndarray) -> float:
    """Return the largest lag-one autocorrelation over the columns of ``series``, in [0, 0.999].

    Columns that do not move are left out (0 where none moves).
    """
    series = np.asarray(series)
    # A column that does not move can still centre to rounding error.
    moving = np.ptp(series, axis=0) > 0
    if len(series) < 3 or not np.any(moving):
        return 0.0
    centred = series[:, moving] - np.mean(series[:, moving], axis=0)
    variance = np.sum(centred**2, axis=0)
    lagged = np.sum(centred[1:] * centred[:-1], axis=0) / variance
    return float(np.clip(np.max(lagged), 0.0, 0.999))


def decorrelated_draws(series: np.ndarray) -> float:
    r"""Return how many independent draws ``series`` is worth, read from its own autocorrelation.

    :math:`n (1 - \rho) / (1 + \rho)` for the largest lag-one autocorrelation
    :math:`\rho` of its columns (:func:`largest_lag_one`), the count of an
    autoregressive chain; draws one relaxation time apart
    (:math:`\rho = e^{-1}`) count as about half an independent draw each, as
    in :func:`independent_draws`.
    """
    rho = largest_lag_one(series)
    return len(series) * (1.0 - rho) / (1.0 + rho)


def slowness(draws: np.ndarray, steps_per_draw: int, relaxation: float) -> float:
    r"""Return how many times more slowly than predicted a window's draws decorrelate.

    The prediction is the Gaussian model's relaxation time in inner steps; a
    posterior whose shape that model misses (the coupling of a non-centred
    hierarchical model's scale and offsets) can decorrelate far more slowly.
    Each coordinate's lag-one autocorrelation :math:`\rho` of the draws
    stands for an autoregressive chain with integrated autocorrelation time
    :math:`(1 + \rho) / (1 - \rho)`; the largest is compared with that of a
    chain that relaxes by ``e`` every ``relaxation`` inner steps,
    :math:`\rho = e^{-K / \text{relaxation}}` for ``K`` inner steps per draw.
    A lag-one autocorrelation scatters by about :math:`1 / \sqrt{n}` over
    :math:`n` independent draws, so the largest of many coordinates stays far
    below what a slow chain shows (a bulk ESS per coordinate from a hundred
    draws scatters too widely for its smallest to be trusted).
    """
    if not np.isfinite(relaxation) or relaxation <= 0 or len(draws) < 3:
        return 1.0
    worst = largest_lag_one(draws)
    predicted = np.exp(-steps_per_draw / relaxation)
    return (1.0 + worst) / (1.0 - worst) * (1.0 - predicted) / (1.0 + predicted)


def check_window(
    draws: np.ndarray,
    metric: Metric,
    independent: float,
    config: TuningConfig,
    temperature: float = 1.0,
) -> WindowCheck:
    """Compare the covariance of ``draws`` (n x D, in the model's coordinates) with ``metric``.

    ``independent`` is the number of independent draws they are worth
    (:func:`independent_draws`); it sets the width of the sampling-error band.
    Draws at temperature ``tau`` spread ``tau`` times the posterior variance,
    so their covariance is divided by it.
    """
    coordinates = np.array([metric.to_coordinates(draw) for draw in draws])
    size = coordinates.shape[1]
    covariance = np.atleast_2d(np.cov(coordinates, rowvar=False)) / temperature
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    eigenvalues = np.maximum(eigenvalues, 1e-12)
    ratio = np.sqrt(size / independent)
    low = max((1.0 - ratio) ** 2, 0.0) / config.window_margin
    high = (1.0 + ratio) ** 2 * config.window_margin
    return WindowCheck(eigenvalues, eigenvectors, (low, high))


def check_coordinates(
    draws: np.ndarray,
    metric: Metric,
    independent: float,
    config: TuningConfig,
    temperature: float = 1.0,
) -> WindowCheck | None:
    r"""Compare each coordinate's variance in the metric's coordinates with 1.

    For a window worth fewer than ``2 D`` independent draws, too few to
    compare its covariance with the metric's (:func:`check_window`), each
    coordinate's variance can still be compared: over :math:`n` independent
    draws of a Gaussian coordinate the sample variance has a relative sd of
    :math:`\sqrt{2 / n}`. The band is that many sds on either side of 1, for
    a Bonferroni bound over the D coordinates (a window of a posterior the
    metric fits disagrees in at most 1% of windows), widened by
    ``config.window_margin``. The draws count as ``independent`` says, or as
    their own largest lag-one autocorrelation in the metric's coordinates says
    where that is more (:func:`decorrelated_draws`). Returns the check, with
    the coordinates' axes as its directions, or None where the draws are
    worth too few for the band to exclude a variance of 0.
    """
    coordinates = np.array([metric.to_coordinates(draw) for draw in draws])
    size = coordinates.shape[1]
    counted = max(independent, decorrelated_draws(coordinates))
    spread = norm.isf(FALSE_ALARM / (2.0 * size)) * np.sqrt(2.0 / max(counted, 1.0))
    if spread >= 1.0:
        return None
    variances = np.maximum(np.var(coordinates, axis=0, ddof=1) / temperature, 1e-12)
    band = ((1.0 - spread) / config.window_margin, (1.0 + spread) * config.window_margin)
    return WindowCheck(variances, np.eye(size), band)


def refine(
    measurements: Measurements,
    check: WindowCheck,
    metric: Metric,
    draws: np.ndarray,
    probe: Probe,
    rng: np.random.Generator,
    estimators,
    config: TuningConfig,
) -> Measurements:
    """Return the measurements with the window's covariance and noise in place of the mode's.

    The covariance keeps the metric's picture except along the directions
    where the draws disagree with it beyond sampling error; the gradient noise
    is measured at up to ``config.noise_points`` of the window's draws.
    """
    size = measurements.mode.size
    factor = metric.factor(size)
    variances = np.where(check.outside, check.eigenvalues, 1.0)
    whitened = (check.eigenvectors * variances) @ check.eigenvectors.T
    covariance = factor @ whitened @ factor.T
    covariance = 0.5 * (covariance + covariance.T)
    noise = noise_again(measurements, probe, draws, rng, estimators, measurements.centre, config)
    return replace(
        measurements,
        laplace_variance=np.diag(covariance).copy(),
        laplace_factor=np.linalg.cholesky(covariance),
        draw_covariance=covariance,
        **noise,
    )
