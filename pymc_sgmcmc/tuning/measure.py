"""What a chain measures before it samples: mode, scale, gradient noise.

At the start of sampling (during ``tune``), :func:`measure` finds a mode of
the posterior (:mod:`pymc_sgmcmc.tuning.mode`) and estimates, around it, the
quantities the step-size rules of :mod:`pymc_sgmcmc.tuning` need: the
posterior scale (the diagonal preconditioner), the range of curvatures in
preconditioned coordinates, and the variance of each gradient estimator.
Where the posterior has no mode, it measures at the chain's start instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.linalg import eigh

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Centre, Probe
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.mode import (
    estimate_hessian,
    find_mode,
    hessian_sds,
    touched_coordinates,
)

__all__ = [
    "FULL_DATA",
    "Measurements",
    "in_coordinates",
    "laplace",
    "measure",
    "measure_at_draws",
    "measure_noise",
    "noise_again",
    "noise_at_draws",
    "noise_fields",
    "with_second_order",
]

#: The gradient on all N rows at every step: no noise, ``N / B`` times a
#: minibatch step's work. The tuner weighs it where the data are small enough
#: for that to pay (:func:`pymc_sgmcmc.tuning.tuner.choose_settings`).
FULL_DATA = "full_data"


@dataclass
class Measurements:
    """Quantities measured around the mode of one chain.

    Attributes
    ----------
    mode : ndarray
        The mode found.
    centre : Centre
        The control-variate centre: the mode, the full-data log-likelihood
        gradient there and the other free variables' values.
    hessian : ndarray
        Hessian of the log posterior at the mode, estimated from a large minibatch.
    log_concave : bool
        Whether ``hessian`` is negative definite.
    laplace_variance : ndarray
        Diagonal of the Laplace covariance ``(-hessian)^-1`` (or ``1 / |diag|``
        where ``hessian`` is not negative definite): the posterior scale.
    laplace_factor : ndarray
        A square root of the Laplace covariance, to draw starting points.
    noise_covariance : dict of str to ndarray
        Covariance of each gradient estimator's noise at typical posterior points.
    batch_size : int
        Rows per minibatch the noise was measured with.
    draw_covariance : ndarray or None
        The covariance estimated from tune draws, once a window has replaced
        the Laplace picture (see :mod:`pymc_sgmcmc.tuning.windows`).
    noise_halves : dict of str to ndarray or None
        Per estimator, the noise covariance from each half of the gradient
        samples (2 x D x D).
    noise_samples : int
        Gradient samples behind each noise covariance.
    tempering_sensitivity : float
        The largest move of a posterior mean, in posterior sds, per unit of
        variance inflation, estimated from tune draws
        (:mod:`pymc_sgmcmc.tuning.tempering`); 0 until a window has measured it.
    moving : ndarray of bool or None
        The coordinates whose means a tune window found moving under
        tempering (nonzero :func:`~pymc_sgmcmc.tuning.tempering.tempering_moves`),
        in any window so far; ``None`` until a window has shown one.
    energy_window : EnergyWindow or None
        The draws and gradients of the tune window on the full data's gradient
        that showed the largest move of the means per unit of ``eps(a) / a``
        (:class:`~pymc_sgmcmc.tuning.tempering.EnergyWindow`), from which the
        tuner bounds a full-data step's move of the means; ``None`` until such a
        window has been checked.
    at_start : bool
        Whether the search found no mode, so that ``mode`` is where it
        started and the picture is the one there (see :func:`measure`),
        until the chain's draws replace it.
    full_batches : bool
        Whether every minibatch the chain draws holds all N rows (a batch size
        of N without replacement), so that its gradient estimates are exact.
    slowness : float
        How many times more slowly than the Gaussian model predicts the
        chain's tune draws decorrelated (:func:`~pymc_sgmcmc.tuning.windows.slowness`);
        1 until a window has shown it slower.
    stiffness : float
        Factor on the largest measured curvature: raised where a tune step
        diverged, showing a curvature beyond the measured range (a funnel's
        neck); 1 until then.
    curvature_checked : bool
        Whether a tune window has measured the curvature at the chain's draws
        (chains on the full data's gradient; see :mod:`pymc_sgmcmc.tuning.curvature`).
    row_work : float or None
        Multiply-adds of one row's share of a gradient (:func:`row_work`);
        ``None`` counts ``2 D``, every row touching every coordinate.
    """

    mode: np.ndarray
    centre: Centre
    hessian: np.ndarray
    log_concave: bool
    laplace_variance: np.ndarray
    laplace_factor: np.ndarray
    noise_covariance: dict = field(default_factory=dict)
    batch_size: int = 100
    draw_covariance: np.ndarray | None = None
    noise_halves: dict | None = None
    noise_samples: int = 0
    tempering_sensitivity: float = 0.0
    moving: np.ndarray | None = None
    energy_window: object = None
    at_start: bool = False
    full_batches: bool = False
    slowness: float = 1.0
    stiffness: float = 1.0
    curvature_checked: bool = False
    row_work: float | None = None

    def curvatures(self, factor) -> tuple[float, float]:
        """Return the smallest and largest curvature in the coordinates ``theta = A z``.

        ``factor`` is ``A`` (a matrix), or a diagonal preconditioner ``P``
        (a vector, ``A = diag(sqrt(P))``). The range spans the Hessian at the
        mode and, once tune draws have been used, the inverse variances of
        the draws' covariance in those coordinates; the largest is multiplied
        by ``stiffness``.
        """
        values = np.linalg.eigvalsh(-in_coordinates(self.hessian, factor))
        if self.draw_covariance is not None:
            factor = np.asarray(factor, dtype=float)
            inverse = 1.0 / factor if factor.ndim == 1 else np.linalg.inv(factor).T
            variances = np.linalg.eigvalsh(in_coordinates(self.draw_covariance, inverse))
            values = np.concatenate([values, 1.0 / variances])
        positive = values[values > 0]
        if positive.size == 0:
            return 1.0, self.stiffness
        return float(positive.min()), float(values.max()) * self.stiffness

    def noise(self, estimator: str, factor) -> float:
        """Return the largest noise variance of ``estimator`` in the coordinates of ``factor``.

        With ``n`` gradient samples in ``D`` dimensions the largest eigenvalue
        of a sample covariance overstates the true one by up to
        ``(1 + sqrt(D / n))^2``, the Marchenko-Pastur edge. Where D exceeds
        ``n / 16`` (an overstatement above 1.5x) the directions of largest
        noise are found on one half of the samples and their variance measured
        on the other (and the other way round), which is unbiased for the
        directions found; the largest diagonal entry bounds it from below.
        The full data's gradient (:data:`FULL_DATA`) has none.
        """
        if estimator == FULL_DATA:
            return 0.0
        covariance = in_coordinates(self.noise_covariance[estimator], factor)
        size = covariance.shape[0]
        halves = None if self.noise_halves is None else self.noise_halves.get(estimator)
        if halves is None or 16 * size <= self.noise_samples:
            return float(eigh(covariance, eigvals_only=True, subset_by_index=[size - 1] * 2)[0])
        first, second = (in_coordinates(half, factor) for half in halves)
        largest = float(np.max(np.diag(covariance)))
        for find, check in ((first, second), (second, first)):
            _, top = eigh(find, subset_by_index=[max(size - 5, 0), size - 1])
            largest = max(largest, float(np.max(np.einsum("ij,ik,kj->j", top, check, top))))
        return largest

    def mean_square_gradient(self, estimator: str, factor, temperature: float) -> np.ndarray:
        """Return the mean square of each coordinate of the gradient estimate at stationarity.

        On the Laplace picture in the coordinates ``theta = A z``, the gradient
        estimate at a draw of ``N(mode, tau H^-1)`` has second moment
        ``tau diag(A' H A) + diag(A' C A)``, with ``C`` the noise covariance
        of ``estimator``. Coordinates of non-positive curvature count the
        smallest positive one.
        """
        curvature = -_diagonal_in_coordinates(self.hessian, factor)
        curvature = np.maximum(curvature, self.curvatures(factor)[0])
        if estimator == FULL_DATA:
            return temperature * curvature
        noise = _diagonal_in_coordinates(self.noise_covariance[estimator], factor)
        return temperature * curvature + np.maximum(noise, 0.0)


def in_coordinates(matrix, factor) -> np.ndarray:
    """Return ``A' M A``, the quadratic form ``matrix`` in the coordinates ``theta = A z``.

    ``factor`` is ``A`` (a matrix), or a diagonal preconditioner ``P`` (a
    vector, ``A = diag(sqrt(P))``). A diagonal ``A`` scales the rows
    and columns of ``matrix``, O(D^2) instead of the O(D^3) of two products
    with a dense diagonal matrix, with the same rounding.
    """
    factor = np.asarray(factor, dtype=float)
    if factor.ndim == 2:
        return factor.T @ matrix @ factor
    scale = np.sqrt(factor)
    return (scale[:, None] * matrix) * scale[None, :]


def _diagonal_in_coordinates(matrix, factor) -> np.ndarray:
    """Return the diagonal of :func:`in_coordinates`, O(D^2) for a diagonal ``factor``."""
    factor = np.asarray(factor, dtype=float)
    if factor.ndim == 2:
        return np.sum(factor * (matrix @ factor), axis=0)
    return np.diag(matrix) * factor


def measure_noise(
    probe: Probe, points, batch_size, rng, estimators, centre: Centre, config, full_batches=False
):
    """Return each estimator's gradient-noise covariance, averaged over ``points``.

    At each point, ``config.noise_batches`` minibatches drawn with
    replacement give independent gradient estimates (every estimator's on the
    same rows); the sample covariance of each half of them is the noise
    covariance there. Returns, per estimator, the two halves' covariances
    averaged over the points (see :meth:`Measurements.noise` for why two).
    With ``full_batches`` (every batch the chain draws holds all N rows, see
    :class:`Measurements`) the estimates are the full-data gradient, and the
    noise is zero without measuring it.
    """
    size = len(points[0])
    estimators = list(estimators)
    result = {name: np.zeros((2, size, size)) for name in estimators}
    if full_batches:
        return result
    stream = IndexStream(probe.n_rows, batch_size, replace=True)
    centre_inputs = centre.inputs()
    half = config.noise_batches // 2
    for point in points:
        # batches x estimators x coordinates
        gradients = np.asarray(
            [
                probe.gradients(estimators, point, rows, centre_inputs)
                for rows in stream.draw(rng, 2 * half)
            ]
        )
        for column, name in enumerate(estimators):
            samples = gradients[:, column]
            for index, part in enumerate((samples[:half], samples[half:])):
                # Gradients that overflowed give a covariance that is not
                # finite, which noise_at_draws reports; numpy need not warn.
                with np.errstate(invalid="ignore", over="ignore"):
                    covariance = np.atleast_2d(np.cov(part, rowvar=False))
                result[name][index] += covariance / len(points)
    return result


def noise_at_draws(
    probe: Probe, draws, batch_size, rng, estimators, centre: Centre, config, full_batches=False
):
    """Measure the gradient noise at up to ``config.noise_points`` of ``draws``, evenly spread.

    Returns the :class:`Measurements` fields (see :func:`noise_fields`).

    Raises
    ------
    RuntimeError
        Where the noise is not finite (the minibatch gradients overflow at
        some of the points).
    """
    chosen = np.linspace(0, len(draws) - 1, min(config.noise_points, len(draws))).astype(int)
    halves = measure_noise(
        probe, draws[chosen], batch_size, rng, estimators, centre, config, full_batches
    )
    if not all(np.all(np.isfinite(pair)) for pair in halves.values()):
        raise RuntimeError(
            "The gradient noise measured around the chain's position is not finite (the "
            "minibatch gradients overflow there); start from another initial point "
            "(initvals=...), or give step_size, preconditioner, control_variate=False and "
            "steps_per_draw to sample without adaptation."
        )
    return noise_fields(halves, len(chosen), config)


def noise_again(
    measurements: Measurements, probe: Probe, draws, rng, estimators, centre: Centre, config
) -> dict:
    """Measure the noise at ``draws`` as :func:`noise_at_draws` does, with the chain's batches.

    The batch size and whether batches hold every row come from ``measurements``;
    ``centre`` is the control variate's.
    """
    return noise_at_draws(
        probe,
        draws,
        measurements.batch_size,
        rng,
        estimators,
        centre,
        config,
        measurements.full_batches,
    )


def noise_fields(halves: dict, n_points: int, config: TuningConfig) -> dict:
    """Return the :class:`Measurements` fields holding what :func:`measure_noise` returned."""
    return {
        "noise_covariance": {name: pair.mean(axis=0) for name, pair in halves.items()},
        "noise_halves": halves,
        "noise_samples": n_points * 2 * (config.noise_batches // 2),
    }


def measure(
    probe: Probe,
    batch_size,
    rng,
    position,
    estimators=("minibatch",),
    config: TuningConfig | None = None,
    full_batches: bool = False,
) -> Measurements:
    """Find the mode and measure scale, curvatures and gradient noise around it.

    Parameters
    ----------
    probe : Probe
        Numerical access to the model's log density.
    batch_size : int
        Rows per minibatch.
    rng : numpy.random.Generator
        Generator of the minibatches, subsamples and measurement points (the
        chain's own).
    position : ndarray
        Where the search for the mode starts.
    estimators : sequence of {"minibatch", "control_variate"}
        Gradient estimators whose noise to measure.
    config : TuningConfig, optional
        The constants.
    full_batches : bool
        Whether every minibatch the chain will draw holds all N rows (see
        :class:`Measurements`).

    Returns
    -------
    Measurements
    """
    config = config or TuningConfig()
    mode, _, likelihood_gradient, hessian, distance = find_mode(
        probe, position, batch_size, rng, config
    )
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(mode))):
        raise RuntimeError(
            "The search for a posterior mode ended where the gradient is not finite; give "
            "step_size, preconditioner, control_variate=False and steps_per_draw to sample "
            "without adaptation, or start from a better initial point (initvals=...)."
        )
    if not distance <= config.mode_distance:
        return _measure_at_start(probe, position, batch_size, rng, estimators, config, full_batches)
    centre = probe.centre(mode, likelihood_gradient, "second_order" in estimators)
    return _around(probe, mode, centre, hessian, batch_size, rng, estimators, config, full_batches)


def _around(
    probe,
    point,
    centre,
    hessian,
    batch_size,
    rng,
    estimators,
    config,
    full_batches,
    at_start=False,
):
    """Return the Laplace picture of ``hessian`` at ``point`` and the noise at its draws."""
    log_concave, variance, factor = laplace(hessian)
    points = _laplace_draws(point, factor, rng, config.noise_points)
    return Measurements(
        point,
        centre,
        hessian,
        log_concave,
        variance,
        factor,
        batch_size=batch_size,
        at_start=at_start,
        full_batches=full_batches,
        row_work=row_work(probe, point, config),
        **noise_at_draws(probe, points, batch_size, rng, estimators, centre, config, full_batches),
    )


def row_work(probe: Probe, point, config: TuningConfig) -> float:
    """Return the multiply-adds of one row's share of a gradient at ``point``.

    A row costs its elementwise operations (:attr:`Probe.row_operations`:
    ``config.arithmetic_cost`` each for arithmetic, ``config.transcendental_cost``
    for exp, log and their kin) and two multiply-adds for each coordinate its
    gradient touches: every coordinate in a dense regression, a handful in a
    hierarchical model whose row reads one group's parameters. The touched
    coordinates are counted as the nonzero entries of single rows' gradients,
    on ``config.row_probes`` rows spread evenly over the data
    (:func:`~pymc_sgmcmc.tuning.mode.touched_coordinates`), so that the
    count, and with it the tuner's choice, is the same in every run.
    """
    arithmetic, others = probe.row_operations
    elementwise = config.arithmetic_cost * arithmetic + config.transcendental_cost * others
    return elementwise + 2.0 * touched_coordinates(probe, point, config)


def _laplace_draws(point, factor, rng, count: int) -> np.ndarray:
    """Return ``count`` draws (rows) of the Laplace picture ``point + factor z``."""
    return point + (factor @ rng.standard_normal((point.size, count))).T


def _measure_at_start(probe: Probe, position, batch_size, rng, estimators, config, full_batches):
    """Return measurements taken at the search's start, where the posterior has no mode.

    The Laplace picture is the one at ``position`` (diagonal where its
    Hessian is not negative definite), the control variate is centred there,
    and the gradient noise is measured at draws of that picture around it
    (at ``position`` alone the control variate would be exact). The chain
    starts at ``position`` and travels during its first tune window, to be
    measured again at its draws.
    """
    position = np.asarray(position, dtype=float)
    hessian = estimate_hessian(probe, position, rng, config)
    if not np.all(np.isfinite(hessian)):
        raise RuntimeError(
            "The posterior has no mode the search could find, and its curvature at the "
            "initial point is not finite; start from another initial point (initvals=...)."
        )
    centre = probe.centre(position, hessian="second_order" in estimators)
    return _around(
        probe,
        position,
        centre,
        hessian,
        batch_size,
        rng,
        estimators,
        config,
        full_batches,
        at_start=True,
    )


def linear_departure(probe: Probe, centre: Centre, points) -> float:
    """Return how far the likelihood's gradient departs from linear from the centre to ``points``.

    With ``H`` the full-data log-likelihood Hessian at the centre (held by
    ``centre``) and ``d = x - centre`` for each point ``x``, returns the median
    over the points of ``|g(x) - g(centre) - H d| / |H d|``, ``g`` the
    full-data log-likelihood gradient: the change in the likelihood's
    curvature across the points, relative to the curvature (one full pass
    over the data per point). Zero where the likelihood is quadratic, and
    infinite where its curvature vanishes (a piecewise-linear likelihood).
    """
    hessian = centre.likelihood_hessian
    departures = []
    for point in np.atleast_2d(points):
        _, gradient = probe.full_likelihood(point)
        linear = hessian @ (point - centre.position)
        remainder = np.linalg.norm(gradient - centre.likelihood_gradient - linear)
        scale = np.linalg.norm(linear)
        departures.append(remainder / scale if scale > 0 else np.inf)
    return float(np.median(departures))


def with_second_order(
    measurements: Measurements, probe: Probe, rng, config: TuningConfig
) -> tuple[Measurements, float]:
    """Return the measurements with the second-order control variate's noise, where it is sound.

    That estimator subtracts the minibatch's error in the curvature at the
    centre, which helps only where that curvature holds wherever the chain
    goes. The full-data Hessian is computed at the centre (D passes over the
    data, unless the centre holds it), and the estimator measured only where
    the Laplace picture is log-concave and, at ``config.noise_points`` of
    its draws, the likelihood's gradient is linear to within
    ``config.second_order_linearity`` (:func:`linear_departure`); its noise
    is measured at those draws. Elsewhere (a kinked likelihood, a
    non-centred hierarchical model's curved ridge) the measurements come
    back without it.

    Returns
    -------
    measurements : Measurements
    departure : float
        The gradient's departure from linear (infinite where it was not
        checked: off log-concave regions, at a start without a mode, or with
        exact gradients).
    """
    if not measurements.log_concave or measurements.at_start or measurements.full_batches:
        return measurements, np.inf
    centre = measurements.centre
    if centre.likelihood_hessian is None:
        centre = replace(centre, likelihood_hessian=probe.likelihood_hessian(centre.position))
    points = _laplace_draws(
        measurements.mode, measurements.laplace_factor, rng, config.noise_points
    )
    departure = linear_departure(probe, centre, points)
    if not departure <= config.second_order_linearity:
        return measurements, departure
    halves = measure_noise(
        probe, points, measurements.batch_size, rng, ["second_order"], centre, config
    )
    noise = noise_fields(halves, len(points), config)
    return (
        replace(
            measurements,
            centre=centre,
            noise_covariance={**measurements.noise_covariance, **noise["noise_covariance"]},
            noise_halves={**(measurements.noise_halves or {}), **noise["noise_halves"]},
        ),
        departure,
    )


def laplace(hessian, draw_variance=None):
    """Return whether ``hessian`` is negative definite, and the Laplace variances and factor.

    Off log-concave regions the variances are ``1 / |diag(hessian)|`` and the
    factor their diagonal square root. There a curvature near zero (a flat
    direction, e.g. a scale whose gradient vanishes) would claim a variance
    without bound; where draws were measured (``draw_variance``, positive
    entries only) the variance is at most theirs.
    """
    try:
        factor = np.linalg.cholesky(np.linalg.inv(-hessian))
        return True, np.sum(factor**2, axis=1), factor
    except np.linalg.LinAlgError:
        diagonal = np.abs(np.diag(hessian))
        variance = 1.0 / np.where(diagonal > 0, diagonal, 1.0)
        if draw_variance is not None:
            measured = np.asarray(draw_variance, dtype=float)
            variance = np.where(measured > 0, np.minimum(variance, measured), variance)
        return False, variance, np.diag(np.sqrt(variance))


def measure_at_draws(
    measurements: Measurements, probe: Probe, draws, rng, estimators, config: TuningConfig
) -> Measurements:
    """Return the measurements taken again around the mean of ``draws`` instead of the mode.

    The Hessian is estimated at the draws' mean, which becomes the centre of
    the Laplace picture (``mode``) and of the control variate, and the
    gradient noise is measured at up to ``config.noise_points`` of the draws.
    """
    draws = np.asarray(draws, dtype=float)
    middle = draws.mean(axis=0)
    hessian = estimate_hessian(probe, middle, rng, config, scale=hessian_sds(measurements.hessian))
    if not np.all(np.isfinite(hessian)):
        return measurements
    log_concave, variance, factor = laplace(hessian, draws.var(axis=0))
    centre = probe.centre(middle, hessian="second_order" in estimators)
    noise = noise_again(measurements, probe, draws, rng, estimators, centre, config)
    return replace(
        measurements,
        mode=middle,
        centre=centre,
        hessian=hessian,
        log_concave=log_concave,
        laplace_variance=variance,
        laplace_factor=factor,
        draw_covariance=None,
        at_start=False,
        **noise,
    )
