"""The minibatch estimate is exact on average for every supported model shape.

Averaging the minibatch gradient over a partition of the N rows into N/B
batches must reproduce the full-data gradient of ``model.logp_dlogp_function``
up to rounding; so must the log density. A missing or doubled N/B scale, a
data array left unindexed, or a likelihood broadcast back to N rows (the
``dims`` and ``shape=`` traps) all break this identity.
"""

import re

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.blocking import DictToArrayBijection
from pymc.model.core import ImputationWarning

from pymc_sgmcmc import SGLD, MinibatchError, build_minibatch_log_density

N_ROWS = 60
BATCH = 12


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_ROWS, 2))
    y = x @ np.array([1.0, -2.0]) + 0.3 + rng.normal(size=N_ROWS)
    return x, y


def pm_data_model():
    x, y = data()
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        y_data = pm.Data("y_obs", y)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x_data @ beta, sigma, observed=y_data)
    return model


def numpy_model():
    x, y = data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x @ beta, sigma, observed=y)
    return model


def dims_model():
    x, y = data()
    coords = {"obs": np.arange(N_ROWS), "feature": ["a", "b"]}
    with pm.Model(coords=coords) as model:
        x_data = pm.Data("x", x, dims=("obs", "feature"))
        beta = pm.Normal("beta", 0, 1, dims="feature")
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x_data @ beta, sigma, observed=y, dims="obs")
    return model


def shape_model():
    x, y = data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x @ beta, sigma, observed=y, shape=N_ROWS)
    return model


def several_observed_model():
    x, y = data()
    counts = np.random.default_rng(1).poisson(np.exp(0.5 * x[:, 0]))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        rate = pm.Normal("rate", 0, 1)
        pm.Normal("y", x @ beta, sigma, observed=y)
        pm.Poisson("counts", pm.math.exp(rate * x[:, 0]), observed=counts)
    return model


def total_size_model():
    x, y = data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", x @ beta, sigma, observed=y, total_size=N_ROWS)
    return model


def potential_model():
    x, y = data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Potential("ridge", -3.0 * (beta**2).sum())
        pm.Normal("y", x @ beta, sigma, observed=y)
    return model


def hierarchical_model():
    x, y = data()
    group = np.arange(N_ROWS) % 7
    with pm.Model(coords={"group": np.arange(7)}) as model:
        group_index = pm.Data("group_index", group)
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        offset = pm.Normal("offset", 0, 1, dims="group")
        intercept = mu + tau * offset
        slope = pm.Normal("slope", 0, 1)
        pm.Normal("y", intercept[group_index] + slope * x[:, 0], 1.0, observed=y)
    return model


def matrix_observed_model():
    x, _ = data()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2)
        pm.Normal("y", mu, 1.0, observed=x)
    return model


MODELS = {
    "pm_data": pm_data_model,
    "numpy": numpy_model,
    "dims": dims_model,
    "shape": shape_model,
    "several_observed": several_observed_model,
    "total_size": total_size_model,
    "potential": potential_model,
    "hierarchical": hierarchical_model,
    "matrix_observed": matrix_observed_model,
}


def random_point(model, seed=3):
    rng = np.random.default_rng(seed)
    point = model.initial_point()
    return {name: value + 0.3 * rng.normal(size=value.shape) for name, value in point.items()}


def partition_average(model, batch=BATCH):
    density = build_minibatch_log_density(model, model.value_vars)
    function = pytensor.function(
        [density.position, density.indices], [density.log_density, density.gradient]
    )
    point = random_point(model)
    position = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    order = np.random.default_rng(0).permutation(N_ROWS)
    results = [function(position, order[i : i + batch]) for i in range(0, N_ROWS, batch)]
    log_density = np.mean([r[0] for r in results])
    gradient = np.mean([r[1] for r in results], axis=0)
    full = model.logp_dlogp_function(ravel_inputs=True)
    full.set_extra_values({})
    full_log_density, full_gradient = full(position)
    return log_density, gradient, full_log_density, full_gradient


@pytest.mark.parametrize("name", list(MODELS))
def test_partition_average_reproduces_full_gradient(name):
    log_density, gradient, full_log_density, full_gradient = partition_average(MODELS[name]())
    np.testing.assert_allclose(gradient, full_gradient, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(log_density, full_log_density, rtol=1e-10)


def test_single_batch_differs_from_full_gradient():
    """Negative control: one batch alone is not the full gradient (the check can fail)."""
    model = numpy_model()
    density = build_minibatch_log_density(model, model.value_vars)
    function = pytensor.function([density.position, density.indices], density.gradient)
    point = random_point(model)
    position = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    full = model.logp_dlogp_function(ravel_inputs=True)
    full.set_extra_values({})
    assert not np.allclose(function(position, np.arange(BATCH)), full(position)[1], rtol=1e-3)


def test_total_size_other_than_n_is_kept_as_written():
    """A model tempered with total_size=2N keeps its own scale: no second N/B factor."""
    x, y = data()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y, total_size=2 * N_ROWS)
    _, gradient, _, full_gradient = partition_average(model)
    np.testing.assert_allclose(gradient, full_gradient, rtol=1e-10)
    _, untempered, _, _ = partition_average(numpy_model())
    assert not np.allclose(gradient, untempered[:2])


