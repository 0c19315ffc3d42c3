"""Algebra of the update rules: known inputs give known outputs, for every declared sampler."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.samplers.sghmc import Underdamped
from pymc_sgmcmc.samplers.sgld import INTEGRATORS, Langevin, langevin_variance_inflation

DYNAMICS = [sampler.dynamics_class for sampler in SAMPLERS.values()]


def langevin(position, gradient, noise, step_size, temperature=1.0, preconditioner=1.0):
    inputs = {
        "step_size": step_size,
        "temperature": temperature,
        "preconditioner": preconditioner,
    }
    return Langevin.step({"position": position}, gradient, noise[None], inputs)["position"]


def test_langevin_step_with_known_inputs():
    position = np.array([1.0, -2.0])
    gradient = np.array([0.5, 4.0])
    noise = np.array([1.0, -1.0])
    new = langevin(position, gradient, noise, step_size=0.02, temperature=4.0)
    # theta + eta g + sqrt(2 eta tau) xi = theta + 0.02 g + 0.4 xi
    np.testing.assert_allclose(new, [1.0 + 0.01 + 0.4, -2.0 + 0.08 - 0.4], rtol=1e-14)


def test_preconditioned_langevin_step_with_known_inputs():
    new = langevin(np.array([0.0]), np.array([2.0]), np.array([1.0]), 0.5, 1.0, np.array([4.0]))
    # 0 + 0.5 * 4 * 2 + sqrt(2 * 0.5 * 4) * 1
    np.testing.assert_allclose(new, [4.0 + 2.0])


def test_underdamped_step_with_known_inputs():
    state = {"position": np.array([1.0]), "momentum": np.array([0.5])}
    inputs = {"step_size": 0.1, "friction": 2.0, "mass": 4.0, "temperature": 0.5}
    new = Underdamped.step(state, np.array([-2.0]), np.array([[1.0]]), inputs)
    # r <- (1 - 0.1 * 2 / 4) 0.5 + 0.1 * (-2) + sqrt(2 * 0.1 * 2 * 0.5) * 1
    expected_momentum = 0.95 * 0.5 - 0.2 + np.sqrt(0.2)
    np.testing.assert_allclose(new["momentum"], [expected_momentum], rtol=1e-14)
    np.testing.assert_allclose(new["position"], [1.0 + 0.1 * expected_momentum / 4.0], rtol=1e-14)


def chain_inputs(dynamics_class, size):
    """Chain inputs at temperature 0, with every position term and per-step input given."""
    dynamics = dynamics_class()
    tuned = {"critical_friction": 1.0, "mode": np.zeros(size)}
    inputs = dynamics.chain_inputs(np.full(size, 0.5), 0.0, tuned)
    inputs.update({name: np.full(size, 0.3) for name in dynamics.position_inputs})
    inputs.update({name: 1.0 for name in dynamics.step_inputs if name != "step_size"})
    return dynamics, inputs


@pytest.mark.parametrize("dynamics_class", DYNAMICS)
@pytest.mark.parametrize("step_size", [1e-3, 0.5])
def test_zero_temperature_and_zero_gradient_leave_the_position_unchanged(dynamics_class, step_size):
    """At rest (zero momentum) with no gradient and no noise nothing moves the position.

    Auxiliary state may still relax (pSGLD's running mean of squared gradients).
    """
    rng = np.random.default_rng(0)
    dynamics, inputs = chain_inputs(dynamics_class, 5)
    position = rng.normal(size=5)
    state = dynamics.initial_state(position, inputs, rng)
    noise = rng.normal(size=(dynamics.noise_vectors, 5))
    new = dynamics.step(state, np.zeros(5), noise, {**inputs, "step_size": step_size})
    np.testing.assert_array_equal(new["position"], state["position"])
    if "momentum" in state:
        np.testing.assert_array_equal(new["momentum"], state["momentum"])


@pytest.mark.parametrize("dynamics_class", DYNAMICS)
def test_rules_build_pytensor_graphs_with_the_same_values(dynamics_class):
    rng = np.random.default_rng(1)
    dynamics, inputs = chain_inputs(dynamics_class, 2)
    inputs = {**inputs, "temperature": 1.5, "step_size": 0.1}
    state = {"position": rng.normal(size=2)}
    # Positive values fit every auxiliary state (a running mean of squares included).
    state.update(
        {v.name: rng.uniform(0.5, 2.0, size=() if v.scalar else 2) for v in dynamics.state}
    )
    gradient, noise = rng.normal(size=2), rng.normal(size=(dynamics.noise_vectors, 2))
    symbols = {name: pt.as_tensor(value).type() for name, value in state.items()}
    g, xi = pt.vector("g"), pt.matrix("xi")
    outputs = dynamics.step(symbols, g, xi, inputs)
    results = [pt.as_tensor(value) for value in outputs.values()]
    function = pytensor.function([*symbols.values(), g, xi], results, on_unused_input="ignore")
    expected = dynamics.step(state, gradient, noise, inputs)
    for value, name in zip(function(*state.values(), gradient, noise), outputs, strict=True):
        np.testing.assert_allclose(value, expected[name], rtol=1e-12)


def langevin_variance(
    integrator, step_size, gradient_noise=0.0, noise_scale=1.0, seed=2, n_steps=300
):
    """Variance of 20,000 SGLD chains on N(0, 1) after ``n_steps`` steps.

    ``gradient_noise`` is the variance of noise added to the exact gradient;
    ``noise_scale`` scales the injected normal draws (1 for the rule as it is).
    """
    rng = np.random.default_rng(seed)
    dynamics = Langevin(integrator)
    inputs = {"step_size": step_size, "temperature": 1.0, "preconditioner": 1.0}
    state = dynamics.initial_state(rng.normal(size=20_000), inputs, rng)
    for _ in range(n_steps):
        gradient = -state["position"]
        if gradient_noise:
            gradient = gradient + np.sqrt(gradient_noise) * rng.normal(size=20_000)
        noise = noise_scale * rng.normal(size=(1, 20_000))
        state = dynamics.step(state, gradient, noise, inputs)
    return state["position"].var()


def stationary_variance(noise_scale_factor=1.0, step_size=0.05):
    """Run the Euler-Maruyama rule on a standard normal target with an exact gradient."""
    return langevin_variance(
        "euler_maruyama", step_size, noise_scale=noise_scale_factor, seed=1, n_steps=400
    )


def test_stationary_variance_of_standard_normal_is_one():
    # Exact stationary variance of the discretised chain: 1 / (1 - eta / 2).
    variance = stationary_variance()
    monte_carlo_sd = np.sqrt(2 / 20_000)
    assert abs(variance - 1 / (1 - 0.05 / 2)) < 4 * monte_carlo_sd
    assert abs(variance - 1) < 0.04


def test_negative_control_eps_over_two_convention_is_caught():
    """Noise sqrt(eta) with drift eta (mixing the two conventions) halves the variance."""
    variance = stationary_variance(noise_scale_factor=np.sqrt(0.5))
    assert abs(variance - 1) > 0.4


def test_shared_draws_step_with_known_inputs():
    state = {"position": np.array([1.0]), "last_noise": np.array([0.5])}
    inputs = {"step_size": 0.02, "temperature": 4.0, "preconditioner": 1.0}
    new = Langevin.step(state, np.array([0.5]), np.array([[1.0]]), inputs)
    # theta + eta g + sqrt(2 eta tau) (xi_last + xi) / 2 = 1 + 0.01 + 0.4 * 0.75
    np.testing.assert_allclose(new["position"], [1.31], rtol=1e-14)
    np.testing.assert_array_equal(new["last_noise"], [1.0])


@pytest.mark.parametrize("step_size", [0.5, 1.0, 1.5])
def test_shared_draws_sample_a_gaussian_without_discretisation_error(step_size):
    """At every stable step size: Euler-Maruyama's variance is 1 / (1 - eta / 2) instead."""
    monte_carlo_sd = np.sqrt(2 / 20_000)
    averaged = langevin_variance("leimkuhler_matthews", step_size)
    assert abs(averaged - 1.0) < 4 * monte_carlo_sd
    euler = langevin_variance("euler_maruyama", step_size)
    assert abs(euler - 1.0 / (1.0 - step_size / 2.0)) < 4 * monte_carlo_sd * euler
    # Negative control: the two differ by far more than the Monte Carlo error.
    assert euler - averaged > 20 * monte_carlo_sd


@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_gaussian_model_predicts_the_variance_with_gradient_noise(integrator):
    step_size, gradient_noise = 0.5, 2.0
    averaged = integrator == "leimkuhler_matthews"
    predicted = 1.0 + langevin_variance_inflation(step_size, 1.0, gradient_noise, averaged)
    variance = langevin_variance(integrator, step_size, gradient_noise)
    assert abs(variance - predicted) < 4 * np.sqrt(2 / 20_000) * predicted, (variance, predicted)
