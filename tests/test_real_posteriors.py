"""Builders of the panel models with correlated, skewed or high-dimensional posteriors."""

import numpy as np
import pytensor
import pytest
from pymc.blocking import DictToArrayBijection
from pytensor.compile.sharedvalue import SharedVariable

from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.real_posteriors import (
    _polynomial_data,
    many_groups_regression,
    median_regression,
    median_regression_moments,
    poisson_glmm,
    poisson_regression,
    polynomial_regression,
    posterior_correlation_condition,
    radon_like,
    student_t_regression,
)

# Builder, free variables and their total size D, and the pm.Data index column.
BUILDERS = {
    "polynomial": (polynomial_regression, {"sigma2", "beta"}, 27, None),
    "student_t": (student_t_regression, {"intercept", "beta", "sigma"}, 5, None),
    "poisson": (poisson_regression, {"intercept", "effect", "beta"}, 22, "level_index"),
    "radon_centred": (
        lambda **kw: radon_like(centred=True, **kw),
        {"mu", "tau", "alpha", "beta", "sigma"},
        54,
        "group_index",
    ),
    "radon_non_centred": (
        lambda **kw: radon_like(centred=False, **kw),
        {"mu", "tau", "z", "beta", "sigma"},
        54,
        "group_index",
    ),
    "radon_slopes_centred": (
        lambda **kw: radon_like(centred=True, varying_slopes=True, **kw),
        {"mu_alpha", "tau_alpha", "alpha", "mu_beta", "tau_beta", "beta", "sigma"},
        105,
        "group_index",
    ),
    "radon_slopes_non_centred": (
        lambda **kw: radon_like(centred=False, varying_slopes=True, **kw),
        {"mu_alpha", "tau_alpha", "z_alpha", "mu_beta", "tau_beta", "z_beta", "sigma"},
        105,
        "group_index",
    ),
    "median": (median_regression, {"coefficients"}, 2, None),
    "poisson_glmm": (poisson_glmm, {"mu", "tau", "z", "beta"}, 63, "group_index"),
    "many_groups": (
        many_groups_regression,
        {"mu", "tau", "intercept", "beta", "sigma"},
        1004,
        "group_index",
    ),
}

# Prior of polynomial_regression, written out independently of the module.
PRIOR_SCALE, PRIOR_SHAPE, PRIOR_RATE = 100.0, 1.0, 1.0


@pytest.mark.parametrize("name", list(BUILDERS))
def test_builder_has_its_free_variables_and_rows(name):
    builder, variables, dimension, _ = BUILDERS[name]
    panel = builder()
    model = panel.model
    point = model.initial_point()
    assert {rv.name for rv in model.free_RVs} == variables
    assert sum(value.size for value in point.values()) == dimension
    observed = model.rvs_to_values[model["y"]]
    rows = observed.data if hasattr(observed, "data") else observed.get_value()
    assert len(rows) == panel.n_rows
    label, rest = panel.name.split(" N=")
    assert label and int(rest.split()[0]) == panel.n_rows
    assert panel.key["model"] and panel.key["n_rows"] == panel.n_rows


def test_radon_like_groups_are_unbalanced_and_keyed_by_form():
    centred, non_centred = radon_like(centred=True), radon_like(centred=False)
    sizes = np.bincount(centred.model["group_index"].get_value(), minlength=50)
    assert sizes.min() <= 5 and sizes.max() >= 300
    assert centred.key != non_centred.key
    assert centred.name.split(" N=")[0] != non_centred.name.split(" N=")[0]
    slopes = radon_like(centred=True, varying_slopes=True)
    assert slopes.key != centred.key
    # Slopes are drawn after the intercept-only data, whose groups they keep.
    np.testing.assert_array_equal(
        slopes.model["group_index"].get_value(), centred.model["group_index"].get_value()
    )


def test_poisson_glmm_groups_are_unbalanced_and_gathered_by_a_pm_data_index():
    panel = poisson_glmm()
    index = panel.model["group_index"]
    assert isinstance(index, SharedVariable)
    sizes = np.bincount(index.get_value(), minlength=60)
    assert sizes.min() < 10 and sizes.max() > 190
    assert panel.n_rows == sizes.sum() == 6181


