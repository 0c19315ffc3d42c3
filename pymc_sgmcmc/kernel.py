"""Fused compiled kernel: many inner steps of a sampler in one compiled call."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.logprob.utils import CheckParameterValue, local_check_parameter_to_ninf_switch
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import apply_ancestors

from pymc_sgmcmc.compiling import cacheable, numba_flags
from pymc_sgmcmc.direct import claim_jax_process, direct_call
from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.estimators import GradientEstimator
from pymc_sgmcmc.metric import IdentityMetric, Metric
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = [
    "Kernel",
    "KernelResult",
    "StepSymbols",
    "as_state",
    "checked_input",
    "checks_as_minus_infinity",
    "is_jax",
]


@dataclass(slots=True)
class KernelResult:
    """What one call of a :class:`Kernel` returns (read it, do not change it).

    Attributes
    ----------
    state : dict of str to ndarray
        State after the last finite inner step, in the metric's coordinates.
    position : ndarray
        The position of that state in the model's coordinates.
    log_density : float
        Minibatch log-density estimate at the returned position, on the last batch.
    gradient_norm : float
        Norm of the gradient estimate at the start of the last inner step.
    steps_taken : int
        Inner steps taken before the first non-finite state or gradient (all
        of them when there was none).
    clipped_steps : int
        Steps among those whose gradient estimate was clipped.
    """

    state: dict
    position: np.ndarray
    log_density: float
    gradient_norm: float
    steps_taken: int
    clipped_steps: int = 0


#: Whether ``pytensor.scan`` takes ``return_updates``: PyTensor versions that do
#: warn that their default return of ``(outputs, updates)`` will change.
_SCAN_TAKES_RETURN_UPDATES = "return_updates" in inspect.signature(pytensor.scan).parameters


def _scan(function, **options) -> list:
    """Return the outputs of ``pytensor.scan`` (a list), without updates: the kernel has none."""
    if _SCAN_TAKES_RETURN_UPDATES:
        return pytensor.scan(function, return_updates=False, **options)
    outputs, _ = pytensor.scan(function, **options)
    return outputs


def is_jax(compile_kwargs: Mapping | None) -> bool:
    """Return whether ``compile_kwargs`` ask for PyTensor's JAX backend."""
    return str((compile_kwargs or {}).get("mode", "")).upper() == "JAX"


