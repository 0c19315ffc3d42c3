"""Tune windows: draws that agree with the metric change nothing; real disagreement is kept."""

import numpy as np

from pymc_sgmcmc.metric import metric_from_covariance
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.windows import check_coordinates, check_window, independent_draws

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


WIDE = 150  # coordinates: more than half the window's independent draws


def test_coordinates_that_agree_with_the_metric_agree_where_the_covariance_cannot_be_checked():
    """A diagonal metric of 150 coordinates, windows of 200 independent draws (fewer than 2 D):
    over 50 windows, no coordinate's sampling error counts as disagreement."""
    scales = np.geomspace(0.1, 10.0, WIDE)
    metric = metric_from_covariance("diagonal", np.zeros(WIDE), np.diag(scales**2))
    alarms = 0
    for seed in range(50):
        draws = np.random.default_rng(seed).normal(size=(200, WIDE)) * scales
        alarms += check_coordinates(draws, metric, 100.0, CONFIG).disagrees
    assert alarms <= 2


def test_a_coordinate_whose_scale_the_metric_misses_is_found_and_measured():
    """One coordinate's sd is 2.5 times the metric's (variance 6.25 in its coordinates), as
    a Laplace picture at a mode far from the mass gives a hierarchical model's mean."""
    scales = np.ones(WIDE)
    metric = metric_from_covariance("diagonal", np.zeros(WIDE), np.eye(WIDE))
    scales[7] = 2.5
    draws = np.random.default_rng(3).normal(size=(200, WIDE)) * scales
    check = check_coordinates(draws, metric, 100.0, CONFIG)
    assert check.disagrees
    np.testing.assert_array_equal(np.flatnonzero(check.outside), [7])
    assert 4.0 < check.worst_ratio < 9.0


def test_draws_worth_too_few_check_no_coordinate():
    """Draws whose own autocorrelation is 0.99, predicted to be worth 5 independent ones."""
    rng = np.random.default_rng(4)
    draws = np.empty((200, WIDE))
    draws[0] = rng.normal(size=WIDE)
    for index in range(1, 200):
        draws[index] = 0.99 * draws[index - 1] + np.sqrt(1 - 0.99**2) * rng.normal(size=WIDE)
    metric = metric_from_covariance("diagonal", np.zeros(WIDE), np.eye(WIDE))
    assert check_coordinates(draws, metric, 5.0, CONFIG) is None
