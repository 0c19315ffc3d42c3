"""pm.sample end to end: chains, cores, seeds, tuning, output groups and ArviZ."""

import logging

import arviz as az
import matplotlib
import numpy as np
import pymc as pm
import pytest

import pymc_sgmcmc
from pymc_sgmcmc import SGHMC, SGLD, PolynomialDecay
from pymc_sgmcmc.registry import SAMPLERS

matplotlib.use("Agg")
pytestmark = pytest.mark.integration

STATS = {"step_size", "gradient_norm", "log_density", "diverging"}


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2))
    y = x @ np.array([1.0, -1.0]) + rng.normal(size=500)
    with pm.Model(coords={"obs": np.arange(500), "feature": ["a", "b"]}) as model:
        x_data = pm.Data("x", x, dims=("obs", "feature"))
        beta = pm.Normal("beta", 0, 1, dims="feature")
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x_data @ beta, sigma, observed=y, dims="obs")
    return model


def run(model, step_class=SGLD, cores=1, seed=7, **kwargs):
    options = {"draws": 30, "tune": 20, "chains": 2, "progressbar": False}
    options.update(kwargs)
    with model:
        step = step_class(batch_size=50, steps_per_draw=5)
        return pm.sample(step=step, cores=cores, random_seed=seed, **options)


def group_names(result):
    if hasattr(result, "groups") and callable(result.groups):
        return {name.strip("/") for name in result.groups()}
    return set(result.children)


def test_every_registered_sampler_is_a_public_step_method():
    for name, sampler in SAMPLERS.items():
        assert getattr(pymc_sgmcmc, name) is sampler and name in pymc_sgmcmc.__all__
        assert issubclass(sampler, pm.step_methods.arraystep.ArrayStepShared)
        assert sampler.__doc__


@pytest.mark.parametrize("step_class", list(SAMPLERS.values()), ids=list(SAMPLERS))
def test_same_seed_gives_identical_draws_whatever_cores(model, step_class):
    sequential = run(model, step_class, cores=1)
    parallel = run(model, step_class, cores=2)
    np.testing.assert_array_equal(
        np.asarray(sequential.posterior["beta"]), np.asarray(parallel.posterior["beta"])
    )
    chains = np.asarray(sequential.posterior["beta"])
    assert not np.array_equal(chains[0], chains[1]), "chains must get different streams"
    other_seed = run(model, step_class, cores=1, seed=8)
    assert not np.array_equal(np.asarray(other_seed.posterior["beta"]), chains)


def test_output_groups_and_sampler_stats(model):
    result = run(model, SGHMC, discard_tuned_samples=False)
    expected = "InferenceData" if int(pm.__version__.split(".")[0]) < 6 else "DataTree"
    assert type(result).__name__ == expected
    assert {"posterior", "sample_stats", "observed_data", "warmup_posterior"} <= group_names(result)
    stats = result.sample_stats
    assert STATS <= set(stats.data_vars)
    assert np.asarray(result.posterior["beta"]).shape == (2, 30, 2)
    assert np.all(np.asarray(stats["step_size"]) > 0)
    assert np.all(np.isfinite(np.asarray(stats["gradient_norm"])))
    assert not np.asarray(stats["diverging"]).any()


def test_arviz_functions_run(model):
    result = run(model, SGLD, draws=50)
    summary = az.summary(result)
    assert len(summary) == 3
    assert np.all(np.isfinite(np.asarray(az.ess(result)["beta"])))
    assert np.all(np.isfinite(np.asarray(az.rhat(result)["beta"])))
    az.plot_trace(result)
    matplotlib.pyplot.close("all")


def test_schedule_decays_across_the_chain_and_restarts_per_chain(model):
    with model:
        schedule = PolynomialDecay(a=1e-4, b=1.0, gamma=0.55)
        step = SGLD(batch_size=50, step_size=schedule, steps_per_draw=1)
        result = pm.sample(
            step=step, draws=10, tune=10, chains=2, cores=1, random_seed=1, progressbar=False
        )
    step_sizes = np.asarray(result.sample_stats["step_size"])
    assert np.all(np.diff(step_sizes, axis=1) < 0)
    np.testing.assert_array_equal(step_sizes[0], step_sizes[1])
    np.testing.assert_allclose(step_sizes[0, 0], 1e-4 / 11**0.55)


def test_a_schedule_value_that_is_not_a_positive_step_size_is_refused(model):
    def schedule(steps):
        return np.where(np.asarray(steps) < 3, 1e-4, -1e-4)

    with model:
        step = SGLD(batch_size=50, step_size=schedule, steps_per_draw=1)
        with pytest.raises(ValueError, match="a schedule must return step sizes > 0"):
            pm.sample(
                step=step, draws=10, tune=0, chains=1, cores=1, random_seed=1, progressbar=False
            )


def test_divergence_stops_the_chain_and_warns(model, caplog):
    with model, caplog.at_level(logging.WARNING, logger="pymc"):
        step = SGLD(batch_size=50, step_size=10.0)
        result = pm.sample(
            step=step, draws=20, tune=0, chains=1, cores=1, random_seed=1, progressbar=False
        )
    diverging = np.asarray(result.sample_stats["diverging"])
    assert diverging.any()
    assert np.all(np.isfinite(np.asarray(result.posterior["beta"])))
    assert "Reduce step_size" in caplog.text


@pytest.mark.parametrize("step_class", list(SAMPLERS.values()), ids=list(SAMPLERS))
def test_sampling_state_snapshot_restores_the_chain(model, step_class):
    """The per-chain state is PyMC step state: restoring a snapshot replays the same draws."""
    with model:
        step = step_class(batch_size=50, steps_per_draw=3)
    step.set_rng(np.random.default_rng(4))
    point = model.initial_point()
    for _ in range(3):
        point, _ = step.step(point)
    snapshot = step.sampling_state
    first = [step.step(point)[0] for _ in range(2)]
    step.sampling_state = snapshot
    again = [step.step(point)[0] for _ in range(2)]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a["beta"], b["beta"])


def test_warnings_reach_pymc_as_sampler_warnings(model, caplog):
    with model, caplog.at_level(logging.WARNING, logger="pymc"):
        step = SGLD(batch_size=50, step_size=0.5)
        result = pm.sample(
            step=step,
            draws=5,
            tune=0,
            chains=1,
            cores=1,
            random_seed=1,
            progressbar=False,
            keep_warning_stat=True,
            compute_convergence_checks=False,
        )
    warnings = [w for w in np.asarray(result.sample_stats["warning"]).ravel() if w is not None]
    assert warnings and all(isinstance(w, pm.stats.convergence.SamplerWarning) for w in warnings)
    assert "leave step_size unset" in caplog.text


def test_tuning_and_compiling_are_announced_before_the_first_draw(model, caplog):
    """PyMC's progress bar stands still while a chain tunes and compiles: say why."""
    with caplog.at_level(logging.INFO, logger="pymc"):
        run(model, chains=1)
    messages = [record.getMessage() for record in caplog.records]
    tuning = next(i for i, m in enumerate(messages) if "SGLD: tuning a chain" in m)
    compiling = [m for m in messages[tuning:] if m.startswith("Compiling the Langevin kernel")]
    assert len(compiling) == 1 and "PyTensor's cache" in compiling[0]
