"""Tune windows: draws that agree with the metric change nothing; real disagreement is kept."""

import numpy as np

from pymc_sgmcmc.metric import metric_from_covariance
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.windows import check_window, independent_draws

SIZE = 5
CONFIG = TuningConfig()


def laplace_covariance():
    rng = np.random.default_rng(0)
    root = rng.normal(size=(SIZE, SIZE)) + 2 * np.eye(SIZE)
    return root @ root.T


def draws_from(covariance, n_draws, seed):
    rng = np.random.default_rng(seed)
    return rng.multivariate_normal(np.ones(SIZE), covariance, size=n_draws)


def test_draws_from_the_laplace_picture_agree():
    """Over 50 windows of 100 independent draws, sampling error never counts as disagreement."""
    covariance = laplace_covariance()
    metric = metric_from_covariance("dense", np.ones(SIZE), covariance)
    disagreements = [
        check_window(draws_from(covariance, 100, seed), metric, 100.0, CONFIG).disagrees
        for seed in range(50)
    ]
    assert not any(disagreements)


def test_a_direction_three_times_wider_is_found():
    """Draws whose variance along one direction is 3x the Laplace picture's: found, and measured."""
    covariance = laplace_covariance()
    metric = metric_from_covariance("dense", np.ones(SIZE), covariance)
    direction = np.linalg.cholesky(covariance)[:, 0]
    wider = covariance + 2.0 * np.outer(direction, direction)
    independent = independent_draws(200, steps_per_draw=10, relaxation=10.0)
    check = check_window(draws_from(wider, 200, 1), metric, independent, CONFIG)
    assert check.disagrees
    assert check.outside.sum() == 1
    assert 2.0 < check.worst_ratio < 4.5


def test_autocorrelated_draws_are_worth_fewer():
    """Draws a tenth of a relaxation time apart are worth a tenth as many independent ones."""
    assert independent_draws(100, steps_per_draw=100, relaxation=1000.0) == 5.0
    assert independent_draws(100, steps_per_draw=100, relaxation=np.nan) == 0.0


def test_tempered_draws_are_compared_with_the_tempered_picture():
    """Draws at temperature 0.1 spread 0.1 times the posterior covariance: that is agreement."""
    covariance = laplace_covariance()
    metric = metric_from_covariance("dense", np.ones(SIZE), covariance)
    independent = independent_draws(200, steps_per_draw=10, relaxation=10.0)
    draws = draws_from(0.1 * covariance, 200, 2)
    assert not check_window(draws, metric, independent, CONFIG, temperature=0.1).disagrees
    assert check_window(draws, metric, independent, CONFIG, temperature=1.0).disagrees
