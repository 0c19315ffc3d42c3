r"""Stochastic-gradient Nosé-Hoover thermostat (Ding et al., 2014).

SGHMC whose friction is a dynamic variable: a scalar thermostat :math:`\xi`
grows while the momentum runs hotter than the temperature and shrinks while
it runs colder, so the friction absorbs gradient noise of unknown size. In
coordinates scaled by the diagonal preconditioner :math:`P` (unit mass), each
inner step draws a minibatch and applies

.. math::

    p &\leftarrow e^{-\eta \xi}\, p + \eta \sqrt{P}\, \hat g(\theta)
         + \sqrt{2 \eta A \tau}\, \epsilon, \\
    \theta &\leftarrow \theta + \eta \sqrt{P}\, p, \\
    \xi &\leftarrow \xi + \eta \left(p_{\text{old}}^\top (p_{\text{old}} + p) / 2D - \tau\right),

with diffusion :math:`A`. The friction acts through :math:`e^{-\eta \xi}`
(Ding et al. write its first-order form :math:`1 - \eta \xi`), which keeps a
momentum bounded through the thermostat's excursions. With gradient noise of variance :math:`v` per
coordinate the thermostat settles near :math:`A + \eta v / (2 \tau)`, where
the momentum's temperature is :math:`\tau`.

The thermostat reads the kinetic energy as :math:`p_t^\top (p_t + p_{t+1}) / 2D`,
the old momentum against the mean of the old and the new: on a Gaussian target
fixed-friction SGHMC has exactly :math:`E[p_t (p_t + p_{t+1}) / 2] = \tau`,
while :math:`E[p_{t+1}^2]` exceeds :math:`\tau` by a term of order
:math:`\eta C`, which a thermostat on :math:`p_{t+1}^\top p_{t+1}` would
remove by over-damping the chain and shrinking the posterior.

A scalar thermostat absorbs the average noise over the coordinates: with
isotropic noise the chain is noise-free SGHMC at the settled friction
:math:`\xi^* = A + \eta v / (2 \tau)`. With anisotropic noise, directions
with more than the average noise run hot and those with less run cold. The
tuner measures the largest noise variance only, so it bounds both extremes:
a direction with all of the noise while the others have none (SGHMC at
friction :math:`A`) and one with none while the others have all of it
(cooled by :math:`A / \xi^*`). The thermostat can settle only while the
friction removes the noise a step adds; the tuner keeps
:math:`\eta \xi^* \le 0.8`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from pymc_sgmcmc.dynamics import ChainInput, Dynamics, StateVariable
from pymc_sgmcmc.samplers.sghmc import _UnderdampedGaussian
from pymc_sgmcmc.step_method import StochasticGradientStep

__all__ = ["SGNHT", "Thermostat"]

#: Largest damping per step, eta times the settled thermostat, the tuner allows.
#: The friction removes at most a fraction e^{-2 eta xi} of the momentum's
#: energy; when the noise a step adds (of order eta^2 v + 2 eta A tau) is more
#: than it can remove, the thermostat grows without settling. Keeping
#: ``eta xi <= 0.8`` (``e^{-eta xi} >= 0.45``) leaves it room to settle and
#: to fluctuate.
_LARGEST_DAMPING = 0.8


def _exp(value):
    """Return ``exp(value)`` for a numpy value or a PyTensor variable."""
    return pt.exp(value) if isinstance(value, Variable) else np.exp(value)


@dataclass(frozen=True)
class _ThermostatGaussian:
    """SGNHT on a Gaussian target: noise-free SGHMC at the thermostat's settled friction."""

    diffusion: float
    critical_friction: float | None

    def _underdamped(self, friction):
        return _UnderdampedGaussian(np.ones(1), np.full(1, friction), self.critical_friction)

    def inflation(self, step_size, curvature, noise):
        settled = self.diffusion + step_size * noise / 2.0
        if step_size * settled > _LARGEST_DAMPING:
            return np.inf
        # A direction with all of the noise while the others have none runs
        # hot, as SGHMC at friction A does; one with none while the others
        # have all of it runs cold, by A / settled, at the settled friction.
        hot = self._underdamped(self.diffusion).inflation(step_size, curvature, noise)
        quiet = self._underdamped(settled).inflation(step_size, curvature, 0.0)
        cold = self.diffusion / settled * (1.0 + quiet) - 1.0
        return max(hot, quiet, abs(cold))

    def relaxation(self, step_size, curvature, noise=0.0):
        return self._underdamped(self.diffusion).relaxation(step_size, curvature)

    def largest_step_size(self, largest_curvature):
        return self._underdamped(self.diffusion).largest_step_size(largest_curvature)

    def chain_inputs(self):
        return self._underdamped(self.diffusion).chain_inputs()


