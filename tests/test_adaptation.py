"""Adaptation before the first draw: mode, scale, noise, estimator and step size."""

import logging
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytensor
import pytest
from exact_posteriors import widely_spread_regression
from probes import probe_and_start
from pymc.blocking import DictToArrayBijection
from scipy import stats

from pymc_sgmcmc import SGHMC, SGLD
from pymc_sgmcmc import runner as runner_module
from pymc_sgmcmc.batches import AllRows, IndexStream
from pymc_sgmcmc.estimators import (
    Probe,
    control_variate_gradient,
    second_order_control_variate_gradient,
)
from pymc_sgmcmc.kernel import KernelResult
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.panel import correlated_regression, logistic_regression
from pymc_sgmcmc.real_posteriors import median_regression, radon_like
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.runner import KernelRunner
from pymc_sgmcmc.samplers.sghmc import Underdamped
from pymc_sgmcmc.samplers.sgld import Langevin
from pymc_sgmcmc.tuning import TuningConfig, UserChoices, find_mode, measure
from pymc_sgmcmc.tuning import chain as chain_module
from pymc_sgmcmc.tuning.chain import ChainAdapter, ChainState
from pymc_sgmcmc.tuning.curvature import largest_curvature, tightest_draws
from pymc_sgmcmc.tuning.measure import FULL_DATA, laplace, measure_noise, with_second_order
from pymc_sgmcmc.tuning.tuner import metric_factor
from pymc_sgmcmc.tuning.windows import independent_draws


@pytest.fixture(scope="module")
def gaussian():
    known = correlated_regression(n_rows=2000, correlation=0.5)
    density = build_minibatch_log_density(known.model, known.model.value_vars)
    return known, density, Probe(density)


def test_mode_of_a_gaussian_posterior_is_its_mean(gaussian):
    known, _, probe = gaussian
    rng = np.random.default_rng(0)
    mode, _, _, _, distance = find_mode(probe, np.zeros(2), 100, rng)
    np.testing.assert_allclose(mode, known.means["beta"], atol=1e-6 * known.sds["beta"].min())
    assert distance < 1e-6


def test_terms_on_more_rows_than_a_piece_are_those_of_one_call(gaussian):
    _, density, probe = gaussian
    position = np.array([0.4, -0.7])
    rows = np.random.default_rng(1).permutation(2000)[:1500]
    in_pieces = Probe(density, piece_rows=400)
    compiled, calls = in_pieces._terms, []
    in_pieces._terms = lambda point, indices: calls.append(len(indices)) or compiled(point, indices)
    # Four pieces of 375 rows, each a mean over its rows, weighted by them.
    for expected, given in zip(
        probe.terms(position, rows), in_pieces.terms(position, rows), strict=True
    ):
        np.testing.assert_allclose(given, expected, rtol=1e-12)
    assert calls == [375] * 4
    np.testing.assert_allclose(in_pieces.full(position)[1], probe.full(position)[1], rtol=1e-12)
    assert max(calls) <= 400


def test_a_piece_holds_about_a_mebibyte_of_data_rows():
    narrow, wide = (logistic_regression(3000, features).model for features in (2, 50))
    narrow = build_minibatch_log_density(narrow, narrow.value_vars)
    wide = build_minibatch_log_density(wide, wide.value_vars)
    # Two covariates and the outcome: 24 bytes a row; fifty and the outcome: 408.
    assert Probe(narrow).piece_rows == 2**20 // 24
    assert Probe(wide).piece_rows == 2**20 // 408


def test_measured_scale_and_curvatures_of_a_gaussian_posterior(gaussian):
    known, _, probe = gaussian
    measurements = measure(probe, 100, np.random.default_rng(1), np.zeros(2))
    np.testing.assert_allclose(np.sqrt(measurements.laplace_variance), known.sds["beta"], rtol=1e-6)
    # Scaled by the marginal variances, the precision is the inverse correlation
    # matrix: eigenvalues 1 / (1 - rho) and 1 / (1 + rho).
    rho = abs(known.correlation)
    smallest, largest = measurements.curvatures(measurements.laplace_variance)
    assert smallest == pytest.approx(1 / (1 + rho), rel=1e-6)
    assert largest == pytest.approx(1 / (1 - rho), rel=1e-6)
    assert measurements.log_concave


def test_a_flat_direction_off_log_concave_regions_takes_the_draws_scale():
    # A saddle whose second coordinate is nearly flat (a scale whose gradient
    # vanishes where the chain went): the curvature alone claims a variance
    # of 1e34, which would make every step size vanish.
    hessian = np.array([[-4.0, 3.0], [3.0, -1e-34]])
    log_concave, variance, factor = laplace(hessian)
    assert not log_concave and variance[1] == pytest.approx(1e34)
    _, bounded, factor = laplace(hessian, draw_variance=np.array([0.5, 2.0]))
    np.testing.assert_allclose(bounded, [0.25, 2.0])
    np.testing.assert_allclose(factor @ factor.T, np.diag(bounded))
    # Draws that did not move (zero variance) leave the curvature's scale.
    _, unmoved, _ = laplace(hessian, draw_variance=np.array([0.0, 2.0]))
    assert unmoved[0] == pytest.approx(0.25)
    # Where the Hessian is negative definite the Laplace picture holds as it is.
    concave, exact, _ = laplace(np.diag([-4.0, -0.5]), draw_variance=np.array([0.01, 0.01]))
    assert concave
    np.testing.assert_allclose(exact, [0.25, 2.0])


def test_control_variate_estimate_is_exact_on_average_and_quieter(gaussian):
    known, density, probe = gaussian
    estimator = control_variate_gradient(density)
    function = pytensor.function(
        [density.position, density.indices, *estimator.inputs.values()], estimator.gradient
    )
    centre = known.means["beta"] + 0.5 * known.sds["beta"]
    _, centre_gradient = probe.full_likelihood(centre)
    position = known.means["beta"] - 0.5 * known.sds["beta"]
    order = np.random.default_rng(0).permutation(2000)
    batches = order.reshape(20, 100)
    estimates = np.array([function(position, rows, centre, centre_gradient) for rows in batches])
    np.testing.assert_allclose(estimates.mean(axis=0), probe.full(position)[1], rtol=1e-10)
    plain = np.array([probe.minibatch_gradient(position, rows) for rows in batches])
    assert np.all(estimates.std(axis=0) < 0.2 * plain.std(axis=0))


def compiled_estimator(density, builder):
    estimator = builder(density)
    function = pytensor.function(
        [density.position, density.indices, *estimator.inputs.values()],
        estimator.gradient,
        on_unused_input="ignore",
    )

    def evaluate(position, rows, inputs):
        return function(position, rows, *(inputs[name] for name in estimator.inputs))

    return evaluate


def test_second_order_control_variate_is_exact_where_the_likelihood_is_quadratic(gaussian):
    known, density, probe = gaussian
    centre = probe.centre(known.means["beta"] + 0.5 * known.sds["beta"], hessian=True)
    inputs = centre.inputs()
    position = known.means["beta"] - 3.0 * known.sds["beta"]
    batches = np.random.default_rng(0).permutation(2000).reshape(20, 100)
    full = probe.full(position)[1]
    second_order = compiled_estimator(density, second_order_control_variate_gradient)
    for rows in batches:
        estimate = second_order(position, rows, inputs)
        np.testing.assert_allclose(estimate, full, rtol=1e-8)
        # The probe builds the same estimate from the terms and one product.
        np.testing.assert_allclose(probe.gradient("second_order", position, rows, inputs), estimate)
    # The full data's Hessian is the same summed over chunks of rows.
    chunked = Probe(density, chunk_rows=300).likelihood_hessian(centre.position)
    np.testing.assert_allclose(chunked, centre.likelihood_hessian, rtol=1e-10)
    # Negative control: the first-order control variate keeps the curvature's error.
    first_order = compiled_estimator(density, control_variate_gradient)
    errors = [first_order(position, rows, inputs) - full for rows in batches]
    assert np.max(np.abs(errors)) > 1e-3 * np.max(np.abs(full))