def as_state(state: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Return a sampler state as the kernel reads it: float64 arrays (0-d for scalars)."""
    return {name: np.asarray(value, dtype="float64") for name, value in state.items()}


def checks_as_minus_infinity(variable):
    """Return ``variable`` with PyMC's parameter checks turned into a log density of -inf.

    :func:`pymc.compile` does this to a whole graph, but not inside the loops
    of a ``scan``, where a failed check would raise instead.
    """
    while True:
        checks = (
            node
            for node in apply_ancestors([variable])
            if isinstance(node.op, CheckParameterValue) and node.op.can_be_replaced_by_ninf
        )
        node = next(checks, None)
        if node is None:
            return variable
        (switch,) = local_check_parameter_to_ninf_switch.transform(None, node)
        variable = graph_replace(variable, {node.outputs[0]: switch}, strict=False)


def checked_input(sampler: str, named: Mapping, name: str, dtype, template, size: int):
    """Return input ``name`` of ``named`` as a C-ordered array of ``dtype``, checked.

    ``template`` holds one entry per dimension: ``"D"`` for the ``size``
    coordinates, ``None`` or another name for any length, or a length.

    Raises
    ------
    ValueError
        If the input is missing or its shape is not the one ``template`` declares.
    """
    if name not in named:
        raise ValueError(f"The {sampler} kernel needs the input {name!r}.")
    value = np.array(named[name], dtype=dtype, order="C")
    expected = tuple(
        size if length == "D" else length if isinstance(length, int) else None
        for length in template
    )
    if value.ndim != len(expected) or any(
        length is not None and length != actual
        for length, actual in zip(expected, value.shape, strict=True)
    ):
        raise ValueError(
            f"The {sampler} kernel input {name!r} has shape {value.shape}; "
            f"expected {tuple('any' if n is None else n for n in expected)}."
        )
    return value


def tie_lengths(values: Mapping, templates: Mapping) -> dict:
    """Return ``values`` with every length that ``templates`` names taken from one variable.

    ``templates`` maps some keys of ``values`` to one entry per dimension: a
    name such as ``"D"`` for a length several values share, or ``None``. Each
    named length is read from the first value that has it, and the others are
    declared to have it (:func:`pytensor.tensor.specify_shape`). PyTensor then
    sees one length where the values broadcast together, instead of checking
    that separate symbolic lengths are equal: those checks are ordered by the
    variables' memory addresses, so that the compiled code's cache key, and
    with it whether a warm cache is read, would vary between processes.
    """
    lengths = {}
    for key, template in templates.items():
        for axis, name in enumerate(template):
            if name is not None and name not in lengths:
                lengths[name] = values[key].shape[axis]
    tied = dict(values)
    for key, template in templates.items():
        if any(name is not None for name in template):
            shape = tuple(None if name is None else lengths[name] for name in template)
            tied[key] = pt.specify_shape(values[key], shape)
    return tied


class StepSymbols:
    """The symbolic inputs of one inner step of ``dynamics`` in ``metric``'s coordinates.

    The dynamics run in the metric's coordinates ``z``, with
    ``theta = shift + A z`` the model's position.

    Parameters
    ----------
    density : MinibatchLogDensity
        Symbolic minibatch estimate of the log density.
    dynamics : Dynamics
        The sampler's declaration.
    metric : type of Metric
        The kind of metric whose coordinates the dynamics run in.

    Attributes
    ----------
    coordinates : TensorVariable
        The position in the metric's coordinates.
    metric_inputs : dict of str to TensorVariable
        The metric's inputs.
    theta : TensorVariable
        The position in the model's coordinates, a graph of ``coordinates``.
    state : dict of str to TensorVariable
        ``"position"`` (the coordinates) and the dynamics' state.
    chain_inputs, step_inputs : dict of str to TensorVariable
        The dynamics' chain and step inputs.
    lengths : dict of str to tuple
        The lengths the state's, the chain inputs' and the metric's inputs
        share, by name, as :func:`tie_lengths` reads them (the position first).
    """

    def __init__(self, density: MinibatchLogDensity, dynamics: Dynamics, metric: type[Metric]):
        self._density = density
        self._metric = metric
        position = density.position

        def placeholder(entry):
            # Vectors take the position's type, whose length is known statically.
            return (
                pt.scalar(entry.name, dtype="float64")
                if entry.scalar
                else position.type(entry.name)
            )

        self.coordinates = position.type("coordinates")
        self.metric_inputs = {
            name: pt.tensor(name, shape=(None,) * len(shape), dtype="float64")
            for name, shape in metric.input_shapes.items()
        }
        self.theta = metric.to_position(self.coordinates, self.metric_inputs)
        self.state = {"position": self.coordinates}
        self.state.update({entry.name: placeholder(entry) for entry in dynamics.state})
        self.step_inputs = {name: pt.scalar(name, dtype="float64") for name in dynamics.step_inputs}
        self.chain_inputs = {spec.name: placeholder(spec) for spec in dynamics.chain_inputs_spec}
        vectors = {**self.state, **self.chain_inputs}
        self.lengths = {
            **{name: ("D",) for name, variable in vectors.items() if variable.ndim == 1},
            **metric.input_shapes,
        }

    def log_prior(self, value):
        """Return the log prior (with the transforms' Jacobians) at coordinates ``value``."""
        return graph_replace(
            self._density.log_prior,
            {self._density.position: self._metric.to_position(value, self.metric_inputs)},
            strict=False,
        )


class Kernel:
    """K inner steps of a sampler, compiled by PyTensor from its declaration.

    One call reads the state, the row indices of K minibatches (a K x B
    integer array), the standard normal draws (K x V x D for V noise vectors),
    the per-step inputs (K values each) and the chain inputs, and runs all K
    steps in a compiled ``scan``. Random numbers are drawn outside the graph
    by the caller, from the chain's generator, so a chain is reproducible from
    its seed alone. When a step produces a non-finite state or gradient, the
    state stays at the last finite one for the rest of the call.

    :meth:`draws` runs the steps of several recorded draws in one call, in a
    second ``scan`` around the draw's, and returns each draw's state,
    position and statistics (see :mod:`pymc_sgmcmc.ahead`); a plain call is
    one such draw.

    Only the minibatch rows are read at each step: the graph indexes the data
    with the batch's indices, so the cost of a step does not depend on N.

    With ``compile_kwargs={"mode": "JAX"}`` the loop runs in JAX, on its
    default device (a GPU where JAX has one). JAX compiles loops of a fixed
    length only, so one function is compiled per number of steps a call
    takes (after tuning, a chain takes the same number at every draw), and
    the data are copied to the device once rather than at every call.

    Parameters
    ----------
    density : MinibatchLogDensity
        Symbolic minibatch estimate of the log density.
    estimator : GradientEstimator
        The gradient estimate the update rule uses.
    dynamics : Dynamics or type of Dynamics
        The sampler's declaration: state, noise, inputs and update rule (a
        class stands for its instance with default options).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile`, e.g. ``{"mode": "NUMBA"}``.
    metric : type of Metric, default IdentityMetric
        The kind of metric whose coordinates the dynamics run in.
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        estimator: GradientEstimator,
        dynamics: Dynamics | type[Dynamics],
        compile_kwargs: dict | None = None,
        metric: type[Metric] = IdentityMetric,
    ):
        if isinstance(dynamics, type):
            dynamics = dynamics()
        self._arguments = (density, estimator, dynamics, compile_kwargs, metric)
        self.dynamics = dynamics
        self.metric = metric
        position = density.position
        symbols = StepSymbols(density, dynamics, metric)
        coordinates, metric_inputs = symbols.coordinates, symbols.metric_inputs
        theta = symbols.theta
        raw_gradient = metric.pull_gradient(
            graph_replace(estimator.gradient, {position: theta}, strict=False), metric_inputs
        )
        # Clipping (Karagiannis's clip(v, c) = v min(1, c / |v|)) in the
        # chain's coordinates; an infinite threshold leaves the gradient as is.
        gradient_norm = pt.sqrt(pt.sum(raw_gradient**2))
        clip = pt.scalar("gradient_clip", dtype="float64")
        clipped = gradient_norm > clip
        gradient = raw_gradient * pt.minimum(1.0, clip / gradient_norm)
        state, step_inputs, chain_inputs = symbols.state, symbols.step_inputs, symbols.chain_inputs
        noise = pt.matrix("noise", dtype="float64")
        rule_inputs = {**chain_inputs, **step_inputs}
        terms = dynamics.position_terms(state, gradient, symbols.log_prior, rule_inputs)
        new_state = dynamics.step(state, gradient, noise, {**rule_inputs, **terms})
        new_state = [pt.as_tensor(new_state[name], dtype="float64") for name in state]
        checked = pt.concatenate([gradient_norm[None], *(pt.atleast_1d(s) for s in new_state)])
        finite = ~(pt.any(pt.isnan(checked)) | pt.any(pt.isinf(checked)))
        # ``alive`` turns false at the first non-finite step and stays false:
        # from then on the state stays at the last finite one.
        alive = pt.scalar("alive", dtype="bool")
        still_alive = alive & finite
        kept = [
            pt.switch(still_alive, new, old)
            for new, old in zip(new_state, state.values(), strict=True)
        ]
        step_outputs = cacheable([*kept, still_alive, gradient_norm, clipped])

        named_inputs = {
            **chain_inputs,
            **estimator.inputs,
            **metric_inputs,
            "gradient_clip": clip,
        }
        sequences = [density.indices, noise, *step_inputs.values()]
        placeholders = [*sequences, *state.values(), alive, *named_inputs.values()]
        # The lengths each input shares with the coordinates ("D") or with
        # another input, by name; the position's comes first.
        lengths = symbols.lengths | dict.fromkeys(sorted(estimator.coordinate_inputs), ("D",))
        named_templates = {name: lengths[name] for name in named_inputs if name in lengths}
        templates = {
            **{variable: lengths[name] for name, variable in state.items() if name in lengths},
            noise: (None, "D"),
            **{named_inputs[name]: template for name, template in named_templates.items()},
        }

        def inner_step(*arguments):
            # scan passes the sequences, then the state, then the non-sequences.
            values = tie_lengths(dict(zip(placeholders, arguments, strict=True)), templates)
            return graph_replace(step_outputs, values, strict=False)

        n_step_inputs, n_state = len(step_inputs), len(state)
        metric_names = tuple(metric_inputs)
        named_names = tuple(named_inputs)

        def build(draws=None, steps=None):
            # The graph of ``draws`` draws of ``steps`` inner steps (any number
            # where None): JAX needs both lengths fixed, inner loop included.

            def one_draw(*arguments):
                # One recorded draw: its inner steps, then its position and log
                # density. The outer scan passes the draw's batches, noise and
                # per-step inputs, then the state and ``alive``, then the chain inputs.
                indices, noises = arguments[:2]
                values = arguments[2 : 2 + n_step_inputs]
                carried = arguments[2 + n_step_inputs : 3 + n_step_inputs + n_state]
                named = dict(
                    zip(named_names, arguments[3 + n_step_inputs + n_state :], strict=True)
                )
                outputs = _scan(
                    inner_step,
                    sequences=[indices, noises, *values],
                    outputs_info=[*carried, None, None],
                    non_sequences=list(named.values()),
                    n_steps=indices.shape[0] if steps is None else steps,
                    strict=False,
                    return_list=True,
                )
                *states, alive_steps, norms, clipped_steps = outputs
                results = [s[-1] for s in states]
                in_metric = {metric_inputs[name]: named[name] for name in metric_names}
                position = graph_replace(theta, {coordinates: results[0]} | in_metric, strict=False)
                # The log density is a statistic only: evaluated once per draw, at
                # its end with its last batch, not inside the inner loop; -inf
                # where the position fails the model's parameter checks.
                log_density = graph_replace(
                    cacheable(checks_as_minus_infinity(density.log_density)),
                    {density.position: position, density.indices: indices[-1]},
                    strict=False,
                )
                steps_taken = pt.sum(alive_steps, dtype="int64")
                clipped_taken = pt.sum(clipped_steps & alive_steps, dtype="int64")
                ends = [alive_steps[-1], position, log_density, norms[-1]]
                return [*results, *ends, steps_taken, clipped_taken]

            # Draws x steps of batches (B rows), noise (V x D) and per-step inputs.
            batch_indices = pt.tensor(
                "batch_indices", shape=(draws, steps, None), dtype=density.indices.dtype
            )
            noises = pt.tensor("noises", shape=(draws, steps, None, None), dtype="float64")
            step_values = [
                pt.tensor(f"{name}s", shape=(draws, steps), dtype="float64") for name in step_inputs
            ]
            initial_state = [
                pt.tensor(f"initial_{name}", shape=(None,) * variable.ndim, dtype="float64")
                for name, variable in state.items()
            ]
            named_values = [
                pt.tensor(name, shape=variable.type.shape, dtype=variable.dtype)
                for name, variable in named_inputs.items()
            ]
            outputs = _scan(
                one_draw,
                sequences=[batch_indices, noises, *step_values],
                outputs_info=[*initial_state, pt.as_tensor(np.True_), *[None] * 5],
                non_sequences=named_values,
                n_steps=batch_indices.shape[0] if draws is None else draws,
                strict=False,
                return_list=True,
            )
            *states, _, positions, log_densities, norms, steps_taken, clipped_taken = outputs
            inputs = [*initial_state, batch_indices, noises, *step_values, *named_values]
            return inputs, [*states, positions, log_densities, norms, steps_taken, clipped_taken]

        self.state_names = tuple(state)
        self._step_input_names = tuple(dynamics.step_inputs)
        self.input_names = tuple(named_inputs)
        self._input_types = {name: variable.type for name, variable in named_inputs.items()}
        self._shapes = named_templates
        self._compile_kwargs = dict(compile_kwargs or {})
        if is_jax(self._compile_kwargs):
            # JAX compiles loops of a fixed length only: one function per pair of lengths.
            self._build = build
            self._by_length = {}
            self._call = self._fixed_length_call
        else:
            inputs, outputs = build()
            self._function = self._compile(inputs, outputs)
            self._call = direct_call(self._function, len(inputs))

    def __reduce__(self):
        # Compiled code does not survive pickling (PyMC pickles the step
        # methods for chain processes it does not fork): compile again.
        return (Kernel, self._arguments)

    def _compile(self, inputs, outputs):
        # Without Numba's fast-math flags, which would remove the divergence check.
        with numba_flags():
            function = pm.compile(inputs, outputs, on_unused_input="ignore", **self._compile_kwargs)
        function.trust_input = True
        return function

    def compiled_function(self, length: int | None = None, draws: int = 1):
        """Return the compiled PyTensor function behind the kernel.

        With JAX, the function of ``draws`` draws of ``length`` steps each
        (compiled now if it was not yet); otherwise the one function for
        every length.
        """
        if not is_jax(self._compile_kwargs):
            return self._function
        return self._fixed_length((draws, length))[0]

    def _fixed_length(self, lengths: tuple[int, int]):
        """Return the JAX function of loops of ``lengths`` (draws, steps) and its call.

        Compiled once per pair, from a graph whose loops have those lengths,
        as ``jax.lax.scan`` needs.
        """
        claim_jax_process()
        if lengths not in self._by_length:
            inputs, outputs = self._build(*lengths)
            function = self._compile(inputs, outputs)
            call = direct_call(function, len(inputs), on_device=True)
            self._by_length[lengths] = (function, call)
        return self._by_length[lengths]

    def _fixed_length_call(self, *arguments):
        """Run the JAX function of this many draws and steps; return numpy arrays."""
        _, call = self._fixed_length(tuple(arguments[len(self.state_names)].shape[:2]))
        return [np.asarray(value) for value in call(*arguments)]

    def prepare(self, named: Mapping[str, np.ndarray], size: int) -> list[np.ndarray]:
        """Check a chain's named inputs once and return them in the kernel's order.

        The kernel runs its calls without checking its inputs, so this is where
        a wrong shape or type is caught: every declared input must be present
        with the number of dimensions of its type, and the lengths over the
        coordinates (declared by the dynamics, the estimator and the metric)
        must be ``size``.

        Raises
        ------
        ValueError
            If an input is missing or has the wrong shape.
        """
        named = {"gradient_clip": np.inf, **named}
        values = []
        for name in self.input_names:
            kind = self._input_types[name]
            template = self._shapes.get(name, kind.shape)
            values.append(
                checked_input(self.dynamics.name, named, name, kind.dtype, template, size)
            )
        return values

    def __call__(
        self,
        state: Mapping[str, np.ndarray],
        indices: np.ndarray,
        noise: np.ndarray,
        step_inputs: Mapping[str, np.ndarray],
        values: list[np.ndarray],
    ) -> KernelResult:
        """Take ``len(indices)`` inner steps from ``state``.

        ``state`` maps every state name to a float64 array (0-d for a scalar
        entry, see :func:`as_state`), as the kernel returns them; the call does
        not convert them.
        ``indices`` holds one minibatch of row indices per step, ``noise`` the
        standard normal draws of every step (K x V x D), ``step_inputs`` K
        values of each per-step input, and ``values`` the chain inputs as
        returned by :meth:`prepare`.
        """
        steps = {name: value[None] for name, value in step_inputs.items()}
        return self.draws(state, indices[None], noise[None], steps, values)[0]

    def draws(
        self,
        state: Mapping[str, np.ndarray],
        indices: np.ndarray,
        noise: np.ndarray,
        step_inputs: Mapping[str, np.ndarray],
        values: list[np.ndarray],
    ) -> list[KernelResult]:
        """Take the inner steps of several draws from ``state``, one after another.

        As :meth:`__call__`, with one more leading axis: ``indices`` is
        draws x K x B, ``noise`` draws x K x V x D and each per-step input
        draws x K. Returns one result per draw, each what a call from the
        previous draw's state would have returned; after a non-finite step
        the state stays at the last finite one, and later draws take no step.
        """
        arguments = [state[name] for name in self.state_names]
        arguments.append(indices)
        arguments.append(noise)
        arguments.extend([step_inputs[name] for name in self._step_input_names])
        arguments.extend(values)
        *states, positions, log_densities, norms, steps_taken, clipped = self._call(*arguments)
        names = self.state_names
        # Python numbers of all draws at once: one conversion per array, not per draw.
        scalars = zip(
            log_densities.tolist(),
            norms.tolist(),
            steps_taken.tolist(),
            clipped.tolist(),
            strict=True,
        )
        return [
            KernelResult(
                {name: value[draw] for name, value in zip(names, states, strict=True)},
                positions[draw],
                log_density,
                norm,
                int(taken),
                int(clip),
            )
            for draw, (log_density, norm, taken, clip) in enumerate(scalars)
        ]
