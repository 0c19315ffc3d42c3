"""Noise that sums to zero over an epoch, and chains slower than predicted: rules and tuner."""

from dataclasses import replace

import numpy as np
import pymc as pm
import pytest

from pymc_sgmcmc import SGHMC, SGLD
from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.samplers.sghmc import Underdamped, underdamped_variance_inflation
from pymc_sgmcmc.samplers.sgld import INTEGRATORS, Langevin, langevin_variance_inflation
from pymc_sgmcmc.samplers.sgrld import RiemannianLangevin
from pymc_sgmcmc.tuning import Measurements, TuningConfig, UserChoices, choose_settings
from pymc_sgmcmc.tuning.chain import ChainAdapter, ChainState
from pymc_sgmcmc.tuning.epochs import (
    EPOCH_MARGIN,
    NEAR_ONE,
    _lag_sum_by_terms,
    _lag_sum_closed_form,
    epoch_lag_sum,
    epoch_steps,
    noise_covariance,
)
from pymc_sgmcmc.tuning.windows import decorrelated_draws, largest_lag_one, slowness

N_CHAINS = 20_000
# Monte Carlo sd of a variance estimated from N_CHAINS independent chains.
VARIANCE_MC_SD = np.sqrt(2 / N_CHAINS)


def langevin_transition(step_size, curvature):
    return np.array([[1.0 - step_size * curvature]]), np.array([step_size])


def underdamped_transition(step_size, friction, curvature):
    transition = np.array(
        [
            [1.0 - step_size**2 * curvature, step_size * (1.0 - step_size * friction)],
            [-step_size * curvature, 1.0 - step_size * friction],
        ]
    )
    return transition, np.array([step_size**2, step_size])


def lag_by_lag(transition, shock, epochs, lags):
    """The noise's covariance summed lag pair by lag pair, averaged over the epoch's phase."""
    responses = [shock]
    for _ in range(lags - 1):
        responses.append(transition @ responses[-1])
    responses = np.array(responses)
    total = np.zeros((shock.size, shock.size))
    for phase in range(epochs):
        starts = [0, *range(phase, lags, epochs)]
        for start, end in zip(starts, [*starts[1:], lags], strict=True):
            block = responses[start:end]
            if len(block) == 0:
                continue
            summed = block.sum(axis=0)
            total += epochs / (epochs - 1) * block.T @ block
            total -= np.outer(summed, summed) / (epochs - 1)
    return total / epochs


@pytest.mark.parametrize(
    ("transition", "epochs"),
    [
        (langevin_transition(0.01, 1.0), 10),
        (langevin_transition(0.3, 1.0), 7),
        (underdamped_transition(0.01, 2.0, 1.0), 50),
        (underdamped_transition(0.05, 2.0, 9.0), 10),
        (underdamped_transition(0.001, 2.0, 1.0), 20),
    ],
)
def test_the_closed_form_matches_the_sum_over_lag_pairs(transition, epochs):
    matrix, shock = transition
    radius = np.max(np.abs(np.linalg.eigvals(matrix)))
    lags = int(40 / -np.log(radius))
    expected = lag_by_lag(matrix, shock, epochs, lags)
    # Near critical damping the two eigenvectors are nearly parallel (their
    # eigenvalues differ by about 2 (h sqrt(a))^1.5), which costs digits.
    np.testing.assert_allclose(noise_covariance(matrix, shock, epochs), expected, rtol=1e-4)


@pytest.mark.parametrize("distance", [1e-6, 1e-9, 1e-12, 1e-15, 0.0])
def test_eigenvalues_near_one_keep_their_digits(distance):
    # Near alpha = beta = 1 - d the geometric sums cancel to order (d E)^2;
    # to first order in d the current epoch gives (E + 1) / 6 - 2 d (E - 2)(E + 1) / 24
    # and the complete epochs E (E + 1) / 12 * d^2 / (2 d).
    epochs = 50
    expected = (epochs + 1) / 6 + distance * (
        epochs * (epochs + 1) / 24 - (epochs - 2) * (epochs + 1) / 12
    )
    value = epoch_lag_sum(1 - distance, 1 - distance, epochs)
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    # One eigenvalue near one, the other not: continuous in the distance.
    mixed = epoch_lag_sum(1 - distance, 0.5, epochs)
    assert abs(mixed - epoch_lag_sum(1.0, 0.5, epochs)) <= 10 * distance * epochs


