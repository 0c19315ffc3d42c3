"""The validation panel: models with trusted reference posteriors.

Each builder returns a :class:`PanelModel`: a PyMC model, written as a user
would write it, with the reference posterior mean and sd of its free
variables, exact where a closed form exists and otherwise from a long NUTS
run computed once and cached (see :func:`nuts_reference`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars

from pymc_sgmcmc.diagnostics import monte_carlo_errors

__all__ = [
    "PanelModel",
    "correlated_data",
    "correlated_regression",
    "hierarchical_regression",
    "laplace_reference",
    "logistic_data",
    "logistic_regression",
    "normal_inverse_gamma_moments",
    "normal_inverse_gamma_posterior",
    "normal_inverse_gamma_regression",
    "nuts_reference",
]


@dataclass
class PanelModel:
    """A model and the reference posterior means and sds of its variables.

    Attributes
    ----------
    name : str
        Short label, e.g. ``"logistic N=50000"``.
    model : pm.Model
        The model.
    n_rows : int
        Number of observed rows N.
    means, sds : dict of str to ndarray
        Reference posterior mean and sd of each variable (``None`` until a
        reference is attached).
    correlation : float, optional
        Reference posterior correlation of the first two coefficients, where known.
    truth : dict of str to ndarray, optional
        The parameter values the data were simulated from, where kept.
    key : dict
        The builder's arguments, identifying the model for cached references.
    mean_se, sd_se : dict of str to ndarray, optional
        Monte Carlo standard errors of the reference means and sds (``None``
        for an exact reference).
    """

    name: str
    model: pm.Model
    n_rows: int
    means: dict[str, np.ndarray] | None = None
    sds: dict[str, np.ndarray] | None = None
    correlation: float | None = None
    truth: dict[str, np.ndarray] | None = None
    key: dict = field(default_factory=dict)
    mean_se: dict[str, np.ndarray] | None = None
    sd_se: dict[str, np.ndarray] | None = None


def normal_inverse_gamma_posterior(design, y, prior_scale, prior_shape, prior_rate):
    """Return the Normal-Inverse-Gamma posterior: ``m_n``, ``V_n``, ``a_n`` and ``b_n``.

    ``beta | sigma2, y ~ N(m_n, sigma2 V_n)`` and ``sigma2 | y ~ IG(a_n, b_n)``.
    The posterior precision is factorised by Cholesky and ``b_n`` is computed
    from the residuals, which keeps them accurate for a nearly collinear
    design.
    """
    precision = design.T @ design + np.eye(design.shape[1]) / prior_scale
    factor = np.linalg.cholesky(precision)
    inverse_factor = np.linalg.solve(factor, np.eye(design.shape[1]))
    scale = inverse_factor.T @ inverse_factor
    mean = scale @ (design.T @ y)
    residual = y - design @ mean
    shape = prior_shape + len(y) / 2
    rate = prior_rate + 0.5 * (residual @ residual + mean @ mean / prior_scale)
    return mean, scale, shape, rate


def normal_inverse_gamma_moments(design, y, prior_scale, prior_shape, prior_rate):
    """Return the posterior means and sds of ``beta`` and ``sigma2``, and corr(beta_0, beta_1).

    From :func:`normal_inverse_gamma_posterior`: ``beta`` is Student-t with
    covariance ``b_n / (a_n - 1) V_n``, ``sigma2 ~ IG(a_n, b_n)``.
    """
    mean, scale, shape, rate = normal_inverse_gamma_posterior(
        design, y, prior_scale, prior_shape, prior_rate
    )
    beta_covariance = scale * rate / (shape - 1)
    beta_sd = np.sqrt(np.diag(beta_covariance))
    sigma2_mean = rate / (shape - 1)
    means = {"beta": mean, "sigma2": np.array(sigma2_mean)}
    sds = {"beta": beta_sd, "sigma2": np.array(sigma2_mean / np.sqrt(shape - 2))}
    return means, sds, beta_covariance[0, 1] / (beta_sd[0] * beta_sd[1])


def normal_inverse_gamma_regression(n_rows=2000, seed=0, total_size=None) -> PanelModel:
    """Bayesian normal linear regression with a Normal-Inverse-Gamma prior (exact posterior).

    ``y_i ~ N(x_i' beta, sigma2)``, ``beta | sigma2 ~ N(0, sigma2 V)``,
    ``sigma2 ~ IG(phi, psi)`` with two standard-normal covariates,
    ``V = 100 I`` and ``phi = psi = 1``. The posterior is Normal-Inverse-Gamma:
    ``beta`` is Student-t with mean ``m_n`` and covariance
    ``b_n / (a_n - 1) V_n``; ``sigma2 ~ IG(a_n, b_n)``.

    Parameters
    ----------
    n_rows : int, default 2000
        Number of rows N.
    seed : int, default 0
        Seed of the simulated data.
    total_size : int, optional
        Passed to the likelihood; anything but N tempers it (for negative controls).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(size=n_rows)
    prior_scale, phi, psi = 100.0, 1.0, 1.0
    with pm.Model() as model:
        sigma2 = pm.InverseGamma("sigma2", alpha=phi, beta=psi)
        beta = pm.Normal("beta", 0.0, pm.math.sqrt(prior_scale * sigma2), shape=2)
        pm.Normal("y", x @ beta, pm.math.sqrt(sigma2), observed=y, total_size=total_size)

    means, sds, correlation = normal_inverse_gamma_moments(x, y, prior_scale, phi, psi)
    return PanelModel(
        f"NIG regression N={n_rows}", model, n_rows, means=means, sds=sds, correlation=correlation
    )


#: The prior sd of :func:`correlated_regression`'s coefficients.
CORRELATED_PRIOR_SD = 100.0


def correlated_data(n_rows=2000, correlation=0.5, seed=0):
    """Return the covariates and outcomes of :func:`correlated_regression`.

    Returns
    -------
    x : ndarray, shape (n_rows, 2)
    y : ndarray, shape (n_rows,)
    """
    rng = np.random.default_rng(seed)
    covariance = np.array([[1.0, correlation], [correlation, 1.0]])
    x = rng.multivariate_normal([0.0, 0.0], covariance, size=n_rows)
    y = x @ np.array([0.5, -1.0]) + rng.normal(size=n_rows)
    return x, y


def correlated_regression(n_rows=2000, correlation=0.5, seed=0) -> PanelModel:
    """Regression with correlated covariates and known noise: a correlated Gaussian posterior.

    With covariates of correlation ``rho`` and unit noise, the posterior of the
    two coefficients is Gaussian with covariance ``(X'X + I / 100^2)^-1``,
    whose correlation is close to ``-rho``.
    """
    x, y = correlated_data(n_rows, correlation, seed)
    prior_sd = CORRELATED_PRIOR_SD
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, prior_sd, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    posterior_covariance = np.linalg.inv(x.T @ x + np.eye(2) / prior_sd**2)
    sds = np.sqrt(np.diag(posterior_covariance))
    return PanelModel(
        f"correlated regression N={n_rows}",
        model,
        n_rows,
        means={"beta": posterior_covariance @ x.T @ y},
        sds={"beta": sds},
        correlation=posterior_covariance[0, 1] / (sds[0] * sds[1]),
        key={"model": "correlated", "n_rows": n_rows, "correlation": correlation, "seed": seed},
    )


def logistic_data(n_rows=5000, n_features=10, badly_scaled=False, seed=0):
    """Return the covariates, outcomes and true coefficients of :func:`logistic_regression`.

    Returns
    -------
    x : ndarray, shape (n_rows, n_features)
    y : ndarray of int64, shape (n_rows,)
    true_beta : ndarray, shape (n_features,)
    """
    rng = np.random.default_rng(seed)
    true_beta = rng.normal(size=n_features)
    x = rng.normal(size=(n_rows, n_features))
    y = rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(x @ true_beta)))
    if badly_scaled:
        x[:, 0] *= 100.0
        x[:, 1] *= 0.01
    return x, y.astype("int64"), true_beta


