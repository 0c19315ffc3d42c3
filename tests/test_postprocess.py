"""Step-size weighted means and zero-variance control variates against closed forms.

The statistical tests use exact draws (or a numpy SGLD) with fixed seeds;
their tolerances are multiples of Monte Carlo standard errors estimated from
independent replications (each a chain of the trace). Each comes with a
negative control: a wrong weighting or a wrong score that the same tolerance
rejects.
"""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from exact_posteriors import half_normal_scale

from pymc_sgmcmc import SGLD, postprocess
from pymc_sgmcmc.postprocess import (
    _control_variate_means,
    step_size_weighted_mean,
    unconstrained_draws,
    zero_variance_mean,
)

#: Monte Carlo tolerance, in standard errors (two-sided p ~ 6e-5 per check).
Z = 4.0

N_ROWS, NOISE_SD, PRIOR_SD = 200, 2.0, 10.0


def make_trace(posterior, sample_stats=None):
    """Build what pm.sample returns from arrays: InferenceData (ArviZ < 1) or DataTree."""
    groups = {"posterior": posterior}
    if sample_stats is not None:
        groups["sample_stats"] = sample_stats
    if int(az.__version__.split(".")[0]) >= 1:
        return az.from_dict(groups)
    return az.from_dict(**groups)


def normal_model(shift=0.0):
    """Normal means with known noise: the posterior is Gaussian, in closed form."""
    rows = np.random.default_rng(0).normal([1.0, -0.5], NOISE_SD, size=(N_ROWS, 2)) + shift
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD, shape=2)
        pm.Normal("y", mu, NOISE_SD, observed=rows)
    precision = 1 / PRIOR_SD**2 + N_ROWS / NOISE_SD**2
    return model, rows.sum(axis=0) / NOISE_SD**2 / precision, precision**-0.5


@pytest.fixture(scope="module")
def gaussian():
    model, mean, sd = normal_model()
    draws = mean + sd * np.random.default_rng(1).normal(size=(100, 200, 2))
    return model, mean, sd, draws, make_trace({"mu": draws})


# Step-size weighted mean --------------------------------------------------------------


def test_weighted_mean_is_the_weighted_sum_of_the_draws():
    rng = np.random.default_rng(2)
    theta = rng.normal(size=(3, 40, 2))
    tau = rng.gamma(2.0, size=(3, 40))
    step_size = rng.uniform(0.01, 1.0, size=(3, 40))
    steps = rng.integers(1, 5, size=(3, 40))
    posterior = {"theta": theta, "tau": tau}

    plain = make_trace(posterior, {"step_size": step_size})
    weights = step_size[..., None]
    expected = (weights * theta).sum(axis=(0, 1)) / weights.sum()
    result = step_size_weighted_mean(plain)
    np.testing.assert_allclose(result["theta"], expected, rtol=1e-12)
    np.testing.assert_allclose(result["tau"], (step_size * tau).sum() / step_size.sum())
    assert result["theta"].dims == plain["posterior"]["theta"].mean(("chain", "draw")).dims

    # A draw stands for steps_per_draw inner steps.
    timed = make_trace(posterior, {"step_size": step_size, "steps_per_draw": steps})
    weights = (step_size * steps)[..., None]
    squares = step_size_weighted_mean(timed, var_names="theta", function=lambda p: p**2)
    assert set(squares.data_vars) == {"theta"}
    np.testing.assert_allclose(
        squares["theta"], (weights * theta**2).sum(axis=(0, 1)) / weights.sum(), rtol=1e-12
    )
    by_chain = step_size_weighted_mean(timed, per_chain=True)["theta"]
    np.testing.assert_allclose(
        by_chain, (weights * theta).sum(axis=1) / weights.sum(axis=1), rtol=1e-12
    )

    # Negative control: with a constant step size it is the plain mean, and
    # changing the weights changes it.
    constant = make_trace(posterior, {"step_size": np.full((3, 40), 0.1)})
    np.testing.assert_allclose(
        step_size_weighted_mean(constant)["theta"], theta.mean(axis=(0, 1)), rtol=1e-12
    )
    assert not np.allclose(result["theta"], theta.mean(axis=(0, 1)), rtol=1e-3)

    with pytest.raises(ValueError, match="positive"):
        step_size_weighted_mean(make_trace(posterior, {"step_size": step_size * 0}))
    with pytest.raises(ValueError, match="step_size"):
        step_size_weighted_mean(make_trace(posterior, {"other": step_size}))


def decreasing_step_size_sgld(replications, steps, seed, scale=0.2, offset=50.0):
    """SGLD on N(0, 1) with a noisy gradient and step sizes scale * offset / (offset + t).

    Every chain starts at a draw of the target and the update is linear with
    mean-zero noise, so every iterate has mean exactly 0.
    """
    rng = np.random.default_rng(seed)
    step_size = scale * offset / (offset + np.arange(steps))
    theta = rng.normal(size=replications)
    draws = np.empty((replications, steps))
    for t in range(steps):
        gradient = -theta + rng.normal(scale=3.0, size=replications)
        theta = (
            theta
            + step_size[t] * gradient
            + np.sqrt(2 * step_size[t]) * rng.normal(size=replications)
        )
        draws[:, t] = theta
    return draws, np.broadcast_to(step_size, draws.shape)


