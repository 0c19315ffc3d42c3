"""How far variance inflation moves skewed posteriors' means, and what the tuner does with it."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.samplers.cyclical import CyclicalLangevin
from pymc_sgmcmc.samplers.psgld import RMSpropLangevin
from pymc_sgmcmc.samplers.sgld import Langevin, langevin_variance_inflation
from pymc_sgmcmc.tuning import TuningConfig, choose_settings
from pymc_sgmcmc.tuning.measure import FULL_DATA, laplace
from pymc_sgmcmc.tuning.tempering import (
    FALSE_ALARM,
    EnergyWindow,
    log_density_at_draws,
    tempering_moves,
    tempering_sensitivity,
)
from pymc_sgmcmc.tuning.tuner import mean_share
from tests.test_tuning import choices, gaussian_measurements


def gamma_and_normals(shape, n_normals, n_draws, seed):
    """Draws of ``x ~ Gamma(shape, 1)`` beside standard normals, with their log density."""
    rng = np.random.default_rng(seed)
    x = rng.gamma(shape, size=n_draws)
    normals = rng.standard_normal((n_draws, n_normals))
    draws = np.column_stack([x, normals])
    log_density = (shape - 1) * np.log(x) - x - 0.5 * np.sum(normals**2, axis=1)
    return draws, log_density


def tempered_gamma_mean(shape, inflation):
    """Mean of ``Gamma(shape, 1)`` tempered to ``p^(1 / (1 + inflation))``: exact."""
    beta = 1.0 / (1.0 + inflation)
    return (beta * (shape - 1) + 1) / beta


@pytest.mark.parametrize("shape", [1.5, 3.0])
def test_sensitivity_of_a_skewed_coordinate_is_the_tempered_means_slope(shape):
    """A Gamma coordinate's mean moves by ``d/de E[x] = 1``, that is ``1/sqrt(shape)`` sds."""
    inflation = 1e-4
    slope = (tempered_gamma_mean(shape, inflation) - shape) / inflation / np.sqrt(shape)
    draws, log_density = gamma_and_normals(shape, 9, 20_000, seed=0)
    estimate = tempering_sensitivity(draws, log_density, independent=len(draws))
    products = (draws[:, 0] - draws[:, 0].mean()) * (log_density - log_density.mean())
    error = products.std() / draws[:, 0].std() / np.sqrt(len(draws))
    assert slope == pytest.approx(1.0 / np.sqrt(shape), rel=1e-3)
    assert abs(estimate - slope) < 4 * error


@pytest.mark.parametrize("size", [2, 10, 200])
def test_a_gaussian_posterior_reads_as_insensitive_but_for_the_false_alarm_rate(size):
    """Gaussian draws, 200 per window: at most the chance false alarms over 300 windows.

    With 1% false alarms, 300 windows give 3 on average; 9 or more has
    probability below 0.4%.
    """
    rng = np.random.default_rng(1)
    alarms = 0
    for _ in range(300):
        draws = rng.standard_normal((200, size))
        log_density = -0.5 * np.sum(draws**2, axis=1)
        alarms += tempering_sensitivity(draws, log_density, independent=200) > 0
    assert stats.binom.sf(alarms - 1, 300, FALSE_ALARM) > 0.004


def test_fewer_independent_draws_need_a_larger_covariance_to_count():
    draws, log_density = gamma_and_normals(3.0, 9, 400, seed=2)
    assert tempering_sensitivity(draws, log_density, independent=400) > 0
    assert tempering_sensitivity(draws, log_density, independent=5) == 0


def test_the_subsample_log_density_gives_the_full_datas_sensitivity():
    """N = 20,000 rows: the log density on 4,096 rows with a control variate is exact enough.

    The posterior is a logistic regression's (near Gaussian), so the draws are
    made skewed by hand: an exponential spread along the first whitened direction.
    """
    panel = logistic_regression(n_rows=20_000, n_features=5)
    density = build_minibatch_log_density(panel.model, panel.model.value_vars)
    probe = Probe(density)
    config = TuningConfig()
    centre = np.zeros(5)
    for _ in range(10):
        _, gradient, _ = probe.full(centre)
        hessian = probe.hessian(centre, np.arange(probe.n_rows), np.full(5, 1e-4))
        centre = centre - np.linalg.solve(hessian, gradient)
    _, _, factor = laplace(hessian)
    rng = np.random.default_rng(3)
    whitened = rng.standard_normal((1000, 5))
    whitened[:, 0] = rng.gamma(1.0, size=1000) - 1.0
    draws = centre + whitened @ factor.T
    exact = np.array([probe.full(draw)[0] for draw in draws])
    estimate = log_density_at_draws(probe, draws, rng, config)
    assert stats.pearsonr(exact, estimate)[0] > 0.999
    exact_sensitivity = tempering_sensitivity(draws, exact, 1000)
    assert exact_sensitivity > 0
    # The subsample may add at most a quarter of the estimate's own sampling error.
    products = (draws - draws.mean(axis=0)) * (exact - exact.mean())[:, None]
    sampling_error = np.max(products.std(axis=0) / draws.std(axis=0)) / np.sqrt(1000)
    difference = abs(tempering_sensitivity(draws, estimate, 1000) - exact_sensitivity)
    assert difference < 0.25 * sampling_error


