r"""The dynamics protocol: what a stochastic-gradient sampler declares.

A sampler of this package is one :class:`Dynamics` subclass. It declares

- its **state** besides the position (:attr:`Dynamics.state`: names, and
  whether each entry is a vector over the coordinates or a scalar, such as a
  thermostat);
- the standard normal **noise** it reads per inner step
  (:attr:`Dynamics.noise_vectors` vectors over the coordinates);
- its **inputs**: values fixed for a chain (:attr:`Dynamics.chain_inputs`,
  e.g. temperature, preconditioner, friction) and values that change every
  inner step (:attr:`Dynamics.step_inputs`, e.g. the step size);
- its **update rule**, one pure function :meth:`Dynamics.step` that works on
  numpy arrays and on PyTensor variables alike;
- its **statistics** (:attr:`Dynamics.stats` and :meth:`Dynamics.statistics`);
- its **Gaussian tuning rule** (:meth:`Dynamics.gaussian_model`, or ``None``):
  the stationary variance of the chain on a Gaussian target, from which
  :mod:`pymc_sgmcmc.tuning` chooses the step size;
- optionally, **position terms** (:meth:`Dynamics.position_terms`): symbolic
  values the update reads besides the gradient, such as a position-dependent
  metric and its correction term, built by PyTensor's autodiff from the log
  prior and the gradient estimate inside the kernel;
- optionally, how a tuned step size becomes a **schedule**
  (:meth:`Dynamics.schedule`) and the per-step inputs a schedule gives
  (:meth:`Dynamics.step_values`), e.g. a cyclical step size with an
  exploration stage.

The kernel (:mod:`pymc_sgmcmc.kernel`) compiles ``K`` inner steps from the
declaration; the PyMC adapter (:mod:`pymc_sgmcmc.step_method`) turns any
declaration into a step method. Every sampler uses one update convention: with
:math:`\hat g` the unbiased minibatch estimate of the gradient of the log
posterior, :math:`\eta` the step size, :math:`\tau` the temperature and
:math:`P` a preconditioner, overdamped Langevin dynamics moves
:math:`\theta \leftarrow \theta + \eta P \hat g + \sqrt{2 \eta \tau P}\,\xi`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from pymc_sgmcmc.schedules import ConstantStepSize

__all__ = ["ChainInput", "Dynamics", "Entry", "GaussianModel", "StateVariable"]


@dataclass(frozen=True)
class Entry:
    """A named value a declaration lists: a vector over the coordinates or a scalar.

    Attributes
    ----------
    name : str
        Its key in the mapping the update rule reads.
    scalar : bool, default False
        A scalar instead of a vector over the coordinates.
    """

    name: str
    scalar: bool = False


class StateVariable(Entry):
    """One entry of a sampler's state besides the position (e.g. a momentum or a thermostat)."""


class ChainInput(Entry):
    """A value the update rule reads that stays fixed for a chain (e.g. the temperature)."""


class GaussianModel(Protocol):
    r"""A sampler's exact behaviour on a Gaussian target, in preconditioned coordinates.

    On the target :math:`N(0, \tau / a)` (curvature :math:`a`, temperature
    :math:`\tau`) with gradient noise of variance :math:`v`, a sampler whose
    update is linear in the state has a stationary variance known in closed
    form. The tuner asks for it at the curvatures the measurements span; a
    model may also offer ``largest_inflation(step_size, curvatures, noise)``,
    the largest inflation over an array of curvatures in one evaluation,
    which the tuner then uses instead of asking curvature by curvature, and
    ``before_curvature_check()``, the model to use until a tune window has
    measured the curvature at the chain's draws.
    """

    def inflation(self, step_size: float, curvature: float, noise: float) -> float:
        """Return the relative excess of the stationary variance over ``tau / a``.

        ``noise`` is the gradient-noise variance divided by the temperature.
        """

    def relaxation(self, step_size: float, curvature: float, noise: float = 0.0) -> float:
        """Return the inner steps over which the slowest mode at ``curvature`` decays by e.

        ``noise`` (as for :meth:`inflation`) matters to samplers whose
        preconditioner adapts to the gradient noise (pSGLD); the others ignore it.
        """

    def largest_step_size(self, largest_curvature: float) -> float:
        """Return an upper bound of the stable step sizes."""

    def chain_inputs(self) -> dict[str, Any]:
        """Return the chain inputs this model assumed (e.g. a chosen friction)."""


