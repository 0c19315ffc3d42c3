"""Long-run checks against posteriors known in closed form or from long NUTS runs.

Tolerances come from Monte Carlo error (``tests/monte_carlo.py``): ArviZ's
MCSE of the draws and of the reference, Bonferroni-corrected for the number
of coordinates compared.

- On a Gaussian posterior the samplers are linear recursions whose
  stationary law is known: the means are exact and the variance is inflated
  by the predicted amount. With ``bias_budget=0.3`` the tuner must put the
  measured inflation at the budget, within Monte Carlo error; a step-size
  rule off by a factor of 3, gradient noise under-measured 3x or a rule that
  ignores the temperature moves it far outside.
- The defaults, as a user runs them (only ``batch_size`` given), must meet
  the accuracy bar (means within 0.1 posterior sd, sds within 10%) on exact
  and NUTS references, at temperatures 0.1 and 0.5, and in compound steps
  with PyMC's own step methods; each such test first checks that its Monte
  Carlo error is small enough to tell a miss of the bar from a pass.
- Negative controls run the same checks on a wrong target and a wrong N/B
  scale, which must fail.
- SGRLD on a funnel-shaped prior, against the exact posterior from a grid,
  with a negative control: the same run without its correction term fails.
- A hierarchical model written non-centred, whose joint mode lies far from
  the posterior's mass, must meet the bar on the parameters it shares with
  the centred form, against NUTS on the centred form (the same posterior).
"""

import numpy as np
import pymc as pm
import pytest
from exact_posteriors import widely_spread_regression
from monte_carlo import assert_matches, assert_meets_bar, compare, critical_value
from scipy.linalg import solve_discrete_lyapunov

from pymc_sgmcmc import SGHMC, SGLD, SGRLD
from pymc_sgmcmc.panel import (
    CORRELATED_PRIOR_SD,
    correlated_data,
    correlated_regression,
    logistic_regression,
    normal_inverse_gamma_regression,
    nuts_reference,
)
from pymc_sgmcmc.real_posteriors import polynomial_regression, radon_like
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.samplers.cyclical import posterior_draws
from pymc_sgmcmc.samplers.sgld import INTEGRATORS
from pymc_sgmcmc.samplers.sgrld import RiemannianLangevin
from pymc_sgmcmc.tuning.config import TuningConfig

pytestmark = pytest.mark.statistical

BATCH_SIZE = 100  # N / B = 20 at N = 2,000


def samplers(names=SAMPLERS, core_marks=(pytest.mark.once,)):
    """Parameters over the registered samplers ``names``.

    Those beyond SGLD and SGHMC carry the ``family`` mark, SGLD and SGHMC
    ``core_marks``: by default ``once``, so that CI runs each run on one PyMC
    version (the family's on PyMC 5, the core samplers' on PyMC 6).
    """
    return [
        pytest.param(
            SAMPLERS[name],
            id=name,
            marks=list(core_marks) if name in CORE else [pytest.mark.family],
        )
        for name in names
    ]


CORE = ("SGLD", "SGHMC")
#: Samplers whose Gaussian model is their exact stationary law (the others' is a bound).
EXACT = [name for name, sampler in SAMPLERS.items() if sampler.dynamics_class.exact_gaussian_model]


#: Cyclical SGLD's draws late in a cycle, at small step sizes, barely move: it
#: needs twice the draws for the Monte Carlo precision the bar checks need.
DRAWS_FACTOR = {"CyclicalSGLD": 2}


def draws_for(sampler, draws):
    """The draws ``sampler`` needs for the precision ``draws`` give the others."""
    return draws * DRAWS_FACTOR.get(sampler.__name__, 1)


def posterior(result):
    """The posterior draws, without a cyclical sampler's exploration stages."""
    return posterior_draws(result)


def sample(model, step, draws, seed, tune=100, chains=2, callback=None):
    with model:
        return pm.sample(
            draws=draws,
            tune=tune,
            step=step(),
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
            callback=callback,
        )


def tempered(known, temperature):
    """The Gaussian posterior raised to the power 1 / temperature: same means, sds * sqrt(tau)."""
    return {name: np.sqrt(temperature) * sd for name, sd in known.sds.items()}


