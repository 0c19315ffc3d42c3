"""Likelihoods and priors with kinks: the Laplace picture from the information identity.

A median regression's log likelihood is piecewise linear in the
coefficients, so differencing its gradient over 1e-3 posterior sd sees no
curvature or a spike. Its posterior is known on a grid
(:func:`pymc_sgmcmc.real_posteriors.median_regression`).
"""

import numpy as np
import pymc as pm
import pytest
from monte_carlo import assert_meets_bar, compare

from pymc_sgmcmc import SGHMC
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.real_posteriors import median_regression, radon_like
from pymc_sgmcmc.tuning import TuningConfig, find_mode, measure
from pymc_sgmcmc.tuning.curvature import largest_curvature
from pymc_sgmcmc.tuning.kinks import likelihood_information, with_information
from pymc_sgmcmc.tuning.measure import laplace
from pymc_sgmcmc.tuning.mode import hessian_sds

PRIOR_SD = 5.0
# Differencing alone, as before the check: no kink is ever detected.
UNCHECKED = TuningConfig(kink_tolerance=np.inf)


def laplace_sds(model, config=None):
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    measurements = measure(probe, 100, np.random.default_rng(1), np.zeros(2), config=config)
    return np.sqrt(measurements.laplace_variance)


@pytest.fixture(scope="module")
def data_sets():
    return {seed: median_regression(seed=seed) for seed in range(4, 12)}


# Beyond ``kink_coordinates`` coordinates the check looks along random directions.
@pytest.mark.statistical
@pytest.mark.parametrize("config", [TuningConfig(), TuningConfig(kink_coordinates=1)])
def test_laplace_picture_of_a_median_regression_has_the_posterior_sds(data_sets, config):
    # The information is estimated from 256 minibatches: its diagonal is
    # within about 9% (1 se), the sds it implies within about 5%; 20% is
    # four standard errors.
    for seed, known in data_sets.items():
        ratio = laplace_sds(known.model, config) / known.sds["coefficients"]
        print(seed, np.round(ratio, 3))
        assert np.all(np.abs(ratio - 1.0) < 0.2), (seed, ratio)


def test_differencing_alone_misses_the_curvature_of_a_median_regression(data_sets):
    # Negative control for the test above: central differences over 1e-3 of the posterior
    # sds, at the posterior mean, give sds off by more than a factor 2 on some data sets
    # (the steps straddle few of the likelihood's kinks, so the prior's curvature is most of
    # what they see). Through the mode search this depends on where the search ends and on
    # the scales it took its steps at, so the control takes the differences directly.
    worst = []
    for known in data_sets.values():
        probe = Probe(build_minibatch_log_density(known.model, known.model.value_vars))
        sds = known.sds["coefficients"]
        hessian = probe.hessian(known.means["coefficients"], np.arange(probe.n_rows), 1e-3 * sds)
        ratio = np.sqrt(laplace(hessian)[1]) / sds
        worst.append(np.max(np.abs(np.log(ratio))))
    print(np.round(np.exp(worst), 3))
    assert max(worst) > np.log(2.0)


@pytest.mark.statistical
def test_sghmc_defaults_sample_a_median_regression():
    # The data set on which the differenced Hessian at the mode is the prior's.
    known = median_regression()
    with known.model:
        idata = pm.sample(
            step=SGHMC(),
            tune=1000,
            draws=2000,
            chains=2,
            cores=1,
            random_seed=5,
            progressbar=False,
            compute_convergence_checks=False,
        )
    comparison = compare(idata.posterior, known.means, known.sds)
    assert_meets_bar(comparison, "SGHMC, median regression")


@pytest.mark.parametrize("checked", [True, False])
def test_the_curvature_at_a_draw_on_a_kink_is_the_one_over_the_posteriors_scale(checked):
    """A draw on one row's kink: the fine difference reads the gradient's jump.

    In the coordinates of the exact posterior sds the median regression's
    curvature, averaged over its kinks, is about 1. Without the coarse check
    (the negative control) the jump of the one row straddled reads as a
    curvature hundreds of times larger, and a chain on the full data's
    gradient would take steps that much smaller.
    """
    known = median_regression()
    probe = Probe(build_minibatch_log_density(known.model, known.model.value_vars))
    # The data of median_regression(seed=10): the draws sit on rows' kinks.
    rng = np.random.default_rng(10)
    x = rng.normal(size=known.n_rows)
    y = 1.0 + 0.5 * x + rng.laplace(scale=0.7, size=known.n_rows)
    intercept, slope = known.means["coefficients"]
    # The four rows whose kinks pass closest to the posterior mean.
    rows = np.argsort(np.abs(y - intercept - slope * x))[:4]
    draws = np.array([[y[row] - slope * x[row], slope] for row in rows])
    assert np.all(np.abs(draws - known.means["coefficients"]) < 5 * known.sds["coefficients"])
    factor = np.diag(known.sds["coefficients"])
    config = TuningConfig() if checked else UNCHECKED
    found = largest_curvature(probe, draws, factor, np.random.default_rng(0), config=config)
    if checked:
        assert 0.5 < found < 2.0
    else:
        assert found > 100.0