def logistic_regression(n_rows=5000, n_features=10, badly_scaled=False, seed=0) -> PanelModel:
    """Bayesian logistic regression with standard-normal covariates and a N(0, 1) prior.

    The benchmark model of the SG-MCMC literature: no intercept, D = 10
    coefficients with true values drawn from N(0, 1). With ``badly_scaled``,
    the first covariate is multiplied by 100 and the second by 0.01 after the
    outcomes are simulated, so the coefficients' posterior scales differ by
    about five orders of magnitude.
    """
    x, y, true_beta = logistic_data(n_rows, n_features, badly_scaled, seed)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=n_features)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    label = "badly scaled logistic" if badly_scaled else "logistic"
    key = {
        "model": "logistic",
        "n_rows": n_rows,
        "n_features": n_features,
        "badly_scaled": badly_scaled,
        "seed": seed,
    }
    return PanelModel(f"{label} N={n_rows}", model, n_rows, truth={"beta": true_beta}, key=key)


def hierarchical_regression(n_rows=20_000, n_groups=50, seed=0) -> PanelModel:
    """Hierarchical linear regression with group intercepts indexed by a data column.

    ``y_i ~ N(alpha[g_i] + beta x_i, sigma)``, ``alpha_g ~ N(mu, tau)``, with
    ``n_groups`` groups of equal expected size (centred, as suits groups with
    hundreds of rows each).
    """
    rng = np.random.default_rng(seed)
    group = rng.integers(n_groups, size=n_rows)
    alpha = 1.0 + 0.5 * rng.normal(size=n_groups)
    x = rng.normal(size=n_rows)
    y = alpha[group] + 0.7 * x + 0.8 * rng.normal(size=n_rows)
    with pm.Model(coords={"group": np.arange(n_groups)}) as model:
        group_index = pm.Data("group_index", group)
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 1.0)
        intercept = pm.Normal("intercept", mu, tau, dims="group")
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", intercept[group_index] + beta * x, sigma, observed=y)
    key = {"model": "hierarchical", "n_rows": n_rows, "n_groups": n_groups, "seed": seed}
    return PanelModel(f"hierarchical N={n_rows} G={n_groups}", model, n_rows, key=key)


