"""Models with known posteriors shared by the tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm


@dataclass
class KnownPosterior:
    """A model and the exact posterior means and sds of some of its variables."""

    model: pm.Model
    means: dict[str, np.ndarray]
    sds: dict[str, np.ndarray]
    n_rows: int
    correlation: float | None = None


def normal_inverse_gamma_regression(n_rows=2000, seed=0, total_size=None) -> KnownPosterior:
    """Bayesian normal linear regression with a Normal-Inverse-Gamma prior.

    y_i ~ N(x_i' beta, sigma2), beta | sigma2 ~ N(0, sigma2 * V), sigma2 ~ IG(phi, psi),
    with V = 100 I and phi = psi = 1, as in the worked example of the SGLD handout.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(size=n_rows)
    prior_scale, phi, psi = 100.0, 1.0, 1.0
    with pm.Model() as model:
        sigma2 = pm.InverseGamma("sigma2", alpha=phi, beta=psi)
        beta = pm.Normal("beta", 0.0, pm.math.sqrt(prior_scale * sigma2), shape=2)
        pm.Normal("y", x @ beta, pm.math.sqrt(sigma2), observed=y, total_size=total_size)

    posterior_precision = np.eye(2) / prior_scale + x.T @ x
    posterior_scale = np.linalg.inv(posterior_precision)
    mean = posterior_scale @ x.T @ y
    shape = phi + n_rows / 2
    rate = psi + 0.5 * (y @ y - mean @ posterior_precision @ mean)
    beta_sd = np.sqrt(np.diag(posterior_scale) * rate / (shape - 1))
    sigma2_mean = rate / (shape - 1)
    sigma2_sd = sigma2_mean / np.sqrt(shape - 2)
    return KnownPosterior(
        model,
        means={"beta": mean, "sigma2": np.array(sigma2_mean)},
        sds={"beta": beta_sd, "sigma2": np.array(sigma2_sd)},
        n_rows=n_rows,
    )


def correlated_regression(n_rows=2000, correlation=0.5, seed=0) -> KnownPosterior:
    """Regression with correlated covariates and known noise: a correlated Gaussian posterior.

    With covariates of correlation rho and unit noise, the posterior of the two
    coefficients is Gaussian with covariance (X'X + I / 100^2)^-1, whose
    correlation is close to -rho.
    """
    rng = np.random.default_rng(seed)
    covariance = np.array([[1.0, correlation], [correlation, 1.0]])
    x = rng.multivariate_normal([0.0, 0.0], covariance, size=n_rows)
    y = x @ np.array([0.5, -1.0]) + rng.normal(size=n_rows)
    prior_sd = 100.0
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, prior_sd, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    posterior_covariance = np.linalg.inv(x.T @ x + np.eye(2) / prior_sd**2)
    sds = np.sqrt(np.diag(posterior_covariance))
    return KnownPosterior(
        model,
        means={"beta": posterior_covariance @ x.T @ y},
        sds={"beta": sds},
        n_rows=n_rows,
        correlation=posterior_covariance[0, 1] / (sds[0] * sds[1]),
    )


def posterior_errors(posterior, known: KnownPosterior):
    """Return the worst |mean error| / sd, the worst |sd ratio - 1| and the smallest bulk ESS."""
    import arviz as az

    mean_errors, sd_errors, ess = [], [], []
    for name, exact_mean in known.means.items():
        draws = np.asarray(posterior[name])
        draws = draws.reshape(-1, *draws.shape[2:])
        mean_errors.append(np.abs(draws.mean(axis=0) - exact_mean) / known.sds[name])
        sd_errors.append(np.abs(draws.std(axis=0) / known.sds[name] - 1.0))
        by_chain = np.asarray(posterior[name])
        by_chain = by_chain.reshape(*by_chain.shape[:2], -1)
        ess.append([float(az.ess(by_chain[..., j])) for j in range(by_chain.shape[-1])])
    return (
        float(np.max(np.concatenate([np.ravel(e) for e in mean_errors]))),
        float(np.max(np.concatenate([np.ravel(e) for e in sd_errors]))),
        float(np.min(np.concatenate([np.ravel(e) for e in ess]))),
    )