def test_user_model_is_not_mutated():
    model = pm_data_model()
    point = random_point(model)
    before = model.compile_logp()(point)
    values_before = dict(model.rvs_to_values)
    names_before = list(model.named_vars)
    x_before = model["x"].get_value().copy()
    with model:
        SGLD(batch_size=BATCH)
    assert model.compile_logp()(point) == before
    assert dict(model.rvs_to_values) == values_before
    assert list(model.named_vars) == names_before
    np.testing.assert_array_equal(model["x"].get_value(), x_before)


def test_no_observed_data_is_refused():
    with pm.Model() as model:
        pm.Normal("a", 0, 1)
    with pytest.raises(MinibatchError, match="no observed variables"):
        SGLD(model=model)


def test_observed_of_different_lengths_are_refused():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y1", mu, 1, observed=np.zeros(100))
        pm.Normal("y2", mu, 1, observed=np.zeros(50))
    with pytest.raises(MinibatchError, match=r"different numbers of rows.*same rows"):
        SGLD(model=model)


def test_pm_minibatch_models_are_refused():
    _, y = data()
    with pm.Model() as model:
        y_batch = pm.Minibatch(y, batch_size=10)
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=y_batch, total_size=N_ROWS)
    with pytest.raises(MinibatchError, match=r"pm\.Minibatch.*full data"):
        SGLD(model=model)


def test_a_batch_size_beyond_the_rows_takes_them_all():
    assert SGLD(model=numpy_model(), batch_size=10 * N_ROWS).batch_size == N_ROWS


