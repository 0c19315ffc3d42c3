"""The search for a posterior mode, and how it tells a mode from a funnel's neck."""

import numpy as np
import pymc as pm
import pytest
from probes import probe_and_start

import pymc_sgmcmc.tuning.mode as mode_module
from pymc_sgmcmc import SGLD
from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.panel import correlated_regression
from pymc_sgmcmc.real_posteriors import _polynomial_data, radon_like
from pymc_sgmcmc.tuning import TuningConfig, find_mode
from pymc_sgmcmc.tuning.measure import measure
from pymc_sgmcmc.tuning.mode import _quadratic_along_softest, hessian_sds


@pytest.mark.parametrize("seed", [0, 2])
def test_the_search_reaches_the_mode_of_a_non_centred_hierarchical_model(seed):
    """Non-centred radon-like (N = 5,000, 50 unbalanced groups) has a mode, but the Hessian on
    the way there is indefinite (``tau * z``). Saddle-free Newton steps get there well within
    the step cap; gradient steps scaled by the Hessian's diagonal ran out of steps 0.3 and 618
    squared sds away from it on these seeds.
    """
    probe, start = probe_and_start(radon_like(n_rows=5000, n_groups=50, centred=False).model)
    *_, distance = find_mode(probe, start, 100, np.random.default_rng(seed))
    assert distance < 10 * TuningConfig().newton_tolerance


def test_the_quadratic_check_refuses_a_softest_sd_a_tenth_or_ten_times_too_large():
    """At a Gaussian mode the log density falls by 1/2 one sd along each axis. A Hessian whose
    softest curvature is 100 times too large (sd a tenth, fall 1/200) or 100 times too small
    (sd ten times, fall 50) is not the quadratic picture of that mode.
    """
    known = correlated_regression(n_rows=2000, correlation=0.5)
    probe = Probe(build_minibatch_log_density(known.model, known.model.value_vars))
    mode, log_density, _, hessian, _ = find_mode(probe, np.zeros(2), 100, np.random.default_rng(0))
    config = TuningConfig()
    assert _quadratic_along_softest(probe, mode, log_density, hessian, config)
    values, vectors = np.linalg.eigh(hessian)
    for factor in (100.0, 0.01):
        # eigh sorts ascending: the last eigenvalue of the Hessian is the softest curvature.
        changed = values.copy()
        changed[-1] *= factor
        wrong = (vectors * changed) @ vectors.T
        assert not _quadratic_along_softest(probe, mode, log_density, wrong, config)


def test_the_quadratic_check_accepts_an_end_a_fraction_of_an_sd_from_the_mode():
    """A search that ends 0.7 local sds from the mode along the softest direction (a squared
    distance of 0.49, within ``mode_distance``) sees the log density fall by 1/2 + 0.7 one sd
    further out and by 1/2 - 0.7 (a rise) one sd back; their mean is the quadratic's 1/2.
    """
    known = correlated_regression(n_rows=2000, correlation=0.5)
    probe = Probe(build_minibatch_log_density(known.model, known.model.value_vars))
    mode, _, _, hessian, _ = find_mode(probe, np.zeros(2), 100, np.random.default_rng(0))
    values, vectors = np.linalg.eigh(-hessian)
    softest = vectors[:, np.argmin(values)] / np.sqrt(values.min())
    off = mode + 0.7 * softest
    log_density = probe.full(off)[0]
    assert probe.full(off - softest)[0] > log_density
    assert _quadratic_along_softest(probe, off, log_density, hessian, TuningConfig())


def test_newton_steps_with_the_checked_hessian_finish_a_search_that_stopped_short(monkeypatch):
    """The search's Hessians a million times too stiff along the softest direction (as finite
    differences can make them on an ill-conditioned posterior): its Newton decrement looks
    small while the search is still over a thousand squared sds from the mode. Newton steps
    with the Hessian checked at its end reach the mode.
    """
    known = correlated_regression(n_rows=2000, correlation=0.5)
    probe = Probe(build_minibatch_log_density(known.model, known.model.value_vars))
    estimate = mode_module.estimate_hessian

    def too_stiff(*args, **kwargs):
        values, vectors = np.linalg.eigh(estimate(*args, **kwargs))
        values[-1] *= 1e6
        return (vectors * values) @ vectors.T

    monkeypatch.setattr(mode_module, "estimate_hessian", too_stiff)
    config = TuningConfig(adam_steps=0)
    mode, *_, distance = find_mode(probe, np.zeros(2), 100, np.random.default_rng(0), config)
    assert distance < config.newton_tolerance
    np.testing.assert_allclose(mode, known.means["beta"], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_search_into_a_funnels_neck_never_ends_at_a_mode(seed):
    """Centred radon-like with weak data (N = 300, 60 groups): the joint density rises without
    bound as ``tau`` goes to 0. The Newton decrement at the search's end is rounding (1.3 to 1.5
    on these seeds, next to the threshold of 1); one local sd along the softest axis the log
    density leaves the quadratic picture, so the end is never taken for a mode.
    """
    probe, start = probe_and_start(radon_like(n_rows=300, n_groups=60, centred=True).model)
    *_, distance = find_mode(probe, start, 50, np.random.default_rng(seed))
    assert distance == np.inf


def _poisson_with_a_raw_covariate():
    """Poisson regression on a covariate between 100 and 300, not centred: the coefficient's
    posterior sd is about 1e-4, and a step of Adam's base rate (0.05) on it moves the log link's
    linear predictor by 5 to 15.
    """
    rng = np.random.default_rng(0)
    x = rng.uniform(100, 300, 500)
    y = rng.poisson(np.exp(1.0 + 0.005 * x))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0, 10)
        slope = pm.Normal("slope", 0, 1)
        pm.Poisson("y", mu=pm.math.exp(intercept + slope * x), observed=y)
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_starts_newton_where_adam_did_not_climb(seed):
    """From the initial point (0, 0) Adam overshoots the slope into the tail where the rate
    rounds to 0 (slope about -0.2); there the curvature vanishes and no Newton step climbs back.
    The search then starts its Newton steps from Adam's start, and ends at the mode that Newton
    steps from the start alone reach (within 0.05 sd: each stops within about 0.01 sd of it).
    """
    model = _poisson_with_a_raw_covariate()
    probe, start = probe_and_start(model)
    end = mode_module._adam(
        probe, start, IndexStream(probe.n_rows, 50), np.random.default_rng(seed), 1500, 0.05
    )
    assert probe.full(end)[0] < probe.full(start)[0]
    mode, _, _, hessian, distance = find_mode(probe, start, 50, np.random.default_rng(seed))
    assert distance < 10 * TuningConfig().newton_tolerance
    config = TuningConfig()

    def refresh(point):
        return mode_module.estimate_hessian(probe, point, np.random.default_rng(0), config)

    newton, *_ = mode_module._newton(probe.full, start, refresh(start), 50, 1e-10, refresh)
    sds = np.sqrt(np.diag(np.linalg.inv(-hessian)))
    assert np.all(np.abs(mode - newton) < 0.05 * sds)


