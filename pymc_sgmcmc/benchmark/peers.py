"""What a PyMC user with a large data set would run instead of NUTS.

Two peers of the SG-MCMC samplers, each run on the benchmark's logistic
regression as its own documentation recommends:

- PyMC's minibatch ADVI: the model rewritten with ``pm.Minibatch`` and
  ``total_size``, fitted by ``pm.fit`` with its defaults, and 1,000 draws per
  chain-equivalent from the mean-field approximation.
- NumPyro's energy-conserving subsampling HMC (``HMCECS``) with NUTS as its
  inner kernel and a second-order Taylor proxy around the posterior mode,
  which is found first (full-data L-BFGS) and counted in the wall time.

Both are timed as a user would time them, from the start of the fit to the
draws in hand, compilation included.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.panel import PanelModel, logistic_data

__all__ = [
    "ADVI_BATCH_SIZE",
    "ADVI_ITERATIONS",
    "HMCECS_BLOCKS",
    "HMCECS_SUBSAMPLE_SIZE",
    "fit_advi",
    "posterior_mode_numpyro",
    "sample_hmcecs",
]

#: Minibatch rows of ADVI: the SG-MCMC samplers' default.
ADVI_BATCH_SIZE = 100

#: Optimisation steps of ADVI: ``pm.fit``'s default.
ADVI_ITERATIONS = 10_000

#: Rows per HMCECS subsample (at most half the rows) and blocks of its Gibbs
#: update of the subsample indices (NumPyro's HMCECS example uses 1,300 and 100).
HMCECS_SUBSAMPLE_SIZE = 1_000
HMCECS_BLOCKS = 100


def _data(panel: PanelModel):
    """Return the covariates and outcomes of a benchmark logistic regression."""
    key = panel.key
    if key.get("model") != "logistic":
        raise ValueError(
            f"The peers run on the benchmark's logistic regression only, not on {panel.name!r}."
        )
    x, y, _ = logistic_data(key["n_rows"], key["n_features"], key["badly_scaled"], key["seed"])
    return x, y


def fit_advi(panel: PanelModel, *, draws: int, seed: int, iterations: int = ADVI_ITERATIONS):
    """Fit minibatch mean-field ADVI and draw from the approximation.

    Parameters
    ----------
    panel : PanelModel
        The benchmark logistic regression.
    draws : int
        Draws from the fitted approximation.
    seed : int
        ``random_seed`` of the fit and of the draws.
    iterations : int, default :data:`ADVI_ITERATIONS`
        Optimisation steps.

    Returns
    -------
    InferenceData or DataTree
        The draws as one chain.
    """
    import pymc as pm

    x, y = _data(panel)
    # A minibatch of int64 outcomes is cast to the Bernoulli's int32, which
    # PyMC refuses as observed data; int32 outcomes pass through.
    y = y.astype("int32")
    with pm.Model():
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=ADVI_BATCH_SIZE)
        beta = pm.Normal("beta", 0.0, 1.0, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=x_batch @ beta, observed=y_batch, total_size=len(y))
        approximation = pm.fit(n=iterations, method="advi", random_seed=seed, progressbar=False)
        return approximation.sample(draws, random_seed=seed)


def _numpyro_model(x, y, subsample_size):
    import numpyro
    import numpyro.distributions as dist

    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("rows", x.shape[0], subsample_size=subsample_size) as rows:
        numpyro.sample("y", dist.Bernoulli(logits=x[rows] @ beta), obs=y[rows])


def posterior_mode_numpyro(model, *arguments, seed: int = 0) -> dict:
    """Return the posterior mode of a NumPyro model by L-BFGS on all rows.

    Parameters
    ----------
    model : callable
        The NumPyro model, its plates without subsampling.
    *arguments
        The model's arguments.
    seed : int, default 0
        Key of the initial point.

    Returns
    -------
    dict of str to jax.Array
        The mode, in the constrained space.
    """
    import jax
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model
    from scipy.optimize import minimize

    information = initialize_model(jax.random.PRNGKey(seed), model, model_args=arguments)
    flat, unravel = ravel_pytree(information.param_info.z)
    energy = jax.jit(jax.value_and_grad(lambda z: information.potential_fn(unravel(z))))

    def objective(z):
        value, gradient = energy(z)
        return float(value), np.asarray(gradient, dtype=np.float64)

    found = minimize(objective, np.asarray(flat, dtype=np.float64), jac=True, method="L-BFGS-B")
    return information.postprocess_fn(unravel(found.x))


def sample_hmcecs(panel: PanelModel, *, chains: int, tune: int, draws: int, seed: int):
    """Sample with NumPyro's HMCECS (NUTS inner kernel, Taylor proxy at the mode).

    Parameters
    ----------
    panel : PanelModel
        The benchmark logistic regression.
    chains, tune, draws : int
        Chains, warm-up iterations and draws per chain.
    seed : int
        Seed of the chains.

    Returns
    -------
    dict
        ``{"posterior": xarray.Dataset}`` with the draws of ``beta`` by
        chain and draw, as the runners read a posterior.
    """
    import jax
    import jax.numpy as jnp
    import xarray as xr
    from numpyro.infer import HMCECS, MCMC, NUTS

    x, y = _data(panel)
    x, y = jnp.asarray(x), jnp.asarray(y)
    mode = posterior_mode_numpyro(_numpyro_model, x, y, None, seed=seed)
    kernel = HMCECS(NUTS(_numpyro_model), num_blocks=HMCECS_BLOCKS, proxy=HMCECS.taylor_proxy(mode))
    method = "parallel" if jax.local_device_count() >= chains else "sequential"
    sampler = MCMC(
        kernel,
        num_warmup=tune,
        num_samples=draws,
        num_chains=chains,
        chain_method=method,
        progress_bar=False,
    )
    # HMCECS needs a proper subsample: at most half the rows on small data.
    subsample_size = min(HMCECS_SUBSAMPLE_SIZE, x.shape[0] // 2)
    sampler.run(jax.random.PRNGKey(seed), x, y, subsample_size)
    # The draws are read directly: ArviZ's NumPyro converter differs between
    # ArviZ versions and would also evaluate the likelihood on every row.
    beta = np.asarray(sampler.get_samples(group_by_chain=True)["beta"])
    return {"posterior": xr.Dataset({"beta": (("chain", "draw", "beta_dim_0"), beta)})}
