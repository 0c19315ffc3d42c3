r"""Preconditioned SGLD with an RMSprop preconditioner (Li, Chen, Carlson & Carin, 2016).

Each inner step updates a running mean :math:`V` of the squared gradient
estimate, turns it into a diagonal preconditioner :math:`G`, and takes a
Langevin step scaled by it:

.. math::

    V &\leftarrow \alpha V + (1 - \alpha)\, \hat g \odot \hat g, \qquad
    G = 1 / (\lambda + \sqrt{V}), \\
    \theta &\leftarrow \theta + \eta\, G \hat g + \eta \tau\, \Gamma
        + \sqrt{2 \eta \tau G}\, \xi,

all in the coordinates the chain samples in (scaled by the tuner's metric,
so the gradient of a roughly standard normal posterior has unit scale).
:math:`\Gamma_i = \partial G_i / \partial \theta_i` is the correction term of
a position-dependent preconditioner (Ma, Chen & Fox, 2015). :math:`G` depends
on the position only through the newest squared gradient, weighted by
:math:`1 - \alpha`, so

.. math::

    \Gamma_i = -(1 - \alpha)\, G_i^2\, \hat g_i\, \hat H_{ii} / \sqrt{V_i},

with :math:`\hat H_{ii}` the diagonal of the Hessian of the minibatch log
density, computed by PyTensor's autodiff (D extra gradient passes per step).
Li et al. drop it, since it is of order :math:`1 - \alpha`; so does
:class:`PSGLD` unless ``correction=True``.

On a Gaussian target of curvature :math:`a` at temperature :math:`\tau`, with
gradient noise of variance :math:`v`, :math:`V` settles near
:math:`\tau a + v`, and the chain is SGLD with step size
:math:`\eta / (\lambda + \sqrt{\tau a + v})`. The tuner chooses :math:`\eta`
from that picture, with the least-curved direction's (largest) scale applied
to every direction, which bounds the inflation from above.

That picture holds while :math:`V` averages over many relaxation times. A
running mean over the last :math:`M = 1 / (1 - \alpha)` steps of a chain
that relaxes in :math:`R` steps follows the chain's recent path: it is larger
in the tails, where the gradient is larger, so :math:`G` is smaller there
and the chain lingers. Without :math:`\Gamma` (which accounts only for the
newest gradient) the chain then samples approximately
:math:`p(\theta) / G(\theta)`, whose variance on a Gaussian target exceeds
the posterior's by up to :math:`R / (R + 2M)`. Li et al.'s
:math:`\alpha = 0.99` (:math:`M = 100`) gives 8% at :math:`R = 18`, a
typical relaxation time. By default :class:`PSGLD` therefore chooses
:math:`M` as ``memory_relaxations`` (100) times the relaxation time the tuner
predicts, which bounds this term by :math:`1 / 201`, and starts :math:`V` at
its settled value per coordinate (measured at the mode); a given ``decay``
has its term counted in the step-size choice and in the predicted inflation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import jacobian

from pymc_sgmcmc.dynamics import ChainInput, Dynamics, StateVariable
from pymc_sgmcmc.samplers.sgld import MOMENTUM_ADVICE, langevin_variance_inflation
from pymc_sgmcmc.step_method import StochasticGradientStep

__all__ = ["PSGLD", "RMSpropLangevin"]


MEMORY_RELAXATIONS = 100


def memory_inflation(relaxation, memory):
    """Return the variance inflation of a running mean of ``memory`` steps (module docstring).

    Parameters
    ----------
    relaxation : float
        Inner steps over which the chain relaxes.
    memory : float
        Steps the running mean of squared gradients averages over, ``1 / (1 - alpha)``.
    """
    return relaxation / (relaxation + 2.0 * memory)


@dataclass(frozen=True)
class _RMSpropGaussian:
    """pSGLD on a Gaussian target: SGLD with the step size scaled by the settled ``G``.

    ``memory`` is the given running mean's length in steps, or None when it is
    chosen as ``MEMORY_RELAXATIONS`` relaxation times.
    """

    regularizer: float
    temperature: float
    smallest_curvature: float
    largest_curvature: float
    memory: float | None

    def scale(self, curvature, noise=0.0):
        """Return the settled preconditioner ``G`` at ``curvature`` (``noise`` is ``v / tau``)."""
        return 1.0 / (self.regularizer + np.sqrt(self.temperature * (curvature + noise)))

    def inflation(self, step_size, curvature, noise):
        effective = step_size * self.scale(self.smallest_curvature, noise)
        if effective * curvature >= 2.0:
            return np.inf
        if self.memory is None:
            path = memory_inflation(1.0, MEMORY_RELAXATIONS)
        else:
            path = memory_inflation(self.relaxation(step_size, curvature, noise), self.memory)
        return langevin_variance_inflation(effective, curvature, noise) + path

    def relaxation(self, step_size, curvature, noise=0.0):
        # The settled preconditioner is smallest, and the chain slowest, where
        # the gradient noise adds most to the running mean.
        contraction = abs(1.0 - step_size * self.scale(curvature, noise) * curvature)
        return np.inf if contraction >= 1.0 else -1.0 / np.log(contraction)

    def largest_step_size(self, largest_curvature):
        return 2.0 / (largest_curvature * self.scale(self.smallest_curvature))

    def chain_inputs(self):
        return {}


class RMSpropLangevin(Dynamics):
    r"""Langevin dynamics preconditioned by a running mean of squared gradients (pSGLD).

    Parameters
    ----------
    decay : float, optional
        Weight :math:`\alpha` of the past in the running mean. By default
        :math:`1 - 1 / M` with :math:`M` 100 relaxation times of the chain
        (see the module docstring); Li et al. use 0.99.
    regularizer : float, default 1e-5
        :math:`\lambda`, which bounds the preconditioner by ``1 / lambda``.
    correction : bool, default False
        Add the correction term :math:`\tau \Gamma` of the position-dependent
        preconditioner (D extra gradient passes per inner step).
    """

    name = "psgld"
    state = (StateVariable("square"),)
    chain_inputs_spec = (
        ChainInput("temperature", scalar=True),
        ChainInput("preconditioner"),
        ChainInput("decay", scalar=True),
        ChainInput("regularizer", scalar=True),
        ChainInput("initial_square"),
    )
    position_inputs = ("correction",)
    exact_gaussian_model = False

    def __init__(self, decay=None, regularizer=1e-5, correction=False):
        if decay is not None and not 0 < decay < 1:
            raise ValueError(f"decay must be between 0 and 1, or None to choose it; got {decay!r}.")
        if not regularizer > 0:
            raise ValueError(f"regularizer must be positive, got {regularizer!r}.")
        if correction not in (True, False):
            raise ValueError(f"correction must be True or False, got {correction!r}.")
        self.decay = None if decay is None else float(decay)
        self.regularizer = float(regularizer)
        self.correction = bool(correction)

    def graph_options(self):
        """Return whether the kernel computes the correction term."""
        return (self.correction,)

    def kernel_mode(self):
        """Return ``"CVM"`` with the correction: its Hessian diagonal compiles faster with C."""
        return "CVM" if self.correction else None

    def fixed_position_terms(self, size):
        """Return the correction term as zeros, unless ``correction=True``."""
        return None if self.correction else {"correction": np.zeros(size)}

    @staticmethod
    def _square(state, gradient, inputs):
        decay, preconditioner = inputs["decay"], inputs["preconditioner"]
        return decay * state["square"] + (1.0 - decay) * preconditioner * gradient**2

    def position_terms(self, state, gradient, log_prior, inputs):
        """Return the correction term (zero unless ``correction=True``)."""
        if not self.correction:
            return {"correction": pt.zeros_like(gradient)}
        position = state["position"]
        hessian_diagonal = pt.diagonal(jacobian(gradient, position, vectorize=True))
        square = self._square(state, gradient, inputs)
        preconditioner = inputs["preconditioner"]
        scale = 1.0 / (inputs["regularizer"] + pt.sqrt(square))
        derivative = (
            -(1.0 - inputs["decay"]) * scale**2 * preconditioner * gradient * hessian_diagonal
        ) / pt.sqrt(square)
        return {"correction": preconditioner * derivative}

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Update the running mean, then take the preconditioned Langevin step."""
        step_size, temperature = inputs["step_size"], inputs["temperature"]
        preconditioner = inputs["preconditioner"]
        square = RMSpropLangevin._square(state, gradient, inputs)
        scale = preconditioner / (inputs["regularizer"] + square**0.5)
        drift = step_size * scale * gradient + step_size * temperature * inputs["correction"]
        diffusion = (2.0 * step_size * temperature * scale) ** 0.5 * noise[0]
        return {"position": state["position"] + drift + diffusion, "square": square}

    def chain_inputs(self, preconditioner, temperature, tuned):
        """Return the temperature, preconditioner, decay, regulariser and starting mean.

        The default decay keeps the running mean over ``MEMORY_RELAXATIONS``
        predicted relaxation times; the mean starts at the measured mean square
        gradient (1 where nothing was measured).
        """
        decay = self.decay
        if decay is None:
            relaxation = tuned.get("relaxation", 1.0)
            decay = 1.0 - 1.0 / (MEMORY_RELAXATIONS * max(float(relaxation), 1.0))
        square = tuned.get("mean_square_gradient")
        if square is None:
            square = np.ones_like(preconditioner, dtype=float)
        return {
            "temperature": np.float64(temperature),
            "preconditioner": preconditioner,
            "decay": np.float64(decay),
            "regularizer": np.float64(self.regularizer),
            "initial_square": np.asarray(square, dtype="float64"),
        }

    def initial_state(self, position, inputs, rng):
        """Start the running mean at its settled value on the Laplace picture."""
        square = np.broadcast_to(inputs["initial_square"], position.shape).astype(float)
        return {"position": position, "square": square}

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return the settled-preconditioner model (see the module docstring)."""
        memory = None if self.decay is None else 1.0 / (1.0 - self.decay)
        return _RMSpropGaussian(self.regularizer, temperature, *curvatures, memory)

    def stiffness_advice(self):
        """Also name SGHMC, whose momentum relaxes faster across spread curvatures."""
        return f"{super().stiffness_advice()}, {MOMENTUM_ADVICE}"

    def over_budget_advice(self):
        """Return the advice when no step size meets the budget."""
        if self.decay is not None:
            return "leave decay unset to have it chosen from the chain's relaxation time"
        return super().over_budget_advice()


class PSGLD(StochasticGradientStep):
    r"""Preconditioned SGLD with an RMSprop preconditioner (Li et al., 2016).

    Each inner step draws a minibatch, updates the running mean of squared
    gradients :math:`V \leftarrow \alpha V + (1 - \alpha) \hat g^2` and moves

    .. math::

        \theta \leftarrow \theta + \eta\, G \hat g + \eta \tau \Gamma
            + \sqrt{2 \eta \tau G}\, \xi, \qquad G = 1 / (\lambda + \sqrt{V}),

    in the coordinates of the tuner's metric. The correction term
    :math:`\Gamma` is dropped (as by Li et al.) unless ``correction=True``.
    The step size is chosen from the bias budget as for
    :class:`~pymc_sgmcmc.SGLD`.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    decay : float, optional
        :math:`\alpha`; by default chosen from the chain's relaxation time so
        that the running mean's memory spans 100 relaxation times (Li et al.
        use 0.99, which biases the variance upwards, see
        :mod:`pymc_sgmcmc.samplers.psgld`).
    regularizer : float, default 1e-5
        :math:`\lambda`.
    correction : bool, default False
        Compute :math:`\Gamma` by autodiff (D extra gradient passes per step).
    **kwargs
        As for :class:`~pymc_sgmcmc.SGLD`.
    """

    name = "psgld"
    dynamics_class = RMSpropLangevin