def test_the_second_order_control_variate_is_measured_where_the_likelihood_is_linear(gaussian):
    """A Gaussian likelihood's gradient is linear: the estimator is measured, and exact."""
    _, _, probe = gaussian
    rng = np.random.default_rng(3)
    first_order = measure(probe, 100, rng, np.zeros(2), ("minibatch", "control_variate"))
    assert "second_order" not in first_order.noise_covariance
    measured, departure = with_second_order(first_order, probe, rng, TuningConfig())
    assert departure < 1e-8
    assert measured.centre.likelihood_hessian is not None
    noise = measured.noise_covariance
    assert np.abs(noise["second_order"]).max() < 1e-12 * np.abs(noise["control_variate"]).max()


def test_the_largest_curvature_at_draws_is_the_whitened_hessians_top_eigenvalue():
    """Power iteration on differences of the full gradient, in the metric's coordinates."""
    probe, start = probe_and_start(radon_like(n_rows=300, n_groups=10, centred=True).model)
    rng = np.random.default_rng(6)
    size = start.size
    draws = start + rng.normal(scale=0.3, size=(2, size))
    factor = np.tril(rng.normal(scale=0.2, size=(size, size))) + np.eye(size)
    expected = 0.0
    for draw in draws:
        hessian = probe.hessian(draw, np.arange(probe.n_rows), np.full(size, 1e-5))
        expected = max(expected, np.linalg.eigvalsh(-factor.T @ hessian @ factor).max())
    found = largest_curvature(probe, draws, factor, rng, iterations=200)
    assert found == pytest.approx(expected, rel=1e-3)
    # A diagonal preconditioner P given as a vector: the coordinates of A = diag(sqrt(P)).
    preconditioner = rng.uniform(0.05, 0.5, size)
    dense = np.diag(np.sqrt(preconditioner))
    found = largest_curvature(probe, draws, preconditioner, rng, iterations=200)
    assert found == pytest.approx(
        largest_curvature(probe, draws, dense, np.random.default_rng(6), iterations=200),
        rel=1e-3,
    )


def funnel_chain(dynamics, name):
    """A full-data chain on a centred funnel, measured where the scale is 0.5.

    Returns the adapter, the chain, a point where it was measured, a point in
    the funnel's neck (scale 0.02) and a generator.
    """
    known = radon_like(n_rows=300, n_groups=10, centred=True)
    model = known.model
    probe, start = probe_and_start(model)
    rng = np.random.default_rng(7)
    point = {v.name: model.initial_point()[v.name] for v in model.value_vars}
    # The mode search runs into the neck; the chain is measured where the scale is 0.5.
    typical = DictToArrayBijection.map({**point, "tau_log__": np.array(np.log(0.5))}).data
    hessian = probe.hessian(typical, np.arange(300), np.full(start.size, 1e-5))
    sds = 1.0 / np.sqrt(np.abs(np.diag(hessian)))
    measured = replace(
        measure(probe, 30, rng, start, ("minibatch",)),
        mode=typical,
        hessian=hessian,
        laplace_variance=sds**2,
        laplace_factor=np.diag(sds),
    )
    choices = UserChoices(
        None, None, ("minibatch",), None, 1.0, 0.05, metric="diagonal", full_data_work=10.0
    )
    adapter = ChainAdapter(name, dynamics, probe, choices, TuningConfig(), 30, False, True, False)
    chain = ChainState(IndexStream(300, 30))
    chain.measurements = measured
    chain.settings = adapter.settings(measured)
    neck = DictToArrayBijection.map({**point, "tau_log__": np.array(np.log(0.02))}).data
    return adapter, chain, typical, neck, rng


def test_a_full_data_window_counts_the_curvature_of_a_funnels_neck():
    """Draws where the centred model's scale is small meet a curvature far above the measured
    one; the chain's stiffness counts it and its step shrinks. Draws where the chain was
    measured leave it as it is.
    """
    adapter, chain, typical, neck, rng = funnel_chain(Underdamped(), "SGHMC")
    assert not adapter.check_curvature(chain, np.tile(typical, (4, 1)), rng)
    step_size = chain.settings.step_size.value
    assert adapter.check_curvature(chain, np.tile(neck, (4, 1)), rng)
    assert chain.measurements.stiffness > 10.0
    assert adapter.settings(chain.measurements).step_size.value < step_size / 3


@pytest.mark.parametrize(("correlation", "counted"), [(0.0, True), (0.99, False)])
def test_a_window_whose_relaxation_was_overstated_counts_its_draws_by_their_autocorrelation(
    monkeypatch, correlation, counted
):
    """Draws of a skewed coordinate (Gamma(2): |Cov(x, log p)| / sd(x) = 1 / sqrt(2)) in a
    chain whose predicted relaxation counts them as worth almost nothing. Independent draws
    still show the skew; draws whose own autocorrelation is 0.99 (negative control) count as
    few, and show nothing.
    """
    adapter, chain, typical, _, rng = funnel_chain(Langevin(), "SGLD")
    chain.settings = replace(chain.settings, relaxation=1e9)
    n_draws = 400
    series_rng = np.random.default_rng(11)
    series = np.empty(n_draws)
    series[0] = series_rng.normal()
    for index in range(1, n_draws):
        innovation = np.sqrt(1 - correlation**2) * series_rng.normal()
        series[index] = correlation * series[index - 1] + innovation
    skewed = stats.gamma.ppf(stats.norm.cdf(series), 2.0)
    draws = np.tile(typical, (n_draws, 1))
    draws[:, 0] += skewed
    log_density = np.log(skewed) - skewed
    monkeypatch.setattr(
        chain_module,
        "log_density_at_draws",
        lambda *arguments, gradients: (
            (log_density, np.zeros_like(draws)) if gradients else log_density
        ),
    )
    predicted = independent_draws(n_draws, chain.settings.steps_per_draw, 1e9)
    assert predicted < 1
    adapter.check_tempering(chain, draws, predicted, rng)
    sensitivity = chain.measurements.tempering_sensitivity
    if counted:
        assert sensitivity == pytest.approx(1 / np.sqrt(2), rel=0.3)
    else:
        assert sensitivity == 0


@pytest.mark.parametrize("seen_moving", [True, False])
def test_a_full_data_window_bounds_the_move_of_a_coordinate_seen_moving(monkeypatch, seen_moving):
    """A full-data SGHMC chain. A first window's log density shows the first coordinate's mean
    moving (a Gamma(2) coordinate); a second window's energy rises along it by 3 sds per unit,
    under noise that hides that from a test over all coordinates. The chain bounds that move
    within the means' share of the budget, with a smaller step. Without the first window
    (negative control) the second reads no move and the step stays.
    """
    adapter, chain, typical, _, rng = funnel_chain(Underdamped(), "SGHMC")
    chain.settings = replace(chain.settings, relaxation=1.0)
    assert chain.settings.estimator == FULL_DATA
    size, n_draws = typical.size, 100
    window_rng = np.random.default_rng(12)
    skewed = window_rng.gamma(2.0, size=4 * n_draws)
    noise = window_rng.standard_normal((n_draws, size))
    factor = metric_factor(chain.settings.metric, chain.settings.preconditioner, size)
    assert factor.ndim == 1
    energy = 3.0 * noise[:, 0] + 10.0 * window_rng.standard_normal(n_draws) + 100.0
    gradients = np.zeros((n_draws, size))
    gradients[:, 0] = np.sqrt(2 * energy / factor[0])
    first_draws = np.tile(typical, (skewed.size, 1))
    first_draws[:, 0] += skewed
    windows = [
        (first_draws, np.log(skewed) - skewed, np.zeros_like(first_draws)),
        (
            typical + noise * np.sqrt(chain.measurements.laplace_variance),
            -0.5 * np.sum(noise**2, axis=1),
            gradients,
        ),
    ]
    if not seen_moving:
        windows = windows[1:]
    step_size = chain.settings.step_size.value
    for draws, log_density, slopes in windows:
        monkeypatch.setattr(
            chain_module,
            "log_density_at_draws",
            lambda *arguments, gradients, value=log_density, slopes=slopes: (value, slopes),
        )
        adapter.check_tempering(chain, draws, len(draws), rng)
        chain.settings = adapter.settings(chain.measurements)
    window = chain.measurements.energy_window
    assert window.sensitivity(factor) == 0.0
    if seen_moving:
        assert chain.measurements.moving[0]
        sensitivity = window.sensitivity(factor, chain.measurements.moving)
        assert sensitivity > 1.0
        move = chain.settings.inflation_per_curvature * sensitivity
        assert move == pytest.approx(TuningConfig().mean_share * 0.05, rel=1e-6)
        assert chain.settings.step_size.value < step_size
    else:
        assert chain.measurements.moving is None
        assert chain.settings.step_size.value == step_size


