"""The Gaussian models behind the step-size rules, and the tuner that uses them."""

import warnings
from dataclasses import replace

import numpy as np
import pymc as pm
import pytest
from probes import probe_and_start

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Centre
from pymc_sgmcmc.metric import DenseMetric, DiagonalMetric, IdentityMetric
from pymc_sgmcmc.samplers.psgld import MEMORY_RELAXATIONS, RMSpropLangevin
from pymc_sgmcmc.samplers.sghmc import (
    Underdamped,
    underdamped_relaxation_steps,
    underdamped_variance_inflation,
)
from pymc_sgmcmc.samplers.sgld import Langevin, langevin_variance_inflation
from pymc_sgmcmc.schedules import ConstantStepSize
from pymc_sgmcmc.tuning import Measurements, TuningConfig, UserChoices, choose_settings
from pymc_sgmcmc.tuning.chain import ChainAdapter, ChainState
from pymc_sgmcmc.tuning.measure import FULL_DATA, in_coordinates, measure, row_work
from pymc_sgmcmc.tuning.tuner import _largest_step_size, metric_factor

N_CHAINS = 40_000
# Monte Carlo sd of a variance estimated from N_CHAINS independent chains.
VARIANCE_MC_SD = np.sqrt(2 / N_CHAINS)


def simulate_langevin(step_size, curvature, noise, temperature=1.0, n_steps=1500, seed=0):
    """Relative excess variance of SGLD on N(0, tau / a), gradient noise of variance ``noise``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=N_CHAINS) * np.sqrt(temperature / curvature)
    state = {"position": x}
    inputs = {"step_size": step_size, "temperature": temperature, "preconditioner": 1.0}
    for _ in range(n_steps):
        gradient = -curvature * state["position"] + np.sqrt(noise) * rng.normal(size=N_CHAINS)
        state = Langevin.step(state, gradient, rng.normal(size=(1, N_CHAINS)), inputs)
    return curvature * state["position"].var() / temperature - 1


def simulate_underdamped(
    step_size, friction, curvature, noise, mass=1.0, temperature=1.0, n_steps=1500, seed=0
):
    """The same for SGHMC with the given (per-coordinate) friction and mass."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=N_CHAINS) * np.sqrt(temperature / curvature)
    state = {"position": x, "momentum": rng.normal(size=N_CHAINS) * np.sqrt(temperature * mass)}
    inputs = {
        "step_size": step_size,
        "friction": friction,
        "mass": mass,
        "temperature": temperature,
    }
    for _ in range(n_steps):
        gradient = -curvature * state["position"] + np.sqrt(noise) * rng.normal(size=N_CHAINS)
        state = Underdamped.step(state, gradient, rng.normal(size=(1, N_CHAINS)), inputs)
    return curvature * state["position"].var() / temperature - 1


@pytest.mark.parametrize(
    ("step_size", "curvature", "noise", "temperature"),
    [(0.05, 2.0, 3.0, 1.0), (0.2, 1.0, 0.0, 1.0), (0.05, 2.0, 3.0, 0.1)],
)
def test_langevin_inflation_matches_simulation(step_size, curvature, noise, temperature):
    simulated = simulate_langevin(step_size, curvature, noise, temperature)
    predicted = langevin_variance_inflation(step_size, curvature, noise / temperature)
    assert abs(simulated - predicted) < 4 * VARIANCE_MC_SD * (1 + predicted)


@pytest.mark.parametrize(
    ("step_size", "friction", "curvature", "noise", "temperature"),
    [(0.2, 1.5, 2.0, 3.0, 1.0), (0.4, 0.5, 1.0, 0.1, 1.0), (0.2, 1.5, 2.0, 3.0, 0.2)],
)
def test_underdamped_inflation_matches_simulation(
    step_size, friction, curvature, noise, temperature
):
    simulated = simulate_underdamped(step_size, friction, curvature, noise, temperature=temperature)
    predicted = underdamped_variance_inflation(step_size, friction, curvature, noise / temperature)
    assert abs(simulated - predicted) < 4 * VARIANCE_MC_SD * (1 + predicted)


def test_negative_control_noise_ignored_in_prediction_is_caught():
    """Leaving the gradient noise out of the prediction misses the simulated inflation."""
    simulated = simulate_langevin(0.05, 2.0, 3.0)
    assert abs(simulated - langevin_variance_inflation(0.05, 2.0, 0.0)) > 4 * VARIANCE_MC_SD


def test_negative_control_temperature_ignored_in_prediction_is_caught():
    """At temperature 0.1 the noise weighs ten times more than the untempered formula says."""
    simulated = simulate_langevin(0.05, 2.0, 3.0, temperature=0.1)
    assert abs(simulated - langevin_variance_inflation(0.05, 2.0, 3.0)) > 4 * VARIANCE_MC_SD


