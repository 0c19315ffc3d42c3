r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

One inner step draws a minibatch, estimates the gradient of the log posterior
:math:`\hat g` and moves

.. math::

    \theta_{n+1} = \theta_n + \eta P \hat g(\theta_n)
        + \sqrt{2 \eta \tau P}\, \tfrac{1}{2}(\xi_n + \xi_{n+1}),
    \qquad \xi_n \sim N(0, I),

each standard normal draw shared by two consecutive steps (Leimkuhler &
Matthews, 2013, the default ``integrator="leimkuhler_matthews"``), or with
``integrator="euler_maruyama"`` the Euler-Maruyama step
:math:`\theta + \eta P \hat g + \sqrt{2 \eta \tau P}\, \xi_{n+1}` of Welling &
Teh, who write the drift with :math:`\epsilon / 2`: the same rule with
:math:`\epsilon = 2 \eta`. Over many steps both inject the same noise (the
halves telescope), so both discretise the same diffusion.

On the Gaussian target :math:`N(0, \tau / a)` with gradient noise of variance
:math:`v`, the Euler-Maruyama recursion :math:`x \leftarrow x + \eta(-a x + n)
+ \sqrt{2 \eta \tau}\, \xi` has stationary variance
:math:`(\tau / a)(1 + \eta v / (2 \tau)) / (1 - \eta a / 2)`: the gradient
noise weighs :math:`1 / \tau` times more at temperature :math:`\tau`. The
shared draws remove the discretisation's part: with
:math:`y_n = x_n - \sqrt{\eta \tau / 2}\, \xi_n`, independent of
:math:`\xi_n`, the recursion is :math:`y_{n+1} = (1 - \eta a) y_n + (2 - \eta
a) \sqrt{\eta \tau / 2}\, \xi_n + \eta n_n`, so the stationary variance is
:math:`\tau / a + \eta v / (a (2 - \eta a))`: exact without gradient noise at
every stable step size, and the noise's share unchanged. On non-Gaussian
targets the error of averages is of second order in :math:`\eta` instead of
first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pymc_sgmcmc.dynamics import ChainInput, Dynamics, StateVariable
from pymc_sgmcmc.step_method import StochasticGradientStep
from pymc_sgmcmc.tuning.epochs import epoch_bound, noise_covariance

__all__ = ["INTEGRATORS", "SGLD", "Langevin", "langevin_variance_inflation"]

#: The discretisations of overdamped Langevin dynamics SGLD offers, the default first.
INTEGRATORS = ("leimkuhler_matthews", "euler_maruyama")


def langevin_variance_inflation(step_size, curvature, noise=0.0, averaged_noise=False):
    """Return the relative excess of SGLD's stationary variance on a Gaussian target.

    Parameters
    ----------
    step_size : float
        Step size in the coordinates where ``curvature`` is measured.
    curvature : float or array
        Curvature ``a`` of the target ``N(0, tau / a)``.
    noise : float, default 0
        Gradient-noise variance divided by the temperature, ``v / tau``.
    averaged_noise : bool, default False
        The Leimkuhler-Matthews step (each normal draw shared by two steps),
        whose only inflation is the gradient noise's; else Euler-Maruyama.
    """
    from_noise = step_size * noise / (2.0 - step_size * curvature)
    if averaged_noise:
        return from_noise
    return from_noise + step_size * curvature / (2.0 - step_size * curvature)


@dataclass(frozen=True)
class _LangevinGaussian:
    """SGLD on a Gaussian target (see the module docstring).

    With ``epochs`` finite, minibatches run through epochs and the tuner
    counts their noise as :func:`~pymc_sgmcmc.tuning.epochs.epoch_bound`
    does, ``position_noise`` of it changing with the position.

    With ``averaged_noise`` the step is Leimkuhler-Matthews's, exact on
    Gaussians; what a posterior's departure from Gaussian adds is of second
    order in the step, and the model counts it as the square of
    Euler-Maruyama's first-order inflation. Before a tune window has measured
    the curvature at the chain's draws, which it does for chains on the full
    data's gradient (``before_curvature_check``, ``curvature_checked``
    false), the model counts Euler-Maruyama's own term, and so gives
    Euler-Maruyama's step: the curvature measured at one point can be many
    times exceeded where the chain goes (a funnel's neck), which that step's
    stability margin covers. Chains on minibatches never have it measured,
    and their gradient noise binds the step well below it anyway.
    """

    epochs: float = field(default=np.inf, kw_only=True)
    position_noise: float = field(default=0.0, kw_only=True)
    averaged_noise: bool = field(default=False, kw_only=True)
    curvature_checked: bool = field(default=True, kw_only=True)

    def before_curvature_check(self):
        """Return the model for steps chosen before the curvature at the draws was measured."""
        return replace(self, curvature_checked=False)

    def inflation(self, step_size, curvature, noise):
        if step_size * curvature >= 2.0:
            return np.inf
        base = langevin_variance_inflation(step_size, curvature)
        if self.averaged_noise and self.curvature_checked:
            base = base**2
        if not np.isfinite(self.epochs):
            return base + langevin_variance_inflation(step_size, curvature, noise, True)
        # The gradient noise enters both steps alike, linearly: this much per unit.
        independent = langevin_variance_inflation(step_size, curvature, 1.0, True)
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


