"""Long-run checks against posteriors known in closed form or from long NUTS runs.

Each run must meet the accuracy bar (posterior means within 0.1 posterior sd,
sds within 10%) and reach a bulk ESS at which the Monte Carlo error is small
against that bar: with ESS >= 900 the Monte Carlo sd of a mean error is at
most 0.033 posterior sd and that of an sd ratio about 0.024, so a correct
sampler passes with a margin of three or more Monte Carlo sds and a sampler
off by the bar fails. The negative controls run the same checks on a wrong
target and on a wrong N/B scale, which must fail.

The first group keeps the plain minibatch gradient (``control_variate=False``)
at N/B = 20, so the minibatch noise is fully on; the second runs the defaults
(only ``batch_size`` given), as a user would.
"""

import numpy as np
import pymc as pm
import pytest

from pymc_sgmcmc import SGHMC, SGLD
from pymc_sgmcmc.diagnostics import accuracy
from pymc_sgmcmc.panel import (
    correlated_regression,
    logistic_regression,
    normal_inverse_gamma_regression,
    nuts_reference,
)

pytestmark = pytest.mark.statistical

MEAN_BAR = 0.1
SD_BAR = 0.1
MIN_ESS = 900
BATCH_SIZE = 100  # N / B = 20 at N = 2,000


def assert_meets_bar(label, draws, known):
    result = accuracy(draws, known.means, known.sds)
    print(
        f"{label}: mean error {result.mean_error:.3f} sd, "
        f"sd ratio {result.worst_sd_ratio:.3f}, ESS {result.min_ess:.0f}"
    )
    assert result.min_ess >= MIN_ESS
    assert result.mean_error < MEAN_BAR
    assert result.sd_error < SD_BAR


def sample(known, step_factory, draws, seed):
    with known.model:
        step = step_factory()
        return pm.sample(
            draws=draws,
            tune=100,
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
    return sample(regression, lambda: SGLD(batch_size=BATCH_SIZE, control_variate=False), 2000, 1)


def test_sgld_with_minibatch_noise_matches_exact_regression(regression, sgld_regression_draws):
    assert_meets_bar("SGLD regression, minibatch gradient", sgld_regression_draws, regression)


def test_sghmc_with_minibatch_noise_matches_exact_regression(regression):
    draws = sample(regression, lambda: SGHMC(batch_size=BATCH_SIZE, control_variate=False), 3000, 2)
    assert_meets_bar("SGHMC regression, minibatch gradient", draws, regression)


def test_sghmc_matches_correlated_gaussian():
    known = correlated_regression(n_rows=2000, correlation=0.5)
    # Fixed settings, no adaptation: unit mass, the largest curvature of the
    # posterior (N times the largest eigenvalue of the covariates' correlation
    # matrix) damped critically, and a step size whose predicted variance
    # inflation from minibatch noise is about 5%.
    largest_curvature = known.n_rows * 1.5
    step_size = 0.2 * BATCH_SIZE / (known.n_rows * np.sqrt(largest_curvature))
    friction = 2 * np.sqrt(largest_curvature)

    def factory():
        return SGHMC(
            batch_size=BATCH_SIZE,
            step_size=step_size,
            friction=friction,
            preconditioner=None,
            control_variate=False,
            steps_per_draw=100,
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
    assert accuracy(sgld_regression_draws, other.means, other.sds).mean_error > MEAN_BAR


def test_negative_control_wrong_scale(regression):
    """A likelihood scaled by N/(2B) instead of N/B widens the sds by sqrt(2): the check fails."""
    halved = normal_inverse_gamma_regression(n_rows=2000, total_size=1000)
    draws = sample(halved, lambda: SGLD(batch_size=BATCH_SIZE, control_variate=False), 300, 4)
    assert accuracy(draws, regression.means, regression.sds).sd_error > SD_BAR


@pytest.mark.parametrize("step_class", [SGLD, SGHMC])
def test_defaults_match_exact_regression(regression, step_class):
    draws = sample(regression, lambda: step_class(batch_size=BATCH_SIZE), 1500, 5)
    assert_meets_bar(f"{step_class.__name__} regression, defaults", draws, regression)


@pytest.fixture(scope="module")
def logistic():
    return nuts_reference(logistic_regression(n_rows=5000))


@pytest.mark.parametrize("step_class", [SGLD, SGHMC])
def test_defaults_match_nuts_on_logistic_regression(logistic, step_class):
    draws = sample(logistic, lambda: step_class(batch_size=BATCH_SIZE), 1500, 6)
    assert_meets_bar(f"{step_class.__name__} logistic N=5000, defaults", draws, logistic)
