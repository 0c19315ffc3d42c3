"""The fused kernel: K inner steps in one compiled call, O(B) work per step."""

import os
import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.special
from pymc.pytensorf import make_shared_replacements
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.raise_op import Assert
from pytensor.scalar.math import Psi
from pytensor.scan.op import Scan
from pytensor.scan.utils import ScanArgs
from pytensor.tensor import subtensor
from pytensor.tensor.shape import Shape, Shape_i
from rules import position_terms

from pymc_sgmcmc import SGHMC, direct
from pymc_sgmcmc import kernel as kernel_module
from pymc_sgmcmc.compiling import digamma
from pymc_sgmcmc.estimators import (
    Centre,
    Probe,
    control_variate_gradient,
    minibatch_gradient,
    second_order_control_variate_gradient,
)
from pymc_sgmcmc.kernel import Kernel, as_state
from pymc_sgmcmc.loop import (
    InterpretedKernel,
    PositionTerms,
    compiled_terms_needed,
    interpretable,
)
from pymc_sgmcmc.metric import METRICS, metric_from_covariance
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.samplers.sghmc import Underdamped
from pymc_sgmcmc.samplers.sgld import Langevin

N_ROWS = 400
#: SGLD's Euler-Maruyama step: the kernel's mechanics without the shared draws' state.
EULER = Langevin("euler_maruyama")
#: Operations that read the data in O(B): gathering rows, reading its length.
#: (PyTensor 2 has a separate op for gathers along the first axis; 3 does not.)
GATHERS = tuple(
    getattr(subtensor, name)
    for name in ("AdvancedSubtensor", "AdvancedSubtensor1")
    if hasattr(subtensor, name)
)
ROW_ACCESS = (*GATHERS, Shape, Shape_i)


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N_ROWS, 3))
    y = rng.random(N_ROWS) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5, 0.2])))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y.astype("int64"))
    return model


@pytest.fixture(scope="module")
def density(model):
    return build_minibatch_log_density(model, model.value_vars)


def make_inputs(n_steps, size=3, batch=20, seed=0):
    rng = np.random.default_rng(seed)
    indices = rng.integers(N_ROWS, size=(n_steps, batch))
    noise = rng.standard_normal((n_steps, 1, size))
    return indices, noise


def chain_inputs(dynamics, size=3):
    tuned = {"critical_friction": 2.0, "mode": np.full(size, 0.1)}
    return dynamics.chain_inputs(np.full(size, 0.7), 1.0, tuned)


#: The backends every kernel test runs on: the default one and JAX.
BACKENDS = pytest.mark.parametrize(
    "compile_kwargs",
    [None, pytest.param({"mode": "JAX"}, marks=pytest.mark.jax)],
    ids=["default", "jax"],
)


@BACKENDS
@pytest.mark.parametrize("sampler", list(SAMPLERS.values()), ids=list(SAMPLERS))
def test_fused_steps_equal_the_update_rule_applied_step_by_step(density, sampler, compile_kwargs):
    """K fused steps with control variates reproduce the declared rule applied with numpy."""
    dynamics = sampler.dynamics_class()
    kernel = Kernel(density, control_variate_gradient(density), dynamics, compile_kwargs)
    probe = Probe(density)
    centre = Centre(np.array([0.5, -0.3, 0.1]), np.array([3.0, -2.0, 1.0]))
    inputs = chain_inputs(dynamics)
    values = kernel.prepare({**inputs, **centre.inputs()}, 3)
    indices, _ = make_inputs(7)
    rng = np.random.default_rng(5)
    noise = rng.standard_normal((7, dynamics.noise_vectors, 3))
    step_sizes = np.linspace(0.01, 0.02, 7)
    state = dynamics.initial_state(np.array([0.2, 0.1, -0.1]), inputs, rng)

    step_values = dynamics.step_values(lambda steps: step_sizes[steps], np.arange(7))
    result = kernel(as_state(state), indices, noise, step_values, values)

    for k in range(7):
        g = probe.gradient("control_variate", state["position"], indices[k], centre.inputs())
        this_step = {name: value[k] for name, value in step_values.items()}
        terms = position_terms(dynamics, density, state, {**inputs, **this_step})
        state = dynamics.step(state, g, noise[k], {**inputs, **this_step, **terms})
    assert result.steps_taken == 7
    for name, value in state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10)


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_RUN", pytest.param("JAX", marks=pytest.mark.jax)])
def test_backends_run_the_same_recursion(density, mode):
    """SGLD's fused steps (shared normal draws) agree with numpy on every backend."""
    dynamics = Langevin()
    kernel = Kernel(density, minibatch_gradient(density), dynamics, {"mode": mode})
    gradient = pm.compile([density.position, density.indices], density.gradient)
    indices, noise = make_inputs(5, seed=1)
    inputs = chain_inputs(dynamics)
    values = kernel.prepare(inputs, 3)
    state = dynamics.initial_state(np.zeros(3), inputs, np.random.default_rng(3))
    result = kernel(state, indices, noise, {"step_size": np.full(5, 1e-3)}, values)
    for k in range(5):
        g = gradient(state["position"], indices[k])
        state = Langevin.step(state, g, noise[k], {**inputs, "step_size": 1e-3})
    for name, value in state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10)