@pytest.fixture(scope="module")
def gaussian():
    """Two independent coefficients: every curvature in preconditioned coordinates is 1."""
    return correlated_regression(n_rows=2000, correlation=0.0)


def inflation_cases():
    """SGLD and SGHMC at three temperatures; the family's exact samplers at temperature 1.

    How the noise weighs against the temperature is the tuner's, shared by all
    samplers; each sampler's own use of the temperature in its update is checked
    at temperatures 0.5 and 0.1 by ``test_defaults_match_the_tempered_posterior``.
    """
    cases = []
    for param in samplers(EXACT):
        temperatures = (1.0, 0.5, 0.1) if param.id in CORE else (1.0,)
        for temperature in temperatures:
            cases.append(
                pytest.param(
                    param.values[0], temperature, id=f"{param.id}-{temperature}", marks=param.marks
                )
            )
    return cases


@pytest.mark.parametrize(("sampler", "temperature"), inflation_cases())
def test_measured_inflation_is_the_bias_budget(gaussian, sampler, temperature):
    """Minibatch noise fully on (N / B = 100, rows drawn independently), budget 0.3."""
    budget = 0.3

    def step():
        return sampler(
            batch_size=20,
            control_variate=False,
            replace=True,
            bias_budget=budget,
            temperature=temperature,
        )

    result = sample(gaussian.model, step, draws=2500, seed=11)
    comparison = compare(result.posterior, gaussian.means, tempered(gaussian, temperature))
    assert_matches(comparison, f"{sampler.__name__} tau={temperature}", np.sqrt(1 + budget))
    recorded = np.asarray(result.sample_stats["predicted_inflation"])
    np.testing.assert_allclose(recorded, budget, rtol=1e-6)


@pytest.mark.once
@pytest.mark.parametrize(
    "options",
    [{"friction": 2e4}, {"mass": 1.0}, {"friction": 50.0, "mass": 10.0}],
    ids=["heavy friction", "unit mass", "both"],
)
def test_measured_inflation_is_the_bias_budget_with_given_friction_and_mass(gaussian, options):
    """The tuner sees a given friction and mass as they are (posterior variances ~ 5e-4)."""
    budget = 0.3

    def step():
        return SGHMC(
            batch_size=20, control_variate=False, replace=True, bias_budget=budget, **options
        )

    result = sample(gaussian.model, step, draws=2500, seed=13)
    comparison = compare(result.posterior, gaussian.means, gaussian.sds)
    assert_matches(comparison, f"SGHMC {options}", np.sqrt(1 + budget))


def langevin_stationary_covariance(step_size, factor, preconditioner, hessian, noise, temperature):
    """SGLD's exact stationary covariance on a Gaussian target, in the model's coordinates.

    In the metric's coordinates ``z`` (``theta = shift + factor z``) each inner
    step is the linear recursion ``z <- (I - eta P K) z + eta P n + sqrt(2 eta tau P) xi``
    with ``K = factor' hessian factor`` and gradient noise ``n`` of covariance
    ``factor' noise factor``; its stationary covariance solves the discrete
    Lyapunov equation.
    """
    curvature = factor.T @ hessian @ factor
    contraction = np.eye(len(curvature)) - step_size * preconditioner[:, None] * curvature
    whitened_noise = factor.T @ noise @ factor
    injected = step_size**2 * preconditioner[:, None] * whitened_noise * preconditioner[None, :]
    injected += 2.0 * step_size * temperature * np.diag(preconditioner)
    return factor @ solve_discrete_lyapunov(contraction, injected) @ factor.T


