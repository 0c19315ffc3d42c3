r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, 2014).

A momentum :math:`r` with diagonal mass :math:`M` and friction :math:`C`
moves with the position; each inner step draws a fresh minibatch and applies

.. math::

    r &\leftarrow (1 - \eta C / M)\, r + \eta \hat g(\theta)
         + \sqrt{2 \eta C \tau}\, \xi, \\
    \theta &\leftarrow \theta + \eta\, r / M,

whose stationary law is the posterior (tempered by :math:`\tau`) for
:math:`\theta` and :math:`N(0, \tau M)` for :math:`r`.

In coordinates scaled by the preconditioner :math:`P` and with the unit-mass
momentum :math:`r / \sqrt{M}`, coordinate :math:`j` runs unit-mass SGHMC with
step size :math:`\eta / \sqrt{M_j P_j}` and friction
:math:`C_j \sqrt{P_j / M_j}`. On a Gaussian target the position-momentum
pair is then a linear recursion whose stationary covariance solves a 2 x 2
discrete Lyapunov equation, which is how the tuner sees a given mass and
friction as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pymc_sgmcmc.dynamics import ChainInput, Dynamics, StateVariable
from pymc_sgmcmc.step_method import StochasticGradientStep
from pymc_sgmcmc.tuning.epochs import epoch_bound, noise_covariance

__all__ = ["SGHMC", "Underdamped", "underdamped_variance_inflation"]


def _transitions(step_size, friction, curvature):
    step_size, friction, curvature = np.broadcast_arrays(
        np.asarray(step_size, dtype=float),
        np.asarray(friction, dtype=float),
        np.asarray(curvature, dtype=float),
    )
    decay = 1.0 - step_size * friction
    transition = np.empty((*step_size.shape, 2, 2))
    transition[..., 0, 0] = 1.0 - step_size**2 * curvature
    transition[..., 0, 1] = step_size * decay
    transition[..., 1, 0] = -step_size * curvature
    transition[..., 1, 1] = decay
    return step_size, friction, transition


def _spectral_radius(transition):
    return np.max(np.abs(np.linalg.eigvals(transition)), axis=-1)


def underdamped_variance_inflation(step_size, friction, curvature, noise=0.0):
    """Return the relative excess of unit-mass SGHMC's stationary position variance.

    The target is ``N(0, tau / curvature)``; ``noise`` is the gradient-noise
    variance divided by the temperature. Vectorised over ``step_size``,
    ``friction`` and ``curvature``; ``inf`` where the recursion is unstable.
    """
    step_size, friction, transition = _transitions(step_size, friction, curvature)
    shock = step_size**2 * noise + 2.0 * step_size * friction
    first = np.stack([step_size**2, step_size], -1)
    second = np.stack([step_size, np.ones_like(step_size)], -1)
    shocks = shock[..., None, None] * np.stack([first, second], -2)
    # C = T C T' + Q; for 2 x 2 matrices, (I - T kron T) vec(C) = vec(Q).
    kron = np.einsum("...ij,...kl->...ikjl", transition, transition).reshape(*shock.shape, 4, 4)
    covariance = np.linalg.solve(np.eye(4) - kron, shocks.reshape(*shock.shape, 4, 1))[..., 0, 0]
    inflation = curvature * covariance - 1.0
    return np.where(_spectral_radius(transition) < 1.0, inflation, np.inf)


def underdamped_relaxation_steps(step_size, friction, curvature):
    """Return the steps over which unit-mass SGHMC's slowest mode decays by e (vectorised)."""
    _, _, transition = _transitions(step_size, friction, curvature)
    radius = _spectral_radius(transition)
    with np.errstate(divide="ignore"):
        return np.where(radius < 1.0, -1.0 / np.log(np.minimum(radius, 1.0)), np.inf)