#: For overdamped samplers slowed by spread curvatures: momentum relaxes over
#: the square root of the spread's inner steps instead of the spread's.
MOMENTUM_ADVICE = "or SGHMC, whose relaxation grows only as the square root of that ratio"


class Langevin(Dynamics):
    """Overdamped Langevin dynamics with a constant diagonal preconditioner.

    Parameters
    ----------
    integrator : {"leimkuhler_matthews", "euler_maruyama"}
        How a step discretises the dynamics (see :mod:`pymc_sgmcmc.samplers.sgld`).
        The default shares each normal draw between two consecutive steps and
        then carries the last draw in its state, ``last_noise``.
    """

    name = "sgld"
    chain_inputs_spec = (ChainInput("temperature", scalar=True), ChainInput("preconditioner"))

    def __init__(self, integrator="leimkuhler_matthews"):
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}.")
        self.integrator = integrator
        self.averaged_noise = integrator == "leimkuhler_matthews"
        if self.averaged_noise:
            self.state = (StateVariable("last_noise"),)

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Take one step: Leimkuhler-Matthews's with ``last_noise`` in the state, else Euler's."""
        step_size, preconditioner = inputs["step_size"], inputs["preconditioner"]
        drift = step_size * preconditioner * gradient
        scale = (2.0 * step_size * inputs["temperature"] * preconditioner) ** 0.5
        if "last_noise" not in state:
            return {"position": state["position"] + drift + scale * noise[0]}
        diffusion = scale * 0.5 * (state["last_noise"] + noise[0])
        return {"position": state["position"] + drift + diffusion, "last_noise": noise[0]}

    def initial_state(self, position, inputs, rng):
        """Return the position and, for the shared draws, a first standard normal draw."""
        if not self.averaged_noise:
            return {"position": position}
        return {"position": position, "last_noise": rng.standard_normal(position.size)}

    def graph_options(self):
        """Return the integrator, which changes the kernel's graph."""
        return (self.integrator,)

    def chain_inputs(self, preconditioner, temperature, tuned):
        """Return the temperature and the preconditioner."""
        return {"temperature": np.float64(temperature), "preconditioner": preconditioner}

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return SGLD's exact Gaussian model for its integrator."""
        return _LangevinGaussian(averaged_noise=self.averaged_noise)

    def stiffness_advice(self):
        """Also name SGHMC, whose momentum relaxes faster across spread curvatures."""
        return f"{super().stiffness_advice()}, {MOMENTUM_ADVICE}"


class SGLD(StochasticGradientStep):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

    Each inner step draws a minibatch of ``batch_size`` rows and moves

    .. math::

        \theta_{n+1} = \theta_n + \eta P \hat g(\theta_n)
            + \sqrt{2 \eta \tau P}\, \tfrac{1}{2}(\xi_n + \xi_{n+1}),

    sharing each standard normal draw :math:`\xi` between two consecutive
    steps (Leimkuhler & Matthews), which samples a Gaussian posterior without
    discretisation error; ``integrator="euler_maruyama"`` takes the original
    step :math:`\theta + \eta P \hat g + \sqrt{2 \eta \tau P}\, \xi`.

    With the defaults every chain adapts itself before its first draw (see
    :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`).

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    integrator : {"leimkuhler_matthews", "euler_maruyama"}
        The discretisation (see :mod:`pymc_sgmcmc.samplers.sgld`).
    **kwargs
        ``batch_size``, ``step_size``, ``temperature``, ``steps_per_draw``,
        ``preconditioner``, ``control_variate``, ``control_variate_refresh``,
        ``bias_budget``, ``replace``, ``tuning``, ``model``,
        ``initial_point``, ``compile_kwargs``, ``blocked`` and ``rng``: see
        :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`.
    """

    name = "sgld"
    dynamics_class = Langevin