@pytest.mark.once
@pytest.mark.parametrize(("step_size", "bounds"), [(2e-3, (0.1, 1.0)), (2e-2, (1.0, 5.0))])
def test_given_step_size_inflates_as_predicted(step_size, bounds):
    """A step size the user gives is kept; the recorded prediction is what the chain does.

    Each coordinate's sd is compared with SGLD's exact stationary law, given the
    metric each chain sampled with and the exact gradient noise of minibatches
    drawn with replacement at the mode; the tuner's prediction, the largest
    inflation over all directions, with that law's largest, within its
    measurement error. At several times the posterior variance the tune windows
    must leave the metric alone: measured on inflated draws it would widen the
    steps and compound the inflation.
    """
    n_rows, batch_size, temperature = 2000, 20, 0.5
    known = correlated_regression(n_rows=n_rows, correlation=0.0)
    steps, settings = [], {}

    def step():
        steps.append(
            SGLD(
                batch_size=batch_size,
                step_size=step_size,
                control_variate=False,
                replace=True,
                temperature=temperature,
            )
        )
        return steps[-1]

    def record_settings(trace, draw):
        settings[draw.chain] = steps[-1].chain.settings

    result = sample(known.model, step, draws=2500, seed=12, callback=record_settings)
    x, y = correlated_data(n_rows, correlation=0.0)
    hessian = x.T @ x + np.eye(2) / CORRELATED_PRIOR_SD**2
    # Minibatch gradients of rows drawn with replacement: N^2 / B times the rows' covariance.
    row_gradients = x * (y - x @ known.means["beta"])[:, None]
    noise = n_rows**2 / batch_size * np.cov(row_gradients.T, bias=True)
    target = temperature * np.linalg.inv(hessian)
    covariances = [
        langevin_stationary_covariance(
            chain.step_size.value,
            chain.metric.factor(2),
            np.broadcast_to(chain.inputs["preconditioner"], (2,)),
            hessian,
            noise,
            temperature,
        )
        for chain in settings.values()
    ]
    assert len(covariances) == 2
    # The pooled draws' variance is the chains' mean variance (their means are equal).
    expected = np.sqrt(np.mean([np.diag(c) for c in covariances], axis=0) / np.diag(target))
    comparison = compare(result.posterior, known.means, tempered(known, temperature))
    assert_matches(comparison, "SGLD given step size", expected)

    predicted = float(result.sample_stats["predicted_inflation"][0, 0])
    assert bounds[0] < predicted < bounds[1]
    exact = np.linalg.eigvals(np.linalg.solve(target, covariances[0])).real.max() - 1.0
    # The prediction rests on the gradient noise measured from
    # noise_points x noise_batches minibatch gradients: its relative standard
    # error, sqrt(2 / count), carries over to the inflation.
    config = TuningConfig()
    relative = np.sqrt(2.0 / (config.noise_points * config.noise_batches))
    assert abs(predicted - exact) < critical_value(1) * exact * relative


#: SGLD's sd ratio on a Gaussian posterior when the whole budget goes to the
#: discretisation: the Euler-Maruyama step inflates the variance by it, the
#: shared normal draws not at all (their allowance is for non-Gaussian error).
DISCRETISATION_SD_RATIO = {"euler_maruyama": np.sqrt(1 + 0.3), "leimkuhler_matthews": 1.0}


@pytest.mark.once
@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_batches_of_every_row_leave_the_budget_to_the_discretisation(integrator):
    """A batch of all N rows drawn without replacement is the full-data gradient.

    No gradient noise is measured, the cheaper plain estimator is chosen, and
    SGLD spends the whole budget on its discretisation: with Euler-Maruyama's
    step the draws' variance is inflated by the budget, with the shared draws
    it is exact. Noise measured as for rows drawn with replacement (which
    leave about a third of the rows out of each batch at N / B = 1) would take
    smaller steps and inflate Euler-Maruyama's variance by less.
    """
    known = correlated_regression(n_rows=50, correlation=0.0)
    budget = 0.3

    def step():
        return SGLD(batch_size=50, bias_budget=budget, integrator=integrator)

    result = sample(known.model, step, draws=2500, seed=14)
    stats = result.sample_stats
    np.testing.assert_array_equal(np.asarray(stats["gradient_noise"]), 0.0)
    assert not np.asarray(stats["control_variate"]).any()
    np.testing.assert_allclose(np.asarray(stats["predicted_inflation"]), budget, rtol=1e-6)
    comparison = compare(result.posterior, known.means, known.sds)
    assert_matches(comparison, "SGLD full batches", DISCRETISATION_SD_RATIO[integrator])