def close_window(adapter, chain, centre, scales, size, rng, draw_rng):
    """Run ``size`` independent normal draws around ``centre`` (sds ``scales``) through the
    chain's tune windows; return what the last draw's recording returned."""
    window = centre + draw_rng.normal(size=(size, centre.size)) * scales
    messages = None
    for draw in window:
        messages = adapter.record_tune_draw(chain, draw, rng, tune=True)
    return messages


def test_a_window_worth_fewer_than_2d_draws_still_rescales_a_coordinate_the_metric_misses():
    """A window of 100 independent draws of the Laplace picture with one coordinate's sd 3
    times the metric's, counted by an overstated relaxation as worth almost nothing, below the
    2 D a covariance needs. The coordinates' check counts them by their own autocorrelation,
    finds the coordinate and rescales it; the metric keeps the others."""
    adapter, chain, typical, _, rng = funnel_chain(Langevin(), "SGLD")
    chain.settings = replace(chain.settings, relaxation=1e9)
    before = chain.measurements.laplace_variance.copy()
    draw_rng = np.random.default_rng(5)
    scales = np.sqrt(before)
    scales[0] *= 3.0
    messages = close_window(
        adapter, chain, typical, scales, adapter.tuning.windows[0], rng, draw_rng
    )
    assert messages is not None
    assert any("variance differs" in message for message in messages)
    ratio = chain.measurements.laplace_variance / before
    assert 5.0 < ratio[0] < 15.0
    np.testing.assert_allclose(ratio[1:], 1.0)


def test_a_window_that_measures_the_metric_again_recounts_a_full_data_chains_stiffness():
    """A full-data SGHMC chain on the centred funnel stepping for 50 times the largest
    curvature measured, and a window of draws around where it was measured, with the first
    coordinate's sd 3 times the metric's and the scale's a tenth (the draws stay out of the
    neck): the window measures the metric again, and the curvature at its draws, counted in
    the new metric, sets the stiffness, at most a few times the largest measured (1.5 on this
    seed). A stiffness carried over from the old metric's coordinates stays at 50."""
    adapter, chain, typical, _, rng = funnel_chain(Underdamped(), "SGHMC")
    chain.measurements = replace(chain.measurements, stiffness=50.0)
    chain.settings = adapter.settings(chain.measurements)
    assert chain.settings.estimator == FULL_DATA
    draw_rng = np.random.default_rng(5)
    scales = np.sqrt(chain.measurements.laplace_variance)
    scales[0] *= 3.0
    scales[1] *= 0.1
    messages = close_window(
        adapter, chain, typical, scales, adapter.tuning.windows[0], rng, draw_rng
    )
    assert messages is not None
    assert any("variance differs" in message for message in messages)
    assert chain.measurements.stiffness < 5.0


@pytest.mark.parametrize("measured_again", [True, False], ids=["metric-measured-again", "agrees"])
def test_a_slowness_measured_in_a_metric_measured_again_is_measured_again_in_the_new_one(
    measured_again,
):
    """A chain whose draws decorrelated 12.7 times more slowly than predicted, in a metric
    that then understates a coordinate's variance 9 times: each window that measures the
    metric again drops the factor (which the tuner multiplies into the inner steps per draw),
    the last one runs once more to measure it in the new metric, and that window, measuring
    the metric yet again, keeps the factor. Windows that agree with the metric (negative
    control) keep it throughout, and no window runs again."""
    adapter, chain, typical, _, rng = funnel_chain(Underdamped(), "SGHMC")
    draw_rng = np.random.default_rng(5)
    first, last = adapter.tuning.windows
    kept, closed = [], []
    for coordinate, size in ((0, first), (2, last), (3, last)):
        chain.measurements = replace(chain.measurements, slowness=12.7)
        chain.settings = adapter.settings(chain.measurements)
        scales = np.sqrt(chain.measurements.laplace_variance)
        if measured_again:
            scales[coordinate] *= 3.0
        messages = close_window(adapter, chain, typical, scales, size, rng, draw_rng)
        assert measured_again == any("variance differs" in m for m in messages or [])
        kept.append(chain.measurements.slowness)
        closed.append(chain.windows_closed)
    if measured_again:
        assert kept == [1.0, 1.0, 12.7]
        assert closed == [1, 1, 2]
    else:
        assert kept == [12.7, 12.7, 12.7]
        assert closed == [1, 2, 2]


@pytest.mark.parametrize("dropped", [True, False], ids=["dropped", "negative-control"])
def test_a_slowness_measured_again_keeps_at_most_the_one_dropped(dropped):
    """A window's draws that decorrelate far more slowly than predicted (a coordinate that
    drifts steadily across the window) read a slowness of about 30. Measured again
    after a window dropped a slowness of 12.7, what the chain keeps is at most 12.7; a chain
    that dropped none (negative control) keeps what it read."""
    adapter, chain, typical, _, _ = funnel_chain(Underdamped(), "SGHMC")
    if dropped:
        chain.measurements = replace(chain.measurements, slowness=12.7)
        assert adapter.forget_slowness(chain)
        assert chain.measurements.slowness == 1.0
    chain.settings = adapter.settings(chain.measurements)
    draw_rng = np.random.default_rng(2)
    size = adapter.tuning.windows[0]
    draws = typical + 0.01 * draw_rng.normal(size=(size, typical.size))
    draws[:, 0] += np.linspace(0.0, 1.0, size)
    assert adapter.check_slowness(chain, draws)
    if dropped:
        assert chain.measurements.slowness == 12.7
    else:
        assert chain.measurements.slowness > 2 * 12.7


def test_shared_draws_take_their_larger_steps_once_the_curvature_at_the_draws_is_checked():
    """SGLD's default step keeps Euler-Maruyama's until a window has measured the curvature
    where the chain goes; a first check that finds nothing steeper then enlarges it, once."""
    adapter, chain, typical, _, rng = funnel_chain(Langevin(), "SGLD")
    euler = funnel_chain(Langevin("euler_maruyama"), "SGLD")[1]
    assert chain.settings.estimator == euler.settings.estimator == "full_data"
    assert chain.settings.step_size.value == pytest.approx(euler.settings.step_size.value)
    assert not chain.measurements.curvature_checked
    step_size = chain.settings.step_size.value
    assert adapter.check_curvature(chain, np.tile(typical, (4, 1)), rng)
    assert chain.measurements.curvature_checked
    larger = adapter.settings(chain.measurements).step_size.value
    # (eta a / (2 - eta a))**2 within the budget of 0.05 against eta a / (2 - eta a)
    expected = (2 * np.sqrt(0.05) / (1 + np.sqrt(0.05))) / (2 * 0.05 / 1.05)
    assert larger / step_size == pytest.approx(expected, rel=1e-6)
    chain.settings = adapter.settings(chain.measurements)
    assert not adapter.check_curvature(chain, np.tile(typical, (4, 1)), rng)


def test_the_tightest_draws_are_those_of_highest_density_and_some_spread():
    draws = np.arange(20.0)[:, None]
    log_density = -np.abs(np.arange(20.0) - 13)
    chosen = tightest_draws(draws, log_density, count=6).ravel()
    assert {12.0, 13.0, 14.0} <= set(chosen)
    assert {0.0, 19.0} <= set(chosen)