@BACKENDS
def test_loop_stops_at_the_last_finite_state(density, compile_kwargs):
    kernel = Kernel(density, minibatch_gradient(density), EULER, compile_kwargs)
    values = kernel.prepare(chain_inputs(Langevin()), 3)
    indices, noise = make_inputs(6, seed=2)
    step_sizes = np.array([1e-3, 1e-3, 1e-3, np.inf, 1e-3, 1e-3])
    start = {"position": np.zeros(3)}
    result = kernel(start, indices, noise, {"step_size": step_sizes}, values)
    prefix = kernel(start, indices[:3], noise[:3], {"step_size": step_sizes[:3]}, values)
    assert result.steps_taken == 3
    np.testing.assert_array_equal(result.state["position"], prefix.state["position"])
    assert np.all(np.isfinite(result.state["position"]))


def test_building_a_step_and_running_a_kernel_uses_nothing_deprecated(model, density):
    # The test configuration ignores deprecation warnings; code built on an
    # API that PyTensor or PyMC deprecate breaks when they drop it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with model:
            SGHMC()
        kernel = Kernel(density, minibatch_gradient(density), EULER)
        values = kernel.prepare(chain_inputs(Langevin()), 3)
        indices, noise = make_inputs(4)
        kernel({"position": np.zeros(3)}, indices, noise, {"step_size": np.full(4, 1e-3)}, values)
    deprecated = [
        f"{warning.filename}:{warning.lineno}: {warning.message}"
        for warning in caught
        if issubclass(warning.category, DeprecationWarning | PendingDeprecationWarning)
        and "pymc_sgmcmc" in warning.filename
    ]
    assert not deprecated