@pytest.mark.once
@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_the_full_data_gradient_chosen_by_the_tuner_leaves_the_budget_to_the_discretisation(
    integrator,
):
    """Where the tuner takes every step on all N rows, those steps carry no noise.

    The rows spread ten times as widely as the model's noise sd of 1, so
    minibatches of 5 of the 50 rows carry noise about 100 times the curvature
    per unit of N/B; a control variate (of either order) made costly leaves the full data's
    gradient (10 minibatch gradients a step) as the cheaper choice. The budget
    then goes to the discretisation, as with batches of every row. Steps on
    minibatches counted as noiseless would inflate the variance by far more.
    """
    model, means, sds = widely_spread_regression()
    budget = 0.3
    costly = TuningConfig(
        estimator_cost={"minibatch": 1.0, "control_variate": 100.0, "second_order": 200.0}
    )

    def step():
        return SGLD(batch_size=5, bias_budget=budget, tuning=costly, integrator=integrator)

    result = sample(model, step, draws=2500, seed=14)
    stats = result.sample_stats
    np.testing.assert_array_equal(np.asarray(stats["gradient_noise"]), 0.0)
    np.testing.assert_allclose(np.asarray(stats["predicted_inflation"]), budget, rtol=1e-6)
    comparison = compare(result.posterior, means, sds)
    assert_matches(
        comparison, "SGLD on the full data's gradient", DISCRETISATION_SD_RATIO[integrator]
    )


@pytest.fixture(scope="module")
def regression():
    return normal_inverse_gamma_regression(n_rows=2000)


@pytest.fixture(scope="module")
def sgld_regression_draws(regression):
    def step():
        return SGLD(batch_size=BATCH_SIZE, control_variate=False)

    return sample(regression.model, step, 3000, 1).posterior


@pytest.mark.once
def test_sgld_with_minibatch_noise_matches_exact_regression(regression, sgld_regression_draws):
    comparison = compare(sgld_regression_draws, regression.means, regression.sds)
    assert_meets_bar(comparison, "SGLD regression, minibatch gradient")


@pytest.mark.once
def test_sghmc_with_minibatch_noise_matches_exact_regression(regression):
    def step():
        return SGHMC(batch_size=BATCH_SIZE, control_variate=False)

    draws = sample(regression.model, step, 3000, 2).posterior
    comparison = compare(draws, regression.means, regression.sds)
    assert_meets_bar(comparison, "SGHMC regression, minibatch gradient")


@pytest.mark.once
def test_negative_control_wrong_target(regression, sgld_regression_draws):
    """The same draws checked against the posterior of other data must fail."""
    other = normal_inverse_gamma_regression(n_rows=2000, seed=99)
    comparison = compare(sgld_regression_draws, other.means, other.sds)
    with pytest.raises(AssertionError):
        assert_meets_bar(comparison, "negative control: other data")


@pytest.mark.once
def test_negative_control_wrong_scale(regression):
    """A likelihood scaled by N/(2B) instead of N/B widens the sds by sqrt(2): the check fails."""
    halved = normal_inverse_gamma_regression(n_rows=2000, total_size=1000)

    def step():
        return SGLD(batch_size=BATCH_SIZE, control_variate=False)

    draws = sample(halved.model, step, 1500, 4).posterior
    comparison = compare(draws, regression.means, regression.sds)
    with pytest.raises(AssertionError):
        assert_meets_bar(comparison, "negative control: N/(2B)")


@pytest.mark.parametrize("sampler", samplers())
def test_defaults_match_exact_regression(regression, sampler):
    result = sample(
        regression.model, lambda: sampler(batch_size=BATCH_SIZE), draws_for(sampler, 2000), 5
    )
    draws = posterior(result)
    assert_meets_bar(compare(draws, regression.means, regression.sds), f"{sampler.__name__}")


@pytest.mark.parametrize("temperature", [0.5, 0.1])
@pytest.mark.parametrize("sampler", samplers())
def test_defaults_match_the_tempered_posterior(sampler, temperature):
    known = correlated_regression(n_rows=2000, correlation=0.5)

    def step():
        return sampler(batch_size=BATCH_SIZE, temperature=temperature)

    draws = posterior(sample(known.model, step, draws_for(sampler, 2000), 6))
    comparison = compare(draws, known.means, tempered(known, temperature))
    assert_meets_bar(comparison, f"{sampler.__name__} tau={temperature}")


