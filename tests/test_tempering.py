"""How far variance inflation moves skewed posteriors' means, and what the tuner does with it."""

import numpy as np
import pytest
from scipy import stats

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.samplers.sgld import Langevin
from pymc_sgmcmc.tuning import TuningConfig, choose_settings
from pymc_sgmcmc.tuning.measure import laplace
from pymc_sgmcmc.tuning.tempering import (
    FALSE_ALARM,
    log_density_at_draws,
    tempering_sensitivity,
)
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


@pytest.mark.parametrize("sensitivity", [0.5, 4.0])
def test_the_tuner_keeps_the_predicted_move_of_the_means_within_the_budget(sensitivity):
    measurements = gaussian_measurements(noise=20.0)
    plain = choose_settings(Langevin(), measurements, choices())
    measurements.tempering_sensitivity = sensitivity
    settings = choose_settings(Langevin(), measurements, choices())
    assert plain.predicted_inflation == pytest.approx(0.05, rel=1e-6)
    expected = 0.05 / max(1.0, sensitivity)
    assert settings.predicted_inflation == pytest.approx(expected, rel=1e-6)
    assert settings.predicted_inflation * sensitivity <= 0.05 * (1 + 1e-6)