def test_the_closed_form_and_the_term_by_term_sum_agree_where_they_meet():
    epochs = 200
    for distance in np.geomspace(1, 10, 5) * NEAR_ONE / epochs:
        for other in (1 - distance, 1 - 3 * distance, 0.9, 0.6 + 0.3j):
            pair = np.array([1 - distance], dtype=complex), np.array([other], dtype=complex)
            closed = _lag_sum_closed_form(*pair, float(epochs))
            np.testing.assert_allclose(closed, _lag_sum_by_terms(*pair, epochs), rtol=1e-7)


def test_independent_noise_is_the_limit_of_long_epochs():
    matrix, shock = underdamped_transition(0.05, 2.0, 1.0)
    independent = noise_covariance(matrix, shock)
    np.testing.assert_allclose(noise_covariance(matrix, shock, 1e9), independent, rtol=1e-6)
    with_noise = underdamped_variance_inflation(0.05, 2.0, 1.0, 3.0)
    without = underdamped_variance_inflation(0.05, 2.0, 1.0, 0.0)
    np.testing.assert_allclose(with_noise - without, 3.0 * independent[0, 0], rtol=1e-9)


class EpochNoise:
    """Minibatch noise of N rows read B at a time, each once per epoch; chains in every phase."""

    def __init__(self, rng, rows, batch_size, n_chains, replace=False):
        self.rng, self.rows, self.batch_size, self.replace = rng, rows, batch_size, replace
        self.epochs = rows.size // batch_size
        self.buffer = self._new_epochs(n_chains)
        self.phase = rng.integers(0, self.epochs, n_chains)
        self.variance = rows.size**2 * rows.var() / batch_size
        if not replace:
            self.variance *= (rows.size - batch_size) / (rows.size - 1)

    def _new_epochs(self, count):
        if self.replace:
            picks = self.rng.choice(self.rows.size, (count, self.epochs, self.batch_size))
            batches = self.rows[picks]
        else:
            permuted = self.rng.permuted(np.tile(self.rows, (count, 1)), axis=1)
            batches = permuted.reshape(count, self.epochs, self.batch_size)
        return self.rows.size * batches.mean(axis=-1)

    def draw(self):
        noise = self.buffer[np.arange(self.phase.size), self.phase]
        self.phase += 1
        ended = self.phase == self.epochs
        if ended.any():
            self.buffer[ended] = self._new_epochs(int(ended.sum()))
            self.phase[ended] = 0
        return noise


def rows_with_noise(variance, n_rows=40, batch_size=4, seed=1):
    """Rows (summing to zero) whose minibatch noise without replacement has ``variance``."""
    rows = np.random.default_rng(seed).normal(size=n_rows)
    rows -= rows.mean()
    scale = n_rows**2 * rows.var() / batch_size * (n_rows - batch_size) / (n_rows - 1)
    return rows * np.sqrt(variance / scale)


def simulate(dynamics, inputs, state, curvature, noise, n_steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n_steps):
        gradient = -curvature * state["position"] + noise.draw()
        state = dynamics.step(state, gradient, rng.normal(size=(1, N_CHAINS)), inputs)
    return curvature * state["position"].var() - 1.0