class Dynamics(ABC):
    """A stochastic-gradient sampler, declared.

    Subclasses set the class attributes and implement :meth:`step` and
    :meth:`chain_inputs`; :meth:`initial_state`, :meth:`statistics` and
    :meth:`gaussian_model` have defaults (no auxiliary state, no statistics,
    no tuning rule). An instance holds the user's sampler-specific options
    (e.g. SGHMC's friction); everything a chain measures comes in through the
    arguments.

    Attributes
    ----------
    name : str
        Short lower-case name.
    state : tuple of StateVariable
        State entries besides ``"position"``.
    noise_vectors : int
        Standard normal vectors over the coordinates read per inner step.
    chain_inputs_spec : tuple of ChainInput
        Inputs fixed for a chain.
    step_inputs : tuple of str
        Scalar inputs that take a new value at every inner step.
    stats : dict of str to dtype
        Scalar sampler statistics returned by :meth:`statistics`.
    position_inputs : tuple of str
        Names of the vectors over the coordinates :meth:`position_terms`
        returns.
    position_terms_read_gradient : bool
        Whether :meth:`position_terms` reads the gradient estimate; terms that
        read only the state can also be compiled as a function of their own,
        which the interpreted loop (:mod:`pymc_sgmcmc.loop`) calls.
    exact_gaussian_model : bool
        Whether :meth:`gaussian_model` is the chain's exact stationary law on a
        Gaussian target (True) or a bound the step size is chosen from. Only
        an exact model's inflation gives the first-order move of the means
        that full-data steps are bound by (:mod:`pymc_sgmcmc.tuning.tempering`)
        and the noise of minibatches on epochs (:mod:`pymc_sgmcmc.tuning.epochs`).
    """

    name: ClassVar[str]
    state: ClassVar[tuple[StateVariable, ...]] = ()
    noise_vectors: ClassVar[int] = 1
    chain_inputs_spec: ClassVar[tuple[ChainInput, ...]] = (ChainInput("temperature", True),)
    step_inputs: ClassVar[tuple[str, ...]] = ("step_size",)
    stats: ClassVar[dict[str, type]] = {}
    position_inputs: ClassVar[tuple[str, ...]] = ()
    position_terms_read_gradient: ClassVar[bool] = True
    exact_gaussian_model: ClassVar[bool] = True

    @staticmethod
    @abstractmethod
    def step(
        state: Mapping[str, Any], gradient, noise, inputs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the state after one inner step.

        Parameters
        ----------
        state : mapping of str to array
            ``"position"`` and the entries of :attr:`state`.
        gradient : array
            Estimate of the gradient of the log posterior at the position.
        noise : array
            Standard normal draws, shape ``(noise_vectors, D)``.
        inputs : mapping of str to array
            Chain inputs and step inputs by name.
        """

    @abstractmethod
    def chain_inputs(
        self, preconditioner: np.ndarray, temperature: float, tuned: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """Return the chain inputs of the update rule.

        Parameters
        ----------
        preconditioner : ndarray
            Diagonal preconditioner ``P`` of the chain.
        temperature : float
            Temperature ``tau``.
        tuned : mapping
            What the Gaussian model chose (:meth:`GaussianModel.chain_inputs`)
            and what the tuner measured: ``"mode"`` and ``"mean_square_gradient"``
            (per coordinate, in the chain's coordinates) and the predicted
            ``"relaxation"`` in inner steps; empty when nothing was measured.
        """

    def initial_state(
        self, position: np.ndarray, inputs: Mapping[str, np.ndarray], rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Return the state at the start of a chain (by default the position alone)."""
        return {"position": position}

    def statistics(self, state: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Return the sampler statistics of a state (none by default)."""
        return {}

    def gaussian_model(
        self,
        curvatures: tuple[float, float],
        preconditioner: np.ndarray,
        config,
        temperature: float = 1.0,
    ) -> GaussianModel | None:
        """Return the Gaussian model the tuner chooses the step size with, or None.

        Parameters
        ----------
        curvatures : (float, float)
            Smallest and largest curvature in preconditioned coordinates.
        preconditioner : ndarray
            Diagonal preconditioner ``P``.
        config : TuningConfig
            The tuner's constants.
        temperature : float, default 1
            The temperature the chain runs at.
        """
        return None

    def fixed_position_terms(self, size: int) -> dict[str, np.ndarray] | None:
        """Return the position terms as arrays where they do not depend on the position.

        The interpreted loop (:mod:`pymc_sgmcmc.loop`) passes them to
        :meth:`step` without computing them; by default only dynamics
        without position terms have fixed ones.

        Parameters
        ----------
        size : int
            Number of coordinates.

        Returns
        -------
        dict of str to ndarray or None
            The values of :attr:`position_inputs`, or None where
            :meth:`position_terms` depends on the position.
        """
        return None if self.position_inputs else {}

    def position_terms(
        self, state: Mapping[str, Any], gradient, log_prior, inputs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return symbolic values the update reads besides the gradient (none by default).

        Called once, inside the kernel, with PyTensor variables; the values
        are passed to :meth:`step` among its inputs, under the names of
        :attr:`position_inputs`.

        Parameters
        ----------
        state : mapping of str to TensorVariable
            ``"position"`` (in the coordinates the chain runs in) and the state.
        gradient : TensorVariable or None
            The gradient estimate at the position, a graph of the position;
            None where the terms are compiled on their own, which
            :attr:`position_terms_read_gradient` false allows.
        log_prior : callable
            Maps a position (TensorVariable) to the log prior density there,
            with the Jacobians of the transforms.
        inputs : mapping of str to TensorVariable
            Chain inputs and step inputs by name.
        """
        return {}

    def graph_options(self) -> tuple:
        """Return the options that change the kernel's graph (none by default).

        Kernels are compiled once per dynamics class, gradient estimator,
        metric and these options.
        """
        return ()

    def fused_kernel_is_faster(self) -> bool:
        """Return whether the fused kernel takes a step faster than the interpreted loop.

        Where it does not, a chain stays in the loop and never compiles the
        kernel (unless it runs on JAX or ``TuningConfig.interpreted_steps``
        is 0); by default it does.
        """
        return True

    def kernel_mode(self) -> str | None:
        """Return the PyTensor backend the kernel compiles fastest with, or None for the default.

        Graphs with nested autodiff (a Hessian diagonal and its derivative)
        take Numba minutes to compile and the C backend (``"CVM"``) seconds.
        """
        return None

    def schedule(self, step_size: float, steps_per_draw: int, relaxation: float = np.nan):
        """Return the schedule a tuned or given constant step size runs as.

        By default the step size itself (:class:`~pymc_sgmcmc.ConstantStepSize`).
        ``relaxation`` is the predicted inner steps over which the chain's
        slowest mode decays by e (NaN where nothing was measured), for
        schedules whose stages must span it.
        """
        return ConstantStepSize(step_size)

    def step_values(self, schedule, steps: np.ndarray) -> dict[str, np.ndarray]:
        """Return the per-step inputs of the steps numbered ``steps`` (by default the step size)."""
        return {"step_size": np.asarray(schedule(steps), dtype="float64")}

    def draw_steps(self, schedule, first_step, steps: int):
        """Return the inner steps of a draw that starts at step ``first_step``.

        By default ``steps``, the draw's share of the tuned steps per draw.
        Dynamics whose schedule has stages that must not end a draw (cyclical
        SGLD's exploration) return more. ``first_step`` may also be an array
        of first steps, one per draw; the result then broadcasts to its shape.
        """
        return steps

    def period(self, schedule) -> int | None:
        """Return the inner steps after which the per-step inputs and draws' lengths repeat.

        :meth:`step_values` and :meth:`draw_steps` then depend on a step's
        number only through its remainder by the period, and are computed
        once per remainder: 1 for a constant step size (by default), None
        where they do not repeat.
        """
        return 1 if isinstance(schedule, ConstantStepSize) else None

    def over_budget_advice(self) -> str:
        """Return the advice of the warning when no step size meets the bias budget."""
        return "use control_variate=True, a larger batch_size or a larger bias_budget"

    def stiffness_advice(self) -> str:
        """Return the advice when the spread of the curvatures, not the noise, slows the chain."""
        return (
            "reparameterise the model so that its scales are closer (a hierarchical scale "
            "near 0 spreads them most), or use a larger bias_budget"
        )

    def check_size(self, size: int) -> None:  # noqa: B027 (optional hook)
        """Raise ValueError if an option does not fit ``size`` coordinates (none by default)."""

    def accepts_metric(self) -> bool:
        """Return whether the chain may run in a metric's coordinates (True by default).

        Dynamics whose given options are in the model's coordinates (e.g. a
        mass) return False; they then run with a diagonal preconditioner.
        """
        return True

    def needs_measurements(self) -> bool:
        """Return whether the chain inputs depend on measurements (besides the step size)."""
        return False
