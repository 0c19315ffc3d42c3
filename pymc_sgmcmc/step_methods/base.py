"""PyMC adapter shared by the stochastic-gradient step methods."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.util import get_random_generator, get_value_vars_from_user_vars

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.kernel import Kernel
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.schedules import as_schedule

__all__ = ["StochasticGradientStep"]

_log = logging.getLogger("pymc")


def _positive_integer(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


class StochasticGradientStep(ArrayStepShared):
    """Base class of the stochastic-gradient step methods.

    A subclass supplies the update rule (:meth:`update`), its hyperparameters
    (:meth:`hyperparameters`), the initial auxiliary state of a chain
    (:meth:`initial_auxiliary`) and a default step size. Everything else
    (minibatch log density, index streams, random numbers, schedules,
    statistics, divergence handling, per-chain reset) lives here.

    Sampler statistics, one value per recorded draw:

    - ``step_size``: step size of the last inner step.
    - ``gradient_norm``: Euclidean norm of the minibatch gradient estimate at
      the start of the last inner step.
    - ``log_density``: minibatch estimate of the log posterior (up to a
      constant) at the start of the last inner step.
    - ``diverging``: True once the state or its gradient became non-finite;
      the chain then stays at its last finite state.
    """

    name = "stochastic_gradient"
    default_blocked = True
    n_auxiliary = 0
    stats_dtypes_shapes: ClassVar[dict] = {
        "step_size": (np.float64, []),
        "gradient_norm": (np.float64, []),
        "log_density": (np.float64, []),
        "diverging": (bool, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        batch_size: int | None = None,
        step_size=None,
        temperature: float = 1.0,
        steps_per_draw: int = 1,
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

        shared = pm.make_shared_replacements(initial_point, vars, model)
        self.density = build_minibatch_log_density(model, vars, shared)
        n_rows = self.density.n_rows
        if batch_size is None:
            batch_size = min(100, n_rows)
        self.batches = IndexStream(n_rows, batch_size, replace=replace)
        self.batch_size = self.batches.batch_size
        self.temperature = float(temperature)
        self.steps_per_draw = _positive_integer("steps_per_draw", steps_per_draw)
        if step_size is None:
            step_size = self.default_step_size(n_rows, self.batch_size)
        self.step_size = as_schedule(step_size)
        self.kernel = Kernel(
            self.density,
            self.update,
            self.n_auxiliary,
            self.hyperparameters(),
            compile_kwargs,
        )
        super().__init__(vars, shared, blocked=blocked, rng=rng)
        self._reset_chain()

    # Subclass interface -------------------------------------------------------

    @staticmethod
    def update(position, *auxiliary, gradient, noise, step_size, **hyperparameters):
        """Return the new state; implemented by each sampler."""
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, float | np.ndarray]:
        """Return the values passed to :meth:`update` besides the state and step size."""
        return {"temperature": self.temperature}

    def initial_auxiliary(self, size: int) -> tuple[np.ndarray, ...]:
        """Return the auxiliary state at the start of a chain."""
        return ()

    @staticmethod
    def default_step_size(n_rows: int, batch_size: int) -> float:
        """Return the step size used when none is given."""
        raise NotImplementedError

    # Chain life cycle -----------------------------------------------------------

    def _reset_chain(self) -> None:
        """Forget all per-chain state: PyMC reuses one step object for every chain."""
        self.tune = True
        self.batches.reset()
        self._steps_taken = 0
        self._auxiliary = None
        self._diverged = False

    def set_rng(self, rng) -> None:
        """Start a chain with generator ``rng`` (PyMC 5)."""
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """Start a chain with generator ``rng`` (PyMC 6)."""
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    # Sampling ---------------------------------------------------------------------

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        """Run ``steps_per_draw`` inner steps from ``q0`` and return the last state."""
        position = q0.data
        if self._auxiliary is None:
            self._auxiliary = self.initial_auxiliary(position.size)
        n_steps = self.steps_per_draw
        step_sizes = self.step_size(self._steps_taken + np.arange(n_steps))
        if self._diverged:
            stats = self._stats(step_sizes[-1], np.nan, np.nan)
            return q0, [stats]

        indices = self.batches.draw(self.rng, n_steps)
        noise = self.rng.standard_normal((n_steps, position.size))
        hyperparameters = [np.asarray(v, dtype="float64") for v in self.hyperparameters().values()]
        auxiliary = self._auxiliary
        log_density = gradient_norm = np.nan
        for k in range(n_steps):
            new_position, new_auxiliary, log_density, gradient_norm = self.kernel(
                position, auxiliary, indices[k], noise[k], step_sizes[k], hyperparameters
            )
            if not (np.isfinite(gradient_norm) and np.all(np.isfinite(new_position))):
                self._diverge(step_sizes[k])
                break
            position, auxiliary = new_position, new_auxiliary
        self._auxiliary = auxiliary
        self._steps_taken += n_steps
        stats = self._stats(step_sizes[-1], log_density, gradient_norm)
        return RaveledVars(position, q0.point_map_info), [stats]

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
        return {
            "step_size": float(step_size),
            "gradient_norm": float(gradient_norm),
            "log_density": float(log_density),
            "diverging": self._diverged,
        }