@pytest.mark.parametrize("integrator", INTEGRATORS)
@pytest.mark.parametrize("replace", [False, True])
def test_langevin_chains_on_epochs_have_the_predicted_variance(replace, integrator):
    step_size, curvature, variance = 0.01, 1.0, 6000.0
    rng = np.random.default_rng(2)
    noise = EpochNoise(rng, rows_with_noise(variance), 4, N_CHAINS, replace)
    inputs = {"step_size": step_size, "temperature": 1.0, "preconditioner": 1.0}
    state = Langevin(integrator).initial_state(rng.normal(size=N_CHAINS), inputs, rng)
    simulated = simulate(Langevin, inputs, state, curvature, noise, 1500, 3)
    averaged = integrator == "leimkuhler_matthews"
    base = langevin_variance_inflation(step_size, curvature, 0.0, averaged)
    independent = langevin_variance_inflation(step_size, curvature, noise.variance, averaged)
    matrix, shock = langevin_transition(step_size, curvature)
    on_epochs = base + curvature * noise.variance * noise_covariance(matrix, shock, 10)[0, 0]
    predicted, other = (independent, on_epochs) if replace else (on_epochs, independent)
    tolerance = 4 * VARIANCE_MC_SD * (1 + predicted)
    assert abs(simulated - predicted) < tolerance, (simulated, predicted)
    # Negative control: the other noise model is far from these chains.
    assert abs(simulated - other) > 10 * tolerance, (simulated, other)


def test_underdamped_chains_on_epochs_have_the_predicted_variance():
    step_size, friction, curvature = 0.03, 2.0, 1.0
    matrix, shock = underdamped_transition(step_size, friction, curvature)
    per_unit = noise_covariance(matrix, shock, 10)[0, 0]
    variance = 1.0 / (curvature * per_unit)  # epochs add about one posterior variance
    rng = np.random.default_rng(4)
    noise = EpochNoise(rng, rows_with_noise(variance), 4, N_CHAINS)
    state = {"position": rng.normal(size=N_CHAINS), "momentum": rng.normal(size=N_CHAINS)}
    inputs = {"step_size": step_size, "friction": friction, "mass": 1.0, "temperature": 1.0}
    simulated = simulate(Underdamped, inputs, state, curvature, noise, 1500, 5)
    base = underdamped_variance_inflation(step_size, friction, curvature)
    predicted = base + curvature * noise.variance * per_unit
    tolerance = 4 * VARIANCE_MC_SD * (1 + predicted)
    assert abs(simulated - predicted) < tolerance, (simulated, predicted)
    independent = underdamped_variance_inflation(step_size, friction, curvature, noise.variance)
    assert independent - simulated > 10 * tolerance, (simulated, independent)


def simulate_curvature_noise(dynamics, inputs, step_size, variance, seed):
    """Chains whose minibatch curvature, not offset, is noisy (the control variate's noise)."""
    rng = np.random.default_rng(seed)
    noise = EpochNoise(rng, rows_with_noise(variance), 4, N_CHAINS)
    state = {"position": rng.normal(size=N_CHAINS)}
    if dynamics is Underdamped:
        state["momentum"] = rng.normal(size=N_CHAINS)
    else:
        state["last_noise"] = rng.normal(size=N_CHAINS)
    for _ in range(int(12 / step_size)):
        gradient = -(1.0 + noise.draw()) * state["position"]
        state = dynamics.step(state, gradient, rng.normal(size=(1, N_CHAINS)), inputs)
    return state["position"].var() - 1.0


@pytest.mark.parametrize(("dynamics", "narrows"), [(Langevin, True), (Underdamped, False)])
def test_curvature_noise_on_epochs_stays_within_the_bound(dynamics, narrows):
    step_size = 0.01
    variance = 0.5 / step_size  # independent noise of this size would widen by about 25%
    inputs = {"step_size": step_size, "temperature": 1.0, "preconditioner": 1.0}
    inputs.update({"friction": 2.0, "mass": 1.0})
    simulated = simulate_curvature_noise(dynamics, inputs, step_size, variance, 6)
    tolerance = 4 * VARIANCE_MC_SD * (1 + abs(simulated))
    model = dynamics().gaussian_model((1.0, 1.0), np.ones(1), TuningConfig())
    bound = model.with_epochs(10.0, variance).inflation(step_size, 1.0, variance)
    assert abs(simulated) < bound + tolerance, (simulated, bound)
    if narrows:
        # SGLD's variance narrows, where the epoch formula for noise that does
        # not change with the position predicts a small widening.
        fixed_only = model.with_epochs(10.0).inflation(step_size, 1.0, variance)
        assert simulated < -2 * tolerance, simulated
        assert simulated < -fixed_only - 2 * tolerance, (simulated, fixed_only)