@BACKENDS
@pytest.mark.parametrize("diverging_step", [None, 6], ids=["finite", "a-step-diverges"])
def test_a_call_of_several_draws_runs_them_one_after_another(
    density, compile_kwargs, diverging_step
):
    """Each draw of ``Kernel.draws`` is what a call from the previous draw's state returns.

    After a non-finite step the state stays at the last finite one and later
    draws of the call take no step.
    """
    dynamics = Underdamped()
    kernel = Kernel(density, minibatch_gradient(density), dynamics, compile_kwargs)
    inputs = chain_inputs(dynamics)
    values = kernel.prepare(inputs, 3)
    rng = np.random.default_rng(6)
    indices = rng.integers(N_ROWS, size=(3, 4, 20))
    noise = rng.standard_normal((3, 4, dynamics.noise_vectors, 3))
    step_sizes = np.linspace(1e-3, 2e-3, 12).reshape(3, 4)
    if diverging_step is not None:
        step_sizes.flat[diverging_step] = np.inf
    state = as_state(dynamics.initial_state(np.array([0.2, 0.1, -0.1]), inputs, rng))

    results = kernel.draws(state, indices, noise, {"step_size": step_sizes}, values)
    # XLA may fuse the log density's sum over the batch's rows differently inside
    # the outer loop than after one call's loop: on JAX that statistic agrees to
    # the rounding of the sum taken in another order (the rows times the machine
    # epsilon, relative), the states to the bit.
    rounding = 0.0 if compile_kwargs is None else indices.shape[-1] * np.finfo(float).eps

    assert len(results) == 3
    stopped = False
    for draw, result in enumerate(results):
        if stopped:
            assert result.steps_taken == 0
            for name, value in result.state.items():
                np.testing.assert_array_equal(value, results[draw - 1].state[name])
            continue
        one = kernel(state, indices[draw], noise[draw], {"step_size": step_sizes[draw]}, values)
        assert result.steps_taken == one.steps_taken
        assert result.clipped_steps == one.clipped_steps
        for name, value in one.state.items():
            np.testing.assert_array_equal(result.state[name], value)
        np.testing.assert_array_equal(result.position, one.position)
        assert result.log_density == pytest.approx(one.log_density, rel=rounding, abs=0.0)
        assert result.gradient_norm == one.gradient_norm
        stopped = one.steps_taken < 4
        state = one.state
    assert stopped == (diverging_step is not None)


def test_a_draw_that_ends_where_the_parameter_checks_fail_has_no_log_density():
    """A finite state whose scale is 0 gets log density -inf, as the model's logp does."""
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", 0.0, sigma, observed=np.linspace(-1.0, 1.0, 40))
    density = build_minibatch_log_density(model, model.value_vars)
    kernel = Kernel(density, minibatch_gradient(density), EULER)
    values = kernel.prepare(chain_inputs(Langevin(), size=1), 1)
    where = np.array([-1e40])  # log sigma: sigma is 0
    assert model.compile_logp()({"sigma_log__": where[0]}) == -np.inf
    indices = np.arange(40)[None, :]
    noise = np.zeros((1, 1, 1))
    result = kernel({"position": where}, indices, noise, {"step_size": np.zeros(1)}, values)
    assert result.log_density == -np.inf


def test_kernel_inputs_are_checked_once_per_chain(density):
    kernel = Kernel(density, minibatch_gradient(density), Underdamped)
    inputs = chain_inputs(Underdamped())
    with pytest.raises(ValueError, match="'mass' has shape"):
        kernel.prepare({**inputs, "mass": np.ones(4)}, 3)
    with pytest.raises(ValueError, match="needs the input 'friction'"):
        kernel.prepare({"temperature": 1.0, "mass": np.ones(3)}, 3)
    with pytest.raises(ValueError, match="'temperature' has shape"):
        kernel.prepare({**inputs, "temperature": np.ones(3)}, 3)


def data_uses(fgraph, data):
    """Return the nodes that read any variable in ``data`` (with that set), looking inside scans."""
    nodes = []
    for node in fgraph.apply_nodes:
        for variable in node.inputs:
            if variable not in data:
                continue
            if isinstance(node.op, Scan):
                args = ScanArgs.from_node(node)
                pairs = [
                    *zip(args.outer_in_non_seqs, args.inner_in_non_seqs, strict=True),
                    *zip(args.outer_in_seqs, args.inner_in_seqs, strict=True),
                ]
                inner = {inner for outer, inner in pairs if outer is variable}
                assert inner, "data must reach a scan as a sequence or non-sequence"
                nodes.extend(data_uses(node.op.fgraph, inner))
            else:
                nodes.append((node, data))
    return nodes


def reads_rows(use):
    """Whether a node reads the data only at given rows (or only its length).

    PyTensor 3 can fuse a gather into the elementwise operation that consumes
    it; such a node reads the data together with an integer index vector.
    """
    node, data = use
    if isinstance(node.op, ROW_ACCESS):
        return True
    has_index = any(
        variable.type.ndim == 1 and variable.type.dtype.startswith("int") and variable not in data
        for variable in node.inputs
    )
    return has_index and type(node.op).__name__.startswith("Fused")


