"""Fused compiled kernel: many inner steps of a sampler in one compiled call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.estimators import GradientEstimator
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = ["Kernel", "KernelResult"]


@dataclass(frozen=True)
class KernelResult:
    """What one call of a :class:`Kernel` returns.

    Attributes
    ----------
    position : ndarray
        State after the last finite inner step.
    auxiliary : tuple of ndarray
        Auxiliary state (e.g. momentum) after the last finite inner step.
    log_density : float
        Minibatch log-density estimate at ``position``, on the last batch.
    gradient_norm : float
        Norm of the gradient estimate at the start of the last inner step.
    steps_taken : int
        Inner steps taken before the first non-finite state or gradient (all
        of them when there was none).
    """

    position: np.ndarray
    auxiliary: tuple
    log_density: float
    gradient_norm: float
    steps_taken: int


class Kernel:
    """K inner steps of a stochastic-gradient sampler, compiled by PyTensor.

    One call reads the state, the row indices of K minibatches (a K x B
    integer array), K standard normal draws (K x D) and K step sizes, and runs
    all K steps in a compiled ``scan``. Random numbers are drawn outside the
    graph by the caller, from the chain's generator, in one go per call, so a
    chain is reproducible from its seed alone. When a step produces a
    non-finite state or gradient, the state stays at the last finite one for
    the rest of the call.

    Only the minibatch rows are read at each step: the graph indexes the data
    with the batch's indices, so the cost of a step does not depend on N.

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
        Passed to :func:`pymc.compile`, e.g. ``{"mode": "NUMBA"}`` to choose
        PyTensor's backend.
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
        state_inputs = [position, *auxiliary]
        checked = pt.concatenate([gradient_norm[None], new_state[0]])
        finite = ~(pt.any(pt.isnan(checked)) | pt.any(pt.isinf(checked)))
        # ``alive`` turns false at the first non-finite step and stays false:
        # from then on the state stays at the last finite one.
        alive = pt.scalar("alive", dtype="bool")
        still_alive = alive & finite
        kept_state = [
            pt.switch(still_alive, new, old)
            for new, old in zip(new_state, state_inputs, strict=True)
        ]
        step_outputs = [*kept_state, still_alive, gradient_norm]

        named_inputs = {**hyper_inputs, **estimator.inputs}
        sequence_inputs = [density.indices, noise, step_size]
        placeholders = [*sequence_inputs, *state_inputs, alive, *named_inputs.values()]

        def inner_step(*arguments):
            # scan passes the sequences, then the state, then the non-sequences.
            return graph_replace(
                step_outputs, dict(zip(placeholders, arguments, strict=True)), strict=False
            )

        batch_indices = pt.matrix("batch_indices", dtype=density.indices.dtype)
        noises = pt.matrix("noises", dtype="float64")
        step_sizes = pt.vector("step_sizes", dtype="float64")
        initial_state = [
            pt.vector(f"initial_{i}", dtype="float64") for i in range(len(state_inputs))
        ]
        named_values = [
            pt.tensor(name, shape=variable.type.shape, dtype=variable.dtype)
            for name, variable in named_inputs.items()
        ]
        outputs, _ = pytensor.scan(
            inner_step,
            sequences=[batch_indices, noises, step_sizes],
            outputs_info=[*initial_state, pt.as_tensor(np.True_), None],
            non_sequences=named_values,
            n_steps=batch_indices.shape[0],
            strict=False,
            return_list=True,
        )
        *states, alive_steps, norms = outputs
        steps_taken = pt.sum(alive_steps)
        results = [s[-1] for s in states]
        # The log density is a statistic only: evaluated once, at the returned
        # position with the last batch, not inside the loop.
        log_density = graph_replace(
            density.log_density,
            {density.position: results[0], density.indices: batch_indices[-1]},
            strict=False,
        )
        inputs = [*initial_state, batch_indices, noises, step_sizes, *named_values]
        self.input_names = tuple(named_inputs)
        self.n_auxiliary = n_auxiliary
        # Numba's fast-math flags let LLVM assume values are finite, which would
        # remove the divergence check; the kernel is compiled without them.
        with pytensor.config.change_flags(numba__fastmath=False):
            self._function = pm.compile(
                inputs,
                [*results, log_density, norms[-1], steps_taken],
                **(compile_kwargs or {}),
            )
        self._function.trust_input = True

    def __call__(
        self,
        position: np.ndarray,
        auxiliary: Sequence[np.ndarray],
        indices: np.ndarray,
        noise: np.ndarray,
        step_sizes: np.ndarray,
        named_values: Sequence[np.ndarray],
    ) -> KernelResult:
        """Take ``len(indices)`` inner steps from ``position``.

        ``indices`` holds one minibatch of row indices per row, ``noise`` one
        standard normal draw per row and ``step_sizes`` one step size per
        step. ``named_values`` are the hyperparameters and estimator inputs,
        in the order of :attr:`input_names`.
        """
        *state, log_density, gradient_norm, steps_taken = self._function(
            position, *auxiliary, indices, noise, step_sizes, *named_values
        )
        return KernelResult(
            state[0], tuple(state[1:]), float(log_density), float(gradient_norm), int(steps_taken)
        )
