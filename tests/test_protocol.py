"""The dynamics protocol carries a sampler nothing else in the package knows about.

A stochastic-gradient Nose-Hoover thermostat (Ding et al. 2014) with a scalar
thermostat state and a thermostat statistic is declared here, in the test
alone; the kernel compiles it, the adapter samples with it through
``pm.sample``, and its statistic lands in ``sample_stats``.
"""

from typing import ClassVar

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from pymc_sgmcmc.dynamics import ChainInput, Dynamics, StateVariable
from pymc_sgmcmc.estimators import minibatch_gradient
from pymc_sgmcmc.kernel import Kernel, as_state
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.step_method import StochasticGradientStep


def mean_square(momentum):
    if isinstance(momentum, np.ndarray):
        return np.mean(momentum**2)
    return pt.mean(momentum**2)


class Thermostat(Dynamics):
    """SGNHT: momentum, and a scalar thermostat that adapts the friction."""

    name = "thermostat"
    state = (StateVariable("momentum"), StateVariable("thermostat", scalar=True))
    chain_inputs_spec = (ChainInput("temperature", scalar=True), ChainInput("diffusion"))
    stats: ClassVar[dict] = {"thermostat": np.float64}

    @staticmethod
    def step(state, gradient, noise, inputs):
        step_size, momentum = inputs["step_size"], state["momentum"]
        momentum = (
            momentum
            - step_size * state["thermostat"] * momentum
            + step_size * gradient
            + (2.0 * step_size * inputs["diffusion"] * inputs["temperature"]) ** 0.5 * noise[0]
        )
        position = state["position"] + step_size * momentum
        thermostat = state["thermostat"] + step_size * (
            mean_square(momentum) - inputs["temperature"]
        )
        return {"position": position, "momentum": momentum, "thermostat": thermostat}

    def chain_inputs(self, preconditioner, temperature, tuned):
        return {"temperature": np.float64(temperature), "diffusion": np.ones_like(preconditioner)}

    def initial_state(self, position, inputs, rng):
        momentum = rng.standard_normal(position.size)
        return {"position": position, "momentum": momentum, "thermostat": np.float64(1.0)}

    def statistics(self, state):
        return {"thermostat": float(state["thermostat"])}


class SGNHT(StochasticGradientStep):
    """A step method for the thermostat declared above."""

    name = "sgnht"
    dynamics_class = Thermostat


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    y = x @ np.array([1.0, -1.0]) + rng.normal(size=300)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    return model


def test_scalar_state_compiles_and_follows_the_rule(model):
    density = build_minibatch_log_density(model, model.value_vars)
    kernel = Kernel(density, minibatch_gradient(density), Thermostat)
    dynamics = Thermostat()
    inputs = dynamics.chain_inputs(np.ones(2), 1.0, {})
    rng = np.random.default_rng(1)
    state = as_state(dynamics.initial_state(np.zeros(2), inputs, rng))
    indices = rng.integers(300, size=(6, 30))
    noise = rng.standard_normal((6, 1, 2))
    step_sizes = np.full(6, 1e-3)
    result = kernel(state, indices, noise, {"step_size": step_sizes}, kernel.prepare(inputs, 2))
    gradient = pm.compile([density.position, density.indices], density.gradient)
    for k in range(6):
        g = gradient(state["position"], indices[k])
        state = Thermostat.step(state, g, noise[k], {**inputs, "step_size": 1e-3})
    assert np.ndim(result.state["thermostat"]) == 0
    for name, value in state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=1e-10)


def test_a_declared_sampler_runs_through_pm_sample(model):
    with model:
        step = SGNHT(
            batch_size=30,
            step_size=1e-3,
            preconditioner=None,
            control_variate=False,
            steps_per_draw=20,
        )
        result = pm.sample(
            step=step, draws=30, tune=10, chains=2, cores=1, random_seed=2, progressbar=False
        )
    thermostat = np.asarray(result.sample_stats["thermostat"])
    assert thermostat.shape == (2, 30) and np.all(np.isfinite(thermostat))
    assert len(np.unique(thermostat)) > 1
    assert np.all(np.isfinite(np.asarray(result.posterior["beta"])))
