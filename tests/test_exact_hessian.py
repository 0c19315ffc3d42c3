"""The exact Hessian: second derivatives in one call, where differences would cost more."""

import numpy as np
import pymc as pm
import pytest
from probes import assert_same_search, counted_search, probe_and_start

import pymc_sgmcmc.exact_hessian as exact_module
from pymc_sgmcmc.real_posteriors import radon_like
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.mode import _exact_pays, checked_hessian, hessian_sds, touched_coordinates
from pymc_sgmcmc.tuning.sparsity import hessian_pattern


@pytest.fixture(scope="module")
def regression():
    """A regression of known noise sd 2 on 12 correlated columns: probe, point, exact Hessians."""
    rng = np.random.default_rng(0)
    design = rng.normal(size=(600, 12)) @ rng.normal(size=(12, 12))
    y = design @ rng.normal(size=12) + 2.0 * rng.normal(size=600)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 3.0, shape=12)
        pm.Normal("y", design @ beta, 2.0, observed=y)
    probe, start = probe_and_start(model)
    point = start + rng.normal(size=start.size)
    prior = -np.eye(12) / 9.0
    return probe, point, design, prior


def test_the_exact_hessian_of_a_regression_is_its_closed_form(regression):
    probe, point, design, prior = regression
    rows = np.arange(probe.n_rows)
    hessian, prior_hessian = probe.exact_hessians(point, rows)
    closed_form = prior - design.T @ design / 4.0
    np.testing.assert_allclose(prior_hessian, prior, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hessian, closed_form, rtol=1e-10, atol=1e-10)


def test_a_subsamples_exact_hessian_is_scaled_to_all_rows_and_agrees_with_differences(regression):
    """On B rows the likelihood's Hessian is N/B times theirs, as the gradient is."""
    probe, point, design, prior = regression
    rows = np.random.default_rng(1).choice(probe.n_rows, 150, replace=False)
    hessian, _ = probe.exact_hessians(point, rows)
    expected = prior - (probe.n_rows / 150) * design[rows].T @ design[rows] / 4.0
    np.testing.assert_allclose(hessian, expected, rtol=1e-10, atol=1e-10)
    differenced, _ = probe.hessians(point, rows, 1e-3 * hessian_sds(hessian))
    np.testing.assert_allclose(hessian, differenced, rtol=1e-6, atol=1e-8 * np.abs(hessian).max())


def test_pieces_of_rows_weigh_by_their_rows(regression, monkeypatch):
    """Rows in uneven pieces (7 at most here) give the Hessian of all of them at once."""
    probe, point, _, _ = regression
    rows = np.arange(probe.n_rows)[:100]
    whole, whole_prior = probe.exact_hessians(point, rows)
    monkeypatch.setattr(exact_module, "PIECE_ELEMENTS", 7 * point.size)
    pieces, pieces_prior = probe.exact_hessians(point, rows)
    np.testing.assert_allclose(pieces, whole, rtol=1e-12)
    np.testing.assert_array_equal(pieces_prior, whole_prior)


def test_the_mode_search_takes_exact_hessians_where_differences_cost_more(regression, monkeypatch):
    """Past ``hessian_exact_work``, on rows that touch every coordinate, the search and the
    checked Hessian use second derivatives: the same mode and Hessian as differencing, in
    fewer gradient calls."""
    probe, start, _, _ = regression
    results = {}
    for name, work in [("exact", 0), ("differenced", 10**12)]:
        config = TuningConfig(hessian_exact_work=work, hessian_exact_size=0)
        results[name] = counted_search(probe, start, config, monkeypatch)
    assert_same_search(results["exact"], results["differenced"])
    assert results["exact"][3] < results["differenced"][3] - 2 * start.size


def test_a_hierarchical_models_hessians_stay_differenced_and_exact_zeros_match():
    """A row of a hierarchical model touches a few of its coordinates: its patterned
    differences cost less than D second derivatives, whatever the work. The exact Hessian's
    zeros still give the pattern the differences give."""
    probe, start = probe_and_start(radon_like(n_rows=400, n_groups=20, centred=False).model)
    point = start + np.random.default_rng(1).normal(scale=0.3, size=start.size)
    config = TuningConfig(hessian_exact_work=0, hessian_exact_size=0)
    assert touched_coordinates(probe, point, config) < 0.5 * point.size
    assert not _exact_pays(probe, point, probe.n_rows, None, config)
    exact_first, _ = probe.exact_hessians(point, np.arange(probe.n_rows))
    plain_first, _ = probe.hessians(point, np.arange(probe.n_rows), np.full(start.size, 1e-4))
    pattern, plain_pattern = hessian_pattern(exact_first), hessian_pattern(plain_first)
    assert pattern is not None and plain_pattern is not None
    assert np.array_equal(pattern.dense, plain_pattern.dense)
    assert all(map(np.array_equal, pattern.groups, plain_pattern.groups))


def test_a_model_without_second_derivatives_is_differenced(regression, monkeypatch):
    """Where PyTensor cannot differentiate the gradient, the Hessian is differenced as before."""
    probe, point, _, _ = regression

    def refuse(*args, **kwargs):
        raise NotImplementedError("no second derivative")

    fresh = exact_module.ExactHessian(probe.density)
    monkeypatch.setattr(exact_module, "grad", refuse)
    monkeypatch.setattr(probe, "_exact_hessian", fresh)
    rows = np.arange(probe.n_rows)
    assert probe.exact_hessians(point, rows) is None
    assert not probe.exact_hessian_available
    config = TuningConfig(hessian_exact_work=0, hessian_exact_size=0)
    hessian, kinked = checked_hessian(probe, point, np.random.default_rng(0), config)
    differenced, _ = probe.hessians(point, rows, 1e-3 * hessian_sds(hessian))
    assert not kinked
    np.testing.assert_allclose(hessian, differenced, rtol=1e-8)


def test_a_kinked_likelihoods_exact_hessian_still_takes_the_information():
    """A Laplace likelihood's second derivative is zero between kinks: as with differences,
    the checked Hessian is the prior's less the information, not the prior's alone."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=2_000)
    y = 1.0 + 0.5 * x + rng.laplace(size=2_000)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=2)
        pm.Laplace("y", beta[0] + beta[1] * x, 1.0, observed=y)
    probe, _ = probe_and_start(model)
    point = np.array([1.0, 0.5])
    results = {}
    for name, work in [("exact", 0), ("differenced", 10**12)]:
        config = TuningConfig(hessian_exact_work=work, hessian_exact_size=0)
        results[name] = checked_hessian(probe, point, np.random.default_rng(0), config)
    (hessian, kinked), (plain, plain_kinked) = results["exact"], results["differenced"]
    assert kinked and plain_kinked
    # The information's rows are the same draws: the same matrix to rounding.
    np.testing.assert_allclose(hessian, plain, rtol=1e-8)
    assert np.all(np.linalg.eigvalsh(-hessian) > 100.0)


def test_fewer_coordinates_than_the_size_floor_keep_their_differences(regression):
    """Below ``hessian_exact_size`` coordinates the differences cost as little: a 12-coefficient
    regression is differenced at any work, and taken exactly once the floor is lowered."""
    probe, point, _, _ = regression
    assert not _exact_pays(probe, point, probe.n_rows, None, TuningConfig(hessian_exact_work=0))
    lowered = TuningConfig(hessian_exact_work=0, hessian_exact_size=12)
    assert _exact_pays(probe, point, probe.n_rows, None, lowered)
