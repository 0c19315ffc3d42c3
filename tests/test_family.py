"""What the samplers beyond SGLD and SGHMC add: their extra terms, state and statistics.

- SGRLD's metric and correction, built by autodiff, against the closed form
  on Neal's funnel (Patterson & Teh's diagonal metric ``e^{-v}`` for the
  group effects); compiled on their own for the interpreted loop, the same
  terms and steps.
- pSGLD's correction term against a finite difference of its preconditioner.
- SGNHT's thermostat absorbs isotropic gradient noise: on a Gaussian target
  the position variance stays at the noise-free value, where SGHMC at the
  same friction is inflated by ``eta v / 2A``.
- Cyclical SGLD's schedule and noise switch; its exploration stage runs inside
  a draw, or is recorded and marked by the ``exploring`` statistic.
- Gradient clipping in the kernel, and its statistic.
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from rules import position_terms

from pymc_sgmcmc import SGLD, SGNHT, ConstantStepSize, CyclicalSGLD, CyclicalStepSize
from pymc_sgmcmc.estimators import Probe, minibatch_gradient
from pymc_sgmcmc.kernel import Kernel
from pymc_sgmcmc.loop import InterpretedKernel, PositionTerms
from pymc_sgmcmc.metric import metric_from_covariance
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.samplers.cyclical import (
    MAX_DRAWS_PER_RELAXATION,
    SETTLING_RELAXATIONS,
    CyclicalLangevin,
)
from pymc_sgmcmc.samplers.psgld import RMSpropLangevin
from pymc_sgmcmc.samplers.sgld import Langevin
from pymc_sgmcmc.samplers.sgnht import Thermostat
from pymc_sgmcmc.samplers.sgrld import RiemannianLangevin

GROUPS = 3


@pytest.fixture(scope="module")
def funnel():
    """v ~ N(0, 3), x_j ~ N(0, e^{v/2}), y ~ N(x_g, 1): the prior is Neal's funnel."""
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(GROUPS), 20)
    y = rng.normal(size=group.size)
    with pm.Model() as model:
        v = pm.Normal("v", 0, 3)
        x = pm.Normal("x", 0, pm.math.exp(v / 2), shape=GROUPS)
        pm.Normal("y", x[group], 1, observed=y)
    return build_minibatch_log_density(model, [model.rvs_to_values[v], model.rvs_to_values[x]])


def funnel_curvature(position):
    v, x = position[0], position[1:]
    return np.concatenate([[1 / 9 + np.sum(x**2) * np.exp(-v) / 2], np.full(GROUPS, np.exp(-v))])


def funnel_inverse_metric(position, mode, preconditioner, floor):
    floor = floor / preconditioner
    data = np.maximum(1 / preconditioner - np.hypot(funnel_curvature(mode), floor), 0)
    return 1 / (np.hypot(funnel_curvature(position), floor) + data)


def test_riemannian_metric_and_correction_match_the_funnel_closed_form(funnel):
    dynamics = RiemannianLangevin()
    preconditioner = np.array([0.5, 2.0, 2.0, 2.0])
    mode = np.array([0.3, 0.1, -0.2, 0.0])
    inputs = dynamics.chain_inputs(preconditioner, 1.0, {"mode": mode})
    position = np.array([-1.2, 0.4, -0.3, 0.2])
    terms = position_terms(dynamics, funnel, {"position": position}, inputs)
    expected = funnel_inverse_metric(position, mode, preconditioner, dynamics.floor)
    np.testing.assert_allclose(terms["inverse_metric"], expected, rtol=1e-10)
    # Gamma_i = d/d theta_i of the i-th inverse-metric entry, by central differences.
    shift = 1e-6
    difference = [
        (
            funnel_inverse_metric(position + shift * unit, mode, preconditioner, dynamics.floor)[i]
            - funnel_inverse_metric(position - shift * unit, mode, preconditioner, dynamics.floor)[
                i
            ]
        )
        / (2 * shift)
        for i, unit in enumerate(np.eye(4))
    ]
    np.testing.assert_allclose(terms["correction"], difference, rtol=1e-6, atol=1e-10)
    # The effects' entries e^{v} do not depend on the effects: no correction there.
    assert np.all(np.abs(terms["correction"][1:]) < 1e-12)
    assert abs(terms["correction"][0]) > 1e-3


