"""Likelihoods with kinks: curvature from the information identity.

A likelihood built from ``abs``, ``maximum`` or ``switch`` (Laplace or
quantile regression, hinge losses) is piecewise smooth: between its kinks it
has no curvature, and all of it sits at the kinks. The Hessian that
:func:`~pymc_sgmcmc.tuning.mode.estimate_hessian` differences over 1e-3
posterior sd sees zero, one or two kinks of some coordinates and comes out
near zero (the Laplace picture is then the prior's) or far too large. Over
the posterior's own scale the kinks average into a smooth curvature, which
the information identity gives without differencing: N times the covariance
of one row's log-likelihood gradient equals the likelihood's curvature, in
expectation at the true parameter of a well-specified model.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.tuning.config import TuningConfig

__all__ = ["differences_disagree", "likelihood_information", "with_information"]


def likelihood_information(probe: Probe, position, rng, batches: int, batch_size: int):
    """Return N times the covariance of one row's log-likelihood gradient at ``position``.

    Estimated from ``batches`` minibatches of ``batch_size`` rows drawn with
    replacement: the covariance of their likelihood gradients (each scaled to
    N rows) is ``N^2 / batch_size`` times the rows'.
    """
    stream = IndexStream(probe.n_rows, batch_size, replace=True)
    gradients = np.array([probe.terms(position, rows)[3] for rows in stream.draw(rng, batches)])
    return np.atleast_2d(np.cov(gradients, rowvar=False)) * batch_size / probe.n_rows


def _child(rng):
    """Return a generator for the check that leaves ``rng``'s own stream as it was."""
    try:
        return rng.spawn(1)[0]
    except (AttributeError, TypeError, ValueError):
        return rng


def _directions(scale, rng, config: TuningConfig):
    """Return the directions checked, as columns scaled by the sds ``scale``.

    The coordinate axes for up to ``config.kink_coordinates`` coordinates,
    beyond that ``config.kink_directions`` random sign vectors of unit length
    in sds (a coarse step along one moves the position 0.1 sd, not
    ``0.1 sqrt(D)``).
    """
    size = len(scale)
    if size <= config.kink_coordinates:
        return np.diag(scale)
    signs = rng.choice([-1.0, 1.0], size=(size, config.kink_directions))
    return signs * scale[:, None] / np.sqrt(size)


def differences_disagree(fine, coarse, config: TuningConfig, information=0.0):
    """Return where a curvature differenced finely and one over ``config.kink_step`` disagree.

    They disagree by more than ``config.kink_tolerance`` times the coarse one
    plus ``information`` (the information identity's curvature, where it was
    estimated): a smooth log density's curvature changes little over a tenth
    of an sd, so there the fine difference straddled a kink.
    """
    fine, coarse = np.asarray(fine), np.asarray(coarse)
    return np.abs(fine - coarse) > config.kink_tolerance * (np.abs(coarse) + information)


def with_information(
    probe: Probe, position, indices, scale, hessian, prior_hessian, rng, config: TuningConfig
):
    """Return ``hessian`` or the prior's Hessian minus the likelihood's information, and which.

    Along each checked direction ``w`` (:func:`_directions`, in sds
    ``scale``) three curvatures of the likelihood are compared: the one of
    ``hessian - prior_hessian`` (differenced over 1e-3 sd on ``indices``),
    one differenced over ``config.kink_step`` sd on the same rows, and the
    information ``w' F w``. The likelihood has kinks along ``w`` where the
    two differences disagree by more than ``config.kink_tolerance`` times
    the coarse one plus the information (a smooth log density's curvature
    changes little over 0.1 sd). Then the Hessian returned is
    ``prior_hessian - F``, with ``F`` estimated from ``16 D`` (at least
    256) minibatches, so that sampling error spreads its eigenvalues by less
    than a factor 1.6 (Marchenko-Pastur): Fisher scoring in the mode search,
    and the Laplace picture at its end. The second value returned says
    whether the likelihood was found kinked.

    The information identity fails for parameters fitted to few rows (at the
    mode a group's residuals shrink towards its intercept), so it only
    replaces a Hessian whose differences are found unreliable, never a
    smooth one. The prior's own kinks are taken out of ``prior_hessian``
    first (:func:`_without_prior_kinks`); they do not count as the
    likelihood's.
    """
    likelihood = prior_hessian - hessian
    prior_hessian, prior_kinked = _without_prior_kinks(
        probe, position, scale, prior_hessian, np.diag(likelihood), config
    )
    generator = _child(rng)
    directions = _directions(np.asarray(scale, dtype=float), generator, config)
    fine = np.einsum("ik,ij,jk->k", directions, likelihood, directions)
    step = config.kink_step
    coarse = np.empty(directions.shape[1])
    for k, direction in enumerate(directions.T):
        forward = probe.terms(position + step * direction, indices)[3]
        backward = probe.terms(position - step * direction, indices)[3]
        coarse[k] = (backward - forward) @ direction / (2.0 * step)
    batch_size = min(probe.n_rows, config.information_batch_size)
    information = likelihood_information(
        probe, position, generator, config.information_batches, batch_size
    )
    along = np.einsum("ik,ij,jk->k", directions, information, directions)
    if not np.any(differences_disagree(fine, coarse, config, along)):
        return (prior_hessian - likelihood if prior_kinked else hessian), False
    batches = max(16 * len(position), 4 * config.information_batches)
    information = likelihood_information(probe, position, generator, batches, batch_size)
    return prior_hessian - information, True


def _without_prior_kinks(probe: Probe, position, scale, prior_hessian, likelihood, config):
    """Return the prior's Hessian without the curvature of its kinks, and whether it had any.

    A prior with a kink (``pm.Laplace``, a Bayesian lasso) has no curvature
    beside it and a spike at it, and its mode often sits exactly there. A
    difference across a kink is inversely proportional to its step, so the
    prior's curvature along each coordinate is differenced again with twice
    the Hessian's step (2e-3 sd; a smooth prior's curvature does not change
    on that scale, even where ``scale`` overstates the sd many times, as in
    a funnel). Where the doubled step's curvature is half the first one's
    (both crossed the kink) or the first one is zero (only the doubled one
    did), and it is not small beside the likelihood's curvature
    ``likelihood``, that coordinate's row and column of the prior's Hessian
    are set to zero, its value between the kinks: the Laplace picture is
    then the likelihood's there, wider than the posterior (the tune windows
    narrow it), not a spike's thousand times narrower. Each coordinate takes
    two evaluations of the prior (on one row).
    """
    one_row = np.arange(1)
    doubled = np.empty(len(position))
    for j, sd in enumerate(np.asarray(scale, dtype=float)):
        offset = np.zeros_like(position)
        offset[j] = 2e-3 * sd
        forward = probe.terms(position + offset, one_row)[1][j]
        backward = probe.terms(position - offset, one_row)[1][j]
        doubled[j] = (backward - forward) / (2.0 * offset[j])
    fine = -np.diag(prior_hessian)
    large = np.abs(doubled) > config.kink_tolerance * np.abs(likelihood)
    with np.errstate(divide="ignore", invalid="ignore"):
        halved = np.abs(doubled / fine - 0.5) < config.kink_tolerance / 2
    kinked = large & (halved | (fine == 0))
    if not np.any(kinked):
        return prior_hessian, False
    smooth = np.where(kinked, 0.0, 1.0)
    return prior_hessian * smooth[:, None] * smooth[None, :], True
