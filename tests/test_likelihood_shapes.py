"""The panel's likelihoods beyond the normal and the logit, and their minibatch estimates."""

import numpy as np
import pytensor
import pytest
from pymc.blocking import DictToArrayBijection

from pymc_sgmcmc.likelihood_shapes import (
    beta_regression,
    censored_regression,
    dirichlet_groups,
    heteroscedastic_regression,
    negative_binomial_regression,
    ordered_logistic_regression,
)
from pymc_sgmcmc.minibatch import build_minibatch_log_density

# Builder, free variables and their total size D on the unconstrained scale.
BUILDERS = {
    "negative_binomial": (negative_binomial_regression, {"intercept", "beta", "alpha"}, 6),
    "beta": (beta_regression, {"intercept", "beta", "precision"}, 5),
    "ordered_logistic": (ordered_logistic_regression, {"beta", "cutpoints"}, 5),
    "censored": (censored_regression, {"intercept", "beta", "sigma"}, 4),
    "dirichlet_groups": (dirichlet_groups, {"weights", "means"}, 7),
    "heteroscedastic": (
        heteroscedastic_regression,
        {"intercept", "beta", "log_sd", "log_sd_slope"},
        5,
    ),
}
# Python-only compilation: these checks need no compiled code.
MODE = "FAST_COMPILE"


@pytest.mark.parametrize("name", list(BUILDERS))
def test_minibatches_of_every_row_average_to_the_full_log_density(name):
    """Four batches that partition the rows average to the model's log density and gradient.

    So every likelihood term is found as data rows and scaled by N / B, the
    censored rows' survival terms and the ordered transform's Jacobian included.
    """
    builder, variables, dimension = BUILDERS[name]
    panel = builder(n_rows=400)
    model = panel.model
    assert {variable.name for variable in model.free_RVs} == variables
    density = build_minibatch_log_density(model, model.value_vars)
    assert density.n_rows == panel.n_rows == 400
    function = pytensor.function(
        [density.position, density.indices], [density.log_density, density.gradient], mode=MODE
    )
    rng = np.random.default_rng(3)
    point = {
        name: value + 0.2 * rng.normal(size=value.shape)
        for name, value in model.initial_point().items()
    }
    position = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    assert position.size == dimension
    batches = np.split(rng.permutation(panel.n_rows), 4)
    results = [function(position, batch) for batch in batches]
    full = model.logp_dlogp_function(ravel_inputs=True, mode=MODE)
    full.set_extra_values({})
    full_log_density, full_gradient = full(position)
    np.testing.assert_allclose(np.mean([r[0] for r in results]), full_log_density, rtol=1e-10)
    np.testing.assert_allclose(
        np.mean([r[1] for r in results], axis=0), full_gradient, rtol=1e-9, atol=1e-9
    )
    # One batch alone is not the full data's estimate: the check can fail.
    assert not np.allclose(results[0][1], full_gradient, rtol=1e-3)