def _cache_directory() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pymc_sgmcmc"
    return Path(os.environ.get("PYMC_SGMCMC_CACHE", default))


def nuts_reference(panel: PanelModel, draws=None, tune=1000, chains=None, refresh=False):
    """Attach reference means and sds from a long NUTS run, cached on disk.

    The run starts every chain at the model's initial point (no jitter, which
    can strand NUTS on badly scaled models) and must reach R-hat <= 1.01. It
    is keyed by the model's definition and the NUTS settings; its summary is
    stored under ``$PYMC_SGMCMC_CACHE`` (default
    ``~/.cache/pymc_sgmcmc``) and reused by later calls.

    Parameters
    ----------
    panel : PanelModel
        A panel model without an exact posterior.
    draws, tune, chains : int, optional
        NUTS settings of the reference run: by default 4 chains of 2,000
        draws, or 2 chains of 1,000 draws from N = 200,000 rows on (a Monte
        Carlo error near 0.02 posterior sd either way).
    refresh : bool, default False
        Run NUTS again even if a cached summary exists.

    Returns
    -------
    PanelModel
        ``panel``, with ``means`` and ``sds`` filled in.
    """
    large = panel.n_rows >= 200_000
    draws = draws or (1000 if large else 2000)
    chains = chains or (2 if large else 4)
    settings = {**panel.key, "draws": draws, "tune": tune, "chains": chains, "summary": 2}

    def run_nuts():
        with panel.model:
            result = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                init="adapt_diag",
                random_seed=20261121,
                progressbar=False,
            )
        posterior = result.posterior
        worst_rhat = max(float(np.max(np.asarray(az.rhat(result)[name]))) for name in posterior)
        if worst_rhat > 1.01:
            raise RuntimeError(
                f"The NUTS reference run for {panel.name} did not converge (R-hat "
                f"{worst_rhat:.3f}); nothing was cached."
            )
        stored = {"settings": settings, "rhat": worst_rhat}
        for key in ("means", "sds", "mean_se", "sd_se"):
            stored[key] = {}
        for variable in panel.model.free_RVs:
            name = variable.name
            draws_array = np.asarray(posterior[name])
            flat = draws_array.reshape(-1, *draws_array.shape[2:])
            stored["means"][name] = flat.mean(axis=0).tolist()
            stored["sds"][name] = flat.std(axis=0).tolist()
            by_chain = draws_array.reshape(*draws_array.shape[:2], -1)
            errors = [monte_carlo_errors(by_chain[..., j]) for j in range(by_chain.shape[-1])]
            shape = draws_array.shape[2:]
            stored["mean_se"][name] = np.reshape([e[0] for e in errors], shape).tolist()
            stored["sd_se"][name] = np.reshape([e[1] for e in errors], shape).tolist()
        return stored

    return _attach(panel, _cached("nuts", settings, run_nuts, refresh))