@pytest.mark.parametrize(("friction", "mass"), [(None, 4.0), (30.0, None), (3.0, 0.25)])
def test_sghmc_model_sees_the_given_friction_and_mass(friction, mass):
    """On a Gaussian of curvature 1 in P-scaled coordinates, the model predicts the simulation."""
    preconditioner = np.array([0.5])
    dynamics = Underdamped(friction=friction, mass=mass)
    model = dynamics.gaussian_model((1.0, 1.0), preconditioner, TuningConfig())
    inputs = dynamics.chain_inputs(preconditioner, 1.0, model.chain_inputs())
    step_size, noise = 0.05, 2.0
    # Position x = sqrt(P) z with z ~ N(0, 1): curvature 1 / P in x, noise variance v / P.
    simulated = simulate_underdamped(
        step_size,
        inputs["friction"],
        1.0 / preconditioner[0],
        noise / preconditioner[0],
        mass=inputs["mass"],
    )
    predicted = model.inflation(step_size, 1.0, noise)
    assert abs(simulated - predicted) < 4 * VARIANCE_MC_SD * (1 + predicted)
    relaxation = model.relaxation(step_size, 1.0)
    assert np.isfinite(relaxation) and relaxation > 1


def test_relaxation_times():
    # Critical damping relaxes in about 1 / (step_size * sqrt(curvature)) steps.
    steps = underdamped_relaxation_steps(0.01, 2.0, 1.0)
    assert 50 < steps < 200
    assert underdamped_variance_inflation(10.0, 2.0, 1.0) == np.inf


def gaussian_measurements(noise, curvature=1.0):
    """Measurements of an uncorrelated Gaussian posterior with sd 1 and isotropic noise."""
    size = 2
    identity = np.eye(size)
    return Measurements(
        mode=np.zeros(size),
        centre=None,
        hessian=-curvature * identity,
        log_concave=True,
        laplace_variance=np.ones(size) / curvature,
        laplace_factor=identity / np.sqrt(curvature),
        noise_covariance={"minibatch": noise * identity, "control_variate": noise / 100 * identity},
    )


def choices(**kwargs):
    options = {
        "step_size": None,
        "preconditioner": None,
        "estimators": ("minibatch",),
        "steps_per_draw": None,
        "temperature": 1.0,
        "bias_budget": 0.05,
    }
    return UserChoices(**{**options, **kwargs})


@pytest.mark.parametrize(
    "dynamics",
    [Langevin(), Langevin("euler_maruyama"), Underdamped(), Underdamped(friction=50.0)],
)
@pytest.mark.parametrize("temperature", [1.0, 0.1])
@pytest.mark.parametrize("curvature_checked", [False, True])
def test_chosen_step_size_meets_the_budget_at_the_actual_temperature(
    dynamics, temperature, curvature_checked
):
    measurements = gaussian_measurements(noise=20.0)
    measurements = replace(measurements, curvature_checked=curvature_checked)
    settings = choose_settings(dynamics, measurements, choices(temperature=temperature))
    step_size = settings.step_size.value
    model = dynamics.gaussian_model((1.0, 1.0), np.ones(2), TuningConfig())
    if hasattr(model, "before_curvature_check"):
        # Only chains on the full data's gradient have the curvature at their draws checked.
        model = model.before_curvature_check()
    inflation = model.inflation(step_size, 1.0, 20.0 / temperature)
    assert settings.predicted_inflation == pytest.approx(inflation)
    # Either the budget binds, or the largest stable step size does (a heavy
    # friction caps the step at 1 / friction).
    at_bound = step_size == pytest.approx(model.largest_step_size(1.0))
    assert inflation == pytest.approx(0.05, rel=1e-6) or (at_bound and inflation < 0.05)


class _PowerInflation:
    """A Gaussian model whose inflation is ``(step_size * largest curvature) ** power``."""

    def __init__(self, power):
        self.power = power

    def largest_step_size(self, curvature):
        return 2.0 / curvature

    def largest_inflation(self, step_size, curvatures, noise):
        return (step_size * curvatures.max()) ** self.power