def _representatives(step_scales, frictions, count=16):
    """Return at most about ``count`` coordinates spanning the step scales and frictions."""
    pairs = np.unique(np.stack([step_scales, frictions], axis=1), axis=0)
    if len(pairs) <= count:
        return pairs[:, 0], pairs[:, 1]
    chosen = set()
    for values in (step_scales, frictions, step_scales * frictions):
        order = np.argsort(values)
        chosen.update(order[np.linspace(0, len(order) - 1, count // 3 + 2).astype(int)])
    index = np.array(sorted(chosen))
    return step_scales[index], frictions[index]


@dataclass(frozen=True)
class _UnderdampedGaussian:
    """SGHMC on a Gaussian target, coordinate by coordinate in effective units.

    With ``epochs`` finite, minibatches run through epochs and the tuner
    counts their noise as :func:`~pymc_sgmcmc.tuning.epochs.epoch_bound`
    does, ``position_noise`` of it changing with the position.
    """

    step_scales: np.ndarray
    frictions: np.ndarray
    critical_friction: float | None
    epochs: float = field(default=np.inf, kw_only=True)
    position_noise: float = field(default=0.0, kw_only=True)

    def inflation(self, step_size, curvature, noise):
        return self.largest_inflation(step_size, [curvature], noise)

    def largest_inflation(self, step_size, curvatures, noise):
        """Return the largest inflation over ``curvatures`` in one vectorised evaluation."""
        arguments = (
            step_size * self.step_scales[:, None],
            self.frictions[:, None],
            np.asarray(curvatures, dtype=float)[None, :],
        )
        values = underdamped_variance_inflation(*arguments, noise)
        if np.isfinite(self.epochs) and np.all(np.isfinite(values)):
            base = underdamped_variance_inflation(*arguments)
            # The inflation grows linearly with the noise: this much per unit.
            independent = underdamped_variance_inflation(*arguments, 1.0) - base
            steps, _, transition = _transitions(*arguments)
            shock = np.stack([steps**2, steps], axis=-1)
            epoch = arguments[2] * noise_covariance(transition, shock, self.epochs)[..., 0, 0]
            position_noise = min(self.position_noise, noise)
            fixed = noise - position_noise
            values = base + epoch_bound(
                fixed * independent, fixed * epoch, position_noise * independent
            )
        return float(np.max(values))

    def with_epochs(self, epochs, position_noise=0.0):
        return replace(self, epochs=epochs, position_noise=position_noise)

    def relaxation(self, step_size, curvature, noise=0.0):
        steps = underdamped_relaxation_steps(
            step_size * self.step_scales, self.frictions, curvature
        )
        return float(np.max(steps))

    def largest_step_size(self, largest_curvature):
        bound = np.minimum(1.0 / self.frictions, 2.0 / np.sqrt(largest_curvature))
        return float(np.min(bound / self.step_scales))

    def chain_inputs(self):
        if self.critical_friction is None:
            return {}
        return {"critical_friction": self.critical_friction}


def _positive(name, value):
    if value is None:
        return None
    array = np.asarray(value, dtype=float)
    if array.size == 0 or not np.all(np.isfinite(array) & (array > 0)):
        raise ValueError(f"{name} must hold positive finite numbers, got {value!r}.")
    return array


class Underdamped(Dynamics):
    """Underdamped Langevin dynamics with minibatch gradients (SGHMC).

    Parameters
    ----------
    friction : float or array, optional
        Friction ``C``; by default each coordinate is damped critically at the
        smallest measured curvature.
    mass : float or array, optional
        Diagonal mass ``M``; ``1 / P`` by default.
    """

    name = "sghmc"
    state = (StateVariable("momentum"),)
    chain_inputs_spec = (
        ChainInput("temperature", scalar=True),
        ChainInput("friction"),
        ChainInput("mass"),
    )

    def __init__(self, friction=None, mass=None):
        self.friction = _positive("friction", friction)
        self.mass = _positive("mass", mass)
        for value in (self.friction, self.mass):
            if value is not None and value.ndim > 1:
                raise ValueError("friction and mass must be numbers or vectors.")

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Update the momentum, then the position (see the module docstring)."""
        step_size, friction, mass = inputs["step_size"], inputs["friction"], inputs["mass"]
        momentum = (
            (1.0 - step_size * friction / mass) * state["momentum"]
            + step_size * gradient
            + (2.0 * step_size * friction * inputs["temperature"]) ** 0.5 * noise[0]
        )
        position = state["position"] + step_size * momentum / mass
        return {"position": position, "momentum": momentum}

    def check_size(self, size):
        """Refuse a friction or mass that is neither one number nor one per coordinate."""
        for name in ("friction", "mass"):
            value = getattr(self, name)
            if value is not None and value.size not in (1, size):
                raise ValueError(
                    f"{name} has {value.size} entries; give one or {size} (one per coordinate)."
                )

    def _mass(self, preconditioner):
        if self.mass is None:
            return 1.0 / preconditioner
        return np.broadcast_to(self.mass, preconditioner.shape).astype(float)

    def chain_inputs(self, preconditioner, temperature, tuned):
        """Return temperature, friction and mass as vectors over the coordinates."""
        mass = self._mass(preconditioner)
        if self.friction is not None:
            friction = np.broadcast_to(self.friction, preconditioner.shape).astype(float)
        else:
            friction = tuned["critical_friction"] * np.sqrt(mass / preconditioner)
        return {"temperature": np.float64(temperature), "friction": friction, "mass": mass}

    def initial_state(self, position, inputs, rng):
        """Draw the momentum from its stationary law ``N(0, tau M)``."""
        scale = np.sqrt(inputs["temperature"] * inputs["mass"])
        return {"position": position, "momentum": scale * rng.standard_normal(position.size)}

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return SGHMC's Gaussian model with this sampler's actual mass and friction."""
        mass = self._mass(preconditioner)
        relative_mass = mass * preconditioner
        if self.friction is None:
            critical = 2.0 * np.sqrt(curvatures[0])
            frictions = np.full(preconditioner.shape, critical)
        else:
            critical = None
            friction = np.broadcast_to(self.friction, preconditioner.shape)
            frictions = friction * np.sqrt(preconditioner / mass)
        step_scales, frictions = _representatives(1.0 / np.sqrt(relative_mass), frictions)
        return _UnderdampedGaussian(step_scales, frictions, critical)

    def accepts_metric(self):
        """Return False when a friction or mass is given: they are in the model's coordinates."""
        return self.friction is None and self.mass is None

    def needs_measurements(self):
        """Return True unless the friction is given: it is chosen from the curvatures."""
        return self.friction is None


class SGHMC(StochasticGradientStep):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, 2014).

    The momentum is drawn from its stationary law :math:`N(0, \tau M)` at the
    start of every chain; each inner step draws a fresh minibatch and applies

    .. math::

        r &\leftarrow (1 - \eta C / M)\, r + \eta \hat g(\theta)
             + \sqrt{2 \eta C \tau}\, \xi, \\
        \theta &\leftarrow \theta + \eta\, r / M.

    With the defaults every chain adapts itself before its first draw as
    :class:`~pymc_sgmcmc.SGLD` does; the mass is the inverse of the
    preconditioner and the friction damps the slowest direction critically.
    A given ``friction`` or ``mass`` is used as given, and the step size is
    chosen for it.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    friction : float or array, optional
        Friction :math:`C`; chosen from the measured curvatures by default.
    mass : float or array, optional
        Diagonal mass :math:`M`; ``1 / preconditioner`` by default.
    **kwargs
        As for :class:`~pymc_sgmcmc.SGLD`.

    Notes
    -----
    Sampler statistics are those of
    :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`.
    """

    name = "sghmc"
    dynamics_class = Underdamped