@pytest.mark.parametrize("sensitivity", [0.25, 0.75, 4.0])
def test_the_tuner_keeps_the_predicted_move_of_the_means_within_the_budget(sensitivity):
    """The means move by at most the budget's share for them, half of it, in sds: a
    sensitivity below a half leaves the inflation at the budget, one above cuts it."""
    share = TuningConfig().mean_share
    assert share == 0.5
    measurements = gaussian_measurements(noise=20.0)
    plain = choose_settings(Langevin(), measurements, choices())
    measurements.tempering_sensitivity = sensitivity
    settings = choose_settings(Langevin(), measurements, choices())
    assert plain.predicted_inflation == pytest.approx(0.05, rel=1e-6)
    expected = 0.05 / max(1.0, sensitivity / share)
    assert settings.predicted_inflation == pytest.approx(expected, rel=1e-6)
    assert settings.predicted_inflation * sensitivity <= share * 0.05 * (1 + 1e-6)


def euler_maruyama_stationary_law(grid, gradient, step):
    """Stationary law on ``grid`` of ``x' = x + step * gradient(x) + sqrt(2 step) * xi``."""
    spacing = grid[1] - grid[0]
    transition = stats.norm.pdf(grid[None, :], (grid + step * gradient)[:, None], np.sqrt(2 * step))
    transition *= spacing
    transition /= transition.sum(axis=1, keepdims=True)
    system = transition.T - np.eye(grid.size)
    system[-1] = 1.0
    right = np.zeros(grid.size)
    right[-1] = 1.0
    return np.linalg.solve(system, right)


def test_the_gradient_energy_gives_the_euler_maruyama_steps_move_of_the_mean():
    """``x = log y`` with ``y ~ Gamma(2, 1)``: ``log p(x) = 2 x - exp(x)``, skewed.

    The Euler-Maruyama chain's stationary mean, computed on a grid at steps
    ``h`` and ``h / 2``, gives by Richardson extrapolation the slope of its
    mean in ``h`` at 0. Per unit of ``eps(a) / a`` (``h / 2`` for this step,
    from its Gaussian model) that slope is what an ``EnergyWindow`` of exact
    draws reads, within four of its Monte Carlo errors.
    """
    shape = 2.0
    grid = np.linspace(-9.0, 4.0, 1301)
    log_density = shape * grid - np.exp(grid)
    density = np.exp(log_density - log_density.max())
    density /= density.sum()
    gradient = shape - np.exp(grid)
    exact_mean = density @ grid
    exact_sd = np.sqrt(density @ (grid - exact_mean) ** 2)
    step = 0.04
    moves = [
        euler_maruyama_stationary_law(grid, gradient, h) @ grid - exact_mean
        for h in (step, step / 2)
    ]
    slope = 2 * moves[1] / (step / 2) - moves[0] / step
    per_curvature = langevin_variance_inflation(1e-8, shape) / shape / 1e-8
    assert per_curvature == pytest.approx(0.5, rel=1e-6)
    observed = abs(slope) / per_curvature / exact_sd

    rng = np.random.default_rng(4)
    draws = np.log(rng.gamma(shape, size=100_000))[:, None]
    gradients = shape - np.exp(draws)
    window = EnergyWindow(draws, gradients, independent=len(draws))
    estimate = window.sensitivity(np.ones(1))
    energy = 0.5 * gradients[:, 0] ** 2
    products = (draws[:, 0] - draws.mean()) * (energy - energy.mean())
    error = products.std() / draws.std() / np.sqrt(len(draws))
    assert abs(estimate - observed) < 4 * error
    # The metric's scale enters squared: a coordinate twice as wide reads four times the move.
    assert window.sensitivity(np.full(1, 4.0)) == pytest.approx(4 * estimate)


def energy_window_of_sensitivity(sensitivity, size=2, n_draws=4000):
    """A window whose half squared gradient rises along the first coordinate by ``sensitivity``."""
    rng = np.random.default_rng(5)
    draws = rng.standard_normal((n_draws, size))
    energy = sensitivity * draws[:, 0] + 10 * (sensitivity + 1)
    gradients = np.zeros_like(draws)
    gradients[:, 0] = np.sqrt(2 * energy)
    return EnergyWindow(draws, gradients, independent=n_draws)


