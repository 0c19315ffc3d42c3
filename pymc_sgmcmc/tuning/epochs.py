r"""Gradient noise that sums to zero over an epoch.

Minibatches drawn without replacement visit every row once per epoch of
:math:`E = \lceil N / B \rceil` inner steps, so at a fixed position the
minibatch estimates of one epoch average to the full-data gradient: their
noise terms sum to zero. Within an epoch the terms are exchangeable, with
variance :math:`v` and covariance :math:`-v / (E - 1)`; terms of different
epochs are independent.

A sampler that is linear in its state on a Gaussian target,
:math:`z_{t+1} = T z_t + q\, n_t + \ldots`, holds the noise as
:math:`\sum_k T^k q\, n_{t-k}`. With :math:`T = V \operatorname{diag}(\lambda)
V^{-1}` and :math:`r = V^{-1} q`, its covariance is :math:`V W V^\top` with
:math:`W_{ij} = v\, r_i r_j\, S(\lambda_i, \lambda_j)`, where
:math:`S(\alpha, \beta) = \sum_{k, l} c_{kl}\, \alpha^k \beta^l` sums the
noise's correlations :math:`c_{kl}` over all pairs of lags, averaged over the
position of the current step within its epoch (draws are recorded at every
position). Independent noise gives :math:`S = 1 / (1 - \alpha \beta)`.

Where an epoch is much shorter than the chain's relaxation time the slow
directions barely move within it and see the epoch's noise cancel: the
variance inflation falls by about the chain's mean square move within an
epoch, in units of the posterior variance (:math:`\eta E / 3` for SGLD and
:math:`\eta^2 E^2 / 12` for critically damped SGHMC, in whitened coordinates).

That holds for noise that does not change with the position. Noise that
does, such as the minibatch's error in the curvature (all of the control
variate's noise, :math:`(\hat H - H)(\theta - \hat\theta)` near its
centre), cancels over an epoch only in the sum of the curvature errors, and
the chain is then contracted by the epoch's mean curvature plus a positive
second-order term: it **narrows** the stationary variance by about as much as
independent noise of the same size would widen it. :func:`epoch_bound`
therefore bounds the magnitude of the inflation by the larger of the two:
the position-independent part as epochs leave it (counted
:data:`EPOCH_MARGIN` times, since that part is measured as the difference of
two estimators' noise) and the position-dependent part as independent noise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EPOCH_MARGIN", "epoch_bound", "epoch_lag_sum", "epoch_steps", "noise_covariance"]

EPOCH_MARGIN = 2.0


def epoch_steps(n_rows: int, batch_size: int) -> float:
    """Return the inner steps of one epoch, ``ceil(N / B)``.

    Batches that cross an epoch's end make the true period ``N / B``; the
    longer whole number is the conservative one, since the noise left by
    epochs grows with their length.
    """
    return float(-(-int(n_rows) // int(batch_size)))


def epoch_lag_sum(alpha, beta, epochs: float):
    r"""Return :math:`S(\alpha, \beta)`, unit noise summed over all pairs of lags.

    Parameters
    ----------
    alpha, beta : complex array_like
        Eigenvalues of the recursion, inside the unit circle (broadcast together).
    epochs : float
        Steps per epoch, a whole number at least 2, or ``inf`` for independent noise.

    Returns
    -------
    complex ndarray
    """
    alpha = np.asarray(alpha, dtype=complex)
    beta = np.asarray(beta, dtype=complex)
    product = alpha * beta
    if not np.isfinite(epochs):
        return 1.0 / (1.0 - product)
    if epochs < 2:
        raise ValueError(f"epochs must be at least 2 steps, got {epochs}.")
    length = float(epochs)

    def partial_sum(ratio):
        # sum of ratio**k for k < E, accurate where ratio is close to one
        # (a zero eigenvalue, from a step that stops the momentum, sums to one)
        zero = ratio == 0
        safe = np.where(zero, 0.5, ratio)
        return np.where(zero, 1.0, -np.expm1(length * np.log(safe)) / (1.0 - safe))

    both, first, second = partial_sum(product), partial_sum(alpha), partial_sum(beta)
    weight = length / (length - 1.0)
    # The lags of an earlier, complete epoch: variance on the diagonal, the
    # negative covariance between every other pair of its steps.
    complete = (weight * both - first * second / (length - 1.0)) / (1.0 - product)
    # The current epoch's steps so far (p of them), averaged over p < E.
    current = weight * (length - both) / (1.0 - product) - (length - first - second + both) / (
        (length - 1.0) * (1.0 - alpha) * (1.0 - beta)
    )
    return (complete + current) / length


def noise_covariance(transition, shock, epochs: float = np.inf):
    """Return the stationary covariance a unit-variance noise leaves in a linear recursion.

    Parameters
    ----------
    transition : ndarray, shape (..., n, n)
        The recursion's matrices, spectral radius below one.
    shock : ndarray, shape (..., n)
        How one noise term enters the state.
    epochs : float, default inf
        Steps per epoch (see :func:`epoch_lag_sum`).

    Returns
    -------
    ndarray, shape (..., n, n)
    """
    eigenvalues, vectors = np.linalg.eig(np.asarray(transition, dtype=float))
    loadings = np.linalg.solve(vectors, np.asarray(shock, dtype=complex)[..., None])[..., 0]
    sums = epoch_lag_sum(eigenvalues[..., :, None], eigenvalues[..., None, :], epochs)
    weights = loadings[..., :, None] * loadings[..., None, :] * sums
    return np.real(vectors @ weights @ np.swapaxes(vectors, -1, -2))


def epoch_bound(independent_fixed, epoch_fixed, independent_position):
    """Return the magnitude of the noise's inflation counted on epochs.

    Parameters
    ----------
    independent_fixed, epoch_fixed : array_like
        The inflation by the position-independent noise as independent
        noise and on epochs.
    independent_position : array_like
        The inflation independent noise of the position-dependent part's
        size would give; on epochs that part narrows the variance about as much.
    """
    fixed = np.minimum(independent_fixed, EPOCH_MARGIN * np.maximum(epoch_fixed, 0.0))
    return np.maximum(fixed, independent_position)
