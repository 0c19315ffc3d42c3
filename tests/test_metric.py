"""Metrics: the change of coordinates is exact, and the kernel composes it with every sampler."""

import numpy as np
import pymc as pm
import pytest
from rules import position_terms

from pymc_sgmcmc.estimators import Probe, minibatch_gradient
from pymc_sgmcmc.kernel import Kernel, as_state
from pymc_sgmcmc.metric import METRICS, LowRankMetric, metric_from_covariance
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.registry import SAMPLERS

SIZE = 4
N_ROWS = 300


def covariance(seed=0, size=SIZE):
    rng = np.random.default_rng(seed)
    root = rng.normal(size=(size, size)) + 2.0 * np.eye(size)
    return root @ root.T


@pytest.mark.parametrize("kind", ["diagonal", "dense", "low_rank"])
def test_maps_are_consistent(kind):
    """theta(z(theta)) = theta, and the pulled gradient is A' g with A the declared factor."""
    rng = np.random.default_rng(1)
    shift = rng.normal(size=SIZE)
    metric = metric_from_covariance(kind, shift, covariance(), rank=SIZE, spread=1.0)
    assert metric.kind == kind
    theta, gradient = rng.normal(size=SIZE), rng.normal(size=SIZE)
    z = metric.to_coordinates(theta)
    np.testing.assert_allclose(metric.position(z), theta, rtol=1e-12)
    factor = metric.factor(SIZE)
    np.testing.assert_allclose(metric.position(z), shift + factor @ z, rtol=1e-12)
    np.testing.assert_allclose(
        metric.pull_gradient(gradient, metric.inputs()), factor.T @ gradient, rtol=1e-12
    )


@pytest.mark.parametrize("kind", ["dense", "low_rank"])
def test_full_metrics_reproduce_the_covariance(kind):
    """A dense metric, or a low-rank one keeping every direction, has A A' = Sigma."""
    target = covariance(2)
    metric = metric_from_covariance(kind, np.zeros(SIZE), target, rank=SIZE, spread=1.0)
    factor = metric.factor(SIZE)
    np.testing.assert_allclose(factor @ factor.T, target, rtol=1e-10)


def test_low_rank_metric_keeps_the_stretched_directions():
    """Directions whose variance differs from the diagonal's by more than the spread are kept."""
    scale = np.array([1.0, 10.0, 0.1, 2.0, 3.0])
    correlation = np.eye(5)
    correlation[0, 1] = correlation[1, 0] = 0.99
    target = correlation * np.outer(scale, scale)
    metric = metric_from_covariance("low_rank", np.zeros(5), target, rank=3, spread=1.5)
    assert isinstance(metric, LowRankMetric)
    np.testing.assert_allclose(np.sort(metric.variances), [0.01, 1.99], rtol=1e-10)
    factor = metric.factor(5)
    np.testing.assert_allclose(factor @ factor.T, target, rtol=1e-8, atol=1e-12)
    # An uncorrelated covariance needs no low-rank part: the metric is diagonal.
    assert metric_from_covariance("low_rank", np.zeros(5), np.diag(scale**2)).kind == "diagonal"


@pytest.fixture(scope="module")
def density():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N_ROWS, SIZE))
    x[:, 1] = x[:, 0] + 0.05 * x[:, 1]
    y = x @ np.array([1.0, -0.5, 0.2, 0.0]) + rng.normal(size=N_ROWS)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=SIZE)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    return build_minibatch_log_density(model, model.value_vars)


