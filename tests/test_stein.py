"""Kernel Stein discrepancy: the closed-form Stein kernel and its power on exact draws.

Exact draws from closed-form posteriors (fixed seeds), replicated to measure
the discrepancy's own sampling variability; wrong draws (shifted by half a
posterior sd, or spread 1.5 times too wide) must clear the right draws'
mean by more than four of its standard deviations in every replication.
"""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from exact_posteriors import half_normal_scale

from pymc_sgmcmc import stein
from pymc_sgmcmc.postprocess import unconstrained_draws
from pymc_sgmcmc.stein import (
    kernel_stein_discrepancy,
    stein_discrepancy_squared,
    thinned_draw_indices,
)

#: Margin, in standard deviations of the right draws' discrepancy or in
#: Monte Carlo standard errors.
Z = 4.0

REPLICATIONS, DRAWS = 40, 300


def make_trace(posterior):
    """Build what pm.sample returns from arrays: InferenceData (ArviZ < 1) or DataTree."""
    if int(az.__version__.split(".")[0]) >= 1:
        return az.from_dict({"posterior": posterior})
    return az.from_dict(posterior=posterior)


def normal_model(noise_sd):
    """Two normal means with known noise sd: a Gaussian posterior in closed form."""
    rows = np.random.default_rng(0).normal([1.0, -0.5], noise_sd, size=(200, 2))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0, shape=2)
        pm.Normal("y", mu, noise_sd, observed=rows)
    precision = 1 / 10.0**2 + 200 / noise_sd**2
    return model, rows.sum(axis=0) / noise_sd**2 / precision, precision**-0.5


def wrong_draws(draws, mean, sd):
    """The right draws, shifted by half a posterior sd, and spread 1.5 times too wide."""
    return {"shifted": draws + 0.5 * sd, "too wide": mean + 1.5 * (draws - mean)}


def discrepancies(model, draws, statistic="V", standardize=False, batch_size=None, seed=None):
    """Squared discrepancy of each replication (a chain of ``draws``)."""
    name = "mu" if draws.ndim == 3 else "sigma"
    unconstrained = unconstrained_draws(make_trace({name: draws}), model, batch_size, seed)
    return np.array(
        [
            stein_discrepancy_squared(positions, scores, statistic, standardize=standardize)
            for positions, scores in zip(unconstrained.positions, unconstrained.scores, strict=True)
        ]
    )


def assert_separates(right, wrong):
    """Every wrong replication exceeds the right ones' mean by Z of their sds."""
    threshold = right.mean() + Z * right.std()
    for label, values in wrong.items():
        assert values.min() > threshold, (label, values.min(), threshold)


@pytest.fixture(scope="module")
def unit_scale():
    """Posterior sd about 1 in each coordinate: the default kernel (c = 1) fits it."""
    model, mean, sd = normal_model(noise_sd=14.0)
    draws = mean + sd * np.random.default_rng(1).normal(size=(REPLICATIONS, DRAWS, 2))
    return model, mean, sd, draws


def test_stein_kernel_matches_finite_differences(monkeypatch):
    rng = np.random.default_rng(2)
    positions, scores = rng.normal(size=(2, 7, 3))
    scale, exponent, step = 1.3, -0.4, 1e-4

    def kernel(x, y):
        return (scale**2 + np.sum((x - y) ** 2)) ** exponent

    def stein_kernel(x, y, s_x, s_y):
        basis = np.eye(3) * step
        grad_x = np.array([kernel(x + e, y) - kernel(x - e, y) for e in basis]) / (2 * step)
        grad_y = np.array([kernel(x, y + e) - kernel(x, y - e) for e in basis]) / (2 * step)
        trace = sum(
            kernel(x + e, y + e)
            - kernel(x + e, y - e)
            - kernel(x - e, y + e)
            + kernel(x - e, y - e)
            for e in basis
        ) / (4 * step**2)
        return s_x @ s_y * kernel(x, y) + s_x @ grad_y + s_y @ grad_x + trace

    matrix = np.array(
        [
            [stein_kernel(positions[i], positions[j], scores[i], scores[j]) for j in range(7)]
            for i in range(7)
        ]
    )
    v_statistic = stein_discrepancy_squared(positions, scores, "V", scale, exponent)
    u_statistic = stein_discrepancy_squared(positions, scores, "U", scale, exponent)
    np.testing.assert_allclose(v_statistic, matrix.mean(), rtol=1e-6)
    np.testing.assert_allclose(u_statistic, (matrix.sum() - np.trace(matrix)) / 42, rtol=1e-6)
    # Chunks of a few rows give the same sums.
    monkeypatch.setattr(stein, "CHUNK_ELEMENTS", 10)
    np.testing.assert_allclose(
        stein_discrepancy_squared(positions, scores, "U", scale, exponent), u_statistic, rtol=1e-12
    )
    # Standardizing rescales each coordinate by its sd and its score inversely.
    spread = positions.std(axis=0)
    np.testing.assert_allclose(
        stein_discrepancy_squared(positions, scores, standardize=True),
        stein_discrepancy_squared(positions / spread, scores * spread),
        rtol=1e-12,
    )
    with pytest.raises(ValueError, match="kernel_exponent"):
        stein_discrepancy_squared(positions, scores, kernel_exponent=-1.5)