@pytest.mark.parametrize("power", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("budget", [1e-4, 0.05, 0.3, 1.0])
def test_the_step_size_search_ends_within_the_budget_next_to_the_root(power, budget):
    curvatures = np.geomspace(1.0, 40.0, 5)
    model = _PowerInflation(power)
    root = budget ** (1 / power) / 40.0
    step_size = _largest_step_size(model, curvatures, 0.0, budget)
    assert model.largest_inflation(step_size, curvatures, 0.0) <= budget
    assert step_size == pytest.approx(root, rel=1e-9)


def test_a_step_size_within_the_budget_everywhere_is_the_largest_stable_one():
    curvatures = np.geomspace(1.0, 40.0, 5)
    assert _largest_step_size(_PowerInflation(1.0), curvatures, 0.0, 3.0) == 2.0 / 40.0


def test_colder_chains_take_smaller_steps():
    measurements = gaussian_measurements(noise=20.0)
    warm = choose_settings(Langevin(), measurements, choices(temperature=1.0))
    cold = choose_settings(Langevin(), measurements, choices(temperature=0.1))
    assert cold.step_size.value < 0.2 * warm.step_size.value


def test_a_given_step_size_is_kept_and_its_inflation_predicted_with_the_temperature():
    measurements = gaussian_measurements(noise=20.0)
    given = choices(step_size=ConstantStepSize(0.01), temperature=0.5)
    settings = choose_settings(Langevin(), measurements, given)
    assert settings.step_size.value == 0.01
    expected = langevin_variance_inflation(0.01, 1.0, 20.0 / 0.5)
    assert settings.predicted_inflation == pytest.approx(expected)
    assert any("leave step_size unset" in message for message in settings.warnings)


def test_control_variates_win_when_their_noise_is_small():
    measurements = gaussian_measurements(noise=200.0)
    settings = choose_settings(
        Langevin(), measurements, choices(estimators=("minibatch", "control_variate"))
    )
    assert settings.estimator == "control_variate"


@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()])
def test_a_step_s_fixed_cost_makes_fewer_dearer_steps_pay(dynamics):
    """The control variate's two gradients per step cost less than twice a plain step.

    Its noise below the plain estimator's, it relaxes in fewer steps; counted
    by gradients alone the plain estimator is cheaper per relaxation time, counted
    with every step's fixed cost (``TuningConfig.step_overhead``) the control
    variate is. A tuner that ignores the fixed cost is the negative control.
    """
    measurements = gaussian_measurements(noise=40.0)
    measurements.noise_covariance["control_variate"] = 25.0 * np.eye(2)
    automatic = choices(estimators=("minibatch", "control_variate"))
    by_gradients = TuningConfig(step_overhead=0.0)
    plain = choose_settings(dynamics, measurements, automatic, config=by_gradients)
    assert plain.estimator == "minibatch"
    settings = choose_settings(dynamics, measurements, automatic)
    assert settings.estimator == "control_variate"
    assert settings.relaxation < plain.relaxation


def test_at_a_given_step_size_the_estimator_within_the_budget_wins():
    """Both estimators relax alike at a given step size; their noise decides."""
    measurements = gaussian_measurements(noise=20.0)
    given = choices(step_size=ConstantStepSize(0.01), estimators=("minibatch", "control_variate"))
    settings = choose_settings(Langevin(), measurements, given)
    assert settings.estimator == "control_variate"
    assert settings.predicted_inflation == pytest.approx(
        langevin_variance_inflation(0.01, 1.0, 20.0 / 100)
    )
    # Where the noise of neither fits the budget, the smaller inflation wins.
    too_large = choices(
        step_size=ConstantStepSize(1.0), estimators=("minibatch", "control_variate")
    )
    assert choose_settings(Langevin(), measurements, too_large).estimator == "control_variate"


def test_slow_chains_are_advised_control_variates_only_where_they_were_not_weighed():
    # The control variate as noisy as the plain estimator: the plain one is
    # chosen as the cheaper, and the chain relaxes slowly either way.
    measurements = gaussian_measurements(noise=2000.0)
    noisy = {name: 2000.0 * np.eye(2) for name in ("minibatch", "control_variate")}
    measurements = replace(measurements, noise_covariance=noisy)
    config = TuningConfig(slow_relaxation=10.0)
    both = choices(estimators=("minibatch", "control_variate"))
    settings = choose_settings(Langevin(), measurements, both, config)
    (warning,) = [message for message in settings.warnings if "decorrelates" in message]
    assert settings.estimator == "minibatch"
    assert "control_variate=True" not in warning
    assert "larger batch_size" in warning
    plain = choose_settings(Langevin(), measurements, choices(), config)
    assert any("control_variate=True" in message for message in plain.warnings)


@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()], ids=["SGLD", "SGHMC"])
def test_slow_chains_whose_curvatures_spread_are_not_advised_larger_batches(dynamics):
    """Where the noise is not what keeps the steps small, the warning names the curvatures' spread.

    A curvature 10^4 times the Laplace picture's (a funnel's neck met by the
    tune draws) with almost no gradient noise: a larger batch would not
    shorten the relaxation. Overdamped samplers are also pointed to SGHMC.
    """
    measurements = replace(gaussian_measurements(noise=1e-6), stiffness=1e4)
    config = TuningConfig(slow_relaxation=10.0)
    settings = choose_settings(dynamics, measurements, choices(), config)
    (warning,) = [message for message in settings.warnings if "decorrelates" in message]
    assert "1e+04 times the smallest" in warning
    assert "with any batch_size" in warning
    assert "larger batch_size" not in warning
    assert ("or SGHMC" in warning) == isinstance(dynamics, Langevin)