class Thermostat(Dynamics):
    """Underdamped Langevin dynamics with a Nosé-Hoover thermostat (SGNHT).

    Parameters
    ----------
    diffusion : float, optional
        Diffusion :math:`A` in the preconditioned coordinates; by default
        the critical friction of the least-curved direction, as SGHMC's.
    """

    name = "sgnht"
    state = (StateVariable("momentum"), StateVariable("thermostat", scalar=True))
    chain_inputs_spec = (
        ChainInput("temperature", scalar=True),
        ChainInput("preconditioner"),
        ChainInput("diffusion", scalar=True),
    )
    stats: ClassVar[dict] = {"thermostat": np.float64}
    exact_gaussian_model = False

    def __init__(self, diffusion=None):
        if diffusion is not None and not (np.isfinite(diffusion) and diffusion > 0):
            raise ValueError(f"diffusion must be a positive finite number, got {diffusion!r}.")
        self.diffusion = None if diffusion is None else float(diffusion)

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Update the momentum, the position, then the thermostat (module docstring)."""
        step_size, temperature = inputs["step_size"], inputs["temperature"]
        scale = inputs["preconditioner"] ** 0.5
        decay = _exp(-step_size * state["thermostat"])
        momentum = (
            decay * state["momentum"]
            + step_size * scale * gradient
            + (2.0 * step_size * inputs["diffusion"] * temperature) ** 0.5 * noise[0]
        )
        position = state["position"] + step_size * scale * momentum
        kinetic = (state["momentum"] * (state["momentum"] + momentum)).mean() / 2.0
        thermostat = state["thermostat"] + step_size * (kinetic - temperature)
        return {"position": position, "momentum": momentum, "thermostat": thermostat}

    def chain_inputs(self, preconditioner, temperature, tuned):
        """Return the temperature, the preconditioner and the diffusion."""
        diffusion = self.diffusion if self.diffusion is not None else tuned["critical_friction"]
        return {
            "temperature": np.float64(temperature),
            "preconditioner": preconditioner,
            "diffusion": np.float64(diffusion),
        }

    def initial_state(self, position, inputs, rng):
        """Draw the momentum from ``N(0, tau)``; start the thermostat at the diffusion."""
        momentum = np.sqrt(inputs["temperature"]) * rng.standard_normal(position.size)
        return {
            "position": position,
            "momentum": momentum,
            "thermostat": np.float64(inputs["diffusion"]),
        }

    def statistics(self, state):
        """Return the thermostat at the end of the draw."""
        return {"thermostat": float(state["thermostat"])}

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return noise-free SGHMC at the friction the thermostat settles at."""
        if self.diffusion is None:
            critical = 2.0 * np.sqrt(curvatures[0])
            return _ThermostatGaussian(critical, critical)
        return _ThermostatGaussian(self.diffusion, None)

    def needs_measurements(self):
        """Return True unless the diffusion is given: it is chosen from the curvatures."""
        return self.diffusion is None


class SGNHT(StochasticGradientStep):
    r"""Stochastic-gradient Nosé-Hoover thermostat (Ding et al., 2014).

    Each inner step draws a minibatch and, in the coordinates of the tuner's
    metric (unit mass), applies

    .. math::

        p' &\leftarrow e^{-\eta \xi} p + \eta \hat g + \sqrt{2 \eta A \tau}\, \epsilon, \\
        \theta &\leftarrow \theta + \eta p', \qquad
        \xi \leftarrow \xi + \eta \left(p^\top (p + p') / 2D - \tau\right).

    The thermostat :math:`\xi` adapts the friction to the gradient noise; it
    starts at :math:`A` in every chain and is recorded as the ``thermostat``
    statistic. The step size is chosen from the bias budget as for
    :class:`~pymc_sgmcmc.SGHMC` with friction :math:`A`.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    diffusion : float, optional
        :math:`A`; the critical friction of the least-curved direction by default.
    **kwargs
        As for :class:`~pymc_sgmcmc.SGLD`.

    Notes
    -----
    Besides the statistics of
    :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`, ``thermostat``
    holds :math:`\xi` at the end of every draw.
    """

    name = "sgnht"
    dynamics_class = Thermostat
