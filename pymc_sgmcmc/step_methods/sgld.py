"""Stochastic gradient Langevin dynamics."""

from __future__ import annotations

from pymc_sgmcmc.integrators import langevin_update
from pymc_sgmcmc.step_methods.base import StochasticGradientStep

__all__ = ["SGLD"]


class SGLD(StochasticGradientStep):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

    Each inner step draws a minibatch of ``batch_size`` rows, estimates the
    gradient of the log posterior as the prior gradient plus N/B times the
    minibatch likelihood gradient, and moves

    .. math::

        \theta \leftarrow \theta + \eta \hat g(\theta) + \sqrt{2 \eta \tau}\, \xi.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    batch_size : int, optional
        Rows per minibatch B; ``min(100, N)`` by default.
    step_size : float or schedule, optional
        Step size :math:`\eta`, a number or a schedule such as
        :class:`~pymc_sgmcmc.PolynomialDecay`. Default ``0.1 * B / N**2``,
        which keeps the variance inflation from minibatch noise near 5% when
        each row carries about unit information on each parameter
        (standardised data); set it for other models.
    temperature : float, default 1
        Temperature :math:`\tau`; 1 samples the posterior.
    steps_per_draw : int, default 1
        Inner steps per recorded draw (thinning).
    replace : bool, default False
        Draw rows with replacement instead of in shuffled epochs.
    model : pm.Model, optional
        The model, from the context by default.
    initial_point : dict, optional
        Point used to build the graphs; ``model.initial_point()`` by default.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile` (e.g. ``{"mode": "NUMBA"}``).
    blocked, rng
        As for every PyMC step method.

    Notes
    -----
    Sampler statistics are those of
    :class:`~pymc_sgmcmc.step_methods.base.StochasticGradientStep`.
    """

    name = "sgld"

    @staticmethod
    def update(position, *, gradient, noise, step_size, temperature):
        """Apply :func:`~pymc_sgmcmc.integrators.langevin_update`."""
        return langevin_update(position, gradient, noise, step_size, temperature)

    @staticmethod
    def default_step_size(n_rows: int, batch_size: int) -> float:
        """Return ``0.1 * B / N**2``."""
        return 0.1 * batch_size / n_rows**2