@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()])
def test_the_tuning_models_bound_the_noise_on_epochs(dynamics):
    model = dynamics.gaussian_model((1.0, 1.0), np.ones(1), TuningConfig())
    for step_size, noise, position_noise in [
        (0.01, 6000.0, 0.0),
        (0.01, 6000.0, 30.0),
        (0.001, 10.0, 5.0),
        (0.2, 50.0, 0.0),
    ]:
        on_epochs = model.with_epochs(10.0, position_noise)
        base = model.inflation(step_size, 1.0, 0.0)
        fixed = model.inflation(step_size, 1.0, noise - position_noise) - base
        position = model.inflation(step_size, 1.0, position_noise) - base
        if isinstance(dynamics, Langevin):
            matrix, shock = langevin_transition(step_size, 1.0)
        else:
            matrix, shock = underdamped_transition(step_size, 2.0, 1.0)
        exact = (noise - position_noise) * noise_covariance(matrix, shock, 10)[0, 0]
        expected = base + max(min(fixed, EPOCH_MARGIN * exact), position)
        assert on_epochs.inflation(step_size, 1.0, noise) == pytest.approx(expected, rel=1e-9)
        # (within rounding: the models scale the inflation of unit noise)
        independent = model.inflation(step_size, 1.0, noise)
        assert on_epochs.inflation(step_size, 1.0, noise) <= independent * (1 + 1e-12)


def test_epoch_length_rounds_up():
    assert epoch_steps(1000, 100) == 10
    assert epoch_steps(919, 100) == 10
    assert epoch_steps(50, 50) == 1