def full_data(fgraph):
    return {
        variable
        for variable in fgraph.inputs + list(fgraph.variables)
        if isinstance(variable, SharedVariable | Constant)
        and variable.type.ndim >= 1
        and np.shape(
            variable.get_value() if isinstance(variable, SharedVariable) else variable.data
        )[0]
        == N_ROWS
    }


@BACKENDS
def test_compiled_kernel_reads_only_minibatch_rows(model, compile_kwargs):
    """Every use of the N-row data in the compiled kernel is a row gather (or reads N)."""
    with model:
        step = SGHMC(
            batch_size=20,
            step_size=1e-3,
            preconditioner=None,
            steps_per_draw=4,
            compile_kwargs=compile_kwargs,
        )
    for estimator in ("minibatch", "control_variate"):
        kernel = step.compiled.kernel(Underdamped, estimator)
        fgraph = kernel.compiled_function(4).maker.fgraph
        data = full_data(fgraph)
        assert data, "the kernel must read the data"
        uses = data_uses(fgraph, data)
        assert any(isinstance(node.op, GATHERS) for node, _ in uses)
        assert all(reads_rows(use) for use in uses), [node.op for node, _ in uses]


def operations(fgraph):
    """Yield the operations of a compiled graph, inside scans and fused or composite ones too."""
    for node in fgraph.apply_nodes:
        yield from _operation_and_inner(node.op)


def _operation_and_inner(operation):
    yield operation
    scalar = getattr(operation, "scalar_op", None)
    if scalar is not None:
        yield from _operation_and_inner(scalar)
    inner = getattr(operation, "fgraph", None)
    if inner is not None:
        yield from operations(inner)


def test_a_digamma_in_the_gradient_is_compiled_from_operations_numba_caches():
    """A Gamma likelihood with an unknown shape has a digamma in its gradient. PyTensor's Numba
    backend calls SciPy's through a pointer, and Numba's cache does not keep code that holds one,
    so every new process compiled the kernel again; the kernel computes it from other operations.
    """
    rng = np.random.default_rng(1)
    with pm.Model() as gamma_model:
        shape = pm.Exponential("shape", 1)
        pm.Gamma("y", alpha=shape, beta=shape, observed=rng.gamma(2.0, 1.0, size=N_ROWS))
    density = build_minibatch_log_density(gamma_model, gamma_model.value_vars)
    # Negative control: compiled as it is, the gradient holds SciPy's digamma.
    plain = pytensor.function([density.position, density.indices], density.likelihood_gradient)
    assert any(isinstance(op, Psi) for op in operations(plain.maker.fgraph))
    kernel = Kernel(density, minibatch_gradient(density), EULER)
    compiled = kernel.compiled_function().maker.fgraph
    assert not any(isinstance(op, Psi) for op in operations(compiled))


def broadcast_checks(fgraph):
    """Return the checks that separate symbolic lengths broadcast, scans' inner graphs included."""
    return [
        op for op in operations(fgraph) if isinstance(op, Assert) and "broadcast" in op.msg.lower()
    ]


#: SGHMC with every metric, the other samplers with the diagonal one; SGRLD's kernel, built the
#: same way, compiles on the C backend for half a minute and is left out.
KERNELS = [("SGHMC", kind) for kind in sorted(METRICS)] + [
    (name, "diagonal") for name in SAMPLERS if name not in ("SGHMC", "SGRLD")
]


@pytest.fixture(scope="module")
def grouped_density():
    """Varying intercepts over ``dims``: the groups' count, and so the position's length, is
    symbolic in the graph."""
    rng = np.random.default_rng(30)
    group = np.repeat(np.arange(30), 5)
    with pm.Model(coords={"group": range(30)}) as grouped:
        mean = pm.Normal("mean", 0, 1)
        spread = pm.HalfNormal("spread", 1)
        intercept = pm.Normal("intercept", mean, spread, dims="group")
        noise = pm.HalfNormal("noise", 1)
        pm.Normal("y", intercept[group], noise, observed=rng.normal(size=group.size))
    return build_minibatch_log_density(grouped, grouped.value_vars)


