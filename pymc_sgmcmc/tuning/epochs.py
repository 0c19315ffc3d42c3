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

__all__ = [
    "EPOCH_MARGIN",
    "NEAR_ONE",
    "epoch_bound",
    "epoch_lag_sum",
    "epoch_steps",
    "noise_covariance",
]

EPOCH_MARGIN = 2.0
# Below this |log(eigenvalue)| E the closed form's cancellation costs half its digits.
NEAR_ONE = 1e-2


def epoch_steps(n_rows: int, batch_size: int) -> float:
    """Return the inner steps of one epoch, ``ceil(N / B)``.

    Batches that cross an epoch's end make the true period ``N / B``; the
    longer whole number is the conservative one, since the noise left by
    epochs grows with their length.
    """
    return float(-(-int(n_rows) // int(batch_size)))


def epoch_lag_sum(alpha, beta, epochs: float):
    r"""Return :math:`S(\alpha, \beta)`, unit noise summed over all pairs of lags.

    The closed form, geometric sums over an epoch, loses its digits where an
    eigenvalue is close to one: its terms of order :math:`E` cancel down to
    terms of order :math:`(1 - \lambda) E` squared. Where
    :math:`|\log \lambda|\, E` is below :data:`NEAR_ONE` the sum is taken
    term by term instead, over deviations :math:`\lambda^k - 1` that keep
    their digits (:func:`_lag_sum_by_terms`).

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
    alpha, beta = np.broadcast_arrays(
        np.asarray(alpha, dtype=complex), np.asarray(beta, dtype=complex)
    )
    product = alpha * beta
    if not np.isfinite(epochs):
        return 1.0 / (1.0 - product)
    if epochs < 2:
        raise ValueError(f"epochs must be at least 2 steps, got {epochs}.")
    length = float(epochs)
    with np.errstate(divide="ignore", invalid="ignore"):
        sums = _lag_sum_closed_form(alpha, beta, length)
        nearest = np.minimum(np.abs(np.log(alpha)), np.abs(np.log(beta))) * length
    near = (nearest < NEAR_ONE) & (alpha != 0) & (beta != 0)
    if np.any(near):
        sums = np.array(sums, dtype=complex)
        sums[near] = _lag_sum_by_terms(alpha[near], beta[near], int(length))
    return sums


def _lag_sum_closed_form(alpha, beta, length):
    """Return :func:`epoch_lag_sum` from geometric sums over an epoch."""
    product = alpha * beta

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


def _lag_sum_by_terms(alpha, beta, length):
    r"""Return :func:`epoch_lag_sum` for eigenvalues near one, term by term.

    An epoch's exchangeable noise is :math:`\sqrt{E / (E - 1)}` times
    independent unit noise less its epoch mean, so each epoch adds the
    centred cross products of its weights :math:`\alpha^k`, :math:`\beta^k`;
    centring leaves them unchanged by a shift, so the weights enter as
    :math:`\lambda^k - 1` (``expm1``), small numbers with all their digits.
    The current epoch's future steps have weight zero.
    """
    lags = np.arange(length, dtype=float)
    phases = lags  # steps of the current epoch taken so far
    scale = length / (length - 1.0)
    result = np.empty(alpha.shape, dtype=complex)
    for index, (first, second) in enumerate(zip(alpha, beta, strict=True)):
        first_deviation = np.expm1(lags * np.log(first))
        second_deviation = np.expm1(lags * np.log(second))
        cross = first_deviation * second_deviation
        # Every complete epoch: the same centred cross products, decayed by
        # (alpha beta)**E per epoch back and averaged over the phase.
        centred = cross.sum() - first_deviation.sum() * second_deviation.sum() / length
        # (no deviation, as where an eigenvalue is one, leaves nothing to decay)
        decay = -np.expm1(np.log(first) + np.log(second))
        complete = 0.0 if centred == 0 else scale * centred / decay
        # The current epoch after p steps (weights one plus the deviations
        # on its first p lags, zero on the rest), summed over p < E.
        first_sums = np.concatenate([[0.0], np.cumsum(first_deviation)[:-1]])
        second_sums = np.concatenate([[0.0], np.cumsum(second_deviation)[:-1]])
        cross_sums = np.concatenate([[0.0], np.cumsum(cross)[:-1]])
        remaining = 1.0 - phases / length
        current = scale * np.sum(
            phases * remaining
            + (first_sums + second_sums) * remaining
            + cross_sums
            - first_sums * second_sums / length
        )
        result[index] = (complete + current) / length
    return result


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