def test_riemannian_terms_compiled_on_their_own_take_the_kernels_steps(funnel):
    """The interpreted loop's SGRLD terms: the closed form, then the fused kernel's steps.

    On the funnel the metric and its correction move with the position, so a
    loop that held them fixed, or read them at the wrong state, would differ.
    """
    dynamics = RiemannianLangevin()
    mode = np.array([0.3, 0.1, -0.2, 0.0])
    metric = metric_from_covariance("diagonal", mode, np.diag([0.5, 2.0, 2.0, 2.0]), spread=1.0)
    inputs = dynamics.chain_inputs(np.ones(4), 1.0, {"mode": metric.to_coordinates(mode)})
    terms = PositionTerms(funnel, dynamics, type(metric), {"mode": "CVM"})
    position = np.array([-1.2, 0.4, -0.3, 0.2])
    state = {"position": metric.to_coordinates(position)}
    named = {key: np.asarray(value, dtype="float64") for key, value in inputs.items()}
    computed = terms({**state, **named, **metric.inputs(), "step_size": np.asarray(0.01)})
    expected = position_terms(dynamics, funnel, state, inputs, metric)
    for name in dynamics.position_inputs:
        np.testing.assert_allclose(computed[name], expected[name], rtol=1e-10, atol=1e-14)
    assert abs(computed["correction"][0]) > 1e-3

    named = {**inputs, **metric.inputs()}
    fused = Kernel(funnel, minibatch_gradient(funnel), dynamics, {"mode": "CVM"}, type(metric))
    loop = InterpretedKernel(Probe(funnel), "minibatch", dynamics, type(metric), terms)
    rng = np.random.default_rng(4)
    indices = rng.integers(3 * 20, size=(12, 10))
    noise = rng.standard_normal((12, 1, 4))
    step_values = {"step_size": np.full(12, 0.05)}
    expected = fused(state, indices, noise, step_values, fused.prepare(named, 4))
    result = loop(state, indices, noise, step_values, loop.prepare(named, 4))
    assert result.steps_taken == expected.steps_taken == 12
    np.testing.assert_allclose(result.position, expected.position, rtol=1e-10)
    assert np.ptp(result.position - position) > 0.1


def test_preconditioned_correction_is_the_derivative_of_the_preconditioner(funnel):
    dynamics = RMSpropLangevin(correction=True)
    preconditioner = np.array([0.5, 2.0, 1.0, 1.5])
    inputs = dynamics.chain_inputs(preconditioner, 1.0, {})
    square = np.array([0.8, 1.5, 0.3, 2.0])
    indices = np.arange(0, 60, 3)
    gradient = pytensor.graph.replace.graph_replace(
        funnel.gradient, {funnel.indices: pt.as_tensor(indices)}, strict=False
    )
    symbols = {name: pt.as_tensor(np.asarray(value)).type() for name, value in inputs.items()}
    square_symbol = pt.vector("square")
    terms = dynamics.position_terms(
        {"position": funnel.position, "square": square_symbol}, gradient, None, symbols
    )
    function = pytensor.function(
        [funnel.position, square_symbol, *symbols.values()],
        terms["correction"],
        on_unused_input="ignore",
    )
    gradient_at = pytensor.function([funnel.position], gradient)

    def scale(position):
        g = gradient_at(position)
        new_square = inputs["decay"] * square + (1 - inputs["decay"]) * preconditioner * g**2
        return preconditioner / (inputs["regularizer"] + np.sqrt(new_square))

    position = np.array([0.4, 0.5, -0.7, 0.3])
    correction = function(position, square, *inputs.values())
    shift = 1e-6
    difference = [
        (scale(position + shift * unit)[i] - scale(position - shift * unit)[i]) / (2 * shift)
        for i, unit in enumerate(np.eye(4))
    ]
    np.testing.assert_allclose(correction, difference, rtol=1e-5)
    assert np.all(np.abs(correction) > 0)


def long_run_variance(dynamics, inputs, noise=10.0, step_size=0.1, steps=100_000):
    """Position variance of one chain of the declared rule on N(0, I_3) with isotropic noise."""
    rng = np.random.default_rng(2)
    state = dynamics.initial_state(np.zeros(3), inputs, rng)
    gradient_noise = np.sqrt(noise) * rng.normal(size=(steps, 3))
    injected = rng.normal(size=(steps, dynamics.noise_vectors, 3))
    squares = np.zeros(3)
    burn_in = steps // 10
    for step in range(steps):
        gradient = -state["position"] + gradient_noise[step]
        state = dynamics.step(state, gradient, injected[step], {**inputs, "step_size": step_size})
        if step >= burn_in:
            squares += state["position"] ** 2
    return squares.mean() / (steps - burn_in)


