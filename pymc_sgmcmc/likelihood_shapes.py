"""Panel models of the likelihoods real regressions use beyond the normal and the logit.

Each builder simulates a data set and returns a :class:`~pymc_sgmcmc.panel.PanelModel`
written as a user would write it, data in ``pm.Data``, without a reference
posterior (:func:`~pymc_sgmcmc.panel.nuts_reference` attaches one):

- :func:`negative_binomial_regression`: overdispersed counts, whose dispersion's
  gradient holds a digamma;
- :func:`beta_regression`: proportions with an unknown precision (three digammas);
- :func:`ordered_logistic_regression`: ordinal outcomes, cutpoints under the
  ordered transform;
- :func:`censored_regression`: a normal likelihood censored from above
  (``pm.Censored``), whose censored rows contribute a log survival function;
- :func:`dirichlet_groups`: group weights on the simplex with a categorical
  likelihood, and group means with a grouped normal one;
- :func:`heteroscedastic_regression`: a normal likelihood whose log sd is linear
  in a covariate.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_sgmcmc.panel import PanelModel

__all__ = [
    "beta_regression",
    "censored_regression",
    "dirichlet_groups",
    "heteroscedastic_regression",
    "negative_binomial_regression",
    "ordered_logistic_regression",
]


def _logistic(values):
    return 1.0 / (1.0 + np.exp(-values))


def negative_binomial_regression(n_rows=2000, seed=0) -> PanelModel:
    """Negative binomial regression: ``y ~ NB(exp(a + x' b), alpha)``, four covariates, D = 6."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 4))
    mean = np.exp(0.5 + x @ np.array([0.3, -0.2, 0.1, 0.4]))
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + mean))
    with pm.Model() as model:
        covariates = pm.Data("x", x)
        counts = pm.Data("y", y)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=4)
        alpha = pm.Exponential("alpha", 1.0)
        pm.NegativeBinomial(
            "counts", mu=pm.math.exp(intercept + covariates @ beta), alpha=alpha, observed=counts
        )
    key = {"model": "negative_binomial", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"negative binomial regression N={n_rows}", model, n_rows, key=key)


def beta_regression(n_rows=1000, seed=0) -> PanelModel:
    """Beta regression: mean ``logit^-1(a + x' b)``, its precision unknown, D = 5."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 3))
    mean = _logistic(0.2 + x @ np.array([0.5, -0.3, 0.2]))
    y = rng.beta(8.0 * mean, 8.0 * (1.0 - mean))
    with pm.Model() as model:
        covariates = pm.Data("x", x)
        shares = pm.Data("y", y)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        precision = pm.Gamma("precision", 2.0, 0.1)
        mu = pm.math.invlogit(intercept + covariates @ beta)
        pm.Beta("shares", alpha=mu * precision, beta=(1.0 - mu) * precision, observed=shares)
    key = {"model": "beta", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"Beta regression N={n_rows}", model, n_rows, key=key)


def ordered_logistic_regression(n_rows=1500, seed=0) -> PanelModel:
    """Ordered logistic regression: four ordered categories, two covariates, D = 5."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 2))
    latent = x @ np.array([0.8, -0.5]) + rng.logistic(size=n_rows)
    y = (latent[:, None] > np.array([-1.0, 0.0, 1.2])).sum(axis=1)
    with pm.Model() as model:
        covariates = pm.Data("x", x)
        levels = pm.Data("y", y)
        beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        cutpoints = pm.Normal(
            "cutpoints",
            0.0,
            3.0,
            shape=3,
            transform=pm.distributions.transforms.ordered,
            initval=[-1.0, 0.0, 1.0],
        )
        pm.OrderedLogistic("levels", eta=covariates @ beta, cutpoints=cutpoints, observed=levels)
    key = {"model": "ordered_logistic", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"ordered logistic regression N={n_rows}", model, n_rows, key=key)


def censored_regression(n_rows=1500, seed=0) -> PanelModel:
    """Return a normal regression censored from above at 1.5 (about a fifth of the rows), D = 4."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 2))
    latent = 1.0 + x @ np.array([0.7, -0.4]) + rng.normal(0.0, 0.8, size=n_rows)
    with pm.Model() as model:
        covariates = pm.Data("x", x)
        measured = pm.Data("y", np.minimum(latent, 1.5))
        intercept = pm.Normal("intercept", 0.0, 3.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Censored(
            "measured",
            pm.Normal.dist(intercept + covariates @ beta, sigma),
            lower=None,
            upper=1.5,
            observed=measured,
        )
    key = {"model": "censored", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"censored regression N={n_rows}", model, n_rows, key=key)


def dirichlet_groups(n_rows=1500, seed=0) -> PanelModel:
    """Four groups' weights (Dirichlet) from their labels, and their means from the outcomes.

    Two likelihoods over the same rows, a categorical one of the group labels
    and a normal one of the outcomes given each row's group. D = 7: 3 for the
    weights on the simplex's unconstrained scale, 4 means.
    """
    rng = np.random.default_rng(seed)
    group = rng.choice(4, size=n_rows, p=[0.1, 0.2, 0.3, 0.4])
    y = rng.normal(np.array([-1.0, 0.0, 1.0, 2.0])[group], 1.0)
    with pm.Model() as model:
        labels = pm.Data("group", group)
        outcomes = pm.Data("y", y)
        weights = pm.Dirichlet("weights", np.ones(4))
        means = pm.Normal("means", 0.0, 3.0, shape=4)
        pm.Categorical("labels", p=weights, observed=labels)
        pm.Normal("outcomes", means[labels], 1.0, observed=outcomes)
    key = {"model": "dirichlet_groups", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"Dirichlet group weights N={n_rows}", model, n_rows, key=key)


def heteroscedastic_regression(n_rows=2000, seed=0) -> PanelModel:
    """Return a normal regression whose log sd is linear in the first covariate, D = 5."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 2))
    sd = np.exp(-0.5 + 0.4 * x[:, 0])
    y = 1.0 + x @ np.array([0.5, -1.0]) + sd * rng.normal(size=n_rows)
    with pm.Model() as model:
        covariates = pm.Data("x", x)
        outcomes = pm.Data("y", y)
        intercept = pm.Normal("intercept", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=2)
        log_sd = pm.Normal("log_sd", 0.0, 2.0)
        log_sd_slope = pm.Normal("log_sd_slope", 0.0, 1.0)
        pm.Normal(
            "outcomes",
            intercept + covariates @ beta,
            pm.math.exp(log_sd + log_sd_slope * covariates[:, 0]),
            observed=outcomes,
        )
    key = {"model": "heteroscedastic", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"heteroscedastic regression N={n_rows}", model, n_rows, key=key)