def test_the_second_order_control_variate_is_not_measured_along_a_curved_ridge():
    """Non-centred radon-like: the likelihood's curvature in the groups' offsets scales with
    ``tau``, which varies across the posterior, so the centre's curvature does not hold where
    the chain goes.
    """
    probe, start = probe_and_start(radon_like(n_rows=1000, n_groups=20, centred=False).model)
    rng = np.random.default_rng(4)
    first_order = measure(probe, 100, rng, start, ("minibatch", "control_variate"))
    assert first_order.log_concave
    config = TuningConfig()
    measured, departure = with_second_order(first_order, probe, rng, config)
    assert departure > 10 * config.second_order_linearity
    assert measured is first_order


def test_the_second_order_control_variate_is_not_measured_where_the_likelihood_has_kinks():
    """A Laplace likelihood is piecewise linear: its Hessian is zero almost everywhere, and its
    gradient jumps, so no curvature at the centre describes it.
    """
    known = median_regression(n_rows=500)
    density = build_minibatch_log_density(known.model, known.model.value_vars)
    probe = Probe(density)
    rng = np.random.default_rng(5)
    first_order = measure(probe, 100, rng, np.zeros(2), ("minibatch", "control_variate"))
    measured, departure = with_second_order(first_order, probe, rng, TuningConfig())
    assert departure == np.inf
    assert measured is first_order


def test_second_order_control_variate_is_unbiased_and_quieter_elsewhere():
    known = logistic_regression(n_rows=2000)
    density = build_minibatch_log_density(known.model, known.model.value_vars)
    probe = Probe(density)
    rng = np.random.default_rng(1)
    mode, _, _, hessian, _ = find_mode(
        probe, np.zeros(known.model.initial_point()["beta"].size), 100, rng
    )
    centre = probe.centre(mode, hessian=True)
    inputs = centre.inputs()
    position = mode + 2.0 * np.sqrt(np.diag(np.linalg.inv(-hessian)))
    batches = rng.permutation(2000).reshape(20, 100)
    full = probe.full(position)[1]
    second_order = compiled_estimator(density, second_order_control_variate_gradient)
    estimates = np.array([second_order(position, rows, inputs) for rows in batches])
    # The batches of an epoch hold every row once: their mean is the full gradient.
    np.testing.assert_allclose(estimates.mean(axis=0), full, rtol=1e-10)
    first_order = compiled_estimator(density, control_variate_gradient)
    plain = np.array([first_order(position, rows, inputs) for rows in batches])
    assert np.all(estimates.std(axis=0) < 0.5 * plain.std(axis=0))
    # Negative control: without the full data's Hessian the estimate is biased.
    biased = dict(inputs, centre_likelihood_hessian=np.zeros_like(centre.likelihood_hessian))
    estimates = np.array([second_order(position, rows, biased) for rows in batches])
    assert np.max(np.abs(estimates.mean(axis=0) - full)) > 1e-3 * np.max(np.abs(full))


def run(step, model, draws=20, tune=10, seed=3, chains=1, **options):
    with model:
        return pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            **options,
        )


@pytest.fixture(scope="module")
def large_logistic():
    return logistic_regression(n_rows=20_000)


def test_control_variates_are_chosen_where_they_pay(large_logistic):
    model = large_logistic.model
    automatic = run(SGLD(batch_size=50, model=model), model)
    assert np.asarray(automatic.sample_stats["control_variate"]).all()
    plain = run(SGLD(batch_size=50, control_variate=False, model=model), model)
    assert not np.asarray(plain.sample_stats["control_variate"]).any()
    # Minibatch noise at N / B = 400 forces a far smaller step size.
    automatic_step = float(automatic.sample_stats["step_size"][0, 0])
    plain_step = float(plain.sample_stats["step_size"][0, 0])
    assert plain_step < automatic_step / 20


@pytest.mark.parametrize("sampler", [SGLD, SGHMC])
def test_only_batches_of_every_row_drawn_without_replacement_are_noiseless(sampler):
    known = correlated_regression(n_rows=50, correlation=0.5)
    model = known.model
    exact = run(sampler(batch_size=50, model=model), model, draws=2, tune=0)
    assert np.all(np.asarray(exact.sample_stats["gradient_noise"]) == 0.0)
    assert not np.asarray(exact.sample_stats["control_variate"]).any()
    # The minibatch estimator itself: where the tuner chooses, the full data's
    # gradient costs no more than these batches and carries no noise.
    for options in ({"batch_size": 50, "replace": True}, {"batch_size": 49}):
        noisy = run(sampler(model=model, control_variate=False, **options), model, draws=2, tune=0)
        assert np.all(np.asarray(noisy.sample_stats["gradient_noise"]) > 0.0), options


COSTLY_CONTROL_VARIATES = TuningConfig(
    estimator_cost={"minibatch": 1.0, "control_variate": 100.0, "second_order": 200.0}
)


@pytest.mark.parametrize("tune", [0, 50, 150])
def test_the_full_data_gradient_is_kept_only_once_a_tune_window_checked_it(tune):
    """Its steps are as large as the curvature allows; a tune window checks them."""
    model, _, _ = widely_spread_regression()
    step = SGLD(batch_size=5, model=model, tuning=COSTLY_CONTROL_VARIATES)
    result = run(step, model, draws=5, tune=tune)
    noise = np.asarray(result.sample_stats["gradient_noise"])
    checked = tune >= COSTLY_CONTROL_VARIATES.windows[0]
    assert np.all(noise == 0.0) == checked
    assert np.all(noise > 0.0) == (not checked)


def test_a_draw_on_all_rows_runs_in_calls_of_bounded_rows_with_the_same_draws(monkeypatch):
    """Calls of a few steps each, from where the last ended, take the same steps as one."""
    model, _, _ = widely_spread_regression()
    step = SGLD(batch_size=5, model=model, tuning=COSTLY_CONTROL_VARIATES)
    whole = run(step, model, draws=5, tune=150)
    assert np.all(np.asarray(whole.sample_stats["gradient_noise"]) == 0.0)
    assert np.all(np.asarray(whole.sample_stats["steps_per_draw"]) >= 3)
    calls = []
    draw = AllRows.draw

    def counted(self, rng, n_batches):
        calls.append(n_batches)
        return draw(self, rng, n_batches)

    monkeypatch.setattr(runner_module, "CALL_ROWS", 2 * 50 + 49)
    monkeypatch.setattr(AllRows, "draw", counted)
    step = SGLD(batch_size=5, model=model, tuning=COSTLY_CONTROL_VARIATES)
    parts = run(step, model, draws=5, tune=150)
    np.testing.assert_array_equal(parts.posterior["slope"], whole.posterior["slope"])
    assert max(calls) == 2


def test_the_full_data_gradient_is_weighed_only_where_the_tuner_chooses_the_estimator():
    model, _, _ = widely_spread_regression()
    automatic = SGLD(batch_size=5, model=model, tuning=COSTLY_CONTROL_VARIATES)
    assert automatic.choices.full_data_work == 10.0
    for options in ({"control_variate": False}, {"control_variate": True}, {"batch_size": 50}):
        step = SGLD(**{"batch_size": 5, **options}, model=model)
        assert step.choices.full_data_work == np.inf, options
    # Nor on more rows than TuningConfig.full_data_rows.
    few = SGLD(batch_size=5, model=model, tuning=TuningConfig(full_data_rows=49))
    assert few.choices.full_data_work == np.inf


def test_a_draw_on_all_rows_ends_with_the_call_that_stopped_at_a_non_finite_step(monkeypatch):
    """The later calls do not run: the draw ends at the last finite state, as one call would."""
    calls = []

    def kernel(state, indices, noise, values, inputs):
        calls.append(len(indices))
        # The second call stops after one of its steps.
        taken = 1 if len(calls) == 2 else len(indices)
        position = state["position"] + taken
        return KernelResult({"position": position}, position, 0.0, 0.0, taken)

    monkeypatch.setattr(runner_module, "CALL_ROWS", 2 * 10)
    monkeypatch.setattr(KernelRunner, "kernel", lambda self, chain: kernel)
    chain = SimpleNamespace(all_rows=AllRows(10), row_generator=None, kernel_inputs=[])
    runner = KernelRunner.__new__(KernelRunner)
    runner.compiled = SimpleNamespace(pages=SimpleNamespace(read=lambda indices: None))
    result = runner._run_in_calls(
        chain,
        chain.all_rows,
        {"position": np.zeros(1)},
        7,
        {"step_size": np.ones(7)},
        np.random.default_rng(0),
        (1, 1),
    )
    assert calls == [2, 2]
    assert result.steps_taken == 3
    np.testing.assert_array_equal(result.position, [3.0])