def test_weighted_mean_of_a_decreasing_schedule_is_unbiased_and_beats_other_weightings():
    replications = 500
    draws, step_size = decreasing_step_size_sgld(replications, steps=4000, seed=3)
    trace = make_trace({"theta": draws}, {"step_size": step_size})
    weighted = np.asarray(step_size_weighted_mean(trace, per_chain=True)["theta"])
    plain = draws.mean(axis=1)
    inverse = (draws / step_size).sum(axis=1) / (1 / step_size).sum(axis=1)

    # Consistent: the replications' mean is the true mean 0 within its MC error.
    standard_error = weighted.std() / np.sqrt(replications)
    assert abs(weighted.mean()) < Z * standard_error

    # More precise than the plain mean, which over-weights the late, slowly
    # mixing draws, and than weights 1/eta, which over-weights them more
    # (the negative control). Paired differences of squared errors (truth 0),
    # with their MC standard errors over the replications.
    for worse in (plain, inverse):
        difference = worse**2 - weighted**2
        assert difference.mean() > Z * difference.std() / np.sqrt(replications)
    difference = inverse**2 - plain**2
    assert difference.mean() > Z * difference.std() / np.sqrt(replications)


# Zero-variance control variates ----------------------------------------------------------


def test_scores_are_the_model_gradient_in_the_unconstrained_space():
    rows = np.random.default_rng(4).normal(size=30)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", mu, sigma, observed=rows)
    rng = np.random.default_rng(5)
    mu_draws, sigma_draws = rng.normal(size=(2, 5)), rng.uniform(0.5, 2.0, size=(2, 5))
    draws = unconstrained_draws(make_trace({"mu": mu_draws, "sigma": sigma_draws}), model)
    assert draws.value_names == ("mu", "sigma_log__")
    assert draws.coordinates == {"mu": slice(0, 1), "sigma": slice(1, 2)}
    np.testing.assert_allclose(draws.positions[..., 1], np.log(sigma_draws), rtol=1e-12)
    residuals = rows - mu_draws[..., None]
    mu_score = -mu_draws / 9.0 + residuals.sum(axis=-1) / sigma_draws**2
    # d/dz of log HalfNormal(e^z) + log N(y | mu, e^z) + z (the Jacobian).
    sigma_score = -(sigma_draws**2) - rows.size + (residuals**2).sum(axis=-1) / sigma_draws**2 + 1
    np.testing.assert_allclose(draws.scores[..., 0], mu_score, rtol=1e-10)
    np.testing.assert_allclose(draws.scores[..., 1], sigma_score, rtol=1e-10)


def test_control_variate_mean_is_the_regression_intercept():
    rng = np.random.default_rng(6)
    scores = rng.normal(size=(300, 3))
    quantities = scores @ rng.normal(size=(3, 2)) + rng.normal(size=(300, 2)) + 5.0
    estimate = _control_variate_means(quantities, scores)
    covariance = np.cov(scores.T, quantities.T)
    coefficients = -np.linalg.solve(covariance[:3, :3], covariance[:3, 3:])
    np.testing.assert_allclose(estimate, (quantities + scores @ coefficients).mean(axis=0))
    # The fitted coefficients absorb any rescaling (or sign) of the score.
    np.testing.assert_allclose(_control_variate_means(quantities, -2.5 * scores), estimate)


def test_zero_variance_mean_is_exact_for_a_gaussian_posterior(gaussian):
    model, mean, sd, draws, trace = gaussian
    replications, n_draws = draws.shape[:2]
    plain_errors = draws.mean(axis=1) - mean
    # The draws are right: the plain mean's error has sd sd / sqrt(T).
    ratio = plain_errors.std(axis=0) / (sd / np.sqrt(n_draws))
    assert np.all(np.abs(ratio - 1) < Z * np.sqrt(1 / (2 * replications)))

    # phi = mu is linear in the score: the control variate removes all the error.
    by_chain = np.asarray(zero_variance_mean(trace, model, per_chain=True)["mu"])
    assert by_chain.shape == (replications, 2)
    assert np.max(np.abs(by_chain - mean)) < 1e-8 * sd
    pooled = zero_variance_mean(trace, model)
    assert pooled["mu"].dims == trace["posterior"]["mu"].mean(("chain", "draw")).dims
    np.testing.assert_allclose(pooled["mu"], mean, rtol=0, atol=1e-8 * sd)

    # Negative control: the score of another model (data shifted by half a
    # noise sd) gives that model's posterior mean, far outside the MC error.
    other, other_mean, _ = normal_model(shift=0.5 * NOISE_SD)
    wrong = np.asarray(zero_variance_mean(trace, other, per_chain=True)["mu"])
    np.testing.assert_allclose(wrong, np.broadcast_to(other_mean, wrong.shape), atol=1e-8)
    assert np.all(np.abs(wrong - mean) > 10 * Z * sd / np.sqrt(n_draws))


