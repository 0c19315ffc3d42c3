"""PyMC adapter shared by the stochastic-gradient step methods."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.util import get_random_generator, get_value_vars_from_user_vars

from pymc_sgmcmc.adaptation import Measurements, measure
from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import DataProbe, control_variate_gradient, minibatch_gradient
from pymc_sgmcmc.kernel import Kernel
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.schedules import ConstantStepSize, as_schedule

__all__ = ["ChainSettings", "StochasticGradientStep"]

_log = logging.getLogger("pymc")

#: PyTensor backend of the compiled kernels unless ``compile_kwargs`` names a
#: ``mode``. Numba ships with PyTensor and runs a fused loop of minibatch steps
#: several times faster than the C backend (see docs/performance.md).
DEFAULT_MODE = "NUMBA"

#: Seed of the generator the adaptation's measurements use (see ``_measure``).
ADAPTATION_SEED = 20_141_217

#: Builders of the gradient estimators, by name.
GRADIENT_ESTIMATORS = {"minibatch": minibatch_gradient, "control_variate": control_variate_gradient}

#: Relative cost of one inner step of each gradient estimator.
ESTIMATOR_COST = {"minibatch": 1.0, "control_variate": 2.0}


def _positive_integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


@dataclass
class ChainSettings:
    """Everything a chain samples with, fixed before its first inner step.

    Attributes
    ----------
    estimator : str
        ``"minibatch"`` or ``"control_variate"``.
    step_size : schedule
        Step size of every inner step.
    preconditioner : ndarray
        Diagonal preconditioner ``P`` (posterior scale), constant for the chain.
    steps_per_draw : int
        Inner steps per recorded draw.
    hyperparameters : dict
        Sampler-specific values (e.g. SGHMC's friction and mass).
    gradient_noise : float
        Measured noise variance of the gradient estimate (preconditioned
        coordinates; NaN when nothing was measured).
    predicted_inflation : float
        Predicted relative inflation of the posterior variance (NaN when
        nothing was measured).
    """

    estimator: str
    step_size: object
    preconditioner: np.ndarray
    steps_per_draw: int
    hyperparameters: dict
    gradient_noise: float = np.nan
    predicted_inflation: float = np.nan


class StochasticGradientStep(ArrayStepShared):
    """Base class of the stochastic-gradient step methods.

    A subclass supplies the update rule (:meth:`update`), its hyperparameters
    for given settings (:meth:`hyperparameters`), its step-size rule
    (:meth:`choose_step_size`) and the initial auxiliary state of a chain
    (:meth:`initial_auxiliary`). Everything else (minibatch log density,
    gradient estimators, adaptation, index streams, random numbers,
    statistics, divergence handling, per-chain reset) lives here.

    Adaptation runs when a chain takes its first draw (during ``tune``): the
    chain finds a mode, estimates the posterior scale and the gradient noise
    there, and fixes for the whole chain the gradient estimator, the diagonal
    preconditioner, the step size meeting ``bias_budget`` and the inner steps
    per draw, unless the user gave them. The chain then starts from a draw of
    the Laplace approximation at that mode, taken with the chain's generator.
    The measurements themselves use a fixed seed: chains that start from the
    same point share them, so they are made once per step object and are the
    same whatever ``cores``.

    Sampler statistics, one value per recorded draw:

    - ``step_size``: step size of the last inner step.
    - ``gradient_norm``: Euclidean norm of the gradient estimate at the start
      of the last inner step.
    - ``log_density``: minibatch estimate of the log posterior (up to a
      constant) at the start of the last inner step.
    - ``diverging``: True once the state or its gradient became non-finite;
      the chain then stays at its last finite state.
    - ``control_variate``: whether the chain uses control variates.
    - ``steps_per_draw``: inner steps per draw.
    - ``gradient_noise``: measured variance of the gradient-estimate noise, in
      preconditioned coordinates.
    - ``predicted_inflation``: predicted relative inflation of the posterior
      variance from discretisation and gradient noise.
    """

    name = "stochastic_gradient"
    default_blocked = True
    n_auxiliary = 0
    stats_dtypes_shapes: ClassVar[dict] = {
        "step_size": (np.float64, []),
        "gradient_norm": (np.float64, []),
        "log_density": (np.float64, []),
        "diverging": (bool, []),
        "control_variate": (bool, []),
        "steps_per_draw": (np.int64, []),
        "gradient_noise": (np.float64, []),
        "predicted_inflation": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        batch_size: int | None = None,
        step_size=None,
        temperature: float = 1.0,
        steps_per_draw: int | None = None,
        preconditioner="auto",
        control_variate: bool | None = None,
        control_variate_refresh: int | None = None,
        bias_budget: float = 0.05,
        replace: bool = False,
        model=None,
        initial_point=None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
        rng=None,
    ):
        model = pm.modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        if vars is None:
            vars = model.continuous_value_vars
        else:
            vars = get_value_vars_from_user_vars(vars, model)
        discrete = [var.name for var in vars if var.dtype not in pm.pytensorf.continuous_types]
        if discrete:
            raise ValueError(
                f"{type(self).__name__} samples continuous variables only; assign another "
                f"step method (e.g. pm.Metropolis) to {discrete}."
            )
        if not vars:
            raise ValueError(
                f"The model has no continuous free variables for {type(self).__name__}."
            )
        if not np.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}.")
        if not 0 < bias_budget < 1:
            raise ValueError(f"bias_budget must be between 0 and 1, got {bias_budget!r}.")
        if control_variate not in (None, True, False):
            raise ValueError(
                f"control_variate must be None (automatic), True or False, got {control_variate!r}."
            )

        compile_kwargs = {"mode": DEFAULT_MODE, **(compile_kwargs or {})}
        if str(compile_kwargs["mode"]).upper() == "JAX":
            raise ValueError(
                "PyTensor's JAX backend cannot compile a loop whose length is an input, which "
                "the fused kernels need; use mode='NUMBA' (the default) or 'FAST_RUN'."
            )
        shared = pm.make_shared_replacements(initial_point, vars, model)
        self.density = build_minibatch_log_density(model, vars, shared)
        n_rows = self.density.n_rows
        if batch_size is None:
            batch_size = min(100, n_rows)
        self.batches = IndexStream(n_rows, batch_size, replace=replace)
        self.batch_size = self.batches.batch_size
        self.temperature = float(temperature)
        self.bias_budget = float(bias_budget)
        self.step_size = None if step_size is None else as_schedule(step_size)
        self.steps_per_draw = (
            None if steps_per_draw is None else _positive_integer("steps_per_draw", steps_per_draw)
        )
        self.control_variate_refresh = (
            None
            if control_variate_refresh is None
            else _positive_integer("control_variate_refresh", control_variate_refresh)
        )
        size = sum(int(np.prod(initial_point[v.name].shape, dtype=int)) for v in vars)
        self._size = size
        self.preconditioner = self._check_preconditioner(preconditioner, size)
        estimators = {
            None: ("minibatch", "control_variate"),
            True: ("control_variate",),
            False: ("minibatch",),
        }[control_variate]
        self.estimators = estimators
        self._compile_kwargs = compile_kwargs
        self._kernels = {}
        self._measured = None
        if not self.needs_measurements():
            self.kernel("minibatch")
        self.probe = DataProbe(self.density, compile_kwargs) if self.needs_measurements() else None
        super().__init__(vars, shared, blocked=blocked, rng=rng)
        self._reset_chain()

    @staticmethod
    def _check_preconditioner(preconditioner, size):
        if isinstance(preconditioner, str):
            if preconditioner != "auto":
                raise ValueError(
                    f"preconditioner must be 'auto', None or an array, got {preconditioner!r}."
                )
            return "auto"
        if preconditioner is None:
            return np.ones(size)
        values = np.broadcast_to(np.asarray(preconditioner, dtype=float), (size,)).copy()
        if not np.all(np.isfinite(values) & (values > 0)):
            raise ValueError("preconditioner must hold positive finite numbers.")
        return values

    def needs_measurements(self) -> bool:
        """Return whether chains must measure the posterior before sampling."""
        fixed = (
            self.step_size is not None
            and not isinstance(self.preconditioner, str)
            and self.estimators == ("minibatch",)
            and self.steps_per_draw is not None
        )
        return not fixed

    def kernel(self, estimator: str) -> Kernel:
        """Return the compiled kernel using ``estimator``, compiling it on first use.

        A chain compiles only the kernel its adaptation chooses; the compiled
        kernel is kept for the chains that follow.
        """
        if estimator not in self._kernels:
            settings = self.default_settings(estimator, self._size)
            self._kernels[estimator] = Kernel(
                self.density,
                GRADIENT_ESTIMATORS[estimator](self.density),
                self.update,
                self.n_auxiliary,
                self.hyperparameters(settings),
                self._compile_kwargs,
            )
        return self._kernels[estimator]

    # Subclass interface -------------------------------------------------------

    @staticmethod
    def update(position, *auxiliary, gradient, noise, step_size, **hyperparameters):
        """Return the new state; implemented by each sampler."""
        raise NotImplementedError

    def hyperparameters(self, settings: ChainSettings) -> dict[str, float | np.ndarray]:
        """Return the values passed to :meth:`update` besides the state and step size."""
        return {"temperature": self.temperature, "preconditioner": settings.preconditioner}

    def choose_step_size(self, curvatures, noise) -> tuple[float, dict, float]:
        """Return the step size meeting the bias budget, extra settings and relaxation steps."""
        raise NotImplementedError

    def predicted_inflation(self, step_size, curvatures, noise, extra) -> float:
        """Return the predicted relative variance inflation at ``step_size``."""
        raise NotImplementedError

    def default_settings(self, estimator: str, size: int) -> ChainSettings:
        """Return the settings of a chain that measures nothing.

        They also fix the types of the kernel's inputs at compile time, which
        is all the placeholder step size of a measuring chain is used for.
        """
        preconditioner = (
            np.ones(size) if isinstance(self.preconditioner, str) else self.preconditioner
        )
        return ChainSettings(
            estimator,
            self.step_size or ConstantStepSize(1e-3),
            preconditioner,
            self.steps_per_draw or 1,
            {},
        )

    def initial_auxiliary(self, size: int) -> tuple[np.ndarray, ...]:
        """Return the auxiliary state at the start of a chain."""
        return ()

    # Chain life cycle -----------------------------------------------------------

    def _reset_chain(self) -> None:
        """Forget all per-chain state: PyMC reuses one step object for every chain."""
        self.tune = True
        self.batches.reset()
        self._steps_taken = 0
        self._steps_since_refresh = 0
        self._auxiliary = None
        self._diverged = False
        self.settings = None
        self._centre = None
        self._kernel_inputs = None

    def set_rng(self, rng) -> None:
        """Start a chain with generator ``rng`` (PyMC 5)."""
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """Start a chain with generator ``rng`` (PyMC 6)."""
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def _start_chain(self, position: np.ndarray) -> np.ndarray:
        """Measure the posterior if needed, fix the chain's settings, return its start."""
        size = position.size
        if self.probe is None:
            self.settings = self.default_settings("minibatch", size)
            return position
        measurements = self._measure(position)
        if not measurements.log_concave:
            _log.warning(
                "%s: the Hessian at the mode found is not negative definite; the step-size "
                "rule assumes a roughly Gaussian posterior and may miss its bias budget.",
                type(self).__name__,
            )
        self.settings = self._choose_settings(measurements)
        self._centre = (measurements.mode, measurements.mode_likelihood_gradient)
        start = measurements.mode + measurements.laplace_factor @ self.rng.standard_normal(size)
        return start

    def _measure(self, position: np.ndarray) -> Measurements:
        """Return the measurements around the mode found from ``position``.

        They use a generator of their own with a fixed seed, so every chain
        that starts from the same point measures the same thing, whatever
        ``cores``; the step therefore measures once and the following chains
        reuse the result.
        """
        key = position.tobytes()
        if self._measured is None or self._measured[0] != key:
            rng = np.random.default_rng(ADAPTATION_SEED)
            result = measure(self.probe, self.batch_size, rng, position, self.estimators)
            self._measured = (key, result)
        return self._measured[1]

    def _choose_settings(self, measurements: Measurements) -> ChainSettings:
        preconditioner = (
            measurements.laplace_variance
            if isinstance(self.preconditioner, str)
            else self.preconditioner
        )
        curvatures = measurements.curvatures(preconditioner)
        candidates = []
        for estimator in self.estimators:
            noise = measurements.noise(estimator, preconditioner)
            step_size, extra, relaxation = self.choose_step_size(curvatures, noise)
            cost = relaxation * ESTIMATOR_COST[estimator]
            candidates.append((cost, estimator, noise, step_size, extra, relaxation))
        _, estimator, noise, step_size, extra, relaxation = min(candidates, key=lambda c: c[0])
        if self.step_size is not None:
            schedule = self.step_size
            fixed = isinstance(schedule, ConstantStepSize)
            inflation = (
                self.predicted_inflation(schedule.value, curvatures, noise, extra)
                if fixed
                else np.nan
            )
            if fixed and inflation > self.bias_budget:
                _log.warning(
                    "%s: step_size=%.3g is predicted to inflate the posterior variance by "
                    "%.0f%% (budget %.0f%%); leave step_size unset to have it chosen.",
                    type(self).__name__,
                    schedule.value,
                    100 * inflation,
                    100 * self.bias_budget,
                )
        else:
            schedule = ConstantStepSize(step_size)
            inflation = self.predicted_inflation(step_size, curvatures, noise, extra)
            if relaxation > 500:
                _log.warning(
                    "%s: meeting the bias budget needs step size %.3g, so the chain decorrelates "
                    "only every ~%.0f inner steps; use control_variate=True, a larger "
                    "batch_size or a larger bias_budget.",
                    type(self).__name__,
                    step_size,
                    relaxation,
                )
        steps_per_draw = self.steps_per_draw or int(np.clip(np.ceil(relaxation), 1, 1000))
        return ChainSettings(
            estimator, schedule, preconditioner, steps_per_draw, extra, noise, inflation
        )

    def _refresh_centre(self, position: np.ndarray) -> None:
        """Re-centre the control variate at ``position`` (a full pass over the data)."""
        _, likelihood_gradient = self.probe.full_likelihood(position)
        self._centre = (position.copy(), likelihood_gradient)
        self._steps_since_refresh = 0
        self._kernel_inputs = self.kernel_inputs(self.settings, self._centre)

    def kernel_inputs(self, settings: ChainSettings, centre=None) -> list[np.ndarray]:
        """Return the named inputs of ``settings``' kernel, in its order.

        ``centre`` is the control-variate centre and the full-data likelihood
        gradient there (needed by the control-variate estimator only).
        """
        named = dict(self.hyperparameters(settings))
        if settings.estimator == "control_variate":
            named["centre"], named["centre_likelihood_gradient"] = centre
        kernel = self.kernel(settings.estimator)
        return [np.asarray(named[name], dtype="float64") for name in kernel.input_names]

    # Sampling ---------------------------------------------------------------------

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        """Run the chain's inner steps for one draw from ``q0`` and return the last state."""
        position = q0.data
        if self.settings is None:
            position = self._start_chain(position)
            self._kernel_inputs = self.kernel_inputs(self.settings, self._centre)
        settings = self.settings
        if self._auxiliary is None:
            self._auxiliary = self.initial_auxiliary(position.size)
        n_steps = settings.steps_per_draw
        step_sizes = settings.step_size(self._steps_taken + np.arange(n_steps))
        if self._diverged:
            return q0, [self._stats(step_sizes[-1], np.nan, np.nan)]

        if (
            settings.estimator == "control_variate"
            and self.control_variate_refresh is not None
            and self._steps_since_refresh >= self.control_variate_refresh
        ):
            self._refresh_centre(position)
        kernel = self.kernel(settings.estimator)
        values = self._kernel_inputs

        indices = self.batches.draw(self.rng, n_steps)
        noise = self.rng.standard_normal((n_steps, position.size))
        result = kernel(position, self._auxiliary, indices, noise, step_sizes, values)
        self._auxiliary = result.auxiliary
        self._steps_taken += result.steps_taken
        self._steps_since_refresh += result.steps_taken
        if result.steps_taken < n_steps:
            self._diverge(step_sizes[result.steps_taken])
        stats = self._stats(step_sizes[-1], result.log_density, result.gradient_norm)
        return RaveledVars(result.position, q0.point_map_info), [stats]

    def _diverge(self, step_size: float) -> None:
        self._diverged = True
        _log.warning(
            "%s: the state or its gradient became non-finite after %d inner steps at step "
            "size %.3g; the chain stops moving. Reduce step_size.",
            type(self).__name__,
            self._steps_taken,
            step_size,
        )

    def _stats(self, step_size, log_density, gradient_norm) -> dict:
        settings = self.settings
        return {
            "step_size": float(step_size),
            "gradient_norm": float(gradient_norm),
            "log_density": float(log_density),
            "diverging": self._diverged,
            "control_variate": settings.estimator == "control_variate",
            "steps_per_draw": settings.steps_per_draw,
            "gradient_noise": settings.gradient_noise,
            "predicted_inflation": settings.predicted_inflation,
        }