def test_discrepancy_separates_wrong_draws(unit_scale):
    model, mean, sd, draws = unit_scale
    right = discrepancies(model, draws)
    wrong = {
        label: discrepancies(model, values)
        for label, values in wrong_draws(draws, mean, sd).items()
    }
    assert_separates(right, wrong)
    # The U-statistic of exact draws is centred on 0 (within its MC error).
    unbiased = discrepancies(model, draws, "U")
    assert abs(unbiased.mean()) < Z * unbiased.std() / np.sqrt(REPLICATIONS)


def test_standardized_discrepancy_of_a_constrained_variable():
    """sigma ~ HalfNormal(1), 50 rows: log(sigma) has sd 0.1, far below the kernel's c = 1."""
    model, inverse_cdf, _ = half_normal_scale(seed=3)
    draws = inverse_cdf(np.random.default_rng(4).uniform(size=(REPLICATIONS, DRAWS)))
    mean, sd = draws.mean(), draws.std()

    right = discrepancies(model, draws, standardize=True)
    wrong = {
        label: discrepancies(model, values, standardize=True)
        for label, values in wrong_draws(draws, mean, sd).items()
    }
    assert_separates(right, wrong)


def test_minibatch_u_statistic_agrees_with_the_full_data_one(unit_scale):
    model, _, _, draws = unit_scale
    full = {statistic: discrepancies(model, draws, statistic) for statistic in "UV"}
    minibatch = {
        statistic: discrepancies(model, draws, statistic, batch_size=50, seed=5)
        for statistic in "UV"
    }
    # Same draws, independent batches: E[U_minibatch - U_full | draws] = 0.
    difference = minibatch["U"] - full["U"]
    assert abs(difference.mean()) < Z * difference.std() / np.sqrt(REPLICATIONS)
    # Negative control: the V-statistic keeps the diagonal pairs, where the
    # minibatch noise adds its variance: a positive bias beyond MC error.
    difference = minibatch["V"] - full["V"]
    assert difference.mean() > Z * difference.std() / np.sqrt(REPLICATIONS)


def test_kernel_stein_discrepancy_of_a_trace(unit_scale):
    model, _, _, draws = unit_scale
    trace = make_trace({"mu": draws[:2]})
    result = kernel_stein_discrepancy(trace, model, max_draws=100)
    assert result.n_draws == 100 and result.statistic == "V" and result.batch_size is None
    kept = thinned_draw_indices(2, DRAWS, 100)
    assert kept.size == 50 and kept[0] == 0 and kept[-1] == DRAWS - 1
    unconstrained = unconstrained_draws(make_trace({"mu": draws[:2, kept]}), model)
    expected = stein_discrepancy_squared(
        unconstrained.positions.reshape(-1, 2), unconstrained.scores.reshape(-1, 2)
    )
    np.testing.assert_allclose(result.squared, expected, rtol=1e-12)
    assert result.discrepancy == pytest.approx(np.sqrt(expected))

    first = kernel_stein_discrepancy(trace, model, max_draws=None)
    assert first.n_draws == 2 * DRAWS
    minibatch = kernel_stein_discrepancy(trace, model, batch_size=50, random_seed=6)
    assert minibatch.statistic == "U" and minibatch.batch_size == 50

    with pm.Model() as discrete:
        pm.Normal("x")
        pm.Poisson("count", 3.0)
    with pytest.raises(ValueError, match="continuous"):
        kernel_stein_discrepancy(make_trace({"x": draws[:1, :, 0]}), discrete)