def test_slow_chains_on_a_skewed_posterior_are_not_advised_a_larger_budget():
    """Where the skew cut the inflation allowed, a larger bias budget would move the means.

    The same noisy posterior with and without a tempering sensitivity of 8
    (the means move by 8 sds per unit of variance inflation): both chains are
    slow, but only the one on the skewed posterior is told that the budget
    was cut for its means and pointed to another form of the model instead.
    """
    measurements = gaussian_measurements(noise=2000.0)
    config = TuningConfig(slow_relaxation=10.0)
    plain = choose_settings(Langevin(), measurements, choices(), config)
    skewed = replace(measurements, tempering_sensitivity=8.0)
    settings = choose_settings(Langevin(), skewed, choices(), config)
    (warning,) = [message for message in settings.warnings if "decorrelates" in message]
    (plain_warning,) = [message for message in plain.warnings if "decorrelates" in message]
    share = TuningConfig().mean_share
    assert settings.predicted_inflation == pytest.approx(share * 0.05 / 8.0, rel=1e-6)
    assert "use a larger bias_budget" not in warning
    assert "a larger bias_budget would move the means" in warning
    assert "about 8 sd per unit of variance inflation" in warning
    # The tuner cannot tell which form the model is written in, so it names both.
    assert "centred or non-centred, whichever it is not written in" in warning
    assert "larger bias_budget" in plain_warning
    assert "move the means" not in plain_warning


@pytest.mark.parametrize(
    "dynamics", [Langevin(), RMSpropLangevin()], ids=["exact model", "bounding model"]
)
def test_a_skewed_chain_on_the_full_data_is_not_advised_a_larger_batch(dynamics):
    """On the full data's gradient a larger batch changes nothing; dynamics whose Gaussian
    model only bounds the inflation are pointed to SGLD and SGHMC, whose full-data chains bound
    each direction's move of the means at its own inflation."""
    skewed = replace(gaussian_measurements(noise=2000.0), tempering_sensitivity=8.0)
    config = TuningConfig(slow_relaxation=10.0)
    settings = choose_settings(dynamics, skewed, choices(full_data_work=1.0), config)
    assert settings.estimator == FULL_DATA
    (warning,) = [message for message in settings.warnings if "decorrelates" in message]
    assert "about 8 sd per unit of variance inflation" in warning
    assert "batch_size" not in warning
    assert ("use SGLD or SGHMC" in warning) == (not dynamics.exact_gaussian_model)
    on_minibatches = choose_settings(dynamics, skewed, choices(), config)
    (warning,) = [message for message in on_minibatches.warnings if "decorrelates" in message]
    assert "use a larger batch_size" in warning
    assert "use SGLD or SGHMC" not in warning


@pytest.mark.parametrize("automatic", [False, True], ids=["given", "automatic"])
def test_a_travelling_chain_leaves_the_second_order_control_variate_behind(automatic):
    # It extrapolates the curvature at the centre, which a travelling chain leaves.
    noise = {"minibatch": 2000.0, "control_variate": 1000.0, "second_order": 400.0}
    measurements = replace(
        gaussian_measurements(1.0),
        noise_covariance={name: value * np.eye(2) for name, value in noise.items()},
    )
    config = TuningConfig(slow_relaxation=0.0)
    if automatic:
        every = choices(estimators=("minibatch", "control_variate"), weighs_second_order=True)
    else:
        every = choices(estimators=tuple(noise))
    adapter = ChainAdapter("SGLD", Langevin(), None, every, config, 100, False, True, False)
    chain = ChainState(IndexStream(1000, 100))
    chain.measurements = measurements
    chain.settings = adapter.settings(measurements)
    assert chain.settings.estimator == "second_order"
    adapter.travel_if_slow(chain, tune=True)
    assert chain.travelling
    assert chain.settings.estimator != "second_order"


def test_the_automatic_choice_weighs_the_second_order_control_variate_where_measured():
    noise = {"minibatch": 2000.0, "control_variate": 100.0, "second_order": 0.1}
    measured = replace(
        gaussian_measurements(1.0),
        noise_covariance={name: value * np.eye(2) for name, value in noise.items()},
    )
    automatic = choices(estimators=("minibatch", "control_variate"), weighs_second_order=True)
    assert choose_settings(Langevin(), measured, automatic).estimator == "second_order"
    # Not weighed unless the user left the choice automatic, nor where not measured.
    first_order = replace(automatic, weighs_second_order=False)
    assert choose_settings(Langevin(), measured, first_order).estimator == "control_variate"
    unmeasured = gaussian_measurements(1.0)
    assert choose_settings(Langevin(), unmeasured, automatic).estimator != "second_order"


@pytest.mark.parametrize("row_work", [None, 24.0, 400.0], ids=["2D", "sparse", "dense"])
@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()])
def test_the_full_data_gradient_is_chosen_where_it_relaxes_faster_per_unit_of_work(
    dynamics, row_work
):
    """The even point moves with a row's work: fixed costs weigh more beside cheap rows."""
    noisy = replace(gaussian_measurements(noise=2000.0), row_work=row_work)
    automatic = choices(estimators=("minibatch", "control_variate"))
    minibatch = choose_settings(dynamics, noisy, automatic)
    config = TuningConfig()
    # Every step's fixed cost, in minibatch gradients of B = 100 rows of D = 2,
    # each row costing ``row_work`` multiply-adds (2 D where not measured).
    per_row = 2 * noisy.mode.size if row_work is None else row_work
    overhead = config.step_overhead / (noisy.batch_size * per_row)
    cost = (config.estimator_cost[minibatch.estimator] + overhead) * minibatch.relaxation
    exact = choose_settings(
        dynamics, replace(gaussian_measurements(noise=0.0), row_work=row_work), choices()
    )
    # Gradient work per step at which both cost alike per relaxation time.
    even = cost / exact.relaxation - overhead
    cheap = choose_settings(dynamics, noisy, replace(automatic, full_data_work=0.9 * even))
    assert cheap.estimator == "full_data"
    assert cheap.gradient_noise == 0.0
    assert cheap.step_size.value == pytest.approx(exact.step_size.value)
    dear = choose_settings(dynamics, noisy, replace(automatic, full_data_work=1.1 * even))
    assert dear.estimator == minibatch.estimator
    assert dear.step_size.value == pytest.approx(minibatch.step_size.value)


