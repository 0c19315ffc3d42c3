"""Posteriors known to numerical precision, shared by the statistical tests."""

import numpy as np
import pymc as pm


def half_normal_scale(seed, rows=50, scale=0.7):
    """``sigma ~ HalfNormal(1)``, ``rows`` draws of N(0, scale) observed with sd ``sigma``.

    Returns the model and a function mapping uniforms to exact posterior draws
    of sigma (inverse CDF on a fine grid).
    """
    observed = np.random.default_rng(seed).normal(0.0, scale, size=rows)
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", 0.0, sigma, observed=observed)
    grid = np.linspace(0.05, 3.0, 200_001)
    log_density = (
        -(grid**2) / 2 - observed.size * np.log(grid) - (observed**2).sum() / (2 * grid**2)
    )
    density = np.exp(log_density - log_density.max())
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(grid))])
    cdf /= cdf[-1]

    def inverse_cdf(uniforms):
        return np.interp(uniforms, cdf, grid)

    mean = np.sum((grid[1:] + grid[:-1]) / 2 * np.diff(cdf))
    return model, inverse_cdf, mean


def widely_spread_regression(rows=50, spread=10.0, prior_sd=10.0, seed=3):
    """A slope with a Normal prior, rows spread ``spread`` times the model's noise sd of 1.

    The posterior is Normal; the rows' spread makes the minibatch gradient's
    noise large against the curvature. Returns the model and the posterior
    means and sds by variable name.
    """
    rng = np.random.default_rng(seed)
    covariate = rng.normal(size=rows)
    response = 0.5 * covariate + spread * rng.normal(size=rows)
    precision = 1 / prior_sd**2 + covariate @ covariate
    means = {"slope": np.array(covariate @ response / precision)}
    sds = {"slope": np.array(precision**-0.5)}
    with pm.Model() as model:
        slope = pm.Normal("slope", 0.0, prior_sd)
        pm.Normal("y", slope * covariate, 1.0, observed=response)
    return model, means, sds