def test_the_full_data_gradient_is_weighed_on_tens_of_thousands_of_rows(large_logistic):
    """Its draws run in calls of bounded rows, so memory does not cap N at 10,000."""
    step = SGLD(batch_size=50, model=large_logistic.model)
    assert step.choices.full_data_work == 20_000 / 50


def test_warning_when_the_budget_forces_tiny_steps(large_logistic, caplog):
    model = large_logistic.model
    with caplog.at_level(logging.WARNING, logger="pymc"):
        run(SGLD(batch_size=10, control_variate=False, model=model), model, draws=2, tune=0)
    assert "control_variate=True" in caplog.text


def test_explicit_step_size_wins_and_is_recorded(large_logistic, caplog):
    model = large_logistic.model
    with caplog.at_level(logging.WARNING, logger="pymc"):
        result = run(SGLD(batch_size=50, step_size=0.9, model=model), model, draws=3)
    np.testing.assert_array_equal(np.asarray(result.sample_stats["step_size"]), 0.9)
    assert np.all(np.asarray(result.sample_stats["predicted_inflation"]) > 0.05)
    assert "leave step_size unset" in caplog.text


def test_chosen_settings_are_recorded_per_chain(large_logistic):
    model = large_logistic.model
    result = run(SGHMC(batch_size=50, model=model), model, chains=2)
    stats = result.sample_stats
    for name in ("gradient_noise", "predicted_inflation", "step_size", "steps_per_draw"):
        values = np.asarray(stats[name])
        assert np.all(np.isfinite(values)) and np.all(values == values[:, :1])
    # Each chain measured for itself, from its own start and with its own generator.
    noise = np.asarray(stats["gradient_noise"])[:, 0]
    assert noise[0] != noise[1]
    assert int(stats["steps_per_draw"][0, 0]) >= 1


def test_refreshed_control_variate_keeps_sampling(large_logistic):
    model = large_logistic.model
    step = SGLD(batch_size=50, control_variate=True, control_variate_refresh=10, model=model)
    result = run(step, model, draws=10)
    assert np.all(np.isfinite(np.asarray(result.posterior["beta"])))
    assert not np.asarray(result.sample_stats["diverging"]).any()


def test_a_moving_centre_is_not_given_the_second_order_control_variate_by_default(large_logistic):
    """Each refresh would buy the full-data Hessian again (D passes), which the automatic
    choice's cost rule does not count; asked for by name, it is still weighed."""
    model = large_logistic.model
    assert SGLD(batch_size=50, model=model).choices.weighs_second_order
    refreshed = SGLD(batch_size=50, control_variate_refresh=10, model=model)
    assert not refreshed.choices.weighs_second_order
    named = SGLD(
        batch_size=50, control_variate="second_order", control_variate_refresh=10, model=model
    )
    assert "second_order" in named.choices.estimators


def test_fixed_settings_skip_adaptation(large_logistic):
    model = large_logistic.model
    step = SGLD(
        batch_size=50,
        step_size=1e-6,
        preconditioner=None,
        control_variate=False,
        steps_per_draw=2,
        model=model,
    )
    assert not step.measures
    result = run(step, model, draws=2, tune=0)
    start = DictToArrayBijection.map(model.initial_point()).data
    # Two tiny steps from the initial point: the chain did not jump to a mode.
    assert np.abs(np.asarray(result.posterior["beta"])[0, 0] - start).max() < 0.1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bias_budget": 0.0}, "bias_budget must be between 0 and 1"),
        ({"preconditioner": "full"}, "preconditioner must be one of 'auto', 'diagonal'"),
        ({"preconditioner": -1.0}, "preconditioner must hold positive"),
        ({"control_variate": "yes"}, "control_variate must be None"),
        ({"control_variate_refresh": 0}, "control_variate_refresh must be a positive integer"),
        ({"integrator": "euler"}, "integrator must be one of \\('leimkuhler_matthews'"),
    ],
)
def test_bad_adaptation_arguments(large_logistic, kwargs, message):
    with pytest.raises(ValueError, match=message):
        SGLD(model=large_logistic.model, **kwargs)


def test_sghmc_bad_mass_and_friction(large_logistic):
    with pytest.raises(ValueError, match="mass must hold positive"):
        SGHMC(model=large_logistic.model, mass=0.0)
    with pytest.raises(ValueError, match="friction must hold positive"):
        SGHMC(model=large_logistic.model, friction=-1.0)
    with pytest.raises(ValueError, match="mass has 3 entries; give one or 10"):
        SGHMC(model=large_logistic.model, mass=np.ones(3))
    with pytest.raises(TypeError, match="SGLD got unknown arguments \\['friction'\\]"):
        SGLD(model=large_logistic.model, friction=1.0)


def test_subsample_newton_stage_reaches_the_same_mode():
    panel = logistic_regression(n_rows=24_000)
    density = build_minibatch_log_density(panel.model, panel.model.value_vars)
    probe = Probe(density, chunk_rows=4_000)
    batch_rows = []
    terms = probe.terms
    probe.terms = lambda position, rows: batch_rows.append(len(rows)) or terms(position, rows)

    def mode(subsample_rows):
        batch_rows.clear()
        config = TuningConfig(subsample_rows=subsample_rows)
        result = find_mode(probe, np.zeros(10), 100, np.random.default_rng(2), config)
        return result, set(batch_rows)

    (direct, _, _, hessian, _), direct_rows = mode(subsample_rows=24_000)
    (staged, _, _, _, _), staged_rows = mode(subsample_rows=3_000)
    assert 3_000 in staged_rows and 3_000 not in direct_rows
    sds = np.sqrt(np.diag(np.linalg.inv(-hessian)))
    np.testing.assert_array_less(np.abs(staged - direct) / sds, 0.01)


def test_newton_search_uses_a_subsample_hessian_and_the_mode_gets_all_rows():
    """The search's directions come from 4,096 rows; the Hessian returned is on all N."""
    panel = logistic_regression(n_rows=24_000)
    density = build_minibatch_log_density(panel.model, panel.model.value_vars)
    probe = Probe(density)
    batch_rows = []
    terms = probe.terms
    probe.terms = lambda position, rows: batch_rows.append(len(rows)) or terms(position, rows)
    config = TuningConfig()
    mode, _, _, hessian, _ = find_mode(probe, np.zeros(10), 100, np.random.default_rng(2), config)
    assert config.hessian_rows in batch_rows and 24_000 in batch_rows
    # Rows on both sides of every difference: 2D full passes at the mode, one scale pass less.
    assert batch_rows.count(24_000) >= 2 * 10
    sds = np.sqrt(np.diag(np.linalg.inv(-hessian)))
    exact = probe.hessian(mode, np.arange(24_000), 1e-3 * sds)
    np.testing.assert_allclose(hessian, exact, rtol=1e-6, atol=1e-9 * np.abs(exact).max())
    subsample = probe.hessian(mode, np.arange(config.hessian_rows), 1e-3 * sds)
    assert np.abs(subsample - exact).max() > 1e-3 * np.abs(exact).max()


def test_chains_start_where_the_gradient_is_finite():
    """Jitter of 1 saturates the logits of a covariate scaled by 100: the start jitters less."""
    panel = logistic_regression(n_rows=2_000, badly_scaled=True)
    result = run(SGHMC(batch_size=50, model=panel.model), panel.model, chains=2)
    assert np.all(np.isfinite(np.asarray(result.posterior["beta"])))
    assert not np.asarray(result.sample_stats["diverging"]).any()


