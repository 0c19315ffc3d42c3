"""Compiled inner step: minibatch gradient estimate followed by an update rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_sgmcmc.estimators import GradientEstimator
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = ["Kernel"]


class Kernel:
    """One inner step of a stochastic-gradient sampler, compiled by PyTensor.

    The compiled function reads the state, a batch of row indices, a standard
    normal draw and the step size, and returns the new state together with
    the minibatch log-density estimate and the gradient norm at the old state.
    Random numbers are drawn outside the graph by the caller, from the chain's
    generator, so a chain is reproducible from its seed alone.

    Parameters
    ----------
    density : MinibatchLogDensity
        Symbolic minibatch estimate of the log density.
    estimator : GradientEstimator
        The gradient estimate the update rule uses.
    update : callable
        Update rule ``update(position, *auxiliary, gradient=, noise=,
        step_size=, **hyperparameters)`` returning the new position, or the
        tuple of the new position and auxiliary variables.
    n_auxiliary : int
        Number of auxiliary state vectors (e.g. 1 for a momentum).
    hyperparameters : mapping of str to float or array
        Values fixing the type (scalar or vector) of each hyperparameter input;
        any of them may change between calls without recompiling.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile` (e.g. ``mode``).
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        estimator: GradientEstimator,
        update: Callable,
        n_auxiliary: int,
        hyperparameters: Mapping[str, float | np.ndarray],
        compile_kwargs: dict | None = None,
    ):
        position = density.position
        auxiliary = [pt.vector(f"auxiliary_{i}", dtype="float64") for i in range(n_auxiliary)]
        noise = pt.vector("noise", dtype="float64")
        step_size = pt.scalar("step_size", dtype="float64")
        hyper_inputs = {
            name: pt.tensor(name, shape=(None,) * np.ndim(value), dtype="float64")
            for name, value in hyperparameters.items()
        }
        new_state = update(
            position,
            *auxiliary,
            gradient=estimator.gradient,
            noise=noise,
            step_size=step_size,
            **hyper_inputs,
        )
        if not isinstance(new_state, tuple):
            new_state = (new_state,)
        gradient_norm = pt.sqrt(pt.sum(estimator.gradient**2))
        outputs = [*new_state, density.log_density, gradient_norm]
        named_inputs = {**hyper_inputs, **estimator.inputs}
        inputs = [position, *auxiliary, density.indices, noise, step_size, *named_inputs.values()]
        self.input_names = tuple(named_inputs)
        self.n_auxiliary = n_auxiliary
        self._function = pm.compile(inputs, outputs, **(compile_kwargs or {}))
        self._function.trust_input = True

    def __call__(
        self,
        position: np.ndarray,
        auxiliary: Sequence[np.ndarray],
        indices: np.ndarray,
        noise: np.ndarray,
        step_size: float,
        named_values: Sequence[np.ndarray],
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...], float, float]:
        """Take one step; return ``(position, auxiliary, log_density, gradient_norm)``.

        ``named_values`` are the hyperparameters and estimator inputs, in the
        order of :attr:`input_names`.
        """
        *state, log_density, gradient_norm = self._function(
            position, *auxiliary, indices, noise, np.asarray(step_size), *named_values
        )
        return state[0], tuple(state[1:]), float(log_density), float(gradient_norm)