@pytest.mark.parametrize("kind", ["dense", "low_rank", "diagonal"])
@pytest.mark.parametrize("sampler", list(SAMPLERS.values()), ids=list(SAMPLERS))
def test_kernel_runs_the_rule_in_the_metric_coordinates(density, sampler, kind):
    """The fused kernel equals the update rule applied with numpy to z and A' g(shift + A z)."""
    dynamics = sampler.dynamics_class()
    metric = metric_from_covariance(
        kind, np.array([0.3, 0.1, -0.2, 0.0]), 0.01 * covariance(4), rank=2, spread=1.0
    )
    assert metric.kind == kind
    kernel = Kernel(density, minibatch_gradient(density), dynamics, metric=METRICS[kind])
    probe = Probe(density)
    tuned = {"critical_friction": 2.0, "mode": np.full(SIZE, 0.1)}
    inputs = dynamics.chain_inputs(np.ones(SIZE), 1.0, tuned)
    values = kernel.prepare({**inputs, **metric.inputs()}, SIZE)
    rng = np.random.default_rng(5)
    indices = rng.integers(N_ROWS, size=(6, 25))
    noise = rng.standard_normal((6, dynamics.noise_vectors, SIZE))
    step_sizes = np.full(6, 0.05)
    state = dynamics.initial_state(metric.to_coordinates(np.zeros(SIZE)), inputs, rng)

    step_values = dynamics.step_values(lambda steps: step_sizes[steps], np.arange(6))
    result = kernel(as_state(state), indices, noise, step_values, values)

    for k in range(6):
        gradient = probe.minibatch_gradient(metric.position(state["position"]), indices[k])
        pulled = metric.pull_gradient(gradient, metric.inputs())
        this_step = {name: value[k] for name, value in step_values.items()}
        terms = position_terms(dynamics, density, state, {**inputs, **this_step}, metric)
        state = dynamics.step(state, pulled, noise[k], {**inputs, **this_step, **terms})
    for name, value in state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10)
    np.testing.assert_allclose(result.position, metric.position(state["position"]), rtol=1e-10)


def test_dense_langevin_is_langevin_preconditioned_by_the_covariance(density):
    """SGLD in the dense metric's coordinates moves theta by eta Sigma g + sqrt(2 eta) L xi.

    With the shared draws, xi is the mean of the last draw and the new one.
    """
    sampler = SAMPLERS["SGLD"]
    dynamics = sampler.dynamics_class()
    target = 0.01 * covariance(6)
    metric = metric_from_covariance("dense", np.zeros(SIZE), target)
    kernel = Kernel(density, minibatch_gradient(density), type(dynamics), metric=METRICS["dense"])
    probe = Probe(density)
    inputs = dynamics.chain_inputs(np.ones(SIZE), 1.0, {})
    values = kernel.prepare({**inputs, **metric.inputs()}, SIZE)
    rng = np.random.default_rng(7)
    indices = rng.integers(N_ROWS, size=(1, 25))
    noise = rng.standard_normal((1, 1, SIZE))
    last_noise = rng.standard_normal(SIZE)
    theta = np.array([0.1, 0.2, -0.3, 0.4])
    result = kernel(
        {"position": metric.to_coordinates(theta), "last_noise": last_noise},
        indices,
        noise,
        {"step_size": np.array([0.1])},
        values,
    )
    gradient = probe.minibatch_gradient(theta, indices[0])
    xi = 0.5 * (last_noise + noise[0, 0])
    expected = theta + 0.1 * target @ gradient + np.sqrt(0.2) * metric.cholesky @ xi
    np.testing.assert_allclose(result.position, expected, rtol=1e-10)


def test_metric_inputs_are_checked(density):
    """A factor of the wrong shape is refused once, before the kernel trusts its inputs."""
    sampler = SAMPLERS["SGLD"]
    dynamics = sampler.dynamics_class()
    kernel = Kernel(density, minibatch_gradient(density), type(dynamics), metric=METRICS["dense"])
    inputs = dynamics.chain_inputs(np.ones(SIZE), 1.0, {})
    metric = metric_from_covariance("dense", np.zeros(SIZE), covariance())
    wrong = {**metric.inputs(), "metric_factor": np.eye(SIZE + 1)}
    with pytest.raises(ValueError, match="'metric_factor' has shape"):
        kernel.prepare({**inputs, **wrong}, SIZE)
