"""Algebra of the update rules: known inputs give known outputs."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_sgmcmc.integrators import langevin_update, underdamped_langevin_update


def test_langevin_step_with_known_inputs():
    position = np.array([1.0, -2.0])
    gradient = np.array([0.5, 4.0])
    noise = np.array([1.0, -1.0])
    new = langevin_update(position, gradient, noise, step_size=0.02, temperature=4.0)
    # theta + eta g + sqrt(2 eta tau) xi = theta + 0.02 g + 0.4 xi
    np.testing.assert_allclose(new, [1.0 + 0.01 + 0.4, -2.0 + 0.08 - 0.4], rtol=1e-14)


def test_preconditioned_langevin_step_with_known_inputs():
    new = langevin_update(
        np.array([0.0]), np.array([2.0]), np.array([1.0]), 0.5, 1.0, preconditioner=np.array([4.0])
    )
    # 0 + 0.5 * 4 * 2 + sqrt(2 * 0.5 * 4) * 1
    np.testing.assert_allclose(new, [4.0 + 2.0])


def test_underdamped_step_with_known_inputs():
    position, momentum = np.array([1.0]), np.array([0.5])
    new_position, new_momentum = underdamped_langevin_update(
        position,
        momentum,
        gradient=np.array([-2.0]),
        noise=np.array([1.0]),
        step_size=0.1,
        friction=2.0,
        mass=4.0,
        temperature=0.5,
    )
    # r <- (1 - 0.1 * 2 / 4) 0.5 + 0.1 * (-2) + sqrt(2 * 0.1 * 2 * 0.5) * 1
    expected_momentum = 0.95 * 0.5 - 0.2 + np.sqrt(0.2)
    np.testing.assert_allclose(new_momentum, [expected_momentum], rtol=1e-14)
    np.testing.assert_allclose(new_position, [1.0 + 0.1 * expected_momentum / 4.0], rtol=1e-14)


@pytest.mark.parametrize("step_size", [1e-3, 0.5])
def test_zero_temperature_and_zero_gradient_leave_the_state_unchanged(step_size):
    rng = np.random.default_rng(0)
    position = rng.normal(size=5)
    noise = rng.normal(size=5)
    zero = np.zeros(5)
    np.testing.assert_array_equal(langevin_update(position, zero, noise, step_size, 0.0), position)
    new_position, new_momentum = underdamped_langevin_update(
        position, zero, zero, noise, step_size, friction=1.0, temperature=0.0
    )
    np.testing.assert_array_equal(new_position, position)
    np.testing.assert_array_equal(new_momentum, zero)


def test_rules_build_pytensor_graphs_with_the_same_values():
    x, g, xi = (pt.vector(name) for name in ("x", "g", "xi"))
    function = pytensor.function([x, g, xi], langevin_update(x, g, xi, 0.1, 1.5))
    values = [np.array([0.3, -1.0]), np.array([2.0, 1.0]), np.array([0.7, 0.1])]
    np.testing.assert_allclose(function(*values), langevin_update(*values, 0.1, 1.5))


def stationary_variance(noise_scale_factor=1.0, step_size=0.05, n_chains=20_000, n_steps=400):
    """Run the Langevin rule on a standard normal target with an exact gradient."""
    rng = np.random.default_rng(1)
    theta = rng.normal(size=n_chains)
    for _ in range(n_steps):
        noise = noise_scale_factor * rng.normal(size=n_chains)
        theta = langevin_update(theta, -theta, noise, step_size)
    return theta.var()


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