def test_tune_draws_after_the_windows_take_one_inner_step():
    """Tune draws run at full length through both windows and the settling draws, then one step;
    kept draws always run at full length."""
    config = TuningConfig()
    full_length = sum(config.windows) + config.settle_draws
    panel = correlated_regression(n_rows=500, correlation=0.0)
    with panel.model:
        result = pm.sample(
            step=SGLD(batch_size=50),
            tune=full_length + 20,
            draws=10,
            chains=1,
            random_seed=3,
            progressbar=False,
            discard_tuned_samples=False,
            compute_convergence_checks=False,
        )
    tuned = np.asarray(result.warmup_sample_stats["steps_per_draw"])[0]
    kept = np.asarray(result.sample_stats["steps_per_draw"])[0]
    assert tuned[:full_length].min() > 1
    assert np.all(tuned[full_length:] == 1)
    assert np.all(kept == tuned[0])


@pytest.mark.once
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_travels_and_is_measured_again(name, caplog):
    """With every chain counted as slow, the first tune window travels at the travel budget
    and the settings are chosen again from its draws before the next tune draw.

    A small bias budget makes the budget, not stability, bind the step size of every sampler,
    so travelling takes larger steps.
    """
    config = TuningConfig(slow_relaxation=0.0)
    panel = correlated_regression(n_rows=500, correlation=0.0)
    with caplog.at_level(logging.INFO, logger="pymc"), panel.model:
        result = pm.sample(
            step=SAMPLERS[name](batch_size=50, bias_budget=0.005, tuning=config),
            tune=config.windows[0] + 20,
            draws=5,
            chains=1,
            random_seed=3,
            progressbar=False,
            discard_tuned_samples=False,
            compute_convergence_checks=False,
        )
    assert "travelled 100 tune draws at a bias budget of 1" in caplog.text
    steps = np.asarray(result.warmup_sample_stats["step_size"])[0]
    first, after = config.windows[0] - 1, config.windows[0] + 1
    if name != "CyclicalSGLD":  # its step size varies along the cycle anyway
        assert steps[after] < steps[first]
    assert np.all(np.isfinite(np.asarray(result.posterior["beta"])))


def sample_skewed_radon(caplog, tuning):
    """SGLD on the non-centred radon-like model (N = 1,000, 20 groups), 2 chains."""
    model = radon_like(n_rows=1000, n_groups=20, centred=False).model
    with caplog.at_level(logging.INFO, logger="pymc"), model:
        step = SGLD(batch_size=100, tuning=tuning)
        result = pm.sample(
            step=step,
            tune=1000,
            draws=5,
            chains=2,
            cores=1,
            random_seed=7,
            progressbar=False,
            compute_convergence_checks=False,
        )
    return step, result


@pytest.mark.once
def test_a_skewed_posterior_shrinks_the_inflation_by_how_far_it_moves_the_means(caplog):
    """Non-centred radon-like (N = 1,000, 20 groups), on minibatches only: ``tau``'s mean
    moves by about 3 of its sds per unit of variance inflation, so each chain's tune windows
    cut the inflation allowed to keep that move within half the bias budget in sds.
    """
    step, result = sample_skewed_radon(caplog, TuningConfig(full_data_rows=0))
    # Each window whose draws show a larger sensitivity says so: at least once per chain.
    assert caplog.text.count("the tune draws show a skewed posterior") >= 2
    inflation = np.asarray(result.sample_stats["predicted_inflation"])[:, -1]
    assert np.all(inflation < 0.05 / 1.5)
    chain = step.chain
    assert chain.settings.estimator != FULL_DATA
    assert chain.measurements.tempering_sensitivity > 1.5
    move = chain.settings.predicted_inflation * chain.measurements.tempering_sensitivity
    assert move <= TuningConfig().mean_share * 0.05 * (1 + 1e-6)


@pytest.mark.once
def test_a_full_data_chain_bounds_its_steps_move_of_the_means_direction_by_direction(caplog):
    """The same model where the chains may take the full data's gradient, which they do. The
    step's inflation there reaches the budget only in the stiffest direction, so its move of
    the means, from the window's gradients, stays within half the budget at a larger inflation
    than tempering's bound (every direction inflated as the stiffest) allows.
    """
    step, result = sample_skewed_radon(caplog, None)
    chain = step.chain
    settings, measurements = chain.settings, chain.measurements
    assert settings.estimator == FULL_DATA
    size = measurements.mode.size
    factor = settings.metric.factor(size) * np.sqrt(settings.preconditioner)[None, :]
    share = TuningConfig().mean_share
    sensitivity = measurements.energy_window.sensitivity(factor, measurements.moving)
    assert settings.inflation_per_curvature * sensitivity <= share * 0.05 * (1 + 1e-6)
    assert settings.predicted_inflation * measurements.tempering_sensitivity > share * 0.05
    inflation = np.asarray(result.sample_stats["predicted_inflation"])[:, -1]
    assert np.all(inflation <= 0.05 * (1 + 1e-6))


@pytest.mark.once
def test_a_travelling_step_that_diverges_travels_on_at_a_smaller_budget(caplog):
    """Batches of N rows drawn with replacement on the non-centred radon-like model: a travel
    window at a bias budget of 1 takes steps near the edge of stability, and one of them can
    diverge. Whether a chain travels (how slowly it relaxes where its search ended) and
    whether one of its steps diverges depend on the random stream, so every chain is made to
    travel (any relaxation counts as slow) and its first travelling draw to end as a
    diverging one does. The chain goes back to its last draw and travels on at a quarter of
    the budget, instead of stopping where it diverged for the rest of the run.
    """
    model = radon_like(n_rows=1000, n_groups=20, centred=False).model
    tuning = TuningConfig(slow_relaxation=1.0)
    step = SGLD(batch_size=1000, replace=True, model=model, tuning=tuning)
    run_kernel, forced = step.runner.run, []

    def first_travelling_draw_diverges(chain, position, n_steps, step_values, rng, tune):
        result = run_kernel(chain, position, n_steps, step_values, rng, tune)
        if not chain.travelling or any(chain is other for other in forced):
            return result
        forced.append(chain)
        return replace(result, steps_taken=n_steps - 1)

    step.runner.run = first_travelling_draw_diverges
    with caplog.at_level(logging.INFO, logger="pymc"), model:
        result = pm.sample(
            step=step,
            tune=400,
            draws=10,
            chains=2,
            cores=1,
            random_seed=0,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert "a travelling step diverged at a bias budget of 1;" in caplog.text
    assert "at a bias budget of 0.25 and was measured again" in caplog.text
    assert "the chain stops moving" not in caplog.text
    assert not np.any(np.asarray(result.sample_stats["diverging"]))
    tau = np.asarray(result.posterior["tau"])
    assert np.all(np.isfinite(tau) & (tau > 0))
    assert np.all(np.ptp(tau, axis=1) > 0)


@pytest.mark.parametrize(
    ("shift", "ramp", "travels_on"),
    [(0.0, 0.0, False), (20.0, 0.0, False), (20.0, 20.0, True)],
    ids=["stayed", "settled", "still-drifting"],
)
def test_a_chain_still_drifting_after_travel_travels_on_where_it_is_not_slow(
    shift, ramp, travels_on, caplog
):
    """A travel window whose draws lie ``shift`` posterior sds from where the chain was last
    measured, moving on by ``ramp`` sds from its first draw to its last. A chain whose last
    draws still drift by several of the sds measured around the window has not arrived: a
    tune window whose draws drift would count the drift as the posterior's variance, so it
    travels on at the bias budget even where it relaxes fast, window by window while each
    window's mean moves, until one stays where it was measured. A chain that moved and
    settled, or stayed, starts its tune windows."""
    panel = correlated_regression(n_rows=500, correlation=0.0)
    step = SGLD(batch_size=50, model=panel.model)
    run(step, panel.model, draws=1, tune=5)
    chain, adapter = step.chain, step.adapter
    rng = np.random.default_rng(0)
    sds = np.sqrt(chain.measurements.laplace_variance)

    def window(length, shift, ramp=0.0):
        along = shift + np.linspace(0.0, ramp, length)[:, None]
        noise = rng.standard_normal((length, sds.size))
        return chain.measurements.mode + sds * (along + noise)

    chain.travelling, chain.travel_budget = True, 1.0
    with caplog.at_level(logging.INFO, logger="pymc"):
        adapter.finish_travel(chain, window(100, shift, ramp), rng, tune=True)
        assert chain.settings.relaxation < adapter.tuning.slow_relaxation
        assert chain.travelling == travels_on
        if not travels_on:
            assert chain.windows_closed == 0
            return
        assert chain.travel_budget == adapter.choices.bias_budget
        adapter.finish_travel(chain, window(200, 20.0), rng, tune=True)
        assert chain.travelling
        adapter.finish_travel(chain, window(200, 0.0), rng, tune=True)
    assert not chain.travelling
    assert caplog.text.count("the chain was still moving where it was measured") == 2


def test_noise_is_measured_closely_where_a_few_rows_carry_it():
    """On rows of heavy-tailed leverage, a noise measurement stays within 1.5x of the exact.

    A linear regression with log-normal covariates: row ``i``'s
    control-variate term at offset ``d`` from the centre is ``-x_i^2 d``, so
    the estimator's noise variance is ``N^2 / B Var(x^2) d^2``, exactly. A
    few rows carry most of it, and too few minibatches per point miss them
    (the measured noise ranged from 0.45x to 2.2x the exact with 32 per point).
    The step size is linear in the noise, so a factor 1.5 keeps the noise's
    share of the inflation within 1.5x the budget.
    """
    rng = np.random.default_rng(3)
    n_rows, batch_size = 20_000, 100
    x = rng.lognormal(0.0, 1.0, n_rows)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0)
        pm.Normal("y", beta * x, 1.0, observed=0.5 * x + rng.normal(size=n_rows))
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    centre = probe.centre(np.array([0.5]))
    offsets = np.linspace(-2.0, 2.0, 8) / np.sqrt(np.sum(x**2))
    exact = n_rows**2 / batch_size * np.var(x**2) * np.mean(offsets**2)
    ratios = []
    for seed in range(10):
        halves = measure_noise(
            probe,
            0.5 + offsets[:, None],
            batch_size,
            np.random.default_rng(seed),
            ["control_variate"],
            centre,
            TuningConfig(),
        )
        ratios.append(halves["control_variate"].mean(axis=0)[0, 0] / exact)
    assert 2 / 3 < min(ratios) and max(ratios) < 3 / 2, ratios


