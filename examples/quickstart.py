"""Sample one PyMC model with SGLD and with NUTS and compare the two posteriors.

Run with ``python examples/quickstart.py``.
"""

import time
import warnings

# Notices that are not about this comparison: ArviZ 0.x announces its 1.0
# refactor, PyTensor's C backend (NUTS on PyMC 5) says it found no BLAS to
# link to, and NUTS's mass-matrix adaptation may overflow in early tuning.
warnings.filterwarnings("ignore", message="ArviZ is undergoing a major refactor")
warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

from pymc_sgmcmc import SGLD  # noqa: E402

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

# Three decimals on ArviZ 0.x and 1.x alike (1.x rounds to 2 digits by default).
sgld_summary = az.summary(sgld, kind="stats", round_to=3)
nuts_summary = az.summary(nuts, kind="stats", round_to=3)
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
print(
    f"SGLD: {compiled - start:.1f} s to build the step; {sampled - compiled:.1f} s in pm.sample "
    "(tuning each chain, then 2 x 1,000 tune and 1,000 draws; a chain compiles its fused kernel "
    "only once its interpreted steps have cost about what the compilation would). "
    f"NUTS: {nuts_seconds:.1f} s in pm.sample."
)
