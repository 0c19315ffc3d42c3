r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

One inner step draws a minibatch, estimates the gradient of the log posterior
:math:`\hat g` and moves

.. math::

    \theta \leftarrow \theta + \eta P \hat g(\theta) + \sqrt{2 \eta \tau P}\, \xi,
    \qquad \xi \sim N(0, I).

Welling & Teh write the drift with :math:`\epsilon / 2`; that is the same
rule with :math:`\epsilon = 2 \eta`.

On the Gaussian target :math:`N(0, \tau / a)` with gradient noise of variance
:math:`v`, the recursion :math:`x \leftarrow x + \eta(-a x + n) + \sqrt{2 \eta
\tau}\, \xi` has stationary variance
:math:`(\tau / a)(1 + \eta v / (2 \tau)) / (1 - \eta a / 2)`: the gradient
noise weighs :math:`1 / \tau` times more at temperature :math:`\tau`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pymc_sgmcmc.dynamics import ChainInput, Dynamics
from pymc_sgmcmc.step_method import StochasticGradientStep
from pymc_sgmcmc.tuning.epochs import epoch_bound, noise_covariance

__all__ = ["SGLD", "Langevin", "langevin_variance_inflation"]


def langevin_variance_inflation(step_size, curvature, noise=0.0):
    """Return the relative excess of SGLD's stationary variance on a Gaussian target.

    Parameters
    ----------
    step_size : float
        Step size in the coordinates where ``curvature`` is measured.
    curvature : float or array
        Curvature ``a`` of the target ``N(0, tau / a)``.
    noise : float, default 0
        Gradient-noise variance divided by the temperature, ``v / tau``.
    """
    return (1.0 + step_size * noise / 2.0) / (1.0 - step_size * curvature / 2.0) - 1.0


@dataclass(frozen=True)
class _LangevinGaussian:
    """SGLD on a Gaussian target (see the module docstring).

    With ``epochs`` finite, minibatches run through epochs and the tuner
    counts their noise as :func:`~pymc_sgmcmc.tuning.epochs.epoch_bound`
    does, ``position_noise`` of it changing with the position.
    """

    epochs: float = field(default=np.inf, kw_only=True)
    position_noise: float = field(default=0.0, kw_only=True)

    def inflation(self, step_size, curvature, noise):
        if step_size * curvature >= 2.0:
            return np.inf
        if not np.isfinite(self.epochs):
            return langevin_variance_inflation(step_size, curvature, noise)
        base = langevin_variance_inflation(step_size, curvature)
        # The inflation grows linearly with the noise: this much per unit.
        independent = langevin_variance_inflation(step_size, curvature, 1.0) - base
        contraction = np.array([[1.0 - step_size * curvature]])
        epoch = curvature * noise_covariance(contraction, np.array([step_size]), self.epochs)[0, 0]
        position_noise = min(self.position_noise, noise)
        fixed = noise - position_noise
        bound = epoch_bound(fixed * independent, fixed * epoch, position_noise * independent)
        return base + float(bound)

    def with_epochs(self, epochs, position_noise=0.0):
        return replace(self, epochs=epochs, position_noise=position_noise)

    def relaxation(self, step_size, curvature, noise=0.0):
        contraction = abs(1.0 - step_size * curvature)
        if contraction == 0.0:
            return 0.0  # a step of 1 / curvature lands on the mean: no memory
        return np.inf if contraction >= 1.0 else -1.0 / np.log(contraction)

    def largest_step_size(self, largest_curvature):
        return 2.0 / largest_curvature

    def chain_inputs(self):
        return {}


class Langevin(Dynamics):
    """Overdamped Langevin dynamics with a constant diagonal preconditioner."""

    name = "sgld"
    chain_inputs_spec = (ChainInput("temperature", scalar=True), ChainInput("preconditioner"))

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Take one Euler-Maruyama step: ``theta + eta P g + sqrt(2 eta tau P) xi``."""
        step_size, preconditioner = inputs["step_size"], inputs["preconditioner"]
        drift = step_size * preconditioner * gradient
        diffusion = (2.0 * step_size * inputs["temperature"] * preconditioner) ** 0.5 * noise[0]
        return {"position": state["position"] + drift + diffusion}

    def chain_inputs(self, preconditioner, temperature, tuned):
        """Return the temperature and the preconditioner."""
        return {"temperature": np.float64(temperature), "preconditioner": preconditioner}

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return SGLD's exact Gaussian model."""
        return _LangevinGaussian()


class SGLD(StochasticGradientStep):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

    Each inner step draws a minibatch of ``batch_size`` rows and moves

    .. math::

        \theta \leftarrow \theta + \eta P \hat g(\theta) + \sqrt{2 \eta \tau P}\, \xi.

    With the defaults every chain adapts itself before its first draw (see
    :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`).

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    **kwargs
        ``batch_size``, ``step_size``, ``temperature``, ``steps_per_draw``,
        ``preconditioner``, ``control_variate``, ``control_variate_refresh``,
        ``bias_budget``, ``replace``, ``tuning``, ``model``,
        ``initial_point``, ``compile_kwargs``, ``blocked`` and ``rng``: see
        :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`.
    """

    name = "sgld"
    dynamics_class = Langevin
