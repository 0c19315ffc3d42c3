"""What a chain measures before it samples: mode, scale, gradient noise.

At the start of sampling (during ``tune``), :func:`find_mode` locates a mode
of the posterior, first by Adam on minibatch gradients, then (on large data)
by Newton steps on a subsample, and finally by damped Newton steps with
full-data gradients summed in chunks, all with a Hessian estimated from a
large minibatch (all rows when that is cheap). :func:`measure` then estimates, around that
mode, the quantities the step-size rules of :mod:`pymc_sgmcmc.tuning` need:
the posterior scale (the diagonal preconditioner), the range of curvatures in
preconditioned coordinates, and the variance of each gradient estimator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Centre, Probe
from pymc_sgmcmc.tuning.config import TuningConfig

__all__ = [
    "Measurements",
    "find_mode",
    "laplace",
    "measure",
    "measure_at_draws",
    "measure_noise",
    "noise_at_draws",
    "noise_fields",
]

_log = logging.getLogger("pymc")


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
    at_start : bool
        Whether the search found no mode, so that ``mode`` is where it
        started and the picture is the one there (see :func:`measure`),
        until the chain's draws replace it.
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
    at_start: bool = False

    def curvatures(self, factor) -> tuple[float, float]:
        """Return the smallest and largest curvature in the coordinates ``theta = A z``.

        ``factor`` is ``A`` (a matrix), or a diagonal preconditioner ``P``
        (a vector, ``A = diag(sqrt(P))``). The range spans the Hessian at the
        mode and, once tune draws have been used, the inverse variances of
        the draws' covariance in those coordinates.
        """
        factor = _as_factor(factor)
        values = np.linalg.eigvalsh(-factor.T @ self.hessian @ factor)
        if self.draw_covariance is not None:
            inverse = np.linalg.inv(factor)
            variances = np.linalg.eigvalsh(inverse @ self.draw_covariance @ inverse.T)
            values = np.concatenate([values, 1.0 / variances])
        positive = values[values > 0]
        if positive.size == 0:
            return 1.0, 1.0
        return float(positive.min()), float(values.max())

    def noise(self, estimator: str, factor) -> float:
        """Return the largest noise variance of ``estimator`` in the coordinates of ``factor``.

        With ``n`` gradient samples in ``D`` dimensions the largest eigenvalue
        of a sample covariance overstates the true one by up to
        ``(1 + sqrt(D / n))^2``, the Marchenko-Pastur edge. Where D exceeds
        ``n / 16`` (an overstatement above 1.5x) the directions of largest
        noise are found on one half of the samples and their variance measured
        on the other (and the other way round), which is unbiased for the
        directions found; the largest diagonal entry bounds it from below.
        """
        factor = _as_factor(factor)
        covariance = factor.T @ self.noise_covariance[estimator] @ factor
        halves = None if self.noise_halves is None else self.noise_halves.get(estimator)
        if halves is None or 16 * covariance.shape[0] <= self.noise_samples:
            return float(np.linalg.eigvalsh(covariance).max())
        first, second = (factor.T @ half @ factor for half in halves)
        largest = float(np.max(np.diag(covariance)))
        for find, check in ((first, second), (second, first)):
            _, vectors = np.linalg.eigh(find)
            top = vectors[:, -5:]
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
        factor = _as_factor(factor)
        curvature = np.diag(-factor.T @ self.hessian @ factor)
        curvature = np.maximum(curvature, self.curvatures(factor)[0])
        noise = np.diag(factor.T @ self.noise_covariance[estimator] @ factor)
        return temperature * curvature + np.maximum(noise, 0.0)


def _as_factor(factor) -> np.ndarray:
    factor = np.asarray(factor, dtype=float)
    return np.diag(np.sqrt(factor)) if factor.ndim == 1 else factor


def _adam(probe: Probe, position, batches: IndexStream, rng, n_steps, rate):
    """Climb the log density with Adam on minibatch gradients."""
    first = np.zeros_like(position)
    second = np.zeros_like(position)
    indices = batches.draw(rng, n_steps)
    for t in range(1, n_steps + 1):
        gradient = probe.minibatch_gradient(position, indices[t - 1])
        if not np.all(np.isfinite(gradient)):
            break
        first = 0.9 * first + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        corrected = (first / (1 - 0.9**t)) / (np.sqrt(second / (1 - 0.999**t)) + 1e-12)
        position = position + rate / np.sqrt(1.0 + t / 100.0) * corrected
    return position


def _hessian_rows(probe: Probe, size: int, rng, config: TuningConfig, search: bool):
    """Return the rows a Hessian is estimated on, or ``None`` for all rows.

    All rows are used while their number times D stays within
    ``config.hessian_full_work`` (a subsample would miss the rows of small
    groups); otherwise ``config.hessian_rows`` rows drawn at random, or
    ``config.hessian_rows_per_coordinate`` per coordinate if that is more (a
    model with a parameter per group needs rows of every group). A Hessian
    that only sets the directions of the Newton search (``search``) uses
    that subsample wherever N is at least four times its size: an error of a
    few percent there costs a Newton step at most, while a pass over all
    rows costs 2D full gradients.
    """
    n_rows = probe.n_rows
    rows = max(config.hessian_rows, config.hessian_rows_per_coordinate * size)
    if n_rows <= rows:
        return None
    if n_rows * size <= config.hessian_full_work and not (search and n_rows >= 4 * rows):
        return None
    return rng.choice(n_rows, rows, replace=False)


def _hessian(probe: Probe, position, rng, config: TuningConfig, search=False, scale=None):
    """Estimate the Hessian of the log posterior on all rows, or on one large minibatch.

    The rows are chosen by :func:`_hessian_rows`. The differencing steps are
    1e-3 of each coordinate's sd, taken from ``scale`` (the sds a previous
    Hessian implied) or else from a first pass with unit-scale steps.
    """
    rows = _hessian_rows(probe, position.size, rng, config, search)
    indices = np.arange(probe.n_rows) if rows is None else rows
    if scale is None:
        scale = _scale(probe.hessian(position, indices, np.full(position.size, 1e-4)))
    return probe.hessian(position, indices, 1e-3 * scale)


def _scale(hessian):
    """Return the sds implied by the diagonal of ``hessian`` (1 where it is not negative)."""
    curvature = np.abs(np.diag(hessian))
    return 1.0 / np.sqrt(np.where(curvature > 0, curvature, 1.0))


def _newton_direction(hessian, gradient):
    """Return the Newton step, or a diagonally scaled gradient step off log-concave regions."""
    try:
        np.linalg.cholesky(-hessian)
        return np.linalg.solve(-hessian, gradient), True
    except np.linalg.LinAlgError:
        scale = np.abs(np.diag(hessian))
        scale = np.where(scale > 0, scale, 1.0)
        return gradient / scale, False


def _newton(evaluate, position, hessian, max_steps, tolerance, refresh=None):
    """Climb ``evaluate`` by damped Newton steps.

    ``evaluate(position)`` returns ``(log_density, gradient, extra)``. The
    Hessian stays fixed while full Newton steps succeed; where a step had to
    be damped, or the Hessian is not negative definite, ``refresh(position)``
    (if given) estimates it again at the new position, since the quadratic
    picture failed there. Stops when the Newton decrement (squared distance
    to the mode in posterior sds) falls below ``tolerance``. Returns the
    final position, its evaluation, the Hessian and whether it moved.
    """
    current = evaluate(position)
    moved = False
    for _ in range(max_steps):
        direction, concave = _newton_direction(hessian, current[1])
        if concave and current[1] @ direction < tolerance:
            break
        step = 1.0
        while step > 1e-6:
            candidate = position + step * direction
            evaluated = evaluate(candidate)
            if np.isfinite(evaluated[0]) and evaluated[0] >= current[0]:
                break
            step /= 2.0
        else:
            break
        position, current, moved = candidate, evaluated, True
        if refresh is not None and (step < 1.0 or not concave):
            hessian = refresh(position)
    return position, current, hessian, moved


def find_mode(probe: Probe, position, batch_size, rng, config: TuningConfig | None = None):
    """Find a posterior mode.

    Adam on minibatch gradients comes first. On more than four times
    ``config.subsample_rows`` rows, Newton steps on the likelihood of one
    random subsample of that many rows (scaled to N) come next, which brings
    the position to within a few sds of the mode at a fraction of a full pass
    per step. Newton steps with full-data gradients finish, until the
    position is within about 0.01 posterior sd of the mode.

    Parameters
    ----------
    probe : Probe
        Numerical access to the model's log density.
    position : ndarray
        Where to start.
    batch_size : int
        Rows per minibatch for the Adam stage.
    rng : numpy.random.Generator
        Generator of the minibatches and subsamples.
    config : TuningConfig, optional
        The constants (step counts, rows, tolerance).

    Returns
    -------
    mode, log_density, likelihood_gradient, hessian : ndarray, float, ndarray, ndarray
        The mode, the full log density and log-likelihood gradient there, and
        the Hessian there.
    distance : float
        Squared distance, in posterior sds of the quadratic picture there,
        from the end of the search to a stationary point: near 0 at a mode,
        large where the log density rises without bound (the search then
        ends where its steps stop, e.g. deep in a funnel's neck).
    """
    config = config or TuningConfig()
    position = _adam(
        probe,
        np.array(position, dtype=float),
        IndexStream(probe.n_rows, batch_size),
        rng,
        config.adam_steps,
        config.adam_rate,
    )
    hessian = _hessian(probe, position, rng, config, search=True)
    if probe.n_rows > 4 * config.subsample_rows:
        rows = np.sort(rng.choice(probe.n_rows, config.subsample_rows, replace=False))

        def on_subsample(point):
            log_prior, prior_gradient, log_likelihood, likelihood_gradient = probe.terms(
                point, rows
            )
            return log_prior + log_likelihood, prior_gradient + likelihood_gradient, None

        position, _, _, moved = _newton(
            on_subsample, position, hessian, config.newton_steps, config.newton_tolerance
        )
        if moved:
            hessian = _hessian(probe, position, rng, config, search=True)

    def refresh(point):
        return _hessian(probe, point, rng, config, search=True)

    position, (log_density, gradient, likelihood_gradient), hessian, _ = _newton(
        probe.full, position, hessian, config.newton_steps, config.newton_tolerance, refresh
    )
    # The search's Hessian set directions only; the one at the mode is
    # estimated on the final rows, with steps scaled by the search's.
    hessian = _hessian(probe, position, rng, config, scale=_scale(hessian))
    return position, log_density, likelihood_gradient, hessian, _distance(hessian, gradient)


def _distance(hessian, gradient) -> float:
    """Return the squared distance, in local posterior sds, from a stationary point.

    The Newton decrement where ``hessian`` is negative definite, otherwise its
    diagonal analogue ``sum(g_i^2 / |H_ii|)``; infinite where either is not finite.
    """
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(gradient))):
        return np.inf
    direction, concave = _newton_direction(hessian, gradient)
    if concave:
        return float(gradient @ direction)
    curvature = np.abs(np.diag(hessian))
    return float(np.sum(gradient**2 / np.where(curvature > 0, curvature, np.inf)))


def measure_noise(probe: Probe, points, batch_size, rng, estimators, centre: Centre, config):
    """Return each estimator's gradient-noise covariance, averaged over ``points``.

    At each point, ``config.noise_batches`` minibatches drawn with
    replacement give independent gradient estimates (every estimator's on the
    same rows); the sample covariance of each half of them is the noise
    covariance there. Returns, per estimator, the two halves' covariances
    averaged over the points (see :meth:`Measurements.noise` for why two).
    """
    stream = IndexStream(probe.n_rows, batch_size, replace=True)
    centre_inputs = centre.inputs()
    size = len(points[0])
    half = config.noise_batches // 2
    estimators = list(estimators)
    result = {name: np.zeros((2, size, size)) for name in estimators}
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
                result[name][index] += np.atleast_2d(np.cov(part, rowvar=False)) / len(points)
    return result


def noise_at_draws(probe: Probe, draws, batch_size, rng, estimators, centre: Centre, config):
    """Measure the gradient noise at up to ``config.noise_points`` of ``draws``, evenly spread.

    Returns the :class:`Measurements` fields (see :func:`noise_fields`).

    Raises
    ------
    RuntimeError
        Where the noise is not finite (the minibatch gradients overflow at
        some of the points).
    """
    chosen = np.linspace(0, len(draws) - 1, min(config.noise_points, len(draws))).astype(int)
    halves = measure_noise(probe, draws[chosen], batch_size, rng, estimators, centre, config)
    if not all(np.all(np.isfinite(pair)) for pair in halves.values()):
        raise RuntimeError(
            "The gradient noise measured around the chain's position is not finite (the "
            "minibatch gradients overflow there); start from another initial point "
            "(initvals=...), or give step_size, preconditioner, control_variate=False and "
            "steps_per_draw to sample without adaptation."
        )
    return noise_fields(halves, len(chosen), config)


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
        return _measure_at_start(probe, position, batch_size, rng, estimators, config)
    centre = probe.centre(mode, likelihood_gradient)
    log_concave, variance, factor = laplace(hessian)
    points = mode + (factor @ rng.standard_normal((mode.size, config.noise_points))).T
    return Measurements(
        mode,
        centre,
        hessian,
        log_concave,
        variance,
        factor,
        batch_size=batch_size,
        **noise_at_draws(probe, points, batch_size, rng, estimators, centre, config),
    )


def _measure_at_start(probe: Probe, position, batch_size, rng, estimators, config):
    """Return measurements taken at the search's start, where the posterior has no mode.

    The Laplace picture is the one at ``position`` (diagonal where its
    Hessian is not negative definite), the control variate is centred there,
    and the gradient noise is measured at draws of that picture around it
    (at ``position`` alone the control variate would be exact). The chain
    starts at ``position`` and travels during its first tune window, to be
    measured again at its draws.
    """
    position = np.asarray(position, dtype=float)
    hessian = _hessian(probe, position, rng, config)
    if not np.all(np.isfinite(hessian)):
        raise RuntimeError(
            "The posterior has no mode the search could find, and its curvature at the "
            "initial point is not finite; start from another initial point (initvals=...)."
        )
    centre = probe.centre(position)
    log_concave, variance, factor = laplace(hessian)
    points = position + (factor @ rng.standard_normal((position.size, config.noise_points))).T
    return Measurements(
        position,
        centre,
        hessian,
        log_concave,
        variance,
        factor,
        batch_size=batch_size,
        at_start=True,
        **noise_at_draws(probe, points, batch_size, rng, estimators, centre, config),
    )


def laplace(hessian):
    """Return whether ``hessian`` is negative definite, and the Laplace variances and factor.

    Off log-concave regions the variances are ``1 / |diag(hessian)|`` and the
    factor their diagonal square root.
    """
    try:
        factor = np.linalg.cholesky(np.linalg.inv(-hessian))
        return True, np.sum(factor**2, axis=1), factor
    except np.linalg.LinAlgError:
        diagonal = np.abs(np.diag(hessian))
        variance = 1.0 / np.where(diagonal > 0, diagonal, 1.0)
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
    hessian = _hessian(probe, middle, rng, config, scale=_scale(measurements.hessian))
    if not np.all(np.isfinite(hessian)):
        return measurements
    log_concave, variance, factor = laplace(hessian)
    centre = probe.centre(middle)
    noise = noise_at_draws(probe, draws, measurements.batch_size, rng, estimators, centre, config)
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