def _model(n_rows=300):
    rng = np.random.default_rng(0)
    x = rng.normal(size=n_rows)
    with pm.Model() as model:
        data = pm.Data("x", x)
        beta = pm.Normal("beta", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", beta * data, sigma, observed=2 * x + rng.normal(size=n_rows))
    return model


def test_step_methods_pass_their_epochs_to_the_tuner_only_where_the_noise_sums_to_zero():
    model = _model()
    with model:
        assert SGLD(batch_size=40).adapter.epochs == 8
        assert SGHMC(batch_size=100).adapter.epochs == 3
        assert SGLD(batch_size=40, replace=True).adapter.epochs == np.inf
        assert SGLD(batch_size=40, control_variate_refresh=20).adapter.epochs == np.inf
        assert SGLD(batch_size=300).adapter.epochs == np.inf  # every row in every batch
        assert SGLD(batch_size=299).adapter.epochs == 2
        compound = SGLD(vars=[model["beta"]], batch_size=40)
        assert compound.adapter.epochs == np.inf


def measurements(noise, control_variate_noise, slowness=1.0):
    identity = np.eye(2)
    return Measurements(
        mode=np.zeros(2),
        centre=None,
        hessian=-identity,
        log_concave=True,
        laplace_variance=np.ones(2),
        laplace_factor=identity,
        noise_covariance={
            "minibatch": noise * identity,
            "control_variate": control_variate_noise * identity,
        },
        slowness=slowness,
    )


CHOICES = UserChoices(
    step_size=None,
    preconditioner=None,
    estimators=("minibatch", "control_variate"),
    steps_per_draw=None,
    temperature=1.0,
    bias_budget=0.05,
)


@pytest.mark.parametrize("dynamics", [Langevin(), Underdamped()])
def test_the_tuner_takes_larger_steps_where_epochs_cancel_noise_that_does_not_move(dynamics):
    plain = replace(CHOICES, estimators=("minibatch",))
    fixed = choose_settings(dynamics, measurements(2000.0, 2.0), plain, epochs=10.0)
    independent = choose_settings(dynamics, measurements(2000.0, 2.0), plain)
    assert fixed.step_size.value > 10 * independent.step_size.value
    assert fixed.predicted_inflation <= CHOICES.bias_budget * (1 + 1e-9)
    # Noise that moves with the position (all of the control variate's)
    # gains nothing from epochs.
    moving = choose_settings(dynamics, measurements(2000.0, 2000.0), plain, epochs=10.0)
    alone = choose_settings(dynamics, measurements(2000.0, 2000.0), plain)
    assert moving.step_size.value == pytest.approx(alone.step_size.value)


def test_a_metric_that_moves_with_the_position_takes_no_credit_for_epochs():
    plain = replace(CHOICES, estimators=("minibatch",))
    dynamics = RiemannianLangevin()
    on_epochs = choose_settings(dynamics, measurements(2000.0, 2.0), plain, epochs=10.0)
    independent = choose_settings(dynamics, measurements(2000.0, 2.0), plain)
    assert on_epochs.step_size.value == independent.step_size.value


def test_a_slow_chain_takes_proportionally_more_inner_steps_per_draw():
    dynamics = Langevin()
    settings = choose_settings(dynamics, measurements(20.0, 20.0), CHOICES)
    slow = choose_settings(dynamics, measurements(20.0, 20.0, slowness=3.0), CHOICES)
    assert slow.step_size.value == settings.step_size.value
    assert slow.relaxation == pytest.approx(3 * settings.relaxation)
    assert slow.steps_per_draw == int(np.ceil(3 * settings.relaxation)) < 1000
    capped = choose_settings(dynamics, measurements(20.0, 20.0, slowness=1e6), CHOICES)
    assert capped.steps_per_draw == TuningConfig().max_steps_per_draw


def test_slowness_tells_slow_draws_from_independent_ones():
    rng = np.random.default_rng(8)
    independent = rng.normal(size=(100, 1000))
    # Draws one relaxation apart: the statistic stays well under the threshold
    # over a thousand coordinates.
    assert slowness(independent, 50, 50.0) < TuningConfig().slowness_threshold / 1.5
    correlation = 0.95
    slow = np.empty(200)
    slow[0] = rng.normal()
    for index in range(1, slow.size):
        slow[index] = correlation * slow[index - 1] + np.sqrt(1 - correlation**2) * rng.normal()
    draws = np.column_stack([slow[::2], rng.normal(size=(100, 5))])  # lag one: 0.95 ** 2
    predicted = (1 + np.exp(-1)) / (1 - np.exp(-1))
    expected = (1 + correlation**2) / (1 - correlation**2) / predicted
    assert 0.5 * expected < slowness(draws, 50, 50.0) < 2 * expected
    assert slowness(draws, 50, 50.0) > TuningConfig().slowness_threshold


def test_a_column_that_does_not_move_has_no_autocorrelation_of_its_rounding():
    rng = np.random.default_rng(4)
    constant = np.full(400, 0.1 + 0.2)  # centres to rounding error, not to zeros
    assert np.any(constant - constant.mean() != 0)
    draws = np.column_stack([constant, rng.normal(size=400)])
    assert largest_lag_one(draws) < 0.2
    assert decorrelated_draws(draws) > 250
    assert largest_lag_one(np.column_stack([constant, constant])) == 0.0


def ar_draws(correlation, n_draws, size, seed):
    rng = np.random.default_rng(seed)
    draws = np.empty((n_draws, size))
    draws[0] = rng.normal(size=size)
    for index in range(1, n_draws):
        innovation = np.sqrt(1 - correlation**2) * rng.normal(size=size)
        draws[index] = correlation * draws[index - 1] + innovation
    return draws


def test_a_window_of_slow_draws_lengthens_the_chains_draws_and_independent_ones_do_not():
    dynamics = Langevin()
    adapter = ChainAdapter("SGLD", dynamics, None, CHOICES, TuningConfig(), 100, False, True, False)
    chain = ChainState(IndexStream(1000, 100))
    chain.measurements = measurements(20.0, 20.0)
    chain.settings = adapter.settings(chain.measurements)
    before = chain.settings.steps_per_draw
    independent = ar_draws(np.exp(-1.0), 100, 2, 9)  # one relaxation apart, as predicted
    assert not adapter.check_slowness(chain, independent)
    assert chain.settings.steps_per_draw == before
    assert not adapter.check_slowness(chain, ar_draws(0.6, 100, 2, 10))  # 1.9x, under 3x
    slow = ar_draws(0.98, 100, 2, 10)
    assert adapter.check_slowness(chain, slow)
    assert chain.measurements.slowness > TuningConfig().slowness_threshold
    assert chain.settings.steps_per_draw > TuningConfig().slowness_threshold * before
