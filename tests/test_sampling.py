"""pm.sample end to end: chains, cores, seeds, tuning, output groups and ArviZ."""

import dataclasses
import logging
import os
import subprocess
import sys
import textwrap

import arviz as az
import matplotlib
import numpy as np
import pymc as pm
import pytensor
import pytest
from pymc.blocking import DictToArrayBijection

import pymc_sgmcmc
from pymc_sgmcmc import SGHMC, SGLD, SGRLD, PolynomialDecay
from pymc_sgmcmc.metric import DiagonalMetric
from pymc_sgmcmc.real_posteriors import EIGHT_SCHOOLS_EFFECTS, EIGHT_SCHOOLS_ERRORS
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.tuning import TuningConfig

matplotlib.use("Agg")
pytestmark = pytest.mark.integration

STATS = {"step_size", "gradient_norm", "log_density", "diverging"}


def build_model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2))
    y = x @ np.array([1.0, -1.0]) + rng.normal(size=500)
    with pm.Model(coords={"obs": np.arange(500), "feature": ["a", "b"]}) as model:
        x_data = pm.Data("x", x, dims=("obs", "feature"))
        beta = pm.Normal("beta", 0, 1, dims="feature")
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x_data @ beta, sigma, observed=y, dims="obs")
    return model


@pytest.fixture(scope="module")
def model():
    return build_model()


def run(model, step_class=SGLD, cores=1, seed=7, step_options=None, **kwargs):
    options = {"draws": 30, "tune": 20, "chains": 2, "progressbar": False}
    options.update(kwargs)
    with model:
        step = step_class(batch_size=50, steps_per_draw=5, **(step_options or {}))
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


def test_same_draws_when_pymc_starts_chain_processes_without_forking(model):
    """PyMC pickles the step method for its ``forkserver`` processes (its default on macOS).

    The fused kernel from the first draw, so that the pickled step holds a
    compiled kernel (from the first run, whose compiled model it reuses)
    besides the tuning functions.
    """
    fused = {"tuning": TuningConfig(interpreted_steps=0)}
    sequential = run(model, SGHMC, cores=1, step_options=fused)
    parallel = run(model, SGHMC, cores=2, mp_ctx="forkserver", step_options=fused)
    np.testing.assert_array_equal(
        np.asarray(sequential.posterior["beta"]), np.asarray(parallel.posterior["beta"])
    )


@pytest.mark.jax
def test_jax_kernels_give_the_draws_of_the_default_backend(model):
    """The same seeded chains, with every draw run by the fused kernel, on JAX and by default."""
    fused = {"tuning": TuningConfig(interpreted_steps=0)}
    default = run(model, SGHMC, step_options=fused)
    jax = run(model, SGHMC, step_options={**fused, "compile_kwargs": {"mode": "JAX"}})
    np.testing.assert_allclose(
        np.asarray(jax.posterior["beta"]), np.asarray(default.posterior["beta"]), rtol=1e-9
    )


@pytest.mark.jax
def test_jax_kernels_in_a_compound_step_read_the_other_blocks_new_values(model):
    """The other block's value, set by PyMC at every draw, reaches JAX's device copy."""

    def compound(compile_kwargs):
        with model:
            step = [
                SGLD(
                    vars=[model["beta"]],
                    batch_size=50,
                    steps_per_draw=5,
                    tuning=TuningConfig(interpreted_steps=0),
                    compile_kwargs=compile_kwargs,
                ),
                pm.Metropolis(vars=[model["sigma"]]),
            ]
            options = {"draws": 30, "tune": 20, "chains": 2, "cores": 1, "random_seed": 4}
            result = pm.sample(step=step, progressbar=False, **options)
        return np.asarray(result.posterior["beta"]), np.asarray(result.posterior["sigma"])

    default, jax = compound(None), compound({"mode": "JAX"})
    np.testing.assert_allclose(jax[0], default[0], rtol=1e-9)
    np.testing.assert_array_equal(jax[1], default[1])
    assert np.unique(jax[1]).size > 2, "the other block must move"


