"""The Gaussian model of the chain behind the step-size rules."""

import numpy as np
import pytest

from pymc_sgmcmc.tuning import (
    langevin_relaxation_steps,
    langevin_step_size,
    langevin_variance_inflation,
    underdamped_relaxation_steps,
    underdamped_step_size,
    underdamped_variance_inflation,
)

N_CHAINS = 40_000
# Monte Carlo sd of a variance estimated from N_CHAINS independent chains.
VARIANCE_MC_SD = np.sqrt(2 / N_CHAINS)


def simulate_langevin(step_size, curvature, noise, n_steps=1500, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=N_CHAINS) / np.sqrt(curvature)
    for _ in range(n_steps):
        gradient = -curvature * x + np.sqrt(noise) * rng.normal(size=N_CHAINS)
        x = x + step_size * gradient + np.sqrt(2 * step_size) * rng.normal(size=N_CHAINS)
    return curvature * x.var() - 1


def simulate_underdamped(step_size, friction, curvature, noise, n_steps=1500, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=N_CHAINS) / np.sqrt(curvature)
    r = rng.normal(size=N_CHAINS)
    for _ in range(n_steps):
        gradient = -curvature * x + np.sqrt(noise) * rng.normal(size=N_CHAINS)
        r = (
            (1 - step_size * friction) * r
            + step_size * gradient
            + np.sqrt(2 * step_size * friction) * rng.normal(size=N_CHAINS)
        )
        x = x + step_size * r
    return curvature * x.var() - 1


@pytest.mark.parametrize(("step_size", "curvature", "noise"), [(0.05, 2.0, 3.0), (0.2, 1.0, 0.0)])
def test_langevin_inflation_matches_simulation(step_size, curvature, noise):
    simulated = simulate_langevin(step_size, curvature, noise)
    predicted = langevin_variance_inflation(step_size, curvature, noise)
    assert abs(simulated - predicted) < 4 * VARIANCE_MC_SD * (1 + predicted)


@pytest.mark.parametrize(
    ("step_size", "friction", "curvature", "noise"), [(0.2, 1.5, 2.0, 3.0), (0.4, 0.5, 1.0, 0.1)]
)
def test_underdamped_inflation_matches_simulation(step_size, friction, curvature, noise):
    simulated = simulate_underdamped(step_size, friction, curvature, noise)
    predicted = underdamped_variance_inflation(step_size, friction, curvature, noise)
    assert abs(simulated - predicted) < 4 * VARIANCE_MC_SD * (1 + predicted)


def test_negative_control_noise_ignored_in_prediction_is_caught():
    """Leaving the gradient noise out of the prediction misses the simulated inflation."""
    simulated = simulate_langevin(0.05, 2.0, 3.0)
    assert abs(simulated - langevin_variance_inflation(0.05, 2.0, 0.0)) > 4 * VARIANCE_MC_SD


def test_step_sizes_meet_the_budget_exactly():
    step_size = langevin_step_size(0.05, 2.0, 0.3)
    assert langevin_variance_inflation(step_size, 2.0, 0.3) == pytest.approx(0.05)
    assert langevin_variance_inflation(step_size, 1.0, 0.3) < 0.05
    curvatures = [0.5, 1.0, 2.0]
    step_size = underdamped_step_size(0.05, curvatures, 2 * np.sqrt(0.5), 0.3)
    worst = max(underdamped_variance_inflation(step_size, np.sqrt(2), a, 0.3) for a in curvatures)
    assert worst == pytest.approx(0.05, rel=1e-6)


def test_more_noise_means_smaller_steps():
    assert langevin_step_size(0.05, 1.0, 10.0) < langevin_step_size(0.05, 1.0, 0.1)
    assert underdamped_step_size(0.05, [1.0], 2.0, 10.0) < underdamped_step_size(
        0.05, [1.0], 2.0, 0.1
    )


def test_relaxation_times():
    assert langevin_relaxation_steps(0.01, 1.0) == pytest.approx(-1 / np.log(0.99))
    # Critical damping relaxes in about 1 / (step_size * sqrt(curvature)) steps.
    steps = underdamped_relaxation_steps(0.01, 2.0, 1.0)
    assert 50 < steps < 200
    assert underdamped_variance_inflation(10.0, 2.0, 1.0) == np.inf