def test_a_chain_whose_dispersed_start_fails_measures_from_its_initial_point():
    """A dispersed start one unit off in the slope puts the linear predictor near 300, where the
    minibatch gradients' covariance overflows; the chain measures from its initial point instead,
    on a copy of its generator, and finds the mode.
    """
    model = _poisson_with_a_raw_covariate()
    with model:
        step = SGLD(batch_size=50)
    probe, start = probe_and_start(model)
    adapter = step.adapter
    with pytest.raises(RuntimeError, match="not finite"):
        measure(probe, 50, np.random.default_rng(0), start + np.array([0.0, 1.0]))
    measured = adapter.measure_from(start + np.array([0.0, 1.0]), start, np.random.default_rng(0))
    direct = measure(probe, 50, np.random.default_rng(0), start)
    assert not measured.at_start
    np.testing.assert_allclose(measured.mode, direct.mode, rtol=1e-4)


def _regression_hessian(design, seed=0):
    """A regression of known noise sd 1 on ``design``: its probe, mode and exact Hessian."""
    rng = np.random.default_rng(seed)
    y = design @ rng.normal(0.0, 0.5, size=design.shape[1]) + rng.normal(size=len(design))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=design.shape[1])
        pm.Normal("y", design @ beta, 1.0, observed=y)
    probe, _ = probe_and_start(model)
    precision = design.T @ design + np.eye(design.shape[1]) / 100.0
    mode = np.linalg.solve(precision, design.T @ y)
    return probe, mode, -precision


def _whitened_error(exact, hessian) -> float:
    """The largest relative error of ``hessian`` along any direction, whitened by ``exact``."""
    factor = np.linalg.cholesky(-exact)
    whitened = np.linalg.solve(factor, np.linalg.solve(factor, hessian - exact).T)
    return float(np.abs(np.linalg.eigvalsh(whitened)).max())


@pytest.mark.parametrize("checked", [True, False])
def test_a_subsample_hessian_of_a_collinear_design_grows_until_it_is_accurate(checked):
    # The polynomial regression's 26 nearly collinear columns: a Hessian on
    # 4,096 of 40,000 rows is a few percent off in each entry, and a factor
    # of several along the softest directions. Unchecked, that is the
    # negative control.
    design, _, _ = _polynomial_data(40_000, 0)
    probe, mode, exact = _regression_hessian(design)
    config = TuningConfig(hessian_full_work=0, hessian_error=0.25 if checked else np.inf)
    hessian, _ = mode_module.checked_hessian(
        probe, mode, np.random.default_rng(1), config, scale=hessian_sds(exact)
    )
    error = _whitened_error(exact, hessian)
    if checked:
        assert error < 0.25
    else:
        assert error > 1.0


def test_an_accurate_subsample_hessian_keeps_its_rows(monkeypatch):
    # Independent covariates: 4,096 rows put the Hessian within about
    # 2 sqrt(D / rows) = 0.07 of the full data's along every direction.
    design = np.random.default_rng(2).normal(size=(40_000, 5))
    probe, mode, exact = _regression_hessian(design)
    rows_used = []
    hessians = probe.hessians

    def counted(position, indices, steps):
        rows_used.append(len(indices))
        return hessians(position, indices, steps)

    monkeypatch.setattr(probe, "hessians", counted)
    config = TuningConfig(hessian_full_work=0)
    hessian, _ = mode_module.checked_hessian(
        probe, mode, np.random.default_rng(1), config, scale=hessian_sds(exact)
    )
    assert rows_used == [2048, 2048]
    assert _whitened_error(exact, hessian) < 0.25