def test_a_smooth_likelihood_keeps_its_differenced_hessian_where_the_identity_fails():
    # At the mode of a hierarchical model the groups with few rows are
    # fitted to them: their residuals shrink, and the rows' gradients spread
    # far less than the curvature (the information identity holds at the
    # true parameter, not at a fitted one). The check must leave the
    # differenced Hessian of such a smooth likelihood as it is.
    model = radon_like(n_rows=919, n_groups=85, centred=False).model
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    size = sum(np.size(value) for value in model.initial_point().values())
    rng = np.random.default_rng(2)
    mode = find_mode(probe, np.zeros(size), 100, rng)[0]
    rows = np.arange(probe.n_rows)
    scale = hessian_sds(probe.hessian(mode, rows, np.full(size, 1e-4)))
    hessian, prior_hessian = probe.hessians(mode, rows, 1e-3 * scale)
    checked, kinked = with_information(
        probe, mode, rows, scale, hessian, prior_hessian, rng, TuningConfig()
    )
    assert not kinked
    assert checked is hessian
    information = likelihood_information(probe, mode, rng, 256, 256)
    curvature = np.diag(prior_hessian - hessian)
    assert np.max(curvature / np.diag(information)) > 10.0


def test_the_search_ends_at_the_mode_of_a_quantile_regression_with_many_coefficients():
    # At the maximum of a likelihood with kinks the gradient is a sum of
    # one-sided jumps (about one per coordinate), not zero: with 61
    # coordinates the search's end must still count as a mode. The Laplace
    # picture is the information's, q (1 - q) X'X / b^2 at the 0.9 quantile
    # (within about 10%, from 16 D minibatches); with Gumbel errors the check
    # loss is misspecified and the posterior is wider, which the tune
    # windows see in the draws.
    quantile, scale = 0.9, 0.5
    rng = np.random.default_rng(0)
    n_rows, size = 5000, 60
    x = rng.normal(size=(n_rows, size))
    y = 1.0 + x @ rng.normal(0.0, 0.5, size=size) + rng.gumbel(size=n_rows)

    def check_loss_logp(value, mu):
        residual = value - mu
        return -pm.math.switch(residual > 0, quantile, quantile - 1) * residual / scale

    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, PRIOR_SD)
        slopes = pm.Normal("slopes", 0.0, PRIOR_SD, shape=size)
        pm.CustomDist("y", intercept + pm.math.dot(x, slopes), logp=check_loss_logp, observed=y)
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    measurements = measure(probe, 100, np.random.default_rng(1), np.zeros(size + 1))
    assert not measurements.at_start
    design = np.column_stack([np.ones(n_rows), x])
    information = quantile * (1 - quantile) * design.T @ design / scale**2
    precision = information + np.eye(size + 1) / PRIOR_SD**2
    expected = np.sqrt(np.diag(np.linalg.inv(precision)))
    ratio = np.sqrt(measurements.laplace_variance) / expected
    print(np.round([ratio.min(), ratio.max()], 3))
    assert np.all(np.abs(ratio - 1.0) < 0.25)


def _lasso(seed):
    rng = np.random.default_rng(seed)
    n_rows, size = 2000, 10
    x = rng.normal(size=(n_rows, size))
    y = x @ np.r_[1.0, -0.5, 0.25, np.zeros(size - 3)] + rng.normal(size=n_rows)
    with pm.Model() as model:
        coefficients = pm.Laplace("coefficients", 0.0, 0.05, shape=size)
        pm.Normal("y", pm.math.dot(x, coefficients), 1.0, observed=y)
    return model, x


@pytest.mark.parametrize("config", [TuningConfig(), UNCHECKED])
def test_a_lasso_prior_at_its_kink_leaves_the_likelihoods_curvature(config):
    # A Laplace prior has no curvature beside its kink at 0, where the
    # lasso's mode puts the coefficients it shrinks: the Laplace picture is
    # then the likelihood's, sd sqrt(diag((X'X)^-1)), not a spike's. Without
    # the check (the negative control) some coordinate's sd is a spike's.
    unchecked = config is UNCHECKED
    failures = 0
    for seed in range(3):
        model, x = _lasso(seed)
        probe = Probe(build_minibatch_log_density(model, model.value_vars))
        measurements = measure(probe, 100, np.random.default_rng(seed), np.zeros(10), config=config)
        expected = np.sqrt(np.diag(np.linalg.inv(x.T @ x)))
        ratio = np.sqrt(measurements.laplace_variance) / expected
        print(seed, np.round(ratio, 4))
        assert not measurements.at_start
        failures += not np.allclose(ratio, 1.0, rtol=1e-3)
    assert failures > 0 if unchecked else failures == 0


def test_a_centred_funnels_neck_is_not_taken_for_a_kink():
    # The search runs into the neck of radon-919-centred, where the
    # Hessian's sds are off by orders of magnitude and differences lose
    # their digits; no kink may be read into that, or the neck would count
    # as a mode.
    model = radon_like(n_rows=919, n_groups=85, centred=True).model
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    size = sum(np.size(value) for value in model.initial_point().values())
    for seed in range(3):
        measurements = measure(probe, 100, np.random.default_rng(seed), np.zeros(size))
        assert measurements.at_start, seed