def _cached(kind: str, settings: dict, compute, refresh: bool) -> dict:
    """Return the summary stored for ``settings``, computing and storing it if needed."""
    if "model" not in settings:
        raise ValueError(
            "A cached reference needs the panel's key (builder name and arguments) to tell "
            "models apart; build the panel with key={'model': ..., ...}."
        )
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    path = _cache_directory() / f"{kind}-{digest}.json"
    if path.exists() and not refresh:
        return json.loads(path.read_text())
    stored = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1))
    return stored


def _attach(panel: PanelModel, stored: dict) -> PanelModel:
    """Fill ``panel``'s reference means and sds from a stored summary."""
    panel.means = {name: np.asarray(value) for name, value in stored["means"].items()}
    panel.sds = {name: np.asarray(value) for name, value in stored["sds"].items()}
    if "mean_se" in stored:
        panel.mean_se = {name: np.asarray(value) for name, value in stored["mean_se"].items()}
        panel.sd_se = {name: np.asarray(value) for name, value in stored["sd_se"].items()}
    return panel


def laplace_reference(panel: PanelModel, refresh=False):
    """Attach reference means and sds from the Laplace approximation, cached on disk.

    The mode is found by damped Newton steps with the exact full-data
    gradient and Hessian, and the covariance is the inverse of the negative
    Hessian there. For a regular model with a flat-enough prior the posterior
    approaches this Gaussian as N grows (Bernstein-von Mises): the error of the
    means and sds, relative to the posterior sd, shrinks like
    :math:`N^{-1/2}`. It is the reference where a long NUTS run would take
    hours (millions of rows); the benchmark reports how far it is from the NUTS
    reference at the sizes where both exist.

    Parameters
    ----------
    panel : PanelModel
        A model whose free variables are all unconstrained and continuous.
    refresh : bool, default False
        Compute again even if a cached summary exists.

    Returns
    -------
    PanelModel
        ``panel``, with ``means`` and ``sds`` filled in.
    """
    model = panel.model
    if any(model.rvs_to_transforms[rv] is not None for rv in model.free_RVs):
        raise ValueError("laplace_reference needs unconstrained free variables.")

    def laplace():
        start = DictToArrayBijection.map(model.initial_point())
        log_density = model.compile_logp()
        gradient = model.compile_dlogp()
        # PyMC's d2logp is the Hessian of the negative log density: the precision.
        precision = model.compile_d2logp()

        def as_point(vector):
            return DictToArrayBijection.rmap(RaveledVars(vector, start.point_map_info))

        mode = start.data
        for _ in range(100):
            step = np.linalg.solve(precision(as_point(mode)), gradient(as_point(mode)))
            current = log_density(as_point(mode))
            while log_density(as_point(mode + step)) < current and np.max(np.abs(step)) > 0:
                step = step / 2.0
            mode = mode + step
            if np.max(np.abs(step) * np.sqrt(np.diag(precision(as_point(mode))))) < 1e-8:
                break
        sds = np.sqrt(np.diag(np.linalg.inv(precision(as_point(mode)))))
        means, sds = as_point(mode), as_point(sds)
        return {
            "settings": panel.key,
            "means": {name: np.ravel(value).tolist() for name, value in means.items()},
            "sds": {name: np.ravel(value).tolist() for name, value in sds.items()},
        }

    return _attach(panel, _cached("laplace", panel.key, laplace, refresh))