def test_minibatch_zero_variance_mean_is_unbiased_with_less_reduction(gaussian):
    model, mean, _, draws, trace = gaussian
    replications = draws.shape[0]
    plain_errors = draws.mean(axis=1) - mean
    errors = (
        np.asarray(
            zero_variance_mean(trace, model, batch_size=100, per_chain=True, random_seed=7)["mu"]
        )
        - mean
    )
    # Unbiased: the mean error over replications is within its MC error.
    assert np.all(np.abs(errors.mean(axis=0)) < Z * errors.std(axis=0) / np.sqrt(replications))
    # The minibatch noise (variance ~ the score's own here) halves the
    # reduction: about half the plain variance is left, not all of it or none.
    ratio = errors.var(axis=0) / plain_errors.var(axis=0)
    assert np.all((ratio > 0.2) & (ratio < 0.75)), ratio


@pytest.fixture(scope="module")
def half_normal():
    """sigma ~ HalfNormal(1), 50 rows ~ N(0, sigma): exact draws by inverse CDF on a fine grid."""
    model, inverse_cdf, mean = half_normal_scale(seed=8)
    draws = inverse_cdf(np.random.default_rng(9).uniform(size=(100, 200)))
    return model, mean, draws


def test_zero_variance_mean_of_a_constrained_variable(half_normal, monkeypatch):
    model, mean, draws = half_normal
    replications = draws.shape[0]
    trace = make_trace({"sigma": draws})
    plain = draws.mean(axis=1)

    def errors():
        return np.asarray(zero_variance_mean(trace, model, per_chain=True)["sigma"]) - mean

    # phi = sigma = exp(z), score in z = log(sigma) with the Jacobian: unbiased
    # within MC error, and most of the variance is gone.
    zero_variance = errors()
    assert abs(zero_variance.mean()) < Z * zero_variance.std() / np.sqrt(replications)
    assert zero_variance.var() < 0.1 * plain.var()
    # Pooled, it agrees with the plain mean within the plain mean's MC error.
    pooled = float(zero_variance_mean(trace, model)["sigma"])
    assert abs(pooled - draws.mean()) < Z * draws.std() / np.sqrt(draws.size)

    # Negative control: the score without the log transform's Jacobian (the
    # gradient of log p(sigma(z)), one less) gives a clearly biased estimate.
    def without_jacobian(*args, **kwargs):
        draws = unconstrained_draws(*args, **kwargs)
        return postprocess.UnconstrainedDraws(
            draws.positions, draws.scores - 1.0, draws.value_names, draws.coordinates
        )

    monkeypatch.setattr(postprocess, "unconstrained_draws", without_jacobian)
    biased = errors()
    assert abs(biased.mean()) > 10 * Z * biased.std() / np.sqrt(replications)


def test_zero_variance_mean_refuses_too_few_draws(gaussian):
    model, _, _, draws, _ = gaussian
    with pytest.raises(ValueError, match="more draws"):
        zero_variance_mean(make_trace({"mu": draws[:1, :3]}), model)
    with pytest.raises(ValueError, match="batch_size"):
        zero_variance_mean(make_trace({"mu": draws[:1]}), model, batch_size=N_ROWS + 1)


# pm.sample end to end ----------------------------------------------------------------------


@pytest.mark.integration
def test_estimators_and_stein_discrepancy_on_a_pm_sample_result():
    from pymc_sgmcmc.stein import kernel_stein_discrepancy

    rows = np.random.default_rng(10).normal(1.0, 1.0, size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", mu, sigma, observed=rows)
        result = pm.sample(
            step=SGLD(batch_size=50),
            draws=200,
            tune=200,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    posterior = postprocess.trace_group(result, "posterior")
    plain = posterior.mean(("chain", "draw"))
    sd = posterior.std(("chain", "draw"))

    weighted = step_size_weighted_mean(result)
    assert set(weighted.data_vars) == {"mu", "sigma"}
    step_size = np.asarray(result["sample_stats"]["step_size"])
    if np.ptp(step_size) == 0:
        np.testing.assert_allclose(weighted["mu"], plain["mu"], rtol=1e-12)

    zero_variance = zero_variance_mean(result, model)
    for name in ("mu", "sigma"):
        # Both estimate the same mean; they differ by much less than a posterior sd.
        assert abs(float(zero_variance[name] - plain[name])) < 0.5 * float(sd[name])

    discrepancy = kernel_stein_discrepancy(result, model, standardize=True)
    assert discrepancy.n_draws == 200 and discrepancy.statistic == "V"
    shifted = make_trace(
        {
            "mu": np.asarray(posterior["mu"]) + float(sd["mu"]),
            "sigma": np.asarray(posterior["sigma"]),
        }
    )
    assert (
        kernel_stein_discrepancy(shifted, model, standardize=True).squared > 4 * discrepancy.squared
    )
    only_mu = kernel_stein_discrepancy(result, model, var_names="mu", standardize=True)
    assert np.isfinite(only_mu.squared) and only_mu.squared != discrepancy.squared
    minibatch = kernel_stein_discrepancy(result, model, batch_size=50, random_seed=2)
    assert minibatch.statistic == "U" and np.isfinite(minibatch.squared)