@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()])
def test_the_full_data_gradient_is_left_out_where_it_would_not_relax_within_the_cap(dynamics):
    """On many rows, draws of the cap of inner steps on all N would cost N / B minibatch draws."""
    noisy = gaussian_measurements(noise=2000.0)
    automatic = choices(estimators=("minibatch", "control_variate"), full_data_work=0.01)
    cheap = choose_settings(dynamics, noisy, automatic)
    assert cheap.estimator == "full_data"
    steps = cheap.relaxation
    # On more rows than capped_full_data_rows (the rows here: 0.01 B).
    within = TuningConfig(max_steps_per_draw=int(np.ceil(steps)), capped_full_data_rows=0)
    assert choose_settings(dynamics, noisy, automatic, config=within).estimator == "full_data"
    beyond = replace(within, max_steps_per_draw=int(np.floor(steps)))
    assert choose_settings(dynamics, noisy, automatic, config=beyond).estimator != "full_data"
    # Tune draws that decorrelated more slowly than predicted count too.
    slow = replace(noisy, slowness=2.0)
    assert choose_settings(dynamics, slow, automatic, config=within).estimator != "full_data"
    # On fewer rows a draw of the cap of steps on all of them is still taken.
    few = replace(beyond, capped_full_data_rows=1)
    assert choose_settings(dynamics, noisy, automatic, config=few).estimator == "full_data"


def test_a_chain_whose_minibatches_relax_slowly_travels_on_them_before_the_full_data():
    """Noise far above the curvature tells a mode far from the mass; the chain travels."""
    measurements = gaussian_measurements(noise=2000.0)
    config = TuningConfig(slow_relaxation=50.0)
    automatic = choices(estimators=("minibatch", "control_variate"), full_data_work=2.0)
    adapter = ChainAdapter("SGLD", Langevin(), None, automatic, config, 100, False, True, False)
    chain = ChainState(IndexStream(200, 100))
    chain.measurements = measurements
    chain.settings = adapter.settings(measurements)
    assert chain.settings.estimator == "full_data"
    assert chain.settings.relaxation < config.slow_relaxation
    adapter.travel_if_slow(chain, tune=True)
    assert chain.travelling
    assert chain.settings.estimator != "full_data"


class UntouchableProbe:
    """A probe of many rows whose full passes must not be paid for."""

    n_rows = 10**9

    def likelihood_hessian(self, position):
        raise AssertionError("the full data were read")

    full_likelihood = likelihood_hessian


@pytest.mark.parametrize(
    "rows, other_blocks, noise",
    [(10**9, False, 1000.0), (1000, True, 1000.0), (1000, False, 0.01)],
    ids=["costly", "compound", "fast"],
)
def test_the_full_data_hessian_is_bought_only_where_it_can_pay(rows, other_blocks, noise):
    """At most the work of ``second_order_draws`` first-order draws, for a chain that relaxes
    slowly with them; never in a compound step.
    """
    probe = UntouchableProbe()
    probe.n_rows = rows
    automatic = choices(estimators=("minibatch", "control_variate"), weighs_second_order=True)
    adapter = ChainAdapter(
        "SGLD", Langevin(), probe, automatic, TuningConfig(), 100, False, True, other_blocks
    )
    chain = ChainState(IndexStream(rows, 100))
    chain.measurements = replace(
        gaussian_measurements(noise), centre=Centre(np.zeros(2), np.zeros(2))
    )
    chain.settings = adapter.settings(chain.measurements)
    slow = chain.settings.relaxation >= adapter.tuning.second_order_relaxation
    assert slow == (noise > 1.0)
    # 2 D N = 4e9 gradient evaluations against 1,000 draws of at most 1,000
    # steps on 100 rows: 2e8 at the control variate's cost.
    adapter.weigh_second_order(chain, np.random.default_rng(0))
    assert "second_order" not in chain.measurements.noise_covariance


def test_zero_temperature_is_called_optimisation():
    settings = choose_settings(Langevin(), gaussian_measurements(1.0), choices(temperature=0.0))
    assert any("optimisation" in message for message in settings.warnings)


