"""Stochastic gradient Hamiltonian Monte Carlo."""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.integrators import underdamped_langevin_update
from pymc_sgmcmc.step_methods.base import StochasticGradientStep
from pymc_sgmcmc.tuning import (
    underdamped_relaxation_steps,
    underdamped_step_size,
    underdamped_variance_inflation,
)

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

    With the defaults, every chain adapts itself before its first draw as
    :class:`~pymc_sgmcmc.SGLD` does; the mass is the inverse of the
    preconditioner (the posterior scale), the friction damps the slowest
    direction critically, and the step size is the largest whose predicted
    variance inflation stays within ``bias_budget``.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    friction : float, optional
        Friction :math:`C`; chosen from the measured curvatures by default.
    mass : float or array, optional
        Diagonal mass :math:`M`; ``1 / preconditioner`` by default.
    **kwargs
        ``batch_size``, ``step_size``, ``temperature``, ``steps_per_draw``,
        ``preconditioner``, ``control_variate``, ``control_variate_refresh``,
        ``bias_budget``, ``replace``, ``model``, ``initial_point``,
        ``compile_kwargs``, ``blocked`` and ``rng``, as for
        :class:`~pymc_sgmcmc.SGLD`.

    Notes
    -----
    Sampler statistics are those of
    :class:`~pymc_sgmcmc.step_methods.base.StochasticGradientStep`.
    """

    name = "sghmc"
    n_auxiliary = 1

    def __init__(self, vars=None, *, friction: float | None = None, mass=None, **kwargs):
        if friction is not None and (not np.isfinite(friction) or friction <= 0):
            raise ValueError(f"friction must be a positive number, got {friction!r}.")
        if mass is not None and not np.all(np.isfinite(mass) & (np.asarray(mass) > 0)):
            raise ValueError(f"mass must hold positive finite numbers, got {mass!r}.")
        self.friction = None if friction is None else float(friction)
        self.mass = None if mass is None else np.asarray(mass, dtype=float)
        super().__init__(vars, **kwargs)

    def needs_measurements(self) -> bool:
        """Return whether chains must measure the posterior (also to choose the friction)."""
        return super().needs_measurements() or self.friction is None

    def _mass(self, settings) -> np.ndarray:
        if self.mass is not None:
            return np.broadcast_to(self.mass, settings.preconditioner.shape).copy()
        return 1.0 / settings.preconditioner

    def hyperparameters(self, settings):
        """Return temperature, friction and mass as vectors over the coordinates."""
        mass = self._mass(settings)
        if self.friction is not None:
            friction = np.full_like(mass, self.friction)
        else:
            friction = settings.hyperparameters.get("friction", 1.0) * mass
        return {"temperature": self.temperature, "friction": friction, "mass": mass}

    def initial_auxiliary(self, size: int) -> tuple[np.ndarray]:
        """Draw the momentum from its stationary law ``N(0, temperature * mass)``."""
        scale = np.sqrt(self.temperature * self._mass(self.settings))
        return (scale * self.rng.standard_normal(size),)

    def _scaled_friction(self, curvatures):
        if self.friction is not None and self.mass is not None:
            return float(np.median(self.friction / self.mass))
        return 2.0 * np.sqrt(curvatures[0])

    def choose_step_size(self, curvatures, noise):
        """Return the largest step size within the bias budget, its friction and relaxation."""
        friction = self._scaled_friction(curvatures)
        grid = np.geomspace(curvatures[0], curvatures[1], 8)
        step_size = underdamped_step_size(self.bias_budget, grid, friction, noise)
        relaxation = max(underdamped_relaxation_steps(step_size, friction, a) for a in grid)
        return step_size, {"friction": friction}, relaxation

    def predicted_inflation(self, step_size, curvatures, noise, extra):
        """Return the largest predicted variance inflation over the curvature range."""
        friction = extra.get("friction", self._scaled_friction(curvatures))
        grid = np.geomspace(curvatures[0], curvatures[1], 8)
        return float(
            max(underdamped_variance_inflation(step_size, friction, a, noise) for a in grid)
        )

    @staticmethod
    def update(position, momentum, *, gradient, noise, step_size, temperature, friction, mass):
        """Apply :func:`~pymc_sgmcmc.integrators.underdamped_langevin_update`."""
        return underdamped_langevin_update(
            position, momentum, gradient, noise, step_size, friction, mass, temperature
        )