FIRST_RUN = textwrap.dedent(
    """
    import numpy as np, pymc as pm
    from pymc_sgmcmc import SGHMC
    from pymc_sgmcmc.real_posteriors import radon_like
    from pymc_sgmcmc.tuning import TuningConfig
    panel = radon_like(n_rows=300, n_groups=20, centred=False)
    with panel.model:
        step = SGHMC(batch_size=50, tuning=TuningConfig(interpreted_steps=0))
        result = pm.sample(step=step, tune=50, draws=20, chains=1, random_seed=1,
                           progressbar=False, compute_convergence_checks=False)
    print(repr(step.chain.measurements.mode.tolist()))
    print(repr(np.asarray(result.posterior["z"]).tolist()))
    """
)


def test_a_first_run_and_a_run_from_the_caches_give_the_same_draws(tmp_path):
    """The code compiled in a first run and the code read back from the caches agree.

    Each run is a new process with PyTensor's (and Numba's) caches in ``tmp_path``:
    the first compiles everything, the second reads it back.
    """
    environment = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path}"}
    draws = [
        subprocess.run(
            [sys.executable, "-c", FIRST_RUN],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert draws[0] and draws[0] == draws[1]


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
    # The step size was given, so nothing else is advised.
    assert "reparameterise" not in caplog.text


def test_a_tuned_chain_that_diverges_in_a_funnel_advises_the_non_centred_form(caplog):
    """The centred eight schools, where chains run into the neck of ``tau`` near 0. Whether one
    of them diverges within a short run depends on the random stream, so the first draw after
    tuning is made to end as a diverging one does: after fewer steps than it was to take.
    """
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, EIGHT_SCHOOLS_ERRORS, observed=EIGHT_SCHOOLS_EFFECTS)
    with model:
        step = SGLD()
    run_kernel = step.runner.run

    def first_sampled_draw_diverges(chain, position, n_steps, step_values, rng, tune):
        result = run_kernel(chain, position, n_steps, step_values, rng, tune)
        if tune or step.chain.diverged:
            return result
        return dataclasses.replace(result, steps_taken=n_steps - 1)

    step.runner.run = first_sampled_draw_diverges
    with model, caplog.at_level(logging.WARNING, logger="pymc"):
        result = pm.sample(
            step=step, draws=20, tune=300, chains=1, cores=1, random_seed=1, progressbar=False
        )
    diverging = np.asarray(result.sample_stats["diverging"])
    assert diverging[0, 0] and diverging.all()
    assert "write such a model non-centred" in caplog.text


@pytest.mark.parametrize(
    ("step_class", "options", "tune"),
    [
        (SGHMC, {}, 20),
        (pymc_sgmcmc.SGNHT, {}, 20),
        # Just above the stable step size: the chain diverges after a few draws.
        (SGLD, {"step_size": 0.003, "preconditioner": 1.0}, 0),
        # Every draw's own step sizes, from a schedule and from a cycle whose
        # first draw (longer, with the exploration stage) starts a call of its own.
        (SGLD, {"step_size": PolynomialDecay(a=1e-3, b=10.0), "preconditioner": 1.0}, 0),
        (pymc_sgmcmc.CyclicalSGLD, {"cycle_draws": 8}, 20),
    ],
    ids=["SGHMC", "SGNHT", "SGLD-diverging", "SGLD-schedule", "CyclicalSGLD"],
)
def test_draws_run_ahead_are_those_of_a_kernel_call_per_draw(
    model, step_class, options, tune, monkeypatch
):
    """After tuning one kernel call runs several draws: PyMC gets the same draws and statistics."""
    from pymc_sgmcmc.kernel import Kernel

    calls = []
    draws = Kernel.draws

    def counted(kernel, state, indices, *arguments):
        calls.append(len(indices))
        return draws(kernel, state, indices, *arguments)

    monkeypatch.setattr(Kernel, "draws", counted)

    def sample(steps_per_call):
        tuning = TuningConfig(interpreted_steps=0, steps_per_call=steps_per_call)
        return run(
            model,
            step_class,
            chains=1,
            tune=tune,
            draws=40,
            step_options={**options, "tuning": tuning},
            compute_convergence_checks=False,
        )

    one_each = sample(0)
    assert set(calls) == {1}
    calls.clear()
    ahead = sample(15)
    assert max(calls) == 3, "three draws of five steps per call"
    np.testing.assert_array_equal(
        np.asarray(one_each.posterior["beta"]), np.asarray(ahead.posterior["beta"])
    )
    for name, values in one_each.sample_stats.data_vars.items():
        if values.dtype.kind in "biuf":
            np.testing.assert_array_equal(
                np.asarray(values), np.asarray(ahead.sample_stats[name]), err_msg=name
            )
    diverging = np.asarray(ahead.sample_stats["diverging"])
    if options.get("step_size") == 0.003:
        # It diverges in a call that ran draws ahead, after a draw that did not.
        assert diverging.any() and not diverging[0, 0]
    else:
        assert not diverging.any()


@pytest.mark.parametrize("interpreted_steps", [0, 10**9], ids=["fused", "interpreted"])
def test_a_draw_longer_than_a_call_runs_in_calls_and_gives_the_draws_of_one(
    model, interpreted_steps, monkeypatch
):
    """A minibatch draw whose rows would fill more than a call's memory runs in several calls."""
    from pymc_sgmcmc import runner as runner_module
    from pymc_sgmcmc.runner import KernelRunner

    calls = []
    choose = KernelRunner.kernel

    class Counted:
        def __init__(self, kernel):
            self.kernel = kernel

        def __call__(self, state, indices, *arguments):
            calls.append(len(indices))
            return self.kernel(state, indices, *arguments)

        def __getattr__(self, name):
            return getattr(self.kernel, name)

    def counted(runner, chain):
        return Counted(choose(runner, chain))

    monkeypatch.setattr(KernelRunner, "kernel", counted)

    def sample():
        tuning = TuningConfig(interpreted_steps=interpreted_steps, steps_per_call=0)
        return run(
            model,
            chains=1,
            tune=5,
            draws=10,
            step_options={"tuning": tuning},
            compute_convergence_checks=False,
        )

    whole = sample()
    assert calls and set(calls) <= {5, 500}, "a draw of 5 steps of 50 rows (or all) per call"
    calls.clear()
    # Two steps of 50 rows per call: a draw of 5 steps takes three.
    monkeypatch.setattr(runner_module, "CALL_ROWS", 100)
    split = sample()
    assert calls.count(2) >= 2 * 15 and set(calls) <= {1, 2}
    np.testing.assert_array_equal(
        np.asarray(whole.posterior["beta"]), np.asarray(split.posterior["beta"])
    )
    np.testing.assert_array_equal(
        np.asarray(whole.sample_stats["log_density"]), np.asarray(split.sample_stats["log_density"])
    )


def test_a_draw_from_a_point_another_step_method_changed_starts_there(model):
    """A point whose arrays are those the last draw returned reuses that draw's raveled
    position; one whose arrays another step method replaced is raveled again. The new
    point holds the draw's values as PyMC's map back would (same dtypes, other variables
    kept)."""
    with model:
        step = SGHMC(batch_size=50, steps_per_draw=5)
    step.set_rng(np.random.default_rng(0))
    starts, astep = [], step.astep

    def recorded(q0):
        starts.append(q0)
        return astep(q0)

    step.astep = recorded
    point = model.initial_point()
    first, _ = step.step(point)
    returned = step.chain.last_point[1]
    second, _ = step.step(first)
    assert starts[1] is returned
    moved = {**second, "beta": second["beta"] + 3.0}
    step.step(moved)
    for given, start in zip([point, first, moved], starts, strict=True):
        expected = DictToArrayBijection.map({name: given[name] for name in step.var_names})
        np.testing.assert_array_equal(start.data, expected.data)
    mapped_back = DictToArrayBijection.rmap(step.chain.last_point[1], start_point=moved)
    assert step.chain.last_point[0].keys() == mapped_back.keys()
    for name, value in mapped_back.items():
        assert step.chain.last_point[0][name].dtype == value.dtype
        np.testing.assert_array_equal(step.chain.last_point[0][name], value)


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


def slow_step_after_two_draws(model):
    """Return an SGLD step whose draws barely move, and the point after two of its draws."""
    with model:
        step = SGLD(batch_size=50, steps_per_draw=1, step_size=1e-6)
    step.set_rng(np.random.default_rng(4))
    point = model.initial_point()
    for _ in range(2):
        point, _ = step.step(point)
    return step, point


def test_a_draw_starts_from_the_position_pymc_hands_over(model):
    """A position moved between draws (by another step method) is where the next draw starts."""
    step, point = slow_step_after_two_draws(model)
    moved = {**point, "beta": point["beta"] + 1.0}
    new, _ = step.step(moved)
    np.testing.assert_allclose(new["beta"], moved["beta"], atol=0.01)


def test_a_draw_after_the_metric_changed_starts_where_the_last_draw_ended(model):
    """New coordinates (a tune window's metric) leave the chain's position where it was."""
    step, point = slow_step_after_two_draws(model)
    size = step.chain.state["position"].size
    metric = DiagonalMetric(np.full(size, 0.3), np.full(size, 2.0))
    step.chain.settings = dataclasses.replace(step.chain.settings, metric=metric)
    step.runner.prepare_inputs(step.chain)
    new, _ = step.step(point)
    np.testing.assert_allclose(new["beta"], point["beta"], atol=0.01)


def test_a_draw_after_a_tune_window_changed_the_metric_starts_where_the_last_draw_ended(model):
    """A tune window that closes at a draw and gives new coordinates (a metric measured where
    the chain went) leaves the next draw starting where that draw ended."""
    step, point = slow_step_after_two_draws(model)
    step.tune = True
    size = step.chain.state["position"].size
    metric = DiagonalMetric(np.full(size, 0.3), np.full(size, 2.0))
    record = step.adapter.record_tune_draw

    def window_closes(chain, position, rng, tune):
        record(chain, position, rng, tune)
        chain.settings = dataclasses.replace(chain.settings, metric=metric)
        return []

    step.adapter.record_tune_draw = window_closes
    ended, _ = step.step(point)
    step.adapter.record_tune_draw = record
    new, _ = step.step(ended)
    assert step.chain.settings.metric is metric
    np.testing.assert_allclose(new["beta"], ended["beta"], atol=0.01)


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


def test_tuning_and_compiling_are_announced_before_the_first_draw(caplog):
    """PyMC's progress bar stands still while a chain tunes and compiles: say why."""
    with caplog.at_level(logging.INFO, logger="pymc"):
        run(build_model(), chains=1)
        # The fused kernel is compiled when a chain has taken enough inner steps.
        run(build_model(), chains=1, step_options={"tuning": TuningConfig(interpreted_steps=0)})
    messages = [record.getMessage() for record in caplog.records]
    first, second = (i for i, m in enumerate(messages) if "SGLD: tuning a chain" in m)
    assert any(m.startswith("Compiling the tuning functions") for m in messages[:first])
    kernel = [i for i, m in enumerate(messages) if m.startswith("Compiling the Langevin kernel")]
    assert len(kernel) == 1 and kernel[0] > second and "PyTensor's cache" in messages[kernel[0]]


def test_chains_hand_over_from_the_interpreted_loop_to_the_fused_kernel(caplog):
    """The hand-over point is counted in inner steps, so the draws do not depend on timing."""
    handing_over = {"tuning": TuningConfig(interpreted_steps=200)}
    with caplog.at_level(logging.INFO, logger="pymc"):
        first = run(build_model(), chains=2, cores=1, step_options=handing_over)
    assert "Compiling the Langevin kernel" in caplog.text
    again = run(build_model(), chains=2, cores=2, step_options=handing_over)
    np.testing.assert_array_equal(
        np.asarray(first.posterior["beta"]), np.asarray(again.posterior["beta"])
    )


def test_by_default_a_chain_hands_over_once_the_loop_has_cost_the_compilation(caplog):
    """The default hand-over point is a number of steps per operation of the gradient's graph."""
    model = build_model()
    with model:
        operations = SGLD(batch_size=50).compiled.gradient_operations("control_variate")
    events = []

    class Compilations(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling the Langevin kernel"):
                events.append("compiled")

    # 102 inner steps: the chain hands over before its 22nd draw of 5 steps
    # (105 steps taken), and compiles nothing if the rule gives 3 times as many.
    tuning = TuningConfig(steps_per_operation=102 / operations)
    handler = Compilations(level=logging.INFO)
    logger = logging.getLogger("pymc")
    logger.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="pymc"):
            result = run(
                model,
                chains=1,
                step_options={"tuning": tuning},
                callback=lambda trace, draw: events.append("draw"),
            )
    finally:
        logger.removeHandler(handler)
    # The chain's gradient estimate is the control variate's (other estimates'
    # graphs have other sizes).
    assert np.all(result.sample_stats["control_variate"])
    assert events.count("compiled") == 1 and events.index("compiled") == 21


def test_sgrld_stays_in_the_interpreted_loop_past_the_hand_over(caplog):
    """Its fused kernel takes a step no faster than the loop, so no chain compiles it."""
    past_the_hand_over = {"tuning": TuningConfig(interpreted_steps=200)}
    with caplog.at_level(logging.INFO, logger="pymc"):
        # 50 draws of 5 inner steps each: 250 steps, past the 200 of the hand-over.
        run(build_model(), SGRLD, chains=1, step_options=past_the_hand_over)
    assert "Compiling the RiemannianLangevin position terms" in caplog.text
    assert "Compiling the RiemannianLangevin kernel" not in caplog.text


def test_a_new_step_on_an_unchanged_model_reuses_what_was_compiled(caplog):
    """Sampling the model again compiles nothing and gives the same draws; a change compiles."""
    model = build_model()
    with model:
        first, second = SGHMC(batch_size=50), SGHMC(batch_size=50)
        mode = pytensor.compile.mode.get_mode("NUMBA")
        other_options = SGHMC(batch_size=50, compile_kwargs={"mode": mode})
    assert second.compiled is first.compiled
    assert other_options.compiled is not first.compiled
    options = {"draws": 20, "tune": 50, "chains": 1, "progressbar": False, "random_seed": 3}
    with model:
        draws = [pm.sample(step=step, **options).posterior["beta"] for step in (first, second)]
        with caplog.at_level(logging.INFO, logger="pymc"):
            third = SGHMC(batch_size=50)
            again = np.asarray(pm.sample(step=third, **options).posterior["beta"])
    np.testing.assert_array_equal(np.asarray(draws[0]), np.asarray(draws[1]))
    np.testing.assert_array_equal(np.asarray(draws[0]), again)
    assert "Compiling" not in caplog.text

    with model:
        pm.Potential("pull", -5000.0 * pm.math.sum((model["beta"] - 3.0) ** 2))
        pulled = SGHMC(batch_size=50)
        shifted = np.asarray(pm.sample(step=pulled, **options).posterior["beta"])
    assert pulled.compiled is not first.compiled
    assert np.all(np.abs(shifted.mean(axis=(0, 1)) - 3.0) < 0.5)

    with pm.Model():
        data = pm.Data("data", np.zeros(300))
        pm.Normal("observed", pm.Normal("mu"), 1.0, observed=data)
        longer = SGLD(batch_size=50)
        pm.set_data({"data": np.zeros(200)})
        shorter = SGLD(batch_size=50)
    assert shorter.compiled is not longer.compiled and shorter.density.n_rows == 200


@pytest.mark.parametrize("interpreted_steps", [0, 30_000], ids=["fused", "interpreted"])
def test_compound_step_gives_the_same_draws_whatever_cores(model, interpreted_steps):
    """The other block's value reaches the compiled code in worker processes too."""

    def compound(cores):
        with model:
            step = [
                SGLD(
                    vars=[model["beta"]],
                    batch_size=50,
                    steps_per_draw=5,
                    tuning=TuningConfig(interpreted_steps=interpreted_steps),
                ),
                pm.Metropolis(vars=[model["sigma"]]),
            ]
            options = {"draws": 30, "tune": 20, "chains": 2, "random_seed": 4}
            result = pm.sample(step=step, cores=cores, progressbar=False, **options)
        return np.asarray(result.posterior["beta"]), np.asarray(result.posterior["sigma"])

    sequential, parallel = compound(1), compound(2)
    for one, other in zip(sequential, parallel, strict=True):
        np.testing.assert_array_equal(one, other)
    assert np.unique(sequential[1]).size > 2, "the other block must move"