def sampled_noise_measurements(size, n_samples, seed=0):
    """Measurements whose minibatch noise is N(0, I) in ``size`` dimensions, from samples."""
    rng = np.random.default_rng(seed)
    halves = np.array(
        [np.cov(rng.standard_normal((n_samples // 2, size)), rowvar=False) for _ in range(2)]
    )
    identity = np.eye(size)
    return Measurements(
        mode=np.zeros(size),
        centre=None,
        hessian=-identity,
        log_concave=True,
        laplace_variance=np.ones(size),
        laplace_factor=identity,
        noise_covariance={"minibatch": halves.mean(axis=0)},
        noise_halves={"minibatch": halves},
        noise_samples=n_samples,
    )


def test_noise_estimate_stays_sound_when_dimensions_exceed_samples():
    """D = 200 from 256 samples: the sample covariance's top eigenvalue overstates a noise of 1
    about 3x (Marchenko-Pastur); the split-sample estimate does not."""
    measurements = sampled_noise_measurements(200, 256)
    overstated = np.linalg.eigvalsh(measurements.noise_covariance["minibatch"]).max()
    assert overstated > 2.5
    assert 0.9 < measurements.noise("minibatch", np.ones(200)) < 1.5
    # With few dimensions the sample covariance is used as it is.
    small = sampled_noise_measurements(4, 256)
    expected = np.linalg.eigvalsh(small.noise_covariance["minibatch"]).max()
    assert small.noise("minibatch", np.ones(4)) == pytest.approx(expected, rel=1e-12)


def test_a_diagonal_metric_s_quantities_match_those_of_its_dense_factor():
    """A preconditioner given as a vector scales rows and columns (O(D^2)) and finds only the
    top noise directions; its curvatures, noise and mean square gradient are those of the
    dense factor ``diag(sqrt(P))``, and the split-sample noise that of every eigenvector."""
    rng = np.random.default_rng(10)
    size = 120
    # Noise of variance 10 along five random directions and 1 elsewhere, from 256 gradients.
    directions = np.linalg.qr(rng.standard_normal((size, 5)))[0]
    noise_root = np.eye(size) + (np.sqrt(10.0) - 1.0) * directions @ directions.T
    gradients = rng.standard_normal((256, size)) @ noise_root
    halves = np.array([np.cov(half, rowvar=False) for half in (gradients[:128], gradients[128:])])
    root = rng.standard_normal((size, size)) / np.sqrt(size)
    draws = rng.standard_normal((400, size)) @ root
    measurements = replace(
        sampled_noise_measurements(size, 256),
        hessian=-(root @ root.T + np.eye(size)),
        draw_covariance=np.cov(draws, rowvar=False),
        noise_covariance={"minibatch": halves.mean(axis=0)},
        noise_halves={"minibatch": halves},
    )
    preconditioner = rng.uniform(0.2, 3.0, size)
    dense = np.diag(np.sqrt(preconditioner))
    assert measurements.curvatures(preconditioner) == pytest.approx(
        measurements.curvatures(dense), rel=1e-10
    )
    assert measurements.noise("minibatch", preconditioner) == pytest.approx(
        measurements.noise("minibatch", dense), rel=1e-10
    )
    assert measurements.mean_square_gradient("minibatch", preconditioner, 1.0) == pytest.approx(
        measurements.mean_square_gradient("minibatch", dense, 1.0), rel=1e-10
    )
    first, second = (dense @ half @ dense for half in halves)
    readings = [np.max(np.diag(0.5 * (first + second)))]
    for find, check in ((first, second), (second, first)):
        top = np.linalg.eigh(find)[1][:, -5:]
        readings.extend(np.diag(top.T @ check @ top))
    found = measurements.noise("minibatch", preconditioner)
    assert found == pytest.approx(max(readings), rel=1e-10)
    # On this seed each half's top direction alone reads less than the five: all five count.
    assert max(readings) > max(readings[5], readings[10])


def test_a_diagonal_metric_s_factor_reads_as_its_dense_matrix():
    """The tuner reads a diagonal metric with a diagonal preconditioner as the vector ``P`` of
    ``A = diag(sqrt(P))``; a dense metric as its matrix with the preconditioner on its columns."""
    rng = np.random.default_rng(4)
    size = 6
    root = rng.standard_normal((size, size))
    matrix = root @ root.T
    scale, preconditioner = rng.uniform(0.5, 2.0, size), rng.uniform(0.5, 2.0, size)
    dense = np.diag(scale) @ np.diag(np.sqrt(preconditioner))
    factor = metric_factor(DiagonalMetric(np.zeros(size), scale), preconditioner, size)
    assert factor.shape == (size,)
    assert in_coordinates(matrix, factor) == pytest.approx(dense.T @ matrix @ dense, rel=1e-12)
    assert in_coordinates(matrix, metric_factor(IdentityMetric(), preconditioner, size)) == (
        pytest.approx(np.diag(np.sqrt(preconditioner)) @ matrix @ np.diag(np.sqrt(preconditioner)))
    )
    cholesky = np.linalg.cholesky(matrix)
    factor = metric_factor(DenseMetric(np.zeros(size), cholesky), preconditioner, size)
    assert factor == pytest.approx(cholesky @ np.diag(np.sqrt(preconditioner)), rel=1e-12)


def rmsprop_inputs(step_size, decay):
    """pSGLD's inputs on N(0, 1) at temperature 1, without its correction term."""
    return {
        "step_size": step_size,
        "temperature": 1.0,
        "preconditioner": 1.0,
        "decay": decay,
        "regularizer": 1e-5,
        "correction": 0.0,
    }


def simulate_rmsprop(step_size, decay, n_chains=2000, n_steps=8000, burn=2000, seed=0):
    """Relative excess variance of pSGLD without its correction on N(0, 1), exact gradients.

    Returns the estimate and its Monte Carlo sd: each chain's time average of
    ``x^2`` after ``burn`` steps is an independent estimate.
    """
    rng = np.random.default_rng(seed)
    state = {"position": rng.normal(size=n_chains), "square": np.ones(n_chains)}
    inputs = rmsprop_inputs(step_size, decay)
    total = np.zeros(n_chains)
    for step in range(n_steps):
        gradient = -state["position"]
        state = RMSpropLangevin.step(state, gradient, rng.normal(size=(1, n_chains)), inputs)
        if step >= burn:
            total += state["position"] ** 2
    averages = total / (n_steps - burn)
    return averages.mean() - 1, averages.std() / np.sqrt(n_chains)


@pytest.mark.parametrize("decay", [0.99, 0.999])
def test_rmsprop_memory_inflation_matches_simulation(decay):
    """A running mean short against the relaxation time widens the chain as predicted.

    At step size 0.05 the chain relaxes in about 20 steps; Li et al.'s decay
    0.99 averages over 100, which the model predicts to inflate the variance
    by 9% on top of the 2.6% of the discretization. The model's memory term is
    first order, so beside 4 Monte Carlo sds it is allowed 10% of itself.
    """
    step_size = 0.05
    measured, error = simulate_rmsprop(step_size, decay)
    model = RMSpropLangevin(decay=decay).gaussian_model((1.0, 1.0), np.ones(1), TuningConfig())
    predicted = model.inflation(step_size, 1.0, 0.0)
    memory = predicted - langevin_variance_inflation(step_size, 1.0)
    assert abs(measured - predicted) < 4 * error + 0.1 * memory
    if decay == 0.99:
        assert measured > 2 * 0.05


def test_rmsprop_memory_is_chosen_from_the_relaxation_time():
    measurements = gaussian_measurements(noise=20.0)
    settings = choose_settings(RMSpropLangevin(), measurements, choices())
    expected = 1 - 1 / (MEMORY_RELAXATIONS * settings.relaxation)
    assert settings.inputs["decay"] == pytest.approx(expected)
    assert settings.predicted_inflation <= 0.05 + 1e-9
    assert not settings.warnings
    # The running mean starts at its settled value: curvature plus noise.
    np.testing.assert_allclose(settings.inputs["initial_square"], 1.0 + 20.0)


def test_a_short_rmsprop_memory_is_warned_about():
    measurements = gaussian_measurements(noise=0.0)
    settings = choose_settings(RMSpropLangevin(decay=0.99), measurements, choices())
    assert settings.predicted_inflation > 0.05
    assert any("leave decay unset" in message for message in settings.warnings)
    assert settings.inputs["decay"] == 0.99


def test_rmsprop_relaxation_counts_the_gradient_noise():
    """Gradient noise of variance v settles the running mean near a + v, so the chain relaxes
    sqrt(1 + v / a) times more slowly than on exact gradients; the model must say so, since
    the relaxation time sets the inner steps per draw and the running mean's memory."""
    rng = np.random.default_rng(1)
    n_chains, noise, step_size, lag = 4000, 20.0, 0.05, 50
    state = {"position": rng.normal(size=n_chains), "square": np.full(n_chains, 1.0 + noise)}
    inputs = rmsprop_inputs(step_size, 0.9999)
    for step in range(2000 + lag):
        if step == 2000:
            start = state["position"].copy()
        gradient = -state["position"] + np.sqrt(noise) * rng.normal(size=n_chains)
        state = RMSpropLangevin.step(state, gradient, rng.normal(size=(1, n_chains)), inputs)
    correlation = np.corrcoef(start, state["position"])[0, 1]
    error = (1 - correlation**2) / np.sqrt(n_chains)
    model = RMSpropLangevin(decay=0.9999).gaussian_model((1.0, 1.0), np.ones(1), TuningConfig())
    predicted = np.exp(-lag / model.relaxation(step_size, 1.0, noise))
    assert abs(correlation - predicted) < 4 * error
    assert np.exp(-lag / model.relaxation(step_size, 1.0)) < predicted - 10 * error


@pytest.mark.parametrize("friction", [None, np.array([0.5, 2.0, 8.0])])
def test_sghmc_inflation_over_all_curvatures_at_once_equals_one_by_one(friction):
    """The tuner's vectorised evaluation agrees with the model asked curvature by curvature."""
    preconditioner = np.array([1.0, 0.3, 4.0])
    dynamics = Underdamped(friction=friction, mass=None if friction is None else np.ones(3))
    model = dynamics.gaussian_model((0.2, 30.0), preconditioner, TuningConfig())
    curvatures = np.geomspace(0.2, 30.0, 16)
    # Step sizes from deep inside the stable range to beyond it (inf there).
    for step_size in (1e-4, 0.01, 0.1, 0.3, 1.0):
        for noise in (0.0, 5.0):
            one_by_one = max(model.inflation(step_size, a, noise) for a in curvatures)
            at_once = model.largest_inflation(step_size, curvatures, noise)
            np.testing.assert_allclose(at_once, one_by_one, rtol=1e-12)


def test_a_step_size_search_whose_stable_edge_has_no_inflation_stays_inside_it():
    """SGHMC's model on minibatches in epochs gives 0 / 0 at the largest stable step size of
    its largest curvature (a tune step that diverged counts 4 times the measured one); the
    search brackets the root just inside that edge instead of stopping on the NaN."""
    model = Underdamped().gaussian_model((1.0, 4.0), np.ones(1), TuningConfig())
    model = model.with_epochs(40.0, 0.054)
    curvatures = np.geomspace(1.0, 4.0, 8)
    largest = model.largest_step_size(4.0)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(model.inflation(largest, 4.0, 0.054))
    # The search says nothing about the edge it steps back from.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step_size = _largest_step_size(model, curvatures, 0.054, 0.05)
    assert 0 < step_size < largest
    inflations = [model.inflation(step_size, curvature, 0.054) for curvature in curvatures]
    assert max(inflations) == pytest.approx(0.05, rel=1e-6)


def elementwise_work(probe, config):
    """The part of a row's work that its elementwise operations cost."""
    arithmetic, others = probe.row_operations
    return config.arithmetic_cost * arithmetic + config.transcendental_cost * others


def test_a_row_s_work_counts_the_coordinates_its_gradient_touches():
    """A dense regression's row touches every coefficient; a grouped model's row, one group's.

    A row's work is its elementwise operations' plus two multiply-adds per
    touched coordinate, whatever ``D`` is: 4 coefficients and the noise scale
    in the regression, and in the grouped model one of 40 intercepts, the
    slope and the noise scale (the hierarchy's mean and scale enter through
    the prior alone). Counting ``2 D`` is the negative control.
    """
    rng = np.random.default_rng(3)
    n_rows, n_groups = 400, 40
    x = rng.normal(size=(n_rows, 4))
    group = rng.integers(n_groups, size=n_rows)
    y = rng.normal(size=n_rows)
    with pm.Model() as dense:
        beta = pm.Normal("beta", 0, 1, shape=4)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", pm.math.dot(pm.Data("x", x), beta), sigma, observed=y)
    with pm.Model() as grouped:
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        intercept = pm.Normal("intercept", mu, tau, shape=n_groups)
        slope = pm.Normal("slope", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        index = pm.Data("group", group)
        pm.Normal("y", intercept[index] + slope * pm.Data("x", x[:, 0]), sigma, observed=y)
    config = TuningConfig()
    for model, touched in ((dense, 5), (grouped, 3)):
        probe, start = probe_and_start(model)
        point = start + 0.3 * np.random.default_rng(0).normal(size=start.size)
        expected = elementwise_work(probe, config) + 2 * touched
        assert row_work(probe, point, config) == expected
    assert start.size == n_groups + 4
    # The chain's measurements carry it to the tuner.
    probe, start = probe_and_start(dense)
    measured = measure(probe, 100, np.random.default_rng(1), start, config=config)
    assert measured.row_work == elementwise_work(probe, config) + 2 * 5


def test_a_row_s_transcendental_functions_are_counted_apart():
    """A Normal row needs only arithmetic; a Bernoulli-logit row needs exp and log as well.

    The counts are of the compiled graph's elementwise operations on the
    batch's rows; the prior's operations, which no row reaches, count for
    neither. Counting every operation alike, or none, is the negative control.
    """
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 3))
    with pm.Model() as normal:
        # The scales' log transform puts exp and log on arrays in the prior alone.
        scale = pm.HalfNormal("scale", 1, shape=3)
        beta = pm.Normal("beta", 0, scale)
        pm.Normal("y", pm.math.dot(pm.Data("x", x), beta), 1.0, observed=rng.normal(size=300))
    with pm.Model() as logistic:
        beta = pm.Normal("beta", 0, 1, shape=3)
        logit = pm.math.dot(pm.Data("x", x), beta)
        pm.Bernoulli("y", logit_p=logit, observed=rng.integers(2, size=300))
    normal_arithmetic, normal_others = probe_and_start(normal)[0].row_operations
    logistic_arithmetic, logistic_others = probe_and_start(logistic)[0].row_operations
    assert normal_others == 0 and normal_arithmetic > 0
    assert logistic_others >= 2 and logistic_arithmetic > 0
