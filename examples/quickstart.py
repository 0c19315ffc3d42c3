"""Sample one PyMC model with SGLD and with NUTS and compare the two posteriors.

Run with ``python examples/quickstart.py``.
"""

import time

import arviz as az
import numpy as np
import pymc as pm

from pymc_sgmcmc import SGLD

# A linear regression on 10,000 rows: three standardised covariates.
rng = np.random.default_rng(42)
n_rows = 10_000
x = rng.normal(size=(n_rows, 3))
y = 1.0 + x @ np.array([0.5, -1.0, 0.25]) + rng.normal(size=n_rows)

with pm.Model(coords={"obs": np.arange(n_rows), "feature": ["x1", "x2", "x3"]}) as model:
    x_data = pm.Data("x", x, dims=("obs", "feature"))
    intercept = pm.Normal("intercept", 0, 5)
    beta = pm.Normal("beta", 0, 5, dims="feature")
    sigma = pm.HalfNormal("sigma", 2)
    pm.Normal("y", intercept + x_data @ beta, sigma, observed=y, dims="obs")

# The same, unmodified model: SGLD draws minibatches of 100 rows, rescales
# their likelihood by N/B and tunes itself (mode, scale, gradient noise,
# control variates, step size) before its first draw.
with model:
    start = time.perf_counter()
    step = SGLD(batch_size=100)
    compiled = time.perf_counter()
    sgld = pm.sample(step=step, tune=1000, draws=1000, chains=2, random_seed=1)
    sampled = time.perf_counter()
    nuts = pm.sample(chains=2, random_seed=1)
    nuts_seconds = time.perf_counter() - sampled

sgld_summary = az.summary(sgld, kind="stats")
nuts_summary = az.summary(nuts, kind="stats")
print("\nSGLD posterior\n", sgld_summary, sep="")
print("\nNUTS posterior\n", nuts_summary, sep="")

print("\nSGLD against NUTS: |mean difference| / NUTS sd, and SGLD sd / NUTS sd")
for name in ["intercept", "beta", "sigma"]:
    sgld_draws = np.asarray(sgld.posterior[name])
    nuts_draws = np.asarray(nuts.posterior[name])
    sgld_draws = sgld_draws.reshape(-1, *sgld_draws.shape[2:])
    nuts_draws = nuts_draws.reshape(-1, *nuts_draws.shape[2:])
    nuts_sd = nuts_draws.std(axis=0)
    mean_error = np.abs(sgld_draws.mean(axis=0) - nuts_draws.mean(axis=0)) / nuts_sd
    sd_ratio = sgld_draws.std(axis=0) / nuts_sd
    print(f"  {name:10s} mean error {np.round(mean_error, 3)}  sd ratio {np.round(sd_ratio, 3)}")
# Inner steps per draw are recorded for the 1,000 kept draws; tuning ran as many.
inner_steps = 2 * int(sgld.sample_stats["steps_per_draw"].sum())
print(
    f"SGLD: {compiled - start:.1f} s to build and compile, {sampled - compiled:.1f} s to tune and "
    f"sample ({inner_steps / (sampled - compiled):,.0f} inner steps per second); "
    f"NUTS: {nuts_seconds:.1f} s in all."
)