@pytest.mark.once
def test_a_posterior_without_a_mode_is_measured_at_the_chains_start(caplog):
    """Centred radon-like with weak data (N = 300, 60 groups): the joint density rises without
    bound as ``tau`` goes to 0 with every intercept at ``mu``, so the search runs into the
    funnel's neck (``log tau`` near -20) and its end is not taken for a mode. The chain is
    measured at its start instead: Laplace draws around that neck overflow the gradients.
    """
    model = radon_like(n_rows=300, n_groups=60, centred=True).model
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    point = model.initial_point()
    start = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    rng = np.random.default_rng(0)
    *_, distance = find_mode(probe, start, 50, rng)
    assert distance > TuningConfig().mode_distance
    estimators = ("minibatch", "control_variate")
    measurements = measure(probe, 50, rng, start, estimators)
    assert measurements.at_start
    np.testing.assert_array_equal(measurements.mode, start)
    noise = {name: np.trace(measurements.noise_covariance[name]) for name in estimators}
    assert np.all(np.isfinite(list(noise.values())))
    # Measured around the start, not at the control variate's centre, where it is exact.
    assert noise["control_variate"] > 1e-3 * noise["minibatch"]
    # No chain counts as slow here: it travels because it has no mode.
    config = TuningConfig(slow_relaxation=np.inf)
    with caplog.at_level(logging.INFO, logger="pymc"), model:
        result = pm.sample(
            step=SGHMC(batch_size=50, tuning=config),
            tune=300,
            draws=20,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert "the search for a posterior mode did not converge" in caplog.text
    assert "it travelled 100 tune draws at a bias budget of 1" in caplog.text
    # Measured again at its draws, the chain no longer warns about its start.
    assert "the search found no posterior mode" not in caplog.text
    tau = np.asarray(result.posterior["tau"])
    assert np.all(np.isfinite(tau) & (tau > 0))


def test_a_chain_without_a_mode_that_cannot_travel_says_so(caplog):
    """Without tune draws a chain measured at its start keeps those settings: it warns."""
    model = radon_like(n_rows=300, n_groups=60, centred=True).model
    with caplog.at_level(logging.WARNING, logger="pymc"), model:
        pm.sample(
            step=SGLD(batch_size=50),
            tune=0,
            draws=3,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert "the search found no posterior mode" in caplog.text


@pytest.mark.parametrize("recovers", [True, False], ids=["recovers", "negative-control"])
def test_a_tune_step_that_diverges_is_taken_back_with_smaller_steps(recovers):
    """The non-centred radon-like model with exact gradients (batches of all N rows): steps
    sized at the mode's curvatures diverge where the funnel narrows. During tune the chain
    goes back to its last draw and counts on 4 times the largest curvature; where that is not
    allowed (``max_stiffness`` 1) the chain stops, as after tuning."""
    panel = radon_like(n_rows=919, n_groups=85, centred=False)
    tuning = TuningConfig() if recovers else TuningConfig(max_stiffness=1.0)
    step = SGHMC(batch_size=919, tuning=tuning, model=panel.model)
    result = run(step, panel.model, draws=20, tune=300, seed=1)
    diverging = np.asarray(result.sample_stats["diverging"])
    stiffness = step.chain.measurements.stiffness
    if recovers:
        assert stiffness >= 4.0
        assert not diverging.any()
        assert np.all(np.isfinite(np.asarray(result.posterior["z"])))
    else:
        assert stiffness == 1.0
        assert diverging.all()


def test_a_metric_measured_again_counts_the_curvature_at_its_draws_once():
    """The stiffness multiplies the largest curvature measured in the metric's coordinates.
    Where a window's draws measure the metric again, a stiffness found in the old coordinates
    would count a stiff direction twice, once in the new metric and once in the factor: an
    SGLD chain of an 8-group Poisson GLMM kept a stiffness of 49 after its metric took in that
    direction, found at most a quarter of the curvature it stepped for at its next window's
    draws, and missed by 0.131 sd with a minimum ESS of 263 (0.030 sd, ESS 1,309, recounted).
    On a Poisson regression (all 500 rows in every batch, the full data's gradient), draws from
    the Laplace approximation at the mode recount a stiffness of 50 to about 1; the same draws
    with the intercept one higher, where every rate and so the curvature is e times higher,
    to about e."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=500)
    y = rng.poisson(np.exp(1.0 + 0.3 * x))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        slope = pm.Normal("slope", 0.0, 5.0)
        pm.Poisson("y", pm.math.exp(intercept + slope * x), observed=y)
    step = SGHMC(batch_size=500, model=model)
    start = DictToArrayBijection.map(model.initial_point()).data
    step.adapter.adapt(step.chain, start, rng, start=True, tune=True)
    measurements = step.chain.measurements
    covariance = np.linalg.inv(-measurements.hessian)
    draws = rng.multivariate_normal(measurements.mode, covariance, size=100)
    recounted = []
    for shift in (0.0, 1.0):
        step.chain.measurements = replace(measurements, stiffness=50.0)
        step.adapter.recount_stiffness(step.chain, draws + np.array([shift, 0.0]), rng)
        recounted.append(step.chain.measurements.stiffness)
    assert recounted[0] < 1.3
    assert 0.8 * np.e < recounted[1] < 1.25 * np.e


def test_measuring_again_keeps_the_curvature_a_diverging_tune_step_showed(large_logistic):
    """A compound step measures again at the end of tuning; the stiffness stays."""
    model = large_logistic.model
    step = SGLD(batch_size=50, model=model)
    start = DictToArrayBijection.map(model.initial_point()).data
    rng = np.random.default_rng(0)
    position, _ = step.adapter.adapt(step.chain, start, rng, start=True, tune=True)
    before = step.chain.settings.step_size.value
    step.adapter.tune_diverged(step.chain, before)
    assert step.chain.measurements.stiffness == 4.0
    step.adapter.adapt(step.chain, position, rng, start=False, tune=False)
    assert step.chain.measurements.stiffness == 4.0
    assert step.chain.settings.step_size.value < before


def test_a_tune_draw_that_ends_where_the_density_vanishes_is_taken_back(monkeypatch):
    """Exact gradients on the non-centred radon-like model, the first draw made to end as a
    draw whose steps run out to ``mu`` near 8e5 does: state and gradient finite, the log
    density -inf. That draw is taken back like a diverging one: the chain goes back to where
    the draw started (the adapted start, not PyMC's initial point) with smaller steps."""
    panel = radon_like(n_rows=919, n_groups=85, centred=False)
    step = SGHMC(batch_size=919, model=panel.model)
    run_kernel, calls = step.runner.run, []

    def first_runs_out(*arguments):
        result = run_kernel(*arguments)
        calls.append(result)
        if len(calls) > 1:
            return result
        return replace(result, position=np.full_like(result.position, 8e5), log_density=-np.inf)

    monkeypatch.setattr(step.runner, "run", first_runs_out)
    result = run(step, panel.model, draws=1, tune=3, seed=0, discard_tuned_samples=False)
    first = result.warmup_sample_stats["log_density"].values[0, 0]
    assert np.isnan(first)  # the draw that was taken back
    assert step.chain.measurements.stiffness == 4.0
    mu = np.concatenate(
        [result.warmup_posterior["mu"].values.ravel(), result.posterior["mu"].values.ravel()]
    )
    assert np.all(np.abs(mu) < 100)
    assert mu[0] != panel.model.initial_point()["mu"]
    assert not np.asarray(result.sample_stats["diverging"]).any()


@pytest.mark.parametrize(
    ("batch_size", "fall", "temperature", "taken_back"),
    [
        (500, 1e6, 1.0, True),
        (500, 500.0, 1.0, False),
        (50, 1e6, 1.0, False),
        (500, 2000.0, 1.0, True),
        (500, 2000.0, 3.0, False),
    ],
    ids=["blew-up", "within-reach", "minibatch-estimate", "beyond-reach", "heated"],
)
def test_a_tune_draw_whose_exact_log_density_falls_too_far_is_taken_back(
    monkeypatch, batch_size, fall, temperature, taken_back
):
    """Exact gradients (all 500 rows in every batch) on a logistic regression, the second draw
    made to end with a finite log density ``fall`` below the first's. Steps sized for the
    curvatures at the mode can blow up where the chain goes without overflowing: one chain of
    the validation panel (the non-centred radon-like model) ended a draw at log density
    -7.8e65, and every step from there diverged. A fall of more than
    ``log_density_drop + D`` (1,010 here) is taken back like a divergence; a fall of 500, more
    than a chain at its stationary law moves but within reach of one on its way from the mode,
    is kept, and so is a fall of 2,000 at temperature 3, whose draws' log densities spread
    three times as far. On minibatches the log density is an estimate, whose error grows with
    N / B past any such bound, so nothing is compared."""
    panel = logistic_regression(n_rows=500)
    step = SGHMC(batch_size=batch_size, temperature=temperature, model=panel.model)
    run_kernel, calls = step.runner.run, []

    def second_falls(*arguments):
        result = run_kernel(*arguments)
        calls.append(result)
        if len(calls) != 2:
            return result
        return replace(result, log_density=calls[0].log_density - fall)

    monkeypatch.setattr(step.runner, "run", second_falls)
    result = run(step, panel.model, draws=1, tune=4, seed=0, discard_tuned_samples=False)
    second = result.warmup_sample_stats["log_density"].values[0, 1]
    if taken_back:
        assert np.isnan(second)
        assert step.chain.measurements.stiffness == TuningConfig().stiffening
    else:
        assert second == pytest.approx(calls[0].log_density - fall)
        assert step.chain.measurements.stiffness == 1.0
    if batch_size < 500:
        assert step.chain.settings.estimator != FULL_DATA
    assert not np.asarray(result.sample_stats["diverging"]).any()


def test_a_first_exact_draw_whose_log_density_falls_too_far_is_taken_back(monkeypatch):
    """A chain's first draw on all rows has no exact draw before it: its fall is measured from
    the exact log density where it starts. On the logistic regression with all 500 rows in
    every batch, the first draw made to end 1e6 below where it started is taken back like a
    divergence. Before, the first draw after minibatches went unchecked: a chain of an 8-group
    Poisson GLMM that travelled on minibatches took its first full-data draw, at a step of
    0.35, to a finite state with ``log tau`` at -105 and ``mu`` at 10, kept it, and its next
    tune window measured a curvature 5e5 times the posterior's there, which froze the chain
    at a step of 8e-6 (minimum ESS 7)."""
    panel = logistic_regression(n_rows=500)
    step = SGHMC(batch_size=500, model=panel.model)
    run_kernel, calls = step.runner.run, []

    def first_falls(*arguments):
        result = run_kernel(*arguments)
        calls.append(result)
        if len(calls) != 1:
            return result
        return replace(result, log_density=result.log_density - 1e6)

    monkeypatch.setattr(step.runner, "run", first_falls)
    result = run(step, panel.model, draws=1, tune=4, seed=0, discard_tuned_samples=False)
    first = result.warmup_sample_stats["log_density"].values[0, 0]
    assert np.isnan(first)
    assert step.chain.measurements.stiffness == TuningConfig().stiffening
    assert np.isfinite(result.warmup_sample_stats["log_density"].values[0, 1:]).all()
    assert not np.asarray(result.sample_stats["diverging"]).any()


def test_a_minibatch_draw_after_an_exact_one_is_not_compared_with_it():
    """Settings that leave the full data for minibatches (as at the end of tuning, where no
    window checked the full data's) make the next draw's log density an estimate: a fall from
    the last exact one, however large, is no divergence."""
    panel = logistic_regression(n_rows=500)
    step = SGHMC(batch_size=50, model=panel.model)
    run(step, panel.model, draws=2, tune=2, seed=0)
    assert step.chain.settings.estimator != FULL_DATA
    step.chain.last_log_density = -100.0
    assert step._landed(-1e6) is None
    assert step._landed(-np.inf) == "the log density became non-finite"


def unchecked_travel_warned(tune: int, **options) -> tuple[bool, SGLD]:
    """Sample the uncorrelated regression with ``SGLD(batch_size=50, **options)`` for ``tune``
    tune draws and 5 draws; return whether PyMC got the warning that no tune window checked
    where the chain travelled, and the step."""
    panel = correlated_regression(n_rows=500, correlation=0.0)
    step = SGLD(batch_size=50, model=panel.model, **options)
    result = run(step, panel.model, draws=5, tune=tune, keep_warning_stat=True)
    warnings = np.asarray(result.sample_stats["warning"]).ravel()
    warned = any(
        "where the chain travelled to" in warning.message
        for warning in warnings
        if warning is not None
    )
    return warned, step


@pytest.mark.parametrize(
    ("extra_tune", "warned"),
    [(20, True), (TuningConfig().windows[0] + 20, False)],
    ids=["tune-ends-after-travel", "a-window-checks"],
)
def test_a_chain_that_travelled_warns_when_no_tune_window_checked_it(extra_tune, warned):
    """Every chain made to travel: tune that ends 20 draws after the travel window leaves the
    settings chosen where the chain went unchecked, and PyMC gets a warning that says to tune
    longer; tune that lasts through the next window checks them and gets none."""
    config = TuningConfig(slow_relaxation=0.0)
    tune = config.windows[0] + extra_tune
    assert unchecked_travel_warned(tune, bias_budget=0.005, tuning=config)[0] == warned


def test_a_chain_that_never_travelled_gets_no_unchecked_travel_warning():
    """Short tune alone is not the warning's cause: a chain adapted at its mode that did not
    travel (a Gaussian posterior) gets no such warning, even with tune shorter than a window."""
    warned, step = unchecked_travel_warned(30)
    assert step.chain.travel_budget == 0.0
    assert not warned


def test_a_chain_still_travelling_when_tuning_ends_warns():
    """Travel windows count as closed windows while the chain travels: with every window
    counted as one the chain moved through (``travel_shift=0``), the chain travels on through
    a second window, and tuning that ends inside it has checked nothing."""
    config = TuningConfig(slow_relaxation=0.0, travel_shift=0.0)
    tune = config.windows[0] + 50
    assert unchecked_travel_warned(tune, bias_budget=0.005, tuning=config)[0]
