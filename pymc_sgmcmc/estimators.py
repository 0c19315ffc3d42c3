r"""Gradient estimators: how a sampler estimates the gradient of the log posterior.

An estimator is a symbolic gradient built from a
:class:`~pymc_sgmcmc.minibatch.MinibatchLogDensity` plus the named inputs it
needs besides the position and the batch. Any sampler can use any estimator:
the kernel compiles whichever it is given.

- :func:`minibatch_gradient`: :math:`\nabla \log p(\theta) + (N/B) \sum_{i \in S}
  \nabla \log p(y_i \mid \theta)`.
- :func:`control_variate_gradient` (SGLD-CV, Baker et al. 2019; SVRG-LD): with a
  centre :math:`\hat\theta` and the full-data likelihood gradient there,

  .. math::

      \nabla \log p(\theta) + \nabla L(\hat\theta)
      + \frac{N}{B} \sum_{i \in S} \bigl(\nabla \log p(y_i \mid \theta)
      - \nabla \log p(y_i \mid \hat\theta)\bigr),

  still unbiased, with a variance that shrinks as :math:`\theta` nears
  :math:`\hat\theta` instead of growing with N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = [
    "DataProbe",
    "GradientEstimator",
    "control_variate_gradient",
    "minibatch_gradient",
]


@dataclass(frozen=True)
class GradientEstimator:
    """A symbolic gradient estimate and the inputs it reads.

    Attributes
    ----------
    name : str
        ``"minibatch"`` or ``"control_variate"``.
    gradient : Variable
        The estimate, a function of ``density.position``, ``density.indices``
        and ``inputs``.
    inputs : dict of str to Variable
        Further vector inputs (e.g. the control-variate centre).
    """

    name: str
    gradient: Variable
    inputs: dict


def minibatch_gradient(density: MinibatchLogDensity) -> GradientEstimator:
    """Return the plain minibatch gradient estimate."""
    return GradientEstimator("minibatch", density.gradient, {})


def control_variate_gradient(density: MinibatchLogDensity) -> GradientEstimator:
    """Return the control-variate gradient estimate centred at an input point."""
    centre = pt.vector("centre", dtype="float64")
    centre_gradient = pt.vector("centre_likelihood_gradient", dtype="float64")
    at_centre = graph_replace(density.likelihood_gradient, {density.position: centre})
    gradient = density.prior_gradient + centre_gradient + density.likelihood_gradient - at_centre
    inputs = {"centre": centre, "centre_likelihood_gradient": centre_gradient}
    return GradientEstimator("control_variate", gradient, inputs)


class DataProbe:
    """Numerical access to a minibatch log density for tuning.

    Parameters
    ----------
    density : MinibatchLogDensity
        The symbolic density.
    compile_kwargs : dict, optional
        Passed to :func:`pytensor.function`.
    chunk_rows : int, default 50,000
        Rows per chunk when summing over the full data, which bounds memory.
    """

    def __init__(self, density, compile_kwargs=None, chunk_rows=50_000):
        self.n_rows = density.n_rows
        self.chunk_rows = int(chunk_rows)
        self._terms = pytensor.function(
            [density.position, density.indices],
            [
                density.log_prior,
                density.prior_gradient,
                density.log_likelihood,
                density.likelihood_gradient,
            ],
            **(compile_kwargs or {}),
        )

    def terms(self, position, indices):
        """Return log prior, its gradient, likelihood estimate and its gradient on ``indices``."""
        return self._terms(position, np.asarray(indices, dtype=np.int64))

    def minibatch_gradient(self, position, indices):
        """Return the plain minibatch gradient estimate."""
        _, prior_gradient, _, likelihood_gradient = self.terms(position, indices)
        return prior_gradient + likelihood_gradient

    def control_variate_gradient(self, position, indices, centre, centre_gradient):
        """Return the control-variate gradient estimate (see :func:`control_variate_gradient`)."""
        _, prior_gradient, _, likelihood_gradient = self.terms(position, indices)
        _, _, _, likelihood_gradient_at_centre = self.terms(centre, indices)
        return (
            prior_gradient + centre_gradient + likelihood_gradient - likelihood_gradient_at_centre
        )

    def full(self, position):
        """Return the exact log posterior, its gradient and the log-likelihood gradient.

        The likelihood is summed over the data in chunks.
        """
        log_prior, prior_gradient, _, _ = self.terms(position, np.arange(1))
        log_likelihood, likelihood_gradient = self.full_likelihood(position)
        return (
            log_prior + log_likelihood,
            prior_gradient + likelihood_gradient,
            likelihood_gradient,
        )

    def full_likelihood(self, position):
        """Return the full-data log likelihood and its gradient, in chunks of rows."""
        total, gradient = 0.0, np.zeros_like(position)
        for start in range(0, self.n_rows, self.chunk_rows):
            rows = np.arange(start, min(start + self.chunk_rows, self.n_rows))
            _, _, value, chunk_gradient = self.terms(position, rows)
            weight = len(rows) / self.n_rows
            total += weight * value
            gradient += weight * chunk_gradient
        return total, gradient

    def hessian(self, position, indices, steps):
        """Return the Hessian of the minibatch log density on ``indices``.

        Central differences of the gradient, with the same rows on both sides
        (so the minibatch noise cancels) and step ``steps[j]`` along
        coordinate ``j``; symmetrised.
        """
        columns = []
        for j, step in enumerate(steps):
            offset = np.zeros_like(position)
            offset[j] = step
            forward = self.minibatch_gradient(position + offset, indices)
            backward = self.minibatch_gradient(position - offset, indices)
            columns.append((forward - backward) / (2.0 * step))
        hessian = np.stack(columns, axis=1)
        return 0.5 * (hessian + hessian.T)