def kernel_of(density, sampler_name, metric_kind):
    dynamics = SAMPLERS[sampler_name].dynamics_class()
    return Kernel(density, minibatch_gradient(density), dynamics, None, METRICS[metric_kind])


@pytest.mark.parametrize(("sampler_name", "metric_kind"), KERNELS)
def test_a_fused_kernel_has_one_length_over_the_coordinates(
    grouped_density, sampler_name, metric_kind
):
    """PyTensor checks that separate symbolic lengths are equal where they broadcast, in an order
    set by the variables' memory addresses, and the order is part of Numba's cache key: a new
    process missed the warm cache in some runs and compiled the kernel again. The kernel's inputs
    over the coordinates share one length, so it has no such check.
    """
    kernel = kernel_of(grouped_density, sampler_name, metric_kind)
    assert not broadcast_checks(kernel.compiled_function().maker.fgraph)


@pytest.mark.parametrize("metric_kind", ["diagonal", "dense", "low_rank"])
def test_sgrlds_position_terms_have_one_length_over_the_coordinates(grouped_density, metric_kind):
    """The interpreted loop's compiled position terms are cached by their graph too."""
    dynamics = SAMPLERS["SGRLD"].dynamics_class()
    terms = PositionTerms(grouped_density, dynamics, METRICS[metric_kind])
    assert not broadcast_checks(terms.compiled_function().maker.fgraph)


def test_a_fused_kernel_of_separate_lengths_checks_them(grouped_density, monkeypatch):
    """Negative control for the test above: the same kernel with its lengths left apart."""
    monkeypatch.setattr(kernel_module, "tie_lengths", lambda values, templates: dict(values))
    kernel = kernel_of(grouped_density, "SGHMC", "diagonal")
    assert broadcast_checks(kernel.compiled_function().maker.fgraph)


def test_the_cacheable_digamma_equals_scipys():
    x = pt.vector("x")
    function = pytensor.function([x], digamma(x))
    positive = np.concatenate([np.geomspace(1e-10, 1e10, 2001), np.linspace(0.01, 30.0, 3001)])
    expected = scipy.special.psi(positive)
    error = np.abs(function(positive) - expected) / np.maximum(np.abs(expected), 1.0)
    assert error.max() < 4e-15
    # Below 0 by reflection, away from the poles at the non-positive integers.
    negative = -np.linspace(0.05, 20.0, 4000)
    negative = negative[np.abs(negative - np.round(negative)) > 0.05]
    expected = scipy.special.psi(negative)
    error = np.abs(function(negative) - expected) / np.maximum(np.abs(expected), 1.0)
    assert error.max() < 1e-12


def test_full_data_check_catches_a_full_pass(model):
    """Negative control: the model's own gradient reads all rows directly."""
    function = model.compile_dlogp()
    fgraph = function.f.maker.fgraph
    uses = data_uses(fgraph, full_data(fgraph))
    assert uses
    assert not all(reads_rows(use) for use in uses)


@pytest.mark.jax
def test_jax_kernels_read_data_replaced_after_their_first_call(model):
    """The data copied to JAX's device are copied again once ``pm.set_data`` replaced them."""
    density = build_minibatch_log_density(model, model.value_vars)
    kernels = [
        Kernel(density, minibatch_gradient(density), EULER, kwargs)
        for kwargs in ({"mode": "NUMBA"}, {"mode": "JAX"})
    ]
    values = [kernel.prepare(chain_inputs(Langevin()), 3) for kernel in kernels]
    indices, noise = make_inputs(4, seed=3)
    steps = {"step_size": np.full(4, 1e-2)}
    start = {"position": np.zeros(3)}
    (data,) = [data for data in density.data if data.dtype.startswith("float")]
    before = kernels[1](start, indices, noise, steps, values[1]).position
    data.set_value(2.0 * data.get_value())
    after = [
        kernel(start, indices, noise, steps, v).position
        for kernel, v in zip(kernels, values, strict=True)
    ]
    np.testing.assert_allclose(after[1], after[0], rtol=1e-10)
    assert not np.allclose(after[1], before)


