"""What a chain measures before it samples: mode, scale, gradient noise.

At the start of every chain (during ``tune``), :func:`find_mode` locates a mode
of the posterior, first by Adam on minibatch gradients and then by damped
Newton steps with full-data gradients summed in chunks and a Hessian
estimated from a large minibatch. :func:`measure` then estimates, around that
mode, the quantities the step-size rules of :mod:`pymc_sgmcmc.tuning` need:
the posterior scale (the diagonal preconditioner), the range of curvatures in
preconditioned coordinates, and the variance of each gradient estimator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import DataProbe

__all__ = ["Measurements", "find_mode", "measure"]

_log = logging.getLogger("pymc")


@dataclass
class Measurements:
    """Quantities measured around the mode of one chain.

    Attributes
    ----------
    mode : ndarray
        The mode found (also the control-variate centre).
    mode_likelihood_gradient : ndarray
        Full-data log-likelihood gradient at the mode.
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
    """

    mode: np.ndarray
    mode_likelihood_gradient: np.ndarray
    hessian: np.ndarray
    log_concave: bool
    laplace_variance: np.ndarray
    laplace_factor: np.ndarray
    noise_covariance: dict

    def curvatures(self, preconditioner) -> tuple[float, float]:
        """Return the smallest and largest curvature in coordinates scaled by ``preconditioner``."""
        scale = np.sqrt(preconditioner)
        values = np.linalg.eigvalsh(-scale[:, None] * self.hessian * scale[None, :])
        positive = values[values > 0]
        if positive.size == 0:
            return 1.0, 1.0
        return float(positive.min()), float(values.max())

    def noise(self, estimator: str, preconditioner) -> float:
        """Return the largest noise variance of ``estimator`` in scaled coordinates."""
        scale = np.sqrt(preconditioner)
        covariance = scale[:, None] * self.noise_covariance[estimator] * scale[None, :]
        return float(np.linalg.eigvalsh(covariance).max())


def _adam(probe: DataProbe, position, batches: IndexStream, rng, n_steps=1500, rate=0.05):
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


def _hessian(probe: DataProbe, position, rng, rows=4096):
    """Estimate the Hessian of the log posterior from one large minibatch.

    A first pass with unit-scale differencing steps gives the curvature of
    each coordinate; the second uses steps of 1e-3 of the implied sd.
    """
    n_rows = probe.n_rows
    indices = np.arange(n_rows) if n_rows <= rows else rng.choice(n_rows, rows, replace=False)
    rough = probe.hessian(position, indices, np.full(position.size, 1e-4))
    curvature = np.abs(np.diag(rough))
    scale = 1.0 / np.sqrt(np.where(curvature > 0, curvature, 1.0))
    return probe.hessian(position, indices, 1e-3 * scale)


def _newton_direction(hessian, gradient):
    """Return the Newton step, or a diagonally scaled gradient step off log-concave regions."""
    try:
        np.linalg.cholesky(-hessian)
        return np.linalg.solve(-hessian, gradient), True
    except np.linalg.LinAlgError:
        scale = np.abs(np.diag(hessian))
        scale = np.where(scale > 0, scale, 1.0)
        return gradient / scale, False


def find_mode(probe: DataProbe, position, batch_size, rng, max_newton_steps=20):
    """Find a posterior mode.

    Parameters
    ----------
    probe : DataProbe
        Numerical access to the model's log density.
    position : ndarray
        Where to start.
    batch_size : int
        Rows per minibatch for the Adam stage.
    rng : numpy.random.Generator
        The chain's generator.
    max_newton_steps : int, default 20
        Most Newton steps after Adam.

    Returns
    -------
    mode, log_density, likelihood_gradient, hessian : ndarray, float, ndarray, ndarray
        The mode, the full log density and log-likelihood gradient there, and
        the Hessian there. The Newton steps reuse the Hessian estimated after
        the Adam stage.
    """
    position = _adam(
        probe, np.array(position, dtype=float), IndexStream(probe.n_rows, batch_size), rng
    )
    log_density, gradient, likelihood_gradient = probe.full(position)
    hessian = _hessian(probe, position, rng)
    moved = False
    for _ in range(max_newton_steps):
        direction, _ = _newton_direction(hessian, gradient)
        if gradient @ direction < 1e-8 * position.size:
            break
        step = 1.0
        while step > 1e-6:
            candidate = position + step * direction
            candidate_full = probe.full(candidate)
            if np.isfinite(candidate_full[0]) and candidate_full[0] >= log_density:
                break
            step /= 2.0
        else:
            break
        position = candidate
        log_density, gradient, likelihood_gradient = candidate_full
        moved = True
    if moved:
        hessian = _hessian(probe, position, rng)
    return position, log_density, likelihood_gradient, hessian


def measure(probe: DataProbe, batch_size, rng, position, estimators=("minibatch",)) -> Measurements:
    """Find the mode and measure scale, curvatures and gradient noise around it.

    Parameters
    ----------
    probe : DataProbe
        Numerical access to the model's log density.
    batch_size : int
        Rows per minibatch.
    rng : numpy.random.Generator
        The chain's generator.
    position : ndarray
        Where the search for the mode starts.
    estimators : sequence of {"minibatch", "control_variate"}
        Gradient estimators whose noise to measure.

    Returns
    -------
    Measurements
    """
    mode, _, likelihood_gradient, hessian = find_mode(probe, position, batch_size, rng)
    try:
        factor = np.linalg.cholesky(np.linalg.inv(-hessian))
        log_concave = True
        variance = np.sum(factor**2, axis=1)
    except np.linalg.LinAlgError:
        log_concave = False
        diagonal = np.abs(np.diag(hessian))
        variance = 1.0 / np.where(diagonal > 0, diagonal, 1.0)
        factor = np.diag(np.sqrt(variance))
    points = mode + (factor @ rng.standard_normal((mode.size, 8))).T
    stream = IndexStream(probe.n_rows, batch_size, replace=True)
    noise_covariance = {}
    for name in estimators:
        covariance = np.zeros((mode.size, mode.size))
        for point in points:
            indices = stream.draw(rng, 32)
            if name == "minibatch":
                gradients = [probe.minibatch_gradient(point, rows) for rows in indices]
            else:
                gradients = [
                    probe.control_variate_gradient(point, rows, mode, likelihood_gradient)
                    for rows in indices
                ]
            covariance += np.atleast_2d(np.cov(np.asarray(gradients), rowvar=False)) / len(points)
        noise_covariance[name] = covariance
    return Measurements(
        mode, likelihood_gradient, hessian, log_concave, variance, factor, noise_covariance
    )