@pytest.fixture(scope="module")
def strongly_correlated():
    """Posterior correlation -0.999 (condition number about 2,000)."""
    return correlated_regression(n_rows=2000, correlation=0.999)


@pytest.mark.parametrize("sampler", samplers())
def test_defaults_match_a_strongly_correlated_posterior(strongly_correlated, sampler):
    """The dense metric whitens the posterior: the bar is met with few inner steps per draw.

    A diagonal preconditioner needs the cap of 1,000 inner steps per draw here
    and still reaches an ESS of only a few dozen in 1,000 draws.
    """
    result = sample(
        strongly_correlated.model,
        lambda: sampler(batch_size=BATCH_SIZE),
        draws_for(sampler, 1500),
        12,
    )
    comparison = compare(posterior(result), strongly_correlated.means, strongly_correlated.sds)
    assert_meets_bar(comparison, f"{sampler.__name__} correlation -0.999")
    # The median: cyclical SGLD's first draw of each cycle also runs its
    # exploration stage.
    assert np.median(result.sample_stats["steps_per_draw"]) < 100


def switching_regression(n_rows=5000, seed=0):
    """``y ~ N(mu + s x, 1)``, ``x ~ U(-0.5, 1.5)``, N(0, 10) priors: a Gaussian posterior."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 1.5, n_rows)
    y = 1.0 + 2.0 * x + rng.normal(size=n_rows)
    design = np.column_stack([np.ones(n_rows), x])
    covariance = np.linalg.inv(design.T @ design + np.eye(2) / 100)
    mean = covariance @ design.T @ y
    sd = np.sqrt(np.diag(covariance))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        s = pm.Normal("s", 0, 10)
        pm.Normal("y", mu + s * x, 1, observed=y)
    means = {"mu": mean[0], "s": mean[1]}
    sds = {"mu": sd[0], "s": sd[1]}
    return model, means, sds


@pytest.mark.once
@pytest.mark.parametrize("control_variate", [None, True])
@pytest.mark.parametrize("sampler", [SGLD, SGHMC], ids=["SGLD", "SGHMC"])
def test_compound_step_with_metropolis(sampler, control_variate):
    """The stochastic-gradient block stays exact while Metropolis moves the other variable.

    The compound-step machinery (re-measuring at the end of tuning, the
    control variate's other blocks) is the adapter's, the same for every
    sampler; its 24,000-draw runs use the two samplers it was built for.
    """
    model, means, sds = switching_regression()

    def step():
        return [
            sampler(vars=[model["mu"]], batch_size=BATCH_SIZE, control_variate=control_variate),
            pm.Metropolis(vars=[model["s"]]),
        ]

    with model:
        draws = posterior(sample(model, step, 24_000, 7, tune=1000))
    assert_meets_bar(compare(draws, means, sds), f"{sampler.__name__} + Metropolis")


@pytest.mark.once
def test_compound_step_with_nuts_assigned_by_pymc(regression):
    """``step=[SGHMC(vars=[beta])]``: PyMC gives the noise variance to NUTS."""
    with regression.model:
        step = SGHMC(vars=[regression.model["beta"]], batch_size=BATCH_SIZE)
        result = pm.sample(
            draws=2000,
            tune=500,
            step=[step],
            chains=2,
            cores=1,
            random_seed=8,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert_meets_bar(compare(result.posterior, regression.means, regression.sds), "SGHMC + NUTS")


@pytest.fixture(scope="module")
def logistic():
    return nuts_reference(logistic_regression(n_rows=5000))


@pytest.fixture(scope="module")
def high_leverage():
    """Cubic polynomial regression of collinear covariates at N = 50,000 (exact posterior)."""
    return polynomial_regression(n_rows=50_000)


@pytest.mark.once
@pytest.mark.parametrize("sampler", [SGLD, SGHMC])
def test_second_order_control_variate_samples_rows_of_unequal_leverage(high_leverage, sampler):
    """The control variate's noise here is the minibatch's error in the curvature (cubes of
    log-normal covariates: a few rows carry most of it), which the second-order control
    variate removes: the chains relax within a few dozen inner steps, where the first-order
    one needs tens of thousands. The defaults choose it (the likelihood's gradient is linear
    across the posterior to about 1%).
    """

    def step():
        return sampler(batch_size=BATCH_SIZE)

    result = sample(high_leverage.model, step, 3000, 22, tune=1000)
    steps = np.asarray(result.sample_stats["steps_per_draw"])
    assert steps.max() <= 100
    comparison = compare(result.posterior, high_leverage.means, high_leverage.sds)
    assert_meets_bar(comparison, f"{sampler.__name__} defaults, rows of unequal leverage")


# With the family's runs, which share the NUTS reference computed by the fixture.
@pytest.mark.parametrize("sampler", samplers(core_marks=()))
def test_defaults_match_nuts_on_logistic_regression(logistic, sampler):
    # The NUTS reference's own Monte Carlo error takes part of the precision
    # budget, so 2,000 draws per chain leave the samplers with the least ESS
    # per draw too imprecise to judge the bar.
    result = sample(
        logistic.model, lambda: sampler(batch_size=BATCH_SIZE), draws_for(sampler, 4000), 6
    )
    draws = posterior(result)
    comparison = compare(draws, logistic.means, logistic.sds, logistic.mean_se, logistic.sd_se)
    assert_meets_bar(comparison, f"{sampler.__name__} logistic N=5000")


SHARED = ("mu", "tau", "beta", "sigma")


@pytest.mark.once
def test_defaults_travel_from_a_non_centred_joint_mode():
    """The chains travel during tune from the joint mode to the posterior's mass.

    In the non-centred form (``alpha = mu + tau z``) the joint mode has
    ``tau`` about four times its posterior mean, and the gradient noise there
    is so large against the curvature that the bias budget alone would keep
    the chains at the mode: with ``travel_budget=0.05`` (no travel) this run
    misses by 0.9 sd on ``mu`` and 40% on the sd of ``tau``. Once there, the
    tune windows find that the variance inflation moves ``tau``'s mean by
    several of its sds per unit and take smaller steps, hence 8,000 draws: at 6,000
    the smallest ESS can fall just short of the ~900 that judging the bar needs.
    """
    reference = nuts_reference(radon_like(n_rows=1000, n_groups=20, centred=True))
    model = radon_like(n_rows=1000, n_groups=20, centred=False).model
    result = sample(model, lambda: SGLD(batch_size=BATCH_SIZE), 8000, 7, tune=1000)
    means = {name: reference.means[name] for name in SHARED}
    sds = {name: reference.sds[name] for name in SHARED}
    mean_se = {name: reference.mean_se[name] for name in SHARED}
    sd_se = {name: reference.sd_se[name] for name in SHARED}
    comparison = compare(result.posterior, means, sds, mean_se, sd_se)
    assert_meets_bar(comparison, "SGLD non-centred radon-like")


class _LangevinWithoutCorrection(RiemannianLangevin):
    """SGRLD's update with its correction term dropped: the negative control."""

    name = "sgrld_without_correction"

    @staticmethod
    def step(state, gradient, noise, inputs):
        return RiemannianLangevin.step(
            state, gradient, noise, {**inputs, "correction": 0.0 * inputs["correction"]}
        )


class _SGRLDWithoutCorrection(SGRLD):
    dynamics_class = _LangevinWithoutCorrection


@pytest.fixture(scope="module")
def weak_funnel():
    """``v ~ N(0, 1.5)``, ``x_j ~ N(0, e^{v/2})``, ``y ~ N(x_g, 3)``: 4 groups of 10 rows.

    Given ``v`` everything is Gaussian (the group means ``ybar_j`` are
    ``N(0, e^v + 9/10)``), so the exact posterior means and sds of ``v`` and
    of every ``x_j`` come from a grid over ``v``.
    """
    groups, rows, noise, v_sd = 4, 10, 3.0, 1.5
    rng = np.random.default_rng(3)
    group = np.repeat(np.arange(groups), rows)
    y = rng.normal(size=groups)[group] + noise * rng.normal(size=group.size)
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, v_sd)
        x = pm.Normal("x", 0.0, pm.math.exp(v / 2.0), shape=groups)
        pm.Normal("y", x[group], noise, observed=y)
    means = np.bincount(group, y) / rows
    grid = np.linspace(-12.0, 8.0, 40001)
    spread = np.exp(grid)[:, None] + noise**2 / rows
    log_weight = -0.5 * (grid / v_sd) ** 2 - 0.5 * np.sum(np.log(spread) + means**2 / spread, 1)
    weight = np.exp(log_weight - log_weight.max())
    weight /= weight.sum()
    shrink = np.exp(grid)[:, None] / spread
    x_mean, x_variance = shrink * means, 1.0 / (np.exp(-grid)[:, None] + rows / noise**2)
    v_mean = weight @ grid
    exact_x_mean = weight @ x_mean
    return (
        model,
        {"v": v_mean, "x": exact_x_mean},
        {
            "v": np.sqrt(weight @ (grid - v_mean) ** 2),
            "x": np.sqrt(weight @ (x_variance + x_mean**2) - exact_x_mean**2),
        },
    )