@pytest.mark.jax
def test_jax_kernels_refuse_to_run_in_a_process_forked_after_jax_ran(density, monkeypatch):
    """JAX deadlocks in a process forked after it started threads: a one-line error instead."""
    kernel = Kernel(density, minibatch_gradient(density), EULER, {"mode": "JAX"})
    values = kernel.prepare(chain_inputs(Langevin()), 3)
    indices, noise = make_inputs(2)
    monkeypatch.setattr(direct, "_jax_process", os.getpid() + 1)
    with pytest.raises(RuntimeError, match="cores=1"):
        kernel({"position": np.zeros(3)}, indices, noise, {"step_size": np.full(2, 1e-3)}, values)


def test_fused_control_variate_follows_another_block_that_moved():
    """One sampled coordinate, another variable moved after the centre was taken."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-0.5, 1.5, N_ROWS)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        s = pm.Normal("s", 0, 10)
        pm.Normal("y", mu + s * x, 1, observed=1.0 + 2.0 * x + rng.normal(size=N_ROWS))
    point = model.initial_point()
    value = model.rvs_to_values[mu]
    shared = make_shared_replacements(point, [value], model)
    density = build_minibatch_log_density(model, [value], shared)
    kernel = Kernel(density, control_variate_gradient(density), EULER)
    probe = Probe(density)
    position = np.array([1.0])
    centre = probe.centre(position)
    (other,) = density.other_blocks
    other.set_value(np.array(2.0))
    inputs = chain_inputs(Langevin(), size=1)
    indices, noise = make_inputs(4, size=1)
    values = kernel.prepare({**inputs, **centre.inputs()}, 1)
    result = kernel({"position": position}, indices, noise, {"step_size": np.full(4, 1e-3)}, values)
    state = {"position": position}
    for k in range(4):
        g = probe.gradient("control_variate", state["position"], indices[k], centre.inputs())
        state = Langevin.step(state, g, noise[k], {**inputs, "step_size": 1e-3})
    np.testing.assert_allclose(result.state["position"], state["position"], rtol=1e-10)


@pytest.mark.parametrize("estimator", ["control_variate", "second_order"])
def test_centred_estimators_stay_exact_on_average_after_another_block_moved(estimator):
    """A compound step: averaged over a partition of the rows, the estimate is the full-data
    gradient at the other block's new value. In this Poisson regression the sampled
    intercept's curvature depends on the other block, so a centre term (gradient or
    Hessian-vector product) evaluated at the other block's new value breaks the identity.
    """
    rng = np.random.default_rng(5)
    x = rng.uniform(-1.0, 1.0, N_ROWS)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        s = pm.Normal("s", 0, 10)
        pm.Poisson("y", pm.math.exp(mu + s * x), observed=rng.poisson(np.exp(0.5 + x)))
    value = model.rvs_to_values[mu]
    shared = make_shared_replacements(model.initial_point(), [value], model)
    density = build_minibatch_log_density(model, [value], shared)
    probe = Probe(density)
    centre = probe.centre(np.array([0.4]), hessian=estimator == "second_order")
    (other,) = density.other_blocks
    other.set_value(np.array(1.5))
    position = np.array([0.9])
    rows = np.random.default_rng(0).permutation(N_ROWS).reshape(20, -1)
    estimates = [probe.gradient(estimator, position, batch, centre.inputs()) for batch in rows]
    _, full_gradient, _ = probe.full(position)
    np.testing.assert_allclose(np.mean(estimates, axis=0), full_gradient, rtol=1e-10)
    # Negative control: one minibatch alone is not the full gradient.
    assert not np.allclose(estimates[0], full_gradient, rtol=1e-3)


def test_probe_control_variate_takes_the_estimators_value_without_compiling_it(density):
    """Without other blocks the probe builds the estimate from its terms: same value, no compile."""
    estimator = control_variate_gradient(density)
    compiled = pm.compile(
        [density.position, density.indices, *estimator.inputs.values()], estimator.gradient
    )
    probe = Probe(density)
    centre = Centre(np.array([0.5, -0.3, 0.1]), np.array([3.0, -2.0, 1.0]))
    indices, _ = make_inputs(3)
    for k, position in enumerate([np.zeros(3), np.array([0.4, -0.2, 0.3]), centre.position]):
        expected = compiled(position, indices[k], *centre.inputs().values())
        estimate = probe.gradient("control_variate", position, indices[k], centre.inputs())
        np.testing.assert_allclose(estimate, expected, rtol=1e-12, atol=1e-12)
    assert probe._estimators == {}
    # Both estimators on the same rows, sharing the plain gradient: the same values.
    position = np.array([0.4, -0.2, 0.3])
    together = probe.gradients(
        ["control_variate", "minibatch"], position, indices[0], centre.inputs()
    )
    for name, estimate in zip(["control_variate", "minibatch"], together, strict=True):
        alone = probe.gradient(name, position, indices[0], centre.inputs())
        np.testing.assert_allclose(estimate, alone, rtol=1e-12, atol=1e-12)


INTERPRETABLE = [name for name, s in SAMPLERS.items() if interpretable(s.dynamics_class())]


@pytest.mark.parametrize("metric_kind", sorted(METRICS))
@pytest.mark.parametrize("sampler_name", INTERPRETABLE)
def test_interpreted_loop_takes_the_fused_kernels_steps(density, sampler_name, metric_kind):
    """Same inputs, same steps: the loop and the fused kernel agree to rounding, every metric."""
    dynamics = SAMPLERS[sampler_name].dynamics_class()
    probe = Probe(density)
    centre = Centre(np.array([0.5, -0.3, 0.1]), np.array([3.0, -2.0, 1.0]))
    covariance = np.array([[1.0, 0.6, 0.1], [0.6, 1.0, -0.5], [0.1, -0.5, 2.0]]) * 0.04
    metric = (
        METRICS["identity"]()
        if metric_kind == "identity"
        else metric_from_covariance(metric_kind, centre.position, covariance, spread=1.5)
    )
    assert metric.kind == metric_kind
    named = {**chain_inputs(dynamics), **metric.inputs(), **centre.inputs(), "gradient_clip": 5.0}
    fused = Kernel(density, control_variate_gradient(density), dynamics, None, type(metric))
    terms = (
        PositionTerms(density, dynamics, type(metric)) if compiled_terms_needed(dynamics) else None
    )
    loop = InterpretedKernel(probe, "control_variate", dynamics, type(metric), terms)
    rng = np.random.default_rng(5)
    indices, _ = make_inputs(9)
    noise = rng.standard_normal((9, dynamics.noise_vectors, 3))
    step_sizes = np.linspace(0.01, 0.02, 9)
    step_values = dynamics.step_values(lambda steps: step_sizes[steps], np.arange(9))
    start = metric.to_coordinates(np.array([0.2, 0.1, -0.1]))
    state = as_state(dynamics.initial_state(start, chain_inputs(dynamics), rng))

    expected = fused(state, indices, noise, step_values, fused.prepare(named, 3))
    result = loop(state, indices, noise, step_values, loop.prepare(named, 3))

    assert result.steps_taken == expected.steps_taken == 9
    assert result.clipped_steps == expected.clipped_steps > 0
    for name, value in expected.state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(result.position, expected.position, rtol=1e-10)
    np.testing.assert_allclose(result.log_density, expected.log_density, rtol=1e-10)
    np.testing.assert_allclose(result.gradient_norm, expected.gradient_norm, rtol=1e-10)


@pytest.mark.parametrize("metric_kind", ["identity", "dense"])
def test_second_order_control_variate_runs_the_same_steps_fused_and_interpreted(
    density, metric_kind
):
    dynamics = Underdamped()
    probe = Probe(density)
    position = np.array([0.5, -0.3, 0.1])
    centre = probe.centre(position, hessian=True)
    covariance = np.array([[1.0, 0.6, 0.1], [0.6, 1.0, -0.5], [0.1, -0.5, 2.0]]) * 0.04
    metric = (
        METRICS["identity"]()
        if metric_kind == "identity"
        else metric_from_covariance(metric_kind, position, covariance, spread=1.5)
    )
    named = {**chain_inputs(dynamics), **metric.inputs(), **centre.inputs()}
    fused = Kernel(
        density, second_order_control_variate_gradient(density), dynamics, None, type(metric)
    )
    loop = InterpretedKernel(probe, "second_order", dynamics, type(metric))
    rng = np.random.default_rng(6)
    indices, _ = make_inputs(9)
    noise = rng.standard_normal((9, dynamics.noise_vectors, 3))
    step_values = dynamics.step_values(lambda steps: np.full(len(steps), 0.02), np.arange(9))
    start = metric.to_coordinates(np.array([0.2, 0.1, -0.1]))
    state = as_state(dynamics.initial_state(start, chain_inputs(dynamics), rng))

    expected = fused(state, indices, noise, step_values, fused.prepare(named, 3))
    result = loop(state, indices, noise, step_values, loop.prepare(named, 3))

    assert result.steps_taken == expected.steps_taken == 9
    for name, value in expected.state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10, atol=1e-12)


def test_interpreted_loop_stops_where_the_fused_kernel_stops(density):
    probe = Probe(density)
    fused = Kernel(density, minibatch_gradient(density), EULER)
    loop = InterpretedKernel(probe, "minibatch", EULER, METRICS["identity"])
    named = chain_inputs(Langevin())
    indices, noise = make_inputs(6, seed=2)
    step_values = {"step_size": np.array([1e-3, 1e-3, 1e-3, np.inf, 1e-3, 1e-3])}
    start = {"position": np.zeros(3)}
    expected = fused(start, indices, noise, step_values, fused.prepare(named, 3))
    result = loop(start, indices, noise, step_values, loop.prepare(named, 3))
    assert result.steps_taken == expected.steps_taken == 3
    np.testing.assert_allclose(result.state["position"], expected.state["position"], rtol=1e-12)


def test_interpreted_loop_checks_its_inputs_once(density):
    loop = InterpretedKernel(Probe(density), "minibatch", EULER, METRICS["diagonal"])
    named = {**chain_inputs(Langevin()), "metric_shift": np.zeros(3), "metric_scale": np.ones(3)}
    loop.prepare(named, 3)
    with pytest.raises(ValueError, match="metric_scale"):
        loop.prepare({**named, "metric_scale": np.ones(4)}, 3)
    with pytest.raises(ValueError, match="needs the input 'temperature'"):
        loop.prepare({k: v for k, v in named.items() if k != "temperature"}, 3)


def test_position_terms_that_read_the_gradient_have_no_interpreted_loop(density):
    """pSGLD's correction reads the minibatch gradient's derivatives: the fused kernel only."""
    dynamics = SAMPLERS["PSGLD"].dynamics_class(correction=True)
    assert not interpretable(dynamics)
    with pytest.raises(ValueError, match="no interpreted form"):
        InterpretedKernel(Probe(density), "minibatch", dynamics, METRICS["identity"])
    with pytest.raises(ValueError, match="inside the compiled kernel only"):
        PositionTerms(density, dynamics, METRICS["identity"])


def test_every_sampler_with_its_default_options_is_interpreted(density):
    """pSGLD's correction is zero unless asked for; SGRLD's terms are compiled on their own."""
    assert INTERPRETABLE == list(SAMPLERS)
    assert [name for name, s in SAMPLERS.items() if compiled_terms_needed(s.dynamics_class())] == [
        "SGRLD"
    ]
    with pytest.raises(ValueError, match="needs its position terms"):
        InterpretedKernel(
            Probe(density), "minibatch", SAMPLERS["SGRLD"].dynamics_class(), METRICS["identity"]
        )
