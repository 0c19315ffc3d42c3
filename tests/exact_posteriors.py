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
