"""Inner steps run by a Python loop around the probe's compiled gradient, with nothing to compile.

A fused kernel (:mod:`pymc_sgmcmc.kernel`) runs K inner steps in one
compiled call, but compiling it costs about a second per process with warm
caches and tens of seconds for a model new to them. The
:class:`InterpretedKernel` takes the same inner steps from the same
declaration: it calls the gradient estimator the tuner already compiled
(:class:`~pymc_sgmcmc.estimators.Probe`) once per step and applies the
dynamics' update rule, the metric's maps and the gradient clipping with
numpy. Each step costs tens of microseconds more than in the fused loop,
so a chain starts with it and hands over to the fused kernel once it has
taken enough steps for the compilation to pay (see
:attr:`~pymc_sgmcmc.tuning.TuningConfig.interpreted_steps`); short runs never
compile a kernel.

Position terms that read only the state (SGRLD's metric and its
correction) are compiled as a function of their own
(:class:`PositionTerms`), called once per step; pSGLD's correction, when
asked for, reads the minibatch gradient's derivatives and has no
interpreted form.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pymc as pm
from pymc.logprob.utils import ParameterValueError
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.compiling import numba_flags
from pymc_sgmcmc.direct import direct_call
from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.kernel import KernelResult, StepSymbols, checked_input, tie_lengths
from pymc_sgmcmc.metric import Metric
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = ["InterpretedKernel", "PositionTerms", "interpretable"]


def interpretable(dynamics: Dynamics) -> bool:
    """Return whether ``dynamics`` can run in an :class:`InterpretedKernel`."""
    return dynamics.fixed_position_terms(1) is not None or not dynamics.position_terms_read_gradient


def compiled_terms_needed(dynamics: Dynamics) -> bool:
    """Return whether the interpreted loop of ``dynamics`` calls a :class:`PositionTerms`."""
    return dynamics.fixed_position_terms(1) is None


class PositionTerms:
    """The position terms of dynamics that read no gradient, compiled on their own.

    Parameters
    ----------
    density : MinibatchLogDensity
        Symbolic minibatch estimate of the log density (its prior is read).
    dynamics : Dynamics
        The sampler's declaration; its position terms must not read the
        gradient.
    metric : type of Metric
        The kind of metric whose coordinates the dynamics run in.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile`, as for the kernel.
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        dynamics: Dynamics,
        metric: type[Metric],
        compile_kwargs: dict | None = None,
    ):
        if dynamics.position_terms_read_gradient:
            raise ValueError(
                f"The {dynamics.name} position terms read the gradient estimate; "
                "they are computed inside the compiled kernel only."
            )
        symbols = StepSymbols(density, dynamics, metric)
        rule_inputs = {**symbols.chain_inputs, **symbols.step_inputs}
        terms = dynamics.position_terms(symbols.state, None, symbols.log_prior, rule_inputs)
        named = {**symbols.state, **symbols.metric_inputs, **rule_inputs}
        self.names = tuple(dynamics.position_inputs)
        self._inputs = tuple(named)
        # Inputs of one length share it, so that the compiled code is the same
        # in every process and a warm cache is read (see tie_lengths).
        inputs = {name: variable.type(name) for name, variable in named.items()}
        tied = tie_lengths(inputs, symbols.lengths)
        outputs = graph_replace(
            [terms[name] for name in self.names],
            {variable: tied[name] for name, variable in named.items()},
            strict=False,
        )
        with numba_flags():
            function = pm.compile(
                list(inputs.values()),
                outputs,
                on_unused_input="ignore",
                **dict(compile_kwargs or {}),
            )
        self._function = function
        self._call = direct_call(function, len(named))

    def compiled_function(self):
        """Return the compiled PyTensor function behind the terms."""
        return self._function

    def __call__(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Return the terms at the state and inputs in ``values`` (float64 arrays, by name)."""
        outputs = self._call(*(values[name] for name in self._inputs))
        return dict(zip(self.names, outputs, strict=True))


class InterpretedKernel:
    """K inner steps of a sampler, taken one gradient call at a time.

    Called as a :class:`~pymc_sgmcmc.kernel.Kernel` is, with the same
    arguments, it returns the same :class:`~pymc_sgmcmc.kernel.KernelResult`
    up to floating-point rounding.

    Parameters
    ----------
    probe : Probe
        The compiled minibatch density and gradient estimators.
    estimator : str
        The gradient estimator (a key of
        :data:`pymc_sgmcmc.estimators.ESTIMATORS`).
    dynamics : Dynamics
        The sampler's declaration; it must have no position terms.
    metric : type of Metric
        The kind of metric the chain runs in.
    position_terms : PositionTerms, optional
        The dynamics' position terms, where they are not fixed
        (:meth:`~pymc_sgmcmc.dynamics.Dynamics.fixed_position_terms`).
    """

    def __init__(
        self,
        probe: Probe,
        estimator: str,
        dynamics: Dynamics,
        metric: type[Metric],
        position_terms: PositionTerms | None = None,
    ):
        if not interpretable(dynamics):
            raise ValueError(
                f"The {dynamics.name} update reads position terms built inside the compiled "
                "kernel; it has no interpreted form."
            )
        if position_terms is None and compiled_terms_needed(dynamics):
            raise ValueError(f"The {dynamics.name} interpreted loop needs its position terms.")
        self.position_terms = position_terms
        self.probe = probe
        self.estimator = estimator
        self.dynamics = dynamics
        self.metric = metric
        self.state_names = ("position", *(entry.name for entry in dynamics.state))
        self._chain_names = tuple(spec.name for spec in dynamics.chain_inputs_spec)
        self._shapes = {
            spec.name: () if spec.scalar else ("D",) for spec in dynamics.chain_inputs_spec
        } | dict(metric.input_shapes)

    def prepare(self, named: Mapping[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
        """Check a chain's named inputs once and return them as float arrays.

        Raises
        ------
        ValueError
            If an input of the dynamics or the metric is missing, or a vector
            over the coordinates does not have ``size`` entries.
        """
        named = {"gradient_clip": np.inf, **named}
        values = {name: np.asarray(value) for name, value in named.items()}
        for name, template in self._shapes.items():
            values[name] = checked_input(self.dynamics.name, named, name, "float64", template, size)
        values.update(self.dynamics.fixed_position_terms(size) or {})
        return values

    def _terms(self, fixed, state, step_inputs, k) -> dict[str, np.ndarray]:
        """Return the position terms at ``state`` and step ``k`` (step inputs as 0-d arrays).

        ``fixed`` holds the call's metric and chain inputs, merged once per call.
        """
        step_values = {
            name: np.asarray(step_inputs[name][k], dtype="float64")
            for name in self.dynamics.step_inputs
        }
        return self.position_terms({**fixed, **state, **step_values})

    def __call__(
        self,
        state: Mapping[str, np.ndarray],
        indices: np.ndarray,
        noise: np.ndarray,
        step_inputs: Mapping[str, np.ndarray],
        values: Mapping[str, np.ndarray],
    ) -> KernelResult:
        """Take ``len(indices)`` inner steps from ``state`` (see :meth:`Kernel.__call__`).

        The loop stops at the first step whose gradient or new state is not
        finite and returns the last finite state, as the fused loop does.
        """
        metric, dynamics, probe, estimator = self.metric, self.dynamics, self.probe, self.estimator
        metric_inputs = {name: values[name] for name in metric.input_shapes}
        rule_inputs = {
            name: values[name]
            for name in (*self._chain_names, *dynamics.position_inputs)
            if name in values
        }
        fixed = {**metric_inputs, **rule_inputs} if self.position_terms is not None else None
        clip = float(values["gradient_clip"])
        steps_taken = clipped_steps = 0
        gradient_norm = np.nan
        # A non-finite step ends the loop and is reported as a divergence, not
        # as numpy's warnings.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for k in range(len(indices)):
                position = metric.to_position(state["position"], metric_inputs)
                try:
                    estimate = probe.gradient(estimator, position, indices[k], values)
                except ParameterValueError:
                    break
                gradient = metric.pull_gradient(estimate, metric_inputs)
                norm = float(np.sqrt(gradient @ gradient))
                if norm > clip:
                    gradient = gradient * (clip / norm)
                for name in dynamics.step_inputs:
                    rule_inputs[name] = step_inputs[name][k]
                if fixed is not None:
                    rule_inputs.update(self._terms(fixed, state, step_inputs, k))
                new_state = dynamics.step(state, gradient, noise[k], rule_inputs)
                new_state = {
                    name: np.asarray(new_state[name], dtype="float64") for name in self.state_names
                }
                finite = all(np.isfinite(value).all() for value in new_state.values())
                if not (finite and np.isfinite(norm)):
                    break
                state = new_state
                steps_taken += 1
                clipped_steps += norm > clip
                gradient_norm = norm
        position = np.asarray(metric.to_position(state["position"], metric_inputs), dtype=float)
        log_prior, _, log_likelihood, _ = probe.terms(position, indices[-1])
        return KernelResult(
            dict(state),
            position,
            float(log_prior + log_likelihood),
            gradient_norm,
            steps_taken,
            int(clipped_steps),
        )