def test_poisson_regression_has_levels_with_a_handful_of_events():
    panel = poisson_regression()
    level = panel.model["level_index"].get_value()
    counts = panel.model.rvs_to_values[panel.model["y"]].data
    events = np.bincount(level, weights=counts, minlength=20)
    assert counts.mean() < 0.3
    assert np.sum(events <= 5) >= 4


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("poisson", {"n_rows": 2000}),
        ("radon_centred", {"n_rows": 2000}),
        ("radon_non_centred", {"n_rows": 2000}),
        ("many_groups", {"n_rows": 20_000, "n_groups": 100}),
    ],
)
def test_index_column_is_pm_data_gathered_by_row(name, arguments):
    builder, _, _, index_name = BUILDERS[name]
    model = builder(**arguments).model
    index = model[index_name]
    assert isinstance(index, SharedVariable)
    assert index.get_value().dtype.kind == "i" and len(index.get_value()) == arguments["n_rows"]
    density = build_minibatch_log_density(model, model.value_vars)
    assert any(data is index for data in density.data)

    # A batch of every row, in shuffled order, gives the full-data log density.
    function = pytensor.function([density.position, density.indices], density.log_density)
    rng = np.random.default_rng(1)
    point = {
        name: value + 0.1 * rng.normal(size=value.shape)
        for name, value in model.initial_point().items()
    }
    position = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    order = rng.permutation(arguments["n_rows"])
    np.testing.assert_allclose(function(position, order), model.compile_logp()(point), rtol=1e-9)


def test_polynomial_posterior_correlation_is_ill_conditioned():
    condition = posterior_correlation_condition(n_rows=5000, seed=0)
    assert condition >= 1e4
    assert abs(polynomial_regression(n_rows=5000).correlation) < 1


def direct_posterior(n_rows, seed=0):
    """The NIG posterior by the textbook formulas, from an explicit inverse."""
    design, y, _ = _polynomial_data(n_rows, seed)
    precision = design.T @ design + np.eye(design.shape[1]) / PRIOR_SCALE
    scale = np.linalg.inv(precision)
    mean = np.linalg.solve(precision, design.T @ y)
    shape = PRIOR_SHAPE + n_rows / 2
    rate = PRIOR_RATE + 0.5 * (y @ y - mean @ precision @ mean)
    return mean, scale, precision, shape, rate


def test_polynomial_model_log_density_is_the_closed_form_posterior():
    """Differences of the model's log density equal those of the NIG posterior density."""
    panel = polynomial_regression(n_rows=5000)
    mean, _, precision, shape, rate = direct_posterior(5000)
    log_density = panel.model.compile_logp(jacobian=False)
    rng = np.random.default_rng(2)
    sds = panel.sds["beta"]

    def closed_form(beta, sigma2):
        deviation = beta - mean
        return (
            -(shape + 1 + len(beta) / 2) * np.log(sigma2)
            - rate / sigma2
            - 0.5 * deviation @ precision @ deviation / sigma2
        )

    values = []
    for _ in range(5):
        beta = mean + 3 * sds * rng.normal(size=len(mean))
        sigma2 = panel.means["sigma2"] * np.exp(0.05 * rng.normal())
        model_value = log_density({"beta": beta, "sigma2_log__": np.log(sigma2)})
        values.append((model_value, closed_form(beta, sigma2)))
    values = np.array(values)
    np.testing.assert_allclose(
        values[1:, 0] - values[0, 0], values[1:, 1] - values[0, 1], atol=1e-6
    )


def test_polynomial_exact_moments_match_monte_carlo_draws():
    panel = polynomial_regression(n_rows=5000)
    mean, scale, _, shape, rate = direct_posterior(5000)
    draws = 200_000
    rng = np.random.default_rng(3)
    sigma2 = rate / rng.gamma(shape, size=draws)
    standard = rng.normal(size=(draws, len(mean))) @ np.linalg.cholesky(scale).T
    beta = mean + np.sqrt(sigma2)[:, None] * standard

    for name, sample in {"beta": beta, "sigma2": sigma2}.items():
        centred = sample - sample.mean(axis=0)
        sd = sample.std(axis=0)
        mean_error = sd / np.sqrt(draws)
        sd_error = np.std(centred**2, axis=0) / (2 * sd * np.sqrt(draws))
        assert np.all(np.abs(panel.means[name] - sample.mean(axis=0)) < 5 * mean_error)
        assert np.all(np.abs(panel.sds[name] - sd) < 5 * sd_error)
    correlation = np.corrcoef(beta[:, 0], beta[:, 1])[0, 1]
    assert abs(panel.correlation - correlation) < 5 * (1 - correlation**2) / np.sqrt(draws)


def test_median_regression_moments_do_not_depend_on_the_grid():
    # A grid twice as fine and wider gives the same moments to far below
    # the Monte Carlo error of any run (1e-3 sd); a grid 20 times coarser
    # does not (the negative control).
    rng = np.random.default_rng(10)
    x = rng.normal(size=2000)
    y = 1.0 + 0.5 * x + rng.laplace(scale=0.7, size=2000)
    means, sds = median_regression_moments(x, y)
    finer_means, finer_sds = median_regression_moments(x, y, points=401, width=10.0)
    np.testing.assert_allclose(means, finer_means, atol=1e-3 * sds.min())
    np.testing.assert_allclose(sds, finer_sds, rtol=1e-3)
    _, coarse_sds = median_regression_moments(x, y, points=11, width=8.0)
    assert not np.allclose(sds, coarse_sds, rtol=1e-3)
    panel = median_regression()
    np.testing.assert_allclose(panel.means["coefficients"], means)
