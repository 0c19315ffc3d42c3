"""Long-run checks against posteriors known in closed form, with minibatch noise on.

Each run must meet the accuracy bar (posterior means within 0.1 posterior sd,
sds within 10%) and reach a bulk ESS at which the Monte Carlo error is small
against that bar: with ESS >= 900 the Monte Carlo sd of a mean error is at
most 0.033 posterior sd and that of an sd ratio about 0.024, so a correct
sampler passes with a margin of three or more Monte Carlo sds and a sampler
off by the bar fails. The negative controls run the same checks on a wrong
target and on a wrong N/B scale, which must fail.
"""

import numpy as np
import pymc as pm
import pytest
from models import correlated_regression, normal_inverse_gamma_regression, posterior_errors

from pymc_sgmcmc import SGHMC, SGLD

pytestmark = pytest.mark.statistical

MEAN_BAR = 0.1
SD_BAR = 0.1
MIN_ESS = 900
BATCH_SIZE = 100  # N / B = 20


def assert_meets_bar(label, draws, known):
    mean_error, sd_error, ess = posterior_errors(draws, known)
    print(f"{label}: mean error {mean_error:.3f} sd, sd error {sd_error:.3f}, ESS {ess:.0f}")
    assert ess >= MIN_ESS
    assert mean_error < MEAN_BAR
    assert sd_error < SD_BAR


def sample(known, step_factory, draws, seed):
    with known.model:
        step = step_factory()
        return pm.sample(
            draws=draws,
            tune=200,
            step=step,
            chains=2,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        ).posterior


@pytest.fixture(scope="module")
def regression():
    return normal_inverse_gamma_regression(n_rows=2000)


@pytest.fixture(scope="module")
def sgld_regression_draws(regression):
    return sample(regression, lambda: SGLD(batch_size=BATCH_SIZE, steps_per_draw=200), 2500, 1)


def test_sgld_matches_exact_regression_posterior(regression, sgld_regression_draws):
    assert_meets_bar("SGLD regression", sgld_regression_draws, regression)


def test_sghmc_matches_exact_regression_posterior(regression):
    draws = sample(regression, lambda: SGHMC(batch_size=BATCH_SIZE, steps_per_draw=100), 4000, 2)
    assert_meets_bar("SGHMC regression", draws, regression)


def test_sghmc_matches_correlated_gaussian():
    known = correlated_regression(n_rows=2000, correlation=0.5)
    # Largest curvature of the posterior: N times the largest eigenvalue of the
    # covariates' correlation matrix; step size and friction as the defaults
    # would choose them for that curvature.
    largest_curvature = known.n_rows * 1.5
    step_size = 0.2 * BATCH_SIZE / (known.n_rows * np.sqrt(largest_curvature))
    friction = 2 * np.sqrt(largest_curvature)

    def factory():
        return SGHMC(
            batch_size=BATCH_SIZE, step_size=step_size, friction=friction, steps_per_draw=100
        )

    draws = sample(known, factory, 6000, 3)
    assert_meets_bar("SGHMC correlated", draws, known)
    flat = np.asarray(draws["beta"]).reshape(-1, 2)
    # Monte Carlo sd of a sample correlation: (1 - rho^2) / sqrt(ESS).
    tolerance = 3 * (1 - known.correlation**2) / np.sqrt(MIN_ESS)
    assert abs(np.corrcoef(flat.T)[0, 1] - known.correlation) < tolerance


def test_negative_control_wrong_target(regression, sgld_regression_draws):
    """The same draws checked against the posterior of other data must fail."""
    other = normal_inverse_gamma_regression(n_rows=2000, seed=99)
    mean_error, _, _ = posterior_errors(sgld_regression_draws, other)
    assert mean_error > MEAN_BAR


def test_negative_control_wrong_scale(regression):
    """A likelihood scaled by N/(2B) instead of N/B widens the sds by sqrt(2): the check fails."""
    halved = normal_inverse_gamma_regression(n_rows=2000, total_size=1000)
    halved.means, halved.sds = regression.means, regression.sds
    draws = sample(halved, lambda: SGLD(batch_size=BATCH_SIZE, steps_per_draw=200), 500, 4)
    _, sd_error, _ = posterior_errors(draws, halved)
    assert sd_error > SD_BAR