@pytest.mark.family
def test_sgrld_samples_a_funnel_and_needs_its_correction(weak_funnel):
    """On a funnel-shaped prior SGRLD's metric changes with ``v``; its correction keeps the law.

    Exact gradients (one batch of all rows) and a small fixed step in the
    model's coordinates, so the stationary law is the posterior up to a
    discretisation error far below the Monte Carlo error; the same run
    without the correction term (negative control) must fail the same check.
    """
    model, means, sds = weak_funnel
    settings = {
        "batch_size": 40,
        "step_size": 0.01,
        "steps_per_draw": 80,
        "preconditioner": None,
        "control_variate": False,
    }
    result = sample(model, lambda: SGRLD(**settings), 2000, 11, tune=200)
    assert_matches(compare(result.posterior, means, sds), "SGRLD on a funnel")
    control = sample(model, lambda: _SGRLDWithoutCorrection(**settings), 2000, 11, tune=200)
    comparison = compare(control.posterior, means, sds)
    print(comparison.report("SGRLD without its correction"))
    z = critical_value(2 * comparison.size)
    wrong_mean = np.abs(comparison.mean_error) > z * comparison.mean_se
    wrong_sd = np.abs(comparison.sd_ratio - 1) > z * comparison.sd_se
    assert np.any(wrong_mean | wrong_sd)