def test_thermostat_absorbs_isotropic_gradient_noise():
    """Noise of variance 10 per coordinate: SGNHT stays near variance 1, SGHMC at A is ~25% wide.

    One chain of 90,000 kept steps decorrelates every ~10 steps: the variance
    estimate over 3 coordinates has a standard error of about 0.01.
    """
    thermostat = Thermostat(diffusion=2.0)
    variance = long_run_variance(thermostat, thermostat.chain_inputs(np.ones(3), 1.0, {}))
    assert abs(variance - 1.0) < 0.05
    # The same chain with the thermostat held at A is SGHMC with friction A = 2.
    from pymc_sgmcmc.samplers.sghmc import Underdamped

    sghmc = Underdamped(friction=2.0, mass=1.0)
    inputs = sghmc.chain_inputs(np.ones(3), 1.0, {})
    assert long_run_variance(sghmc, inputs) > 1.15


def test_thermostat_is_recorded_for_every_draw():
    rng = np.random.default_rng(4)
    x = rng.normal(size=500)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta * x, 1, observed=x + rng.normal(size=500))
        result = pm.sample(
            draws=30,
            tune=30,
            step=SGNHT(batch_size=50),
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    thermostat = np.asarray(result.sample_stats["thermostat"])
    assert thermostat.shape == (1, 30)
    assert np.all(np.isfinite(thermostat)) and np.all(thermostat > 0)
    assert np.unique(thermostat).size > 1


def test_cyclical_schedule_and_noise_switch():
    schedule = CyclicalStepSize(maximum=1.0, cycle_length=8, exploration=0.25)
    steps = np.arange(16)
    np.testing.assert_allclose(schedule(steps)[[0, 4, 8]], [1.0, 0.5, 1.0])
    assert schedule(steps)[7] == pytest.approx(0.5 * (np.cos(np.pi * 7 / 8) + 1))
    np.testing.assert_array_equal(schedule.exploring(steps), np.tile([1, 1] + [0] * 6, 2) > 0)
    assert schedule.sampling_maximum == pytest.approx(0.5 * (np.cos(np.pi / 4) + 1))
    dynamics = CyclicalLangevin(cycle_draws=4, exploration=0.25)
    tuned = dynamics.schedule(0.1, steps_per_draw=2)
    assert tuned.cycle_length == 8 and tuned.sampling_maximum == pytest.approx(0.1)
    values = dynamics.step_values(tuned, steps)
    np.testing.assert_array_equal(values["noise_scale"], 1.0 - tuned.exploring(steps))
    # No noise while exploring: a step at temperature 1 with zero gradient stays put.
    inputs = dynamics.chain_inputs(np.ones(2), 1.0, {})
    state = dynamics.initial_state(np.zeros(2), inputs, np.random.default_rng(0))
    step = {**inputs, "step_size": 0.5, "noise_scale": 0.0, "kept": 0.0}
    new = dynamics.step(state, np.zeros(2), np.ones((1, 2)), step)
    np.testing.assert_array_equal(new["position"], np.zeros(2))
    assert new["exploring"] == 1.0


def test_cycles_span_the_relaxation_and_settle_after_exploring():
    dynamics = CyclicalLangevin(cycle_draws=10, exploration=0.25)
    # A relaxation within a draw's steps: cycles of cycle_draws draws, and
    # SETTLING_RELAXATIONS relaxations of settling after exploring.
    schedule = dynamics.schedule(0.1, steps_per_draw=10, relaxation=8.0)
    assert schedule.cycle_length == 100
    assert schedule.settling == int(np.ceil(SETTLING_RELAXATIONS * 8.0))
    # A relaxation beyond the steps per draw: the cycle spans cycle_draws relaxations.
    long = dynamics.schedule(0.1, steps_per_draw=10, relaxation=25.0)
    assert long.cycle_length == 10 * 10 * 3 and long.settling == 75
    # A relaxation of a chain whose steps were cut far below its curvatures':
    # the cycle counts at most MAX_DRAWS_PER_RELAXATION draws per relaxation,
    # so a cycle's first draw does not hold hundreds of millions of steps.
    stuck = dynamics.schedule(1e-6, steps_per_draw=1000, relaxation=4e7)
    assert stuck.cycle_length == 10 * 1000 * MAX_DRAWS_PER_RELAXATION
    assert stuck.settling == (stuck.cycle_length - 250_000) // 2
    # Settling takes at most half the sampling stage.
    short = CyclicalLangevin(cycle_draws=2, exploration=0.5).schedule(0.1, 10, 10.0)
    assert short.settling == 5
    steps = np.arange(200)
    kept = schedule.kept(steps)
    np.testing.assert_array_equal(kept, steps % 100 >= 25 + schedule.settling)
    assert not (kept & schedule.exploring(steps)).any()
    # Settling steps run with noise; a draw may not end at them.
    values = dynamics.step_values(schedule, steps)
    np.testing.assert_array_equal(values["noise_scale"], 1.0 - schedule.exploring(steps))
    np.testing.assert_array_equal(values["kept"], kept)
    # The first draw of a cycle explores, settles, then takes its own steps.
    assert dynamics.draw_steps(schedule, 0, 10) == 25 + schedule.settling + 10
    assert dynamics.draw_steps(schedule, 20, 10) == 25 + schedule.settling - 20 + 10
    assert dynamics.draw_steps(schedule, 49, 10) == 10
    # Recorded, the settling draws are marked as exploring.
    inputs = dynamics.chain_inputs(np.ones(2), 1.0, {})
    state = dynamics.initial_state(np.zeros(2), inputs, np.random.default_rng(0))
    settling_step = {**inputs, "step_size": 0.1, "noise_scale": 1.0, "kept": 0.0}
    assert dynamics.step(state, np.zeros(2), np.ones((1, 2)), settling_step)["exploring"] == 1.0


def test_a_given_cyclical_schedule_leaves_room_for_kept_draws():
    with pytest.raises(ValueError, match="settling must leave steps"):
        CyclicalStepSize(1.0, cycle_length=40, exploration=0.25, settling=30)


def test_exploration_runs_inside_the_first_draw_of_each_cycle():
    schedule = CyclicalStepSize(1.0, cycle_length=40, exploration=0.25)
    dynamics = CyclicalLangevin(cycle_draws=8)
    # Cycle start: the 10 exploration steps, then a draw's 5 sampling steps.
    assert dynamics.draw_steps(schedule, 0, 5) == 15
    assert dynamics.draw_steps(schedule, 15, 5) == 5
    assert dynamics.draw_steps(schedule, 40, 5) == 15
    # A draw that starts inside an exploration stage finishes it first.
    assert dynamics.draw_steps(schedule, 3, 5) == 12
    assert not schedule.exploring(np.arange(3, 15)[-5:]).any()
    recording = CyclicalLangevin(cycle_draws=8, record_exploration=True)
    assert recording.draw_steps(schedule, 0, 5) == 5
    assert dynamics.draw_steps(ConstantStepSize(0.1), 0, 5) == 5
    # The draws of a call ask for an array of first steps at once.
    firsts = np.array([0, 15, 40, 3])
    np.testing.assert_array_equal(dynamics.draw_steps(schedule, firsts, 5), [15, 5, 15, 12])


def _cyclical_sample(step_options=None, **sample_options):
    """Sample a one-coefficient regression with cyclical SGLD; return the result and the step."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=500)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta * x, 1, observed=x + rng.normal(size=500))
        step = CyclicalSGLD(batch_size=50, cycle_draws=8, exploration=0.25, **(step_options or {}))
        settings = {
            "draws": 80,
            "tune": 20,
            "chains": 2,
            "cores": 1,
            "random_seed": 2,
            "progressbar": False,
            "compute_convergence_checks": False,
        }
        return pm.sample(step=step, **(settings | sample_options)), step


def _cyclical_run(**options):
    result, step = _cyclical_sample(options)
    return result, step.chain.settings.step_size


def test_by_default_every_recorded_draw_is_a_sampling_draw():
    result, schedule = _cyclical_run()
    assert not np.asarray(result.sample_stats["exploring"]).any()
    steps = np.asarray(result.sample_stats["steps_per_draw"])
    usual = np.median(steps)
    assert schedule.cycle_length == 8 * usual and schedule.settling > 0
    # One long draw per cycle: the exploration stage (two draws' worth of
    # steps), the settling steps and a draw's own, less the steps by which
    # the chain's cycles are out of step with its draws after tuning.
    long_draws = steps > usual
    for chain_steps, chain_long in zip(steps, long_draws, strict=True):
        assert len(set(chain_steps[chain_long])) == 1
    last = steps[-1][long_draws[-1]][0]
    assert 0 <= schedule.sampling_start + schedule.settling + usual - last < usual
    draws_per_cycle = (schedule.cycle_length - schedule.sampling_start - schedule.settling) / usual
    assert abs(long_draws[-1].sum() - 80 / draws_per_cycle) <= 1


def test_each_draw_takes_the_steps_and_step_sizes_of_its_place_in_the_cycle():
    # The per-step inputs and draws' lengths are built once per place in the
    # cycle and reused; every draw must still get those of its own steps.
    result, step = _cyclical_sample(draws=200, chains=1, random_seed=4, discard_tuned_samples=False)
    settings = step.chain.settings
    assert step.dynamics.period(settings.step_size) == settings.step_size.cycle_length
    steps = np.asarray(result.sample_stats["steps_per_draw"])[0]
    step_sizes = np.asarray(result.sample_stats["step_size"])[0]
    tuned = np.asarray(result.warmup_sample_stats["steps_per_draw"])[0].sum()
    firsts = tuned + np.concatenate([[0], np.cumsum(steps)[:-1]])
    # More cycles than the kept places in one, so that reused values are checked.
    assert firsts[-1] > 3 * settings.step_size.cycle_length
    expected = step.dynamics.draw_steps(settings.step_size, firsts, settings.steps_per_draw)
    np.testing.assert_array_equal(steps, expected)
    np.testing.assert_array_equal(step_sizes, settings.step_size(firsts + steps - 1))


def test_recorded_exploration_draws_are_marked_and_dropped():
    result, schedule = _cyclical_run(record_exploration=True)
    exploring = np.asarray(result.sample_stats["exploring"])
    # Exploring and settling: what the draws of a cycle may not end at.
    not_kept = (schedule.sampling_start + schedule.settling) / schedule.cycle_length
    assert abs(exploring[-1].mean() - not_kept) < 0.1
    from pymc_sgmcmc import sampling_draws

    kept = sampling_draws(result)
    assert kept["beta"].shape == (2, int((~exploring).sum(axis=1).min()))
    first_chain = np.asarray(result.posterior["beta"])[0][~exploring[0]]
    np.testing.assert_array_equal(np.asarray(kept["beta"])[0], first_chain[: kept.sizes["draw"]])


@pytest.fixture(scope="module")
def line():
    rng = np.random.default_rng(6)
    x = rng.normal(size=200)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta * x, 1, observed=2 * x + rng.normal(size=200))
    return model


def test_clipping_scales_the_gradient_to_the_threshold(line):
    density = build_minibatch_log_density(line, line.value_vars)
    kernel = Kernel(density, minibatch_gradient(density), Langevin("euler_maruyama"))
    gradient = pytensor.function([density.position, density.indices], density.gradient)
    inputs = Langevin().chain_inputs(np.ones(1), 0.0, {})
    indices = np.arange(50)[None, :]
    start = np.array([-1.0])
    full = gradient(start, indices[0])
    for clip, expected in [(np.inf, full), (0.5, 0.5 * np.sign(full))]:
        values = kernel.prepare({**inputs, "gradient_clip": clip}, 1)
        result = kernel(
            {"position": start},
            indices,
            np.zeros((1, 1, 1)),
            {"step_size": np.array([0.01])},
            values,
        )
        np.testing.assert_allclose(result.state["position"], start + 0.01 * expected, rtol=1e-12)
        assert result.clipped_steps == (0 if clip == np.inf else 1)


def test_clipping_is_recorded_and_checked(line):
    with line:
        for clip, clipped in [(None, 0.0), (1e-6, 1.0)]:
            result = pm.sample(
                draws=10,
                tune=10,
                step=SGLD(
                    batch_size=20,
                    clip_gradient=clip,
                    step_size=1e-3,
                    steps_per_draw=5,
                    preconditioner=None,
                    control_variate=False,
                ),
                chains=1,
                random_seed=3,
                progressbar=False,
                compute_convergence_checks=False,
            )
            np.testing.assert_array_equal(
                np.asarray(result.sample_stats["gradient_clipped"]), clipped
            )
        with pytest.raises(ValueError, match="clip_gradient must be a positive number"):
            SGLD(batch_size=20, clip_gradient=-1.0)
