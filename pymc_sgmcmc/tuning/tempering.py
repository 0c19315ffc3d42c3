r"""How far the bias budget's variance inflation moves the posterior means.

The step-size rules keep a chain's predicted variance inflation within the
bias budget :math:`\varepsilon`. To first order a chain whose variance is
inflated by :math:`\varepsilon` samples the posterior tempered to
:math:`p^{1/(1+\varepsilon)}`, and tempering moves every mean by

.. math::

    \frac{d}{d\varepsilon} \operatorname{E}_\varepsilon[\theta_i]
    = -\operatorname{Cov}_p\!\left(\theta_i, \log p(\theta)\right).

On a Gaussian posterior the covariance is zero, and so it stays small on the
near-Gaussian ones. On a skewed or curved posterior it grows with the number
of coordinates that a parameter couples: ``log p`` spreads with an sd of about
:math:`\sqrt{D/2}`, so a hierarchical scale that sets how widely many group
effects spread (``tau`` of a non-centred model) moves by several of its sds
per unit of inflation. :func:`tempering_sensitivity` estimates the largest
such move from a chain's tune draws, in posterior sds per unit of inflation,
and the tuner then shrinks the inflation allowed so that the predicted move
stays within the bias budget in posterior sds as well
(:func:`pymc_sgmcmc.tuning.tuner.choose_settings`).

Tempering inflates every direction alike. A chain on the full data's
gradient has no gradient noise, and its discretisation inflates each
direction by its own amount, :math:`\varepsilon(a)` at curvature :math:`a`,
nearly in proportion to :math:`a` at the steps the tuner takes; the stiffest
direction, which sets the step, may be several times stiffer than the bulk.
To first order in the step, the Euler-Maruyama step of the Langevin
diffusion (step :math:`h`, metric coordinates) moves the means by

.. math::

    \operatorname{E}_h[\theta_i] - \operatorname{E}[\theta_i]
    = -\frac{h}{4} \operatorname{Cov}_p\!\left(\theta_i, |\nabla \log p|^2\right),

since the stationary law's first-order density correction
:math:`\tfrac{h}{4}|\nabla \log p|^2 - \tfrac{h}{2}\Delta \log p` has the same
covariance with each coordinate as :math:`-\tfrac{h}{4}|\nabla \log p|^2` (integrate
:math:`\operatorname{E}_p[\theta_i \Delta \log p]` by parts). On a Gaussian the
step inflates curvature :math:`a` by :math:`\varepsilon(a) = h a / 2`, so the move
is :math:`\varepsilon(a) / a` times :math:`\operatorname{Cov}_p(\theta_i,
\tfrac12 |\nabla \log p|^2)`, and the same expression with SGHMC's
:math:`\varepsilon(a)` gives its move (checked against long runs of both
update rules on a log-Gamma target, friction included). Each direction
then counts with its own inflation: :class:`EnergyWindow` holds a window's
draws and gradients and gives the largest such covariance in sds for any
metric, and the tuner keeps :math:`\max_a \varepsilon(a) / a` times it within
the budget for chains on the full data whose Gaussian model is their exact
stationary law (SGLD's and SGHMC's; the others' models are bounds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.tuning.config import TuningConfig

__all__ = [
    "FALSE_ALARM",
    "EnergyWindow",
    "log_density_at_draws",
    "tempering_moves",
    "tempering_sensitivity",
]

#: Chance that a posterior whose means do not move reads as one whose do.
FALSE_ALARM = 0.01


def log_density_at_draws(
    probe: Probe,
    draws: np.ndarray,
    rng,
    config: TuningConfig,
    temperature: float = 1.0,
    gradients: bool = False,
):
    """Return the log posterior at each draw, up to a constant shared by all draws.

    On all rows where there are at most ``max(config.hessian_rows,
    config.hessian_rows_per_coordinate * D)`` of them. On more, the
    log likelihood is estimated on that many rows, the same for every draw,
    with the full-data gradient at the draws' mean as a control variate: the
    estimate's error is then the subsample's error in the curvature, a
    function even in the distance from the mean, which leaves the covariances
    with the coordinates unbiased to first order. The cost is one full-data
    pass and one subsample evaluation per draw.

    The log density is divided by ``temperature``: tempered draws sample
    ``p^(1/temperature)``. With ``gradients`` the log posterior's gradient at
    each draw (undivided, on the same rows) comes second, shape ``(n, D)``.
    """
    draws = np.asarray(draws, dtype=float)
    rows = max(config.hessian_rows, config.hessian_rows_per_coordinate * draws.shape[1])
    if probe.n_rows <= rows:
        indices = np.arange(probe.n_rows)
        correction = np.zeros(draws.shape[1])
    else:
        indices = np.sort(rng.choice(probe.n_rows, rows, replace=False))
        middle = draws.mean(axis=0)
        _, full_gradient = probe.full_likelihood(middle)
        _, _, _, subsample_gradient = probe.terms(middle, indices)
        correction = full_gradient - subsample_gradient
    values = np.empty(len(draws))
    slopes = np.empty_like(draws) if gradients else None
    for k, draw in enumerate(draws):
        log_prior, prior_gradient, log_likelihood, likelihood_gradient = probe.terms(draw, indices)
        values[k] = log_prior + log_likelihood + correction @ draw
        if gradients:
            slopes[k] = prior_gradient + likelihood_gradient + correction
    if gradients:
        return values / temperature, slopes
    return values / temperature


def _moves(draws: np.ndarray, values: np.ndarray, independent: float):
    """Return each coordinate's ``|Cov(theta_i, values)| / sd_i`` and its Bonferroni threshold."""
    spread = np.where(draws.std(axis=0) > 0, draws.std(axis=0), np.inf)
    products = (draws - draws.mean(axis=0)) * (values - values.mean())[:, None]
    moves = np.abs(products.mean(axis=0)) / spread
    error = products.std(axis=0) / spread / np.sqrt(independent)
    return moves, error * norm.isf(FALSE_ALARM / (2.0 * draws.shape[1]))