def test_per_row_latent_variables_are_refused_in_minibatches():
    _, y = data()
    with pm.Model() as model:
        latent = pm.Normal("latent", 0, 1, shape=N_ROWS)
        pm.Normal("y", latent, 1, observed=y)
    with pytest.raises(MinibatchError, match=f"per-row latent.*batch_size={N_ROWS}"):
        SGLD(model=model, batch_size=N_ROWS // 2)
    with pytest.raises(MinibatchError, match="per-row latent"):
        SGLD(model=model, replace=True)


def test_per_row_latent_variables_refuse_data_of_other_rows():
    x, y = data()
    with pm.Model() as model:
        column = pm.Data("x", np.ascontiguousarray(x[: N_ROWS // 2, 0]))
        observed = pm.Data("y", y[: N_ROWS // 2])
        latent = pm.Normal("latent", 0, 1, shape=N_ROWS // 2)
        pm.Normal("y_obs", column + latent, 1, observed=observed)
    with pytest.raises(MinibatchError, match=f"data= gives {N_ROWS} rows.*per-row latent"):
        SGLD(model=model, data={"x": np.ascontiguousarray(x[:, 0]), "y": y})
    # The same rows as the model's are the model's own data again.
    SGLD(model=model, data={"x": np.ascontiguousarray(x[: N_ROWS // 2, 0]), "y": y[: N_ROWS // 2]})


def test_per_row_latent_variables_are_read_at_the_batch_rows():
    x, y = data()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        latent = pm.Normal("latent", 0, 1, shape=N_ROWS)
        pm.Normal("y", mu * x[:, 0] + latent, 1, observed=y)
    density = SGLD(model=model).compiled.density
    assert density.row_latents == ("latent",)
    function = pytensor.function(
        [density.position, density.indices], [density.log_density, density.gradient]
    )
    point = {"mu": np.array(0.3), "latent": np.random.default_rng(2).normal(size=N_ROWS)}
    position = DictToArrayBijection.map(point).data
    # Full batches come in any order: each row's latent goes with that row.
    rows = np.random.default_rng(3).permutation(N_ROWS)
    log_density, gradient = function(position, rows)
    np.testing.assert_allclose(log_density, model.compile_logp()(point), rtol=1e-12)
    expected = model.compile_dlogp()(point)
    np.testing.assert_allclose(gradient, expected, rtol=1e-12)


def test_scalar_observed_is_refused():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=1.0)
    with pytest.raises(MinibatchError, match="scalar"):
        SGLD(model=model)


def test_joint_likelihood_over_rows_is_refused():
    _, y = data()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.MvNormal("y", mu * np.ones(N_ROWS), np.eye(N_ROWS), observed=y)
    with pytest.raises(MinibatchError, match="does not factor over rows"):
        SGLD(model=model)


def test_a_time_series_likelihood_is_refused_with_the_rewrite_that_minibatches():
    series = np.cumsum(np.random.default_rng(2).normal(size=300)) * 0.1
    with pm.Model() as model:
        rho = pm.Normal("rho", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.AR("y", rho, sigma=sigma, constant=True, observed=series)
    with pytest.raises(MinibatchError, match=r"pass the lagged values as pm\.Data"):
        SGLD(model=model)


def test_discrete_variables_are_refused():
    _, y = data()
    with pm.Model() as model:
        k = pm.Poisson("k", 3)
        pm.Normal("y", k, 1, observed=y)
    with pytest.raises(ValueError, match=r"continuous variables only.*pm\.Metropolis"):
        SGLD(vars=[k], model=model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "between 1 and the number of rows"),
        ({"batch_size": 2.5}, "batch_size must be an integer"),
        ({"step_size": 0.0}, "step_size must be a positive"),
        ({"temperature": -1.0}, "temperature must be"),
        ({"steps_per_draw": 0}, "steps_per_draw must be a positive integer"),
    ],
)
def test_bad_arguments_get_one_line_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SGLD(model=numpy_model(), **kwargs)


def ar_series(n=400, seed=0):
    rng = np.random.default_rng(seed)
    y = np.zeros(n)
    for t in range(1, n):
        y[t] = 0.8 * y[t - 1] + rng.normal()
    return y


@pytest.mark.parametrize(
    ("kind", "expression"),
    [
        ("lag", "y_data[:-1]"),
        ("lead", "y_data[1:]"),
        ("cumulative sum", "Cumsum{axis=0}(y_data)"),
        ("centred by its mean", "Sum{axes=None}(y_data)"),
    ],
)
def test_rows_that_depend_on_other_rows_are_refused_naming_the_expression(kind, expression):
    y = ar_series()
    with pm.Model() as model:
        y_data = pm.Data("y_data", y)
        rho = pm.Normal("rho", 0, 1)
        if kind == "lag":
            mean = rho * pt.concatenate([pt.zeros(1), y_data[:-1]])
            pm.Normal("y", mean, 1.0, observed=y_data)
        elif kind == "lead":
            mean = rho * pt.concatenate([y_data[1:], pt.zeros(1)])
            pm.Normal("y", mean, 1.0, observed=y_data)
        elif kind == "cumulative sum":
            pm.Normal("y", rho * pt.cumsum(y_data) / len(y), 1.0, observed=y_data)
        else:
            pm.Normal("y", rho, 1.0, observed=y_data - y_data.mean())
    message = f"'y' for one row reads other rows through `{re.escape(expression)}`"
    with pytest.raises(MinibatchError, match=message):
        SGLD(model=model)


def test_observed_data_sliced_from_a_data_array_is_refused():
    y = ar_series()
    with pm.Model() as model:
        y_data = pm.Data("y_data", y)
        rho = pm.Normal("rho", 0, 1)
        pm.Normal("y", rho * y_data[:-1], 1.0, observed=y_data[1:])
    message = r"observed data's 399 rows \('y_data' has 400\).*observed=y\[1:\]"
    with pytest.raises(MinibatchError, match=message):
        SGLD(model=model)


def test_data_arrays_with_other_rows_than_the_observed_are_refused():
    x, y = data()
    with pm.Model() as model:
        x_data = pm.Data("x_data", x[:, 0])
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta * x_data, 1.0, observed=pm.Data("y_data", y[:-5]))
    message = f"observed data has {N_ROWS - 5} rows but 'x_data' has {N_ROWS}; give every"
    with pytest.raises(MinibatchError, match=message):
        SGLD(model=model)


def test_missing_observations_imputed_by_pymc_are_refused():
    x, y = data()
    y = y.copy()
    y[:3] = np.nan
    with pm.Model() as model, pytest.warns(ImputationWarning):
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta * x[:, 0], 1.0, observed=y)
    with pytest.raises(MinibatchError, match=r"'y' has missing values .*'y_unobserved'"):
        SGLD(model=model)


def test_the_same_lag_given_as_a_data_column_is_accepted():
    y = ar_series()
    with pm.Model() as model:
        lagged = pm.Data("lagged", np.concatenate([[0.0], y[:-1]]))
        rho = pm.Normal("rho", 0, 1)
        pm.Normal("y", rho * lagged, 1.0, observed=y)
    SGLD(model=model)


@pytest.mark.parametrize("rows", [2 * N_ROWS, N_ROWS // 2])
def test_data_resized_after_the_step_was_built_is_refused(rows):
    model = pm_data_model()
    with model:
        step = SGLD(batch_size=BATCH)
        x, y = np.ones((rows, 2)), np.ones(rows)
        pm.set_data({"x": x, "y_obs": y})
        with pytest.raises(MinibatchError, match=f"now has {rows} rows, but SGLD was built for"):
            pm.sample(step=step, draws=2, tune=0, chains=1, progressbar=False)