@pytest.mark.parametrize("sensitivity", [0.25, 4.0])
def test_a_full_data_step_keeps_its_predicted_move_of_the_means_within_the_budget(sensitivity):
    """Full-data settings on a Gaussian picture of curvature 1, with a tempering sensitivity
    of 8 that would cut the inflation 16 times (the means' share of the budget is a half).
    With a window's gradients the step is bound by its own move, ``max_a eps(a) / a`` times
    the window's sensitivity: within the means' share of the budget, and at it where the move
    binds (a sensitivity above the share times the curvature)."""
    share = TuningConfig().mean_share
    measurements = replace(gaussian_measurements(noise=20.0), tempering_sensitivity=8.0)
    automatic = choices(full_data_work=0.01)
    tempered = choose_settings(Langevin(), measurements, automatic)
    assert tempered.estimator == FULL_DATA
    assert tempered.predicted_inflation == pytest.approx(0.05 * share / 8, rel=1e-6)
    window = energy_window_of_sensitivity(sensitivity)
    settings = choose_settings(Langevin(), replace(measurements, energy_window=window), automatic)
    read = window.sensitivity(np.ones(2))
    assert read == pytest.approx(sensitivity, rel=0.1)
    move = settings.inflation_per_curvature * read
    assert move <= share * 0.05 * (1 + 1e-6)
    if read > share:
        assert move == pytest.approx(share * 0.05, rel=1e-6)
    else:
        assert settings.predicted_inflation == pytest.approx(0.05, rel=1e-6)


def test_a_dynamics_whose_gaussian_model_is_a_bound_keeps_temperings_cut():
    """Cyclical SGLD's model bounds its inflation along a cycle of step sizes: the first-order
    move needs the exact one, so the window's gradients leave its full-data step as it was."""
    measurements = replace(gaussian_measurements(noise=20.0), tempering_sensitivity=8.0)
    automatic = choices(full_data_work=0.01)
    dynamics = CyclicalLangevin()
    assert not dynamics.exact_gaussian_model
    tempered = choose_settings(dynamics, measurements, automatic)
    window = energy_window_of_sensitivity(0.5)
    settings = choose_settings(dynamics, replace(measurements, energy_window=window), automatic)
    assert tempered.estimator == settings.estimator == FULL_DATA
    assert settings.step_size == tempered.step_size


def test_a_coordinate_seen_moving_counts_its_energy_move_as_estimated():
    """A window of 100 independent draws of 63 coordinates whose energy rises along the first
    by 3 sds per unit, under noise of sd 20 (a metric that misses the curvature at the
    draws). The Bonferroni threshold of 63 coordinates hides the move; where the log
    density's test marked the coordinate moving, its estimate counts. Marking another
    coordinate instead (negative control) reads that one's estimate and leaves the first
    hidden.
    """
    rng = np.random.default_rng(3)
    size, n_draws = 63, 100
    draws = rng.standard_normal((n_draws, size))
    energy = 3.0 * draws[:, 0] + 20.0 * rng.standard_normal(n_draws) + 200.0
    gradients = np.zeros_like(draws)
    gradients[:, 0] = np.sqrt(2 * energy)
    window = EnergyWindow(draws, gradients, independent=n_draws)
    products = (draws - draws.mean(axis=0)) * (energy - energy.mean())[:, None]
    estimates = np.abs(products.mean(axis=0)) / draws.std(axis=0)
    assert estimates[0] > 1.5
    assert window.sensitivity(np.ones(size)) == 0.0
    first = np.zeros(size, dtype=bool)
    first[0] = True
    assert window.sensitivity(np.ones(size), first) == pytest.approx(estimates[0])
    other = np.roll(first, 1)
    assert window.sensitivity(np.ones(size), other) == pytest.approx(estimates[1])
    assert estimates[1] != pytest.approx(estimates[0])


def test_the_moving_coordinates_are_those_whose_tempering_move_stands_out():
    """Gamma(3) beside nine normals: only the Gamma coordinate is marked, and nothing is with
    fewer than 10 independent draws, as the sensitivity reads."""
    draws, log_density = gamma_and_normals(3.0, 9, 4000, seed=6)
    moving = tempering_moves(draws, log_density, independent=4000) > 0
    assert moving.tolist() == [True] + [False] * 9
    assert not (tempering_moves(draws, log_density, independent=5) > 0).any()


def test_dynamics_whose_model_bounds_the_inflation_let_the_means_take_the_whole_budget():
    """pSGLD's Gaussian model bounds its inflation from above, so tempering's predicted move
    already exceeds its chain's: the means may move by the whole budget, not half of it as
    with SGLD's exact model."""
    measurements = replace(gaussian_measurements(noise=20.0), tempering_sensitivity=4.0)
    exact = choose_settings(Langevin(), measurements, choices())
    bounded = choose_settings(RMSpropLangevin(), measurements, choices())
    assert mean_share(Langevin(), TuningConfig()) == 0.5
    assert mean_share(RMSpropLangevin(), TuningConfig()) == 1.0
    assert exact.predicted_inflation == pytest.approx(0.5 * 0.05 / 4.0, rel=1e-6)
    assert bounded.predicted_inflation == pytest.approx(0.05 / 4.0, rel=1e-6)