def per_row_offsets(seed=0, rows=20):
    """``y_i ~ N(mu + offset_i, 1)`` with ``mu, offset_i ~ N(0, 1)``: one latent per row.

    The posterior is Gaussian; its precision is the prior's identity plus
    ``A'A`` with ``A = [1 | I]``. Returns the model and its exact means and sds.
    """
    y = np.random.default_rng(seed).normal(1.0, 1.5, rows)
    design = np.column_stack([np.ones(rows), np.eye(rows)])
    covariance = np.linalg.inv(np.eye(rows + 1) + design.T @ design)
    mean = covariance @ design.T @ y
    sd = np.sqrt(np.diag(covariance))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        offset = pm.Normal("offset", 0.0, 1.0, shape=rows)
        pm.Normal("y", mu + offset, 1.0, observed=y)
    means = {"mu": mean[0], "offset": mean[1:]}
    sds = {"mu": sd[0], "offset": sd[1:]}
    return model, means, sds


@pytest.fixture(scope="module")
def per_row_draws():
    model, means, sds = per_row_offsets()
    # A batch size beyond the 20 rows: full batches, each offset read with its row.
    draws = sample(model, lambda: SGHMC(batch_size=100), 2000, 21).posterior
    return draws, means, sds


@pytest.mark.once
def test_per_row_latent_variables_with_full_batches_match_the_exact_posterior(per_row_draws):
    draws, means, sds = per_row_draws
    assert_meets_bar(compare(draws, means, sds), "SGHMC per-row offsets")


@pytest.mark.once
def test_negative_control_per_row_latents_of_other_rows(per_row_draws):
    """The same draws against the posterior with the rows' order reversed must fail."""
    draws, means, sds = per_row_draws
    reversed_means = {"mu": means["mu"], "offset": means["offset"][::-1]}
    with pytest.raises(AssertionError):
        assert_meets_bar(compare(draws, reversed_means, sds), "negative control: other rows")