def tempering_moves(draws: np.ndarray, log_density: np.ndarray, independent: float):
    """Return each coordinate's move per unit of variance inflation, in sds, where it stands out.

    The estimates and the test of :func:`tempering_sensitivity`, which is
    their largest: a move that does not stand out reads 0, so the nonzero
    ones are the coordinates a window shows moving. All zero below 10
    independent draws.
    """
    draws = np.asarray(draws, dtype=float)
    if independent < 10:
        return np.zeros(draws.shape[1])
    moves, threshold = _moves(draws, np.asarray(log_density, dtype=float), independent)
    return np.where(moves > threshold, moves, 0.0)


def tempering_sensitivity(draws: np.ndarray, log_density: np.ndarray, independent: float) -> float:
    r"""Return the largest move of a posterior mean per unit of variance inflation, in sds.

    For each coordinate :math:`i`, the draws' estimate of
    :math:`|\operatorname{Cov}(\theta_i, \log p)| / \operatorname{sd}(\theta_i)`.
    Each estimate carries a sampling error, the sd of the products of the
    centred coordinate and log density over :math:`\sqrt{n}` for
    ``independent`` draws :math:`n`, in the same units. Estimates within the
    largest of D such errors are set to zero (a Bonferroni bound: a Gaussian
    posterior of any number of coordinates, whose true sensitivity is zero,
    reads as sensitive in at most 1% of windows), so that only a move that
    stands out counts.

    Parameters
    ----------
    draws : ndarray, shape (n, D)
        The chain's tune draws, in the sampled coordinates.
    log_density : ndarray, shape (n,)
        The log posterior at each draw (:func:`log_density_at_draws`).
    independent : float
        How many independent draws they are worth; below 10 nothing is
        estimated.

    Returns
    -------
    float
        0 where no coordinate's move stands out from the sampling error.
    """
    return float(tempering_moves(draws, log_density, independent).max())


@dataclass(frozen=True)
class EnergyWindow:
    """A tune window's draws and the log posterior's gradient at each.

    Attributes
    ----------
    draws, gradients : ndarray, shape (n, D)
        The draws (sampled coordinates) and the gradient of ``log p`` there.
    independent : float
        How many independent draws they are worth.
    temperature : float
        The chain's temperature: it samples ``p^(1/temperature)``.
    """

    draws: np.ndarray
    gradients: np.ndarray
    independent: float
    temperature: float = 1.0

    def sensitivity(self, factor, moving=None) -> float:
        r"""Return the largest :math:`|\operatorname{Cov}(\theta_i, E)|` in sds of :math:`\theta_i`.

        ``E`` is half the squared gradient of the tempered log density in the
        coordinates ``theta = A z`` of ``factor`` (a matrix ``A``, or a diagonal
        preconditioner ``P`` as a vector, ``A = diag(sqrt(P))``), times the
        temperature: a step whose Gaussian model inflates curvature ``a`` by
        ``eps(a)`` moves each mean by about ``eps(a) / a`` times this, in sds
        (see the module docstring). Moves within their sampling error count as
        zero, as in :func:`tempering_sensitivity`, except on the coordinates
        ``moving`` (a boolean mask, nonzero :func:`tempering_moves`): a window's
        log density showed those means moving already, so their estimates
        count as they are. The energy spreads more widely than the log
        density where the metric misses the curvature at the draws, and a
        second test at the same false-alarm rate would then miss a move of
        several sds per unit of ``eps(a) / a`` in a window of a hundred draws.
        """
        factor = np.asarray(factor, dtype=float)
        if factor.ndim == 1:
            in_metric = self.gradients * np.sqrt(factor)
        else:
            in_metric = self.gradients @ factor
        energy = 0.5 * np.sum(in_metric**2, axis=1) / self.temperature
        if self.independent < 10:
            return 0.0
        moves, threshold = _moves(self.draws, energy, self.independent)
        if moving is not None:
            threshold = np.where(moving, 0.0, threshold)
        significant = moves[moves > threshold]
        return float(significant.max()) if significant.size else 0.0
