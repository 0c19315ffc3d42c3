"""Stochastic gradient Hamiltonian Monte Carlo."""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.integrators import underdamped_langevin_update
from pymc_sgmcmc.step_methods.base import StochasticGradientStep

__all__ = ["SGHMC"]


class SGHMC(StochasticGradientStep):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, 2014).

    The momentum :math:`r` is drawn from its stationary law
    :math:`N(0, \tau M)` at the start of every chain; each inner step draws a
    fresh minibatch and applies

    .. math::

        r &\leftarrow (1 - \eta C / M)\, r + \eta \hat g(\theta)
             + \sqrt{2 \eta C \tau}\, \xi, \\
        \theta &\leftarrow \theta + \eta\, r / M.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    batch_size : int, optional
        Rows per minibatch B; ``min(100, N)`` by default.
    step_size : float or schedule, optional
        Step size :math:`\eta`. Default ``0.2 * B / N**1.5``.
    friction : float, optional
        Friction :math:`C`. Default ``2 * sqrt(N * mass)``: with the default
        step size, critical damping and a variance inflation from minibatch
        noise near 5% when each row carries about unit information on each
        parameter (standardised data).
    mass : float, default 1
        Mass :math:`M` of every coordinate.
    temperature : float, default 1
        Temperature :math:`\tau`; 1 samples the posterior.
    steps_per_draw : int, default 1
        Inner steps per recorded draw (thinning).
    replace : bool, default False
        Draw rows with replacement instead of in shuffled epochs.
    model, initial_point, compile_kwargs, blocked, rng
        As for :class:`~pymc_sgmcmc.SGLD`.

    Notes
    -----
    Sampler statistics are those of
    :class:`~pymc_sgmcmc.step_methods.base.StochasticGradientStep`.
    """

    name = "sghmc"
    n_auxiliary = 1

    def __init__(self, vars=None, *, friction: float | None = None, mass: float = 1.0, **kwargs):
        if not np.isfinite(mass) or mass <= 0:
            raise ValueError(f"mass must be a positive number, got {mass!r}.")
        if friction is not None and (not np.isfinite(friction) or friction <= 0):
            raise ValueError(f"friction must be a positive number, got {friction!r}.")
        self.mass = float(mass)
        self.friction = None if friction is None else float(friction)
        super().__init__(vars, **kwargs)

    def hyperparameters(self) -> dict[str, float]:
        """Return temperature, friction and mass."""
        friction = self.friction
        if friction is None:
            friction = 2.0 * np.sqrt(self.density.n_rows * self.mass)
        return {"temperature": self.temperature, "friction": friction, "mass": self.mass}

    def initial_auxiliary(self, size: int) -> tuple[np.ndarray]:
        """Draw the momentum from its stationary law ``N(0, temperature * mass)``."""
        scale = np.sqrt(self.temperature * self.mass)
        return (scale * self.rng.standard_normal(size),)

    @staticmethod
    def update(position, momentum, *, gradient, noise, step_size, temperature, friction, mass):
        """Apply :func:`~pymc_sgmcmc.integrators.underdamped_langevin_update`."""
        return underdamped_langevin_update(
            position, momentum, gradient, noise, step_size, friction, mass, temperature
        )

    @staticmethod
    def default_step_size(n_rows: int, batch_size: int) -> float:
        """Return ``0.2 * B / N**1.5``."""
        return 0.2 * batch_size / n_rows**1.5
