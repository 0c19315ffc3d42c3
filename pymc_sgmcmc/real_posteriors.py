"""Panel models whose posteriors look like those of real analyses.

The models of :mod:`pymc_sgmcmc.panel` have nearly Gaussian, weakly correlated
posteriors. Each builder here stresses one thing those lack:

- :func:`polynomial_regression`: correlation. A cubic polynomial in five
  collinear covariates; the posterior correlation matrix of its 26
  coefficients has a condition number above 10^5 (exact posterior).
- :func:`student_t_regression`: heavy tails. A Student-t likelihood, so
  single rows with large residuals give large, rare gradient terms.
- :func:`poisson_regression`: skew. A Poisson model with a categorical
  covariate whose rare levels have a handful of events or none.
- :func:`radon_like`: a funnel and unbalanced groups. A hierarchical model
  with groups of 2 to several hundred rows, written centred or non-centred.
- :func:`poisson_glmm`: a hierarchical scale behind a log link. Group
  intercepts of a Poisson regression, non-centred, whose scale's mean moves
  by several of its sds under tempering.
- :func:`many_groups_regression`: dimension. A hierarchical regression with
  1,000 group intercepts (D = 1,004) and a million rows.
- :func:`median_regression`: kinks. A Laplace likelihood, piecewise linear
  in the coefficients (exact posterior, summed on a grid).
- :func:`eight_schools`: a latent variable per row. The eight schools of
  Rubin (1981), written non-centred: eight rows, eight offsets.

Like the panel's builders, each returns a :class:`~pymc_sgmcmc.panel.PanelModel`;
the polynomial and median regressions carry their exact posteriors, and the others get a
reference from :func:`~pymc_sgmcmc.panel.nuts_reference`.
"""

from __future__ import annotations

import itertools

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_sgmcmc.panel import (
    PanelModel,
    normal_inverse_gamma_moments,
    normal_inverse_gamma_posterior,
    nuts_reference,
)

__all__ = [
    "eight_schools",
    "many_groups_reference",
    "many_groups_regression",
    "median_regression",
    "poisson_glmm",
    "poisson_regression",
    "polynomial_regression",
    "posterior_correlation_condition",
    "radon_like",
    "student_t_regression",
]

#: Prior of the polynomial regression, ``beta | sigma2 ~ N(0, scale sigma2 I)`` and
#: ``sigma2 ~ IG(shape, rate)``: scale, shape and rate.
_POLYNOMIAL_PRIOR_SCALE, _POLYNOMIAL_PRIOR_SHAPE, _POLYNOMIAL_PRIOR_RATE = 100.0, 1.0, 1.0


def _polynomial_data(n_rows: int, seed: int):
    """Simulate the polynomial regression's design matrix, outcomes and coefficients.

    Five log-normal covariates ``exp(0.4 z)``, with ``z`` standard normal of
    pairwise correlation 0.9, are positive with median 1 and correlate about
    0.9; with their 15 second-order terms and 5 cubes and an intercept they
    make 26 nearly collinear columns.
    """
    rng = np.random.default_rng(seed)
    n_covariates = 5
    correlation = 0.9 * np.ones((n_covariates, n_covariates)) + 0.1 * np.eye(n_covariates)
    latent = rng.multivariate_normal(np.zeros(n_covariates), correlation, size=n_rows)
    covariates = np.exp(0.4 * latent)
    pairs = itertools.combinations_with_replacement(range(n_covariates), 2)
    columns = [np.ones(n_rows), *covariates.T]
    columns += [covariates[:, i] * covariates[:, j] for i, j in pairs]
    columns += [covariates[:, j] ** 3 for j in range(n_covariates)]
    design = np.column_stack(columns)
    true_beta = rng.normal(0.0, 0.5, size=design.shape[1])
    y = design @ true_beta + rng.normal(size=n_rows)
    return design, y, true_beta


def posterior_correlation_condition(n_rows=5000, seed=0) -> float:
    """Condition number of the posterior correlation matrix of the polynomial regression's ``beta``.

    It is about 2.1e5 at N = 5,000 and 1.4e5 at N = 500,000 (seed 0): the
    posterior is dominated by the nearly collinear design at every N.

    Parameters
    ----------
    n_rows : int, default 5000
        Number of rows N.
    seed : int, default 0
        Seed of the simulated data.
    """
    design, y, _ = _polynomial_data(n_rows, seed)
    _, scale, _, _ = normal_inverse_gamma_posterior(
        design, y, _POLYNOMIAL_PRIOR_SCALE, _POLYNOMIAL_PRIOR_SHAPE, _POLYNOMIAL_PRIOR_RATE
    )
    sds = np.sqrt(np.diag(scale))
    return float(np.linalg.cond(scale / np.outer(sds, sds)))


def polynomial_regression(n_rows=5000, seed=0) -> PanelModel:
    """Cubic polynomial regression on collinear covariates (exact, strongly correlated posterior).

    ``y_i ~ N(x_i' beta, sigma2)`` with 26 columns: an intercept, five
    positive covariates of pairwise correlation about 0.9 (not standardised),
    their 15 squares and pairwise products and their 5 cubes. The prior is
    Normal-Inverse-Gamma, ``beta | sigma2 ~ N(0, 100 sigma2 I)`` and
    ``sigma2 ~ IG(1, 1)``, so the posterior is exact at any N: ``beta`` is
    Student-t with mean ``m_n`` and covariance ``b_n / (a_n - 1) V_n`` and
    ``sigma2 ~ IG(a_n, b_n)``. The prior's precision is under 1% of the data's
    in every direction from N = 5,000 on. The condition number of the
    posterior correlation matrix of ``beta`` is about 2.1e5 at N = 5,000 and
    1.4e5 at N = 500,000 (see :func:`posterior_correlation_condition`).

    Parameters
    ----------
    n_rows : int, default 5000
        Number of rows N.
    seed : int, default 0
        Seed of the simulated data.
    """
    design, y, true_beta = _polynomial_data(n_rows, seed)
    prior_scale, prior_shape, prior_rate = (
        _POLYNOMIAL_PRIOR_SCALE,
        _POLYNOMIAL_PRIOR_SHAPE,
        _POLYNOMIAL_PRIOR_RATE,
    )
    with pm.Model() as model:
        sigma2 = pm.InverseGamma("sigma2", alpha=prior_shape, beta=prior_rate)
        beta = pm.Normal("beta", 0.0, pm.math.sqrt(prior_scale * sigma2), shape=design.shape[1])
        pm.Normal("y", design @ beta, pm.math.sqrt(sigma2), observed=y)

    means, sds, correlation = normal_inverse_gamma_moments(
        design, y, prior_scale, prior_shape, prior_rate
    )
    return PanelModel(
        f"polynomial regression N={n_rows}",
        model,
        n_rows,
        means=means,
        sds=sds,
        correlation=correlation,
        truth={"beta": true_beta, "sigma2": np.array(1.0)},
        key={"model": "polynomial", "n_rows": n_rows, "seed": seed},
    )


def student_t_regression(n_rows=5000, seed=0) -> PanelModel:
    """Robust linear regression: a Student-t likelihood with 4 degrees of freedom.

    ``y_i ~ StudentT(4, intercept + x_i' beta, sigma)`` with three
    standard-normal covariates, and data simulated with t(3) noise, heavier
    tailed than the model assumes: a few rows have residuals of ten or more
    scale units. D = 5.

    Parameters
    ----------
    n_rows : int, default 5000
        Number of rows N.
    seed : int, default 0
        Seed of the simulated data.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 3))
    true_beta = np.array([1.0, -0.5, 0.25])
    y = 0.5 + x @ true_beta + rng.standard_t(3, size=n_rows)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.StudentT("y", nu=4.0, mu=intercept + x @ beta, sigma=sigma, observed=y)
    return PanelModel(
        f"Student-t regression N={n_rows}",
        model,
        n_rows,
        truth={"intercept": np.array(0.5), "beta": true_beta},
        key={"model": "student_t", "n_rows": n_rows, "seed": seed},
    )


def poisson_regression(n_rows=5000, seed=0) -> PanelModel:
    """Poisson regression with rare levels of a categorical covariate (skewed posterior).

    ``y_i ~ Poisson(exp(intercept + effect[level_i] + x_i' beta))`` with a
    base rate of 0.2 events per row, two standard-normal covariates and a
    20-level factor in treatment coding: level 0 holds half the rows and the
    other levels' shares fall geometrically (by a factor 0.75 each), so at
    N = 5,000 the rarest levels have a few rows and a handful of events or
    none, and their effects' posteriors are skewed (skewness down to about
    -0.4 at N = 5,000, from NUTS). The N(0, 1) prior of the
    effects keeps the posterior proper for levels without events. The level
    of each row is a ``pm.Data`` index. D = 22.

    Parameters
    ----------
    n_rows : int, default 5000
        Number of rows N.
    seed : int, default 0
        Seed of the simulated data.
    """
    rng = np.random.default_rng(seed)
    n_levels = 20
    shares = 0.25 * 0.75 ** np.arange(n_levels - 1)
    level_probabilities = np.concatenate([[1.0], shares / shares.sum()]) / 2.0
    level = rng.choice(n_levels, size=n_rows, p=level_probabilities)
    x = rng.normal(size=(n_rows, 2))
    true_effect = rng.normal(0.0, 0.5, size=n_levels - 1)
    true_beta = np.array([0.3, -0.2])
    log_rate = np.log(0.2) + np.concatenate([[0.0], true_effect])[level] + x @ true_beta
    y = rng.poisson(np.exp(log_rate))
    with pm.Model(coords={"level": np.arange(1, n_levels)}) as model:
        level_index = pm.Data("level_index", level)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        effect = pm.Normal("effect", 0.0, 1.0, dims="level")
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        # Level 0 is the baseline: its effect is 0.
        level_effect = pt.concatenate([pt.zeros(1), effect])
        pm.Poisson("y", pm.math.exp(intercept + level_effect[level_index] + x @ beta), observed=y)
    key = {"model": "poisson", "n_rows": n_rows, "seed": seed}
    truth = {"intercept": np.array(np.log(0.2)), "effect": true_effect, "beta": true_beta}
    return PanelModel(f"Poisson regression N={n_rows}", model, n_rows, truth=truth, key=key)


def radon_like(n_rows=5000, n_groups=50, centred=True, seed=0, varying_slopes=False) -> PanelModel:
    """Hierarchical model of the radon data's shape: unbalanced groups and a funnel.

    ``y_i ~ N(alpha[g_i] + beta floor_i, sigma)``, ``alpha_g ~ N(mu, tau)``
    with a binary covariate ``floor`` (1 in a fifth of the rows) and group
    sizes drawn from a log-normal with log-sd 2: at N = 5,000 (seed 0) eight
    groups have 2 to 5 rows and nine have over 250. The small groups'
    intercepts are set mostly by the prior, which makes the centred form
    funnel-shaped in ``(tau, alpha_g)``; the large groups' are set by the
    data, which makes the non-centred form (``alpha = mu + tau z``,
    ``z ~ N(0, 1)``) a curved ridge in ``(mu, tau, z_g)``. At N = 5,000 the
    data fix ``tau`` well enough (posterior sd 0.036 around 0.29) that NUTS
    samples the centred form without divergences, and the non-centred form
    with a step size half as long and a seventh of the ESS. The group of each
    row is a ``pm.Data`` index. D = n_groups + 4.

    With ``varying_slopes`` the floor effect varies by group too,
    ``beta_g ~ N(mu_beta, tau_beta)`` (true sd 0.2), written like the
    intercepts: two funnels, D = 2 n_groups + 5.

    Parameters
    ----------
    n_rows : int, default 5000
        Number of rows N.
    n_groups : int, default 50
        Number of groups; each has at least 2 rows.
    centred : bool, default True
        Write the group intercepts centred (``alpha`` free) or non-centred
        (``z`` free).
    seed : int, default 0
        Seed of the simulated data.
    varying_slopes : bool, default False
        Give each group its own floor effect.
    """
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 2.0, size=n_groups)
    sizes = 2 + rng.multinomial(n_rows - 2 * n_groups, weights / weights.sum())
    group = rng.permutation(np.repeat(np.arange(n_groups), sizes))
    floor = (rng.random(n_rows) < 0.2).astype(float)
    true_alpha = 1.5 + 0.3 * rng.normal(size=n_groups)
    y = true_alpha[group] - 0.7 * floor + 0.75 * rng.normal(size=n_rows)
    true_beta = np.array(-0.7)
    if varying_slopes:
        true_beta = -0.7 + 0.2 * rng.normal(size=n_groups)
        y = y + (true_beta[group] + 0.7) * floor

    def group_effects(mean_name, sd_name, effect_name, z_name):
        mean = pm.Normal(mean_name, 0.0, 5.0)
        sd = pm.HalfNormal(sd_name, 1.0)
        if centred:
            return pm.Normal(effect_name, mean, sd, dims="group")
        return mean + sd * pm.Normal(z_name, 0.0, 1.0, dims="group")

    with pm.Model(coords={"group": np.arange(n_groups)}) as model:
        group_index = pm.Data("group_index", group)
        if varying_slopes:
            alpha = group_effects("mu_alpha", "tau_alpha", "alpha", "z_alpha")
            beta = group_effects("mu_beta", "tau_beta", "beta", "z_beta")[group_index]
        else:
            alpha = group_effects("mu", "tau", "alpha", "z")
            beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", alpha[group_index] + beta * floor, sigma, observed=y)
    label = "radon-like centred" if centred else "radon-like non-centred"
    key = {
        "model": "radon_like",
        "n_rows": n_rows,
        "n_groups": n_groups,
        "centred": centred,
        "seed": seed,
    }
    if varying_slopes:
        label += ", varying slopes"
        key["varying_slopes"] = True
    truth = {"alpha": true_alpha, "beta": true_beta, "sigma": np.array(0.75)}
    return PanelModel(f"{label} N={n_rows} G={n_groups}", model, n_rows, truth=truth, key=key)


def _many_groups_data(n_rows, n_groups, seed):
    rng = np.random.default_rng(seed)
    group = rng.integers(n_groups, size=n_rows)
    true_intercept = 1.0 + 0.5 * rng.normal(size=n_groups)
    x = rng.normal(size=n_rows)
    y = true_intercept[group] + 0.7 * x + 0.8 * rng.normal(size=n_rows)
    return group, x, y, true_intercept


def many_groups_reference(panel: PanelModel) -> PanelModel:
    """Attach a NUTS reference to :func:`many_groups_regression` from its sufficient statistics.

    Given the group intercepts, ``beta`` and ``sigma``, the likelihood of the
    rows depends on the data only through per-group counts and sums of
    ``y``, ``x``, ``x^2``, ``x y`` and ``y^2``. The same posterior written with
    them (a ``pm.Potential``) costs O(groups) per gradient instead of O(N),
    so a long NUTS run (4 chains x 5,000 draws, R-hat <= 1.01, cached like
    every reference) takes about 35 s where the row-by-row model takes 12
    minutes per chain. The two log densities agree up to a constant, and a
    NUTS run of 2 chains x 1,000 draws on the row-by-row model at N = 10^6
    agreed with this reference within its Monte Carlo error (means within
    0.055 sd, sd ratios 0.92 to 1.11).
    """
    key = panel.key
    group, x, y, _ = _many_groups_data(key["n_rows"], key["n_groups"], key["seed"])
    count = np.bincount(group, minlength=key["n_groups"]).astype(float)
    sums = {
        name: np.bincount(group, weights=values, minlength=key["n_groups"])
        for name, values in {"y": y, "x": x, "xx": x * x, "xy": x * y, "yy": y * y}.items()
    }
    with pm.Model(coords={"group": np.arange(key["n_groups"])}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 1.0)
        intercept = pm.Normal("intercept", mu, tau, dims="group")
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        squares = (
            sums["yy"]
            - 2 * intercept * sums["y"]
            - 2 * beta * sums["xy"]
            + count * intercept**2
            + 2 * intercept * beta * sums["x"]
            + beta**2 * sums["xx"]
        )
        pm.Potential(
            "likelihood", -key["n_rows"] * pm.math.log(sigma) - squares.sum() / (2 * sigma**2)
        )
    collapsed = PanelModel(
        panel.name, model, 0, key={**key, "model": "many_groups_sufficient_statistics"}
    )
    nuts_reference(collapsed, draws=5000, chains=4)
    panel.means, panel.sds = collapsed.means, collapsed.sds
    panel.mean_se, panel.sd_se = collapsed.mean_se, collapsed.sd_se
    return panel


def many_groups_regression(n_rows=1_000_000, n_groups=1000, seed=0) -> PanelModel:
    """Hierarchical linear regression with many groups: D = n_groups + 4.

    ``y_i ~ N(intercept[g_i] + beta x_i, sigma)``, ``intercept_g ~ N(mu, tau)``
    (centred, as suits groups of about ``n_rows / n_groups`` rows each), with
    groups of equal expected size given as a ``pm.Data`` index. With the
    defaults, 1,000 groups of about 1,000 rows each; NUTS takes about 12
    minutes per chain of 1,000 tuning steps and 1,000 draws (15 leapfrog steps
    per draw at 17 ms per full-data gradient).

    Parameters
    ----------
    n_rows : int, default 1_000_000
        Number of rows N.
    n_groups : int, default 1000
        Number of groups.
    seed : int, default 0
        Seed of the simulated data.
    """
    group, x, y, true_intercept = _many_groups_data(n_rows, n_groups, seed)
    with pm.Model(coords={"group": np.arange(n_groups)}) as model:
        group_index = pm.Data("group_index", group)
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 1.0)
        intercept = pm.Normal("intercept", mu, tau, dims="group")
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", intercept[group_index] + beta * x, sigma, observed=y)
    key = {"model": "many_groups", "n_rows": n_rows, "n_groups": n_groups, "seed": seed}
    truth = {"intercept": true_intercept, "beta": np.array(0.7), "sigma": np.array(0.8)}
    return PanelModel(f"many groups N={n_rows} G={n_groups}", model, n_rows, truth=truth, key=key)


#: Scale of the median regression's Laplace likelihood and sd of its Normal prior.
_MEDIAN_SCALE, _MEDIAN_PRIOR_SD = 0.7, 5.0


def _laplace_logp(value, mu, scale):
    return -pm.math.abs(value - mu) / scale - pm.math.log(2 * scale)


def median_regression(n_rows=2000, seed=10) -> PanelModel:
    """Median regression: a Laplace likelihood with a kink at every row (exact posterior).

    ``y_i ~ Laplace(a + b x_i, 0.7)`` written with ``abs`` in a
    ``pm.CustomDist``, the scale given, ``a, b ~ N(0, 5)``. The log
    likelihood is piecewise linear in the coefficients, so a Hessian
    differenced over 1e-3 posterior sd sees no curvature or a spike; with the
    default seed, measured from zero with generator seed 1, it sees none, and
    the prior's sds (5) stood for the posterior's (0.016) before the kink
    check (:mod:`pymc_sgmcmc.tuning.kinks`). The posterior means and sds are sums over a grid of
    201 x 201 points spanning 8 asymptotic sds each way (see
    :func:`median_regression_moments`).

    Parameters
    ----------
    n_rows : int, default 2000
        Number of rows N.
    seed : int, default 10
        Seed of the simulated data.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_rows)
    y = 1.0 + 0.5 * x + rng.laplace(scale=_MEDIAN_SCALE, size=n_rows)
    with pm.Model() as model:
        coefficients = pm.Normal("coefficients", 0.0, _MEDIAN_PRIOR_SD, shape=2)
        pm.CustomDist(
            "y",
            coefficients[0] + coefficients[1] * x,
            _MEDIAN_SCALE,
            logp=_laplace_logp,
            observed=y,
        )
    means, sds = median_regression_moments(x, y)
    return PanelModel(
        f"median regression N={n_rows}",
        model,
        n_rows,
        means={"coefficients": means},
        sds={"coefficients": sds},
        truth={"coefficients": np.array([1.0, 0.5])},
        key={"model": "median", "n_rows": n_rows, "seed": seed},
    )


def median_regression_moments(x, y, points=201, width=8.0):
    """Return the posterior means and sds of the median regression's coefficients.

    The posterior is summed on a grid spanning ``width`` asymptotic sds
    around the least-squares fit on each axis; at 0.08 sd spacing the sums
    are exact far below Monte Carlo error.
    """
    design = np.column_stack([np.ones_like(x), x])
    centre = np.linalg.lstsq(design, y, rcond=None)[0]
    sds = np.sqrt(np.diag(np.linalg.inv(design.T @ design))) * _MEDIAN_SCALE
    axes = [c + np.linspace(-width, width, points) * s for c, s in zip(centre, sds, strict=True)]
    first, second = np.meshgrid(*axes, indexing="ij")
    log_density = -(first**2 + second**2) / (2 * _MEDIAN_PRIOR_SD**2)
    for rows_x, rows_y in zip(np.array_split(x, 20), np.array_split(y, 20), strict=True):
        residuals = rows_y[:, None, None] - first[None] - second[None] * rows_x[:, None, None]
        log_density = log_density - np.abs(residuals).sum(axis=0) / _MEDIAN_SCALE
    weights = np.exp(log_density - log_density.max())
    weights /= weights.sum()
    means = np.array([np.sum(weights * first), np.sum(weights * second)])
    grids = (first, second)
    variances = [
        np.sum(weights * (grid - mean) ** 2) for grid, mean in zip(grids, means, strict=True)
    ]
    return means, np.sqrt(variances)


#: The eight schools' estimated coaching effects and their standard errors (Rubin, 1981).
EIGHT_SCHOOLS_EFFECTS = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_ERRORS = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools() -> PanelModel:
    """Return the eight schools, non-centred: ``y_j ~ N(mu + tau z_j, s_j)``, ``z_j ~ N(0, 1)``.

    ``mu ~ N(0, 5)``, ``tau ~ HalfCauchy(5)``. Each row has its own latent
    offset ``z_j``, so the step methods sample it with full batches (the
    default batch size of ``min(100, N)`` is all eight rows). The posterior of
    ``(tau, z)`` is a funnel, milder than the centred form's.
    """
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        z = pm.Normal("z", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * z, EIGHT_SCHOOLS_ERRORS, observed=EIGHT_SCHOOLS_EFFECTS)
    return PanelModel("eight schools, non-centred", model, 8, key={"model": "eight-schools"})


def poisson_glmm(n_groups=60, seed=24, group_sizes=(3, 200)) -> PanelModel:
    """Varying-intercept Poisson regression, non-centred, with unbalanced groups.

    ``y_i ~ Poisson(exp(mu + tau z[g_i] + beta x_i))``, ``z_g ~ N(0, 1)``,
    ``mu, beta ~ N(0, 1)``, ``tau ~ HalfNormal(1)``, with group sizes drawn
    uniformly from ``group_sizes[0]`` to ``group_sizes[1] - 1`` rows (9 to
    196, N = 6,181 at the defaults; 81 to 246, N = 1,365 with 8 groups of
    ``(50, 301)``, where ``tau`` rests on 8 groups), a standard normal
    covariate and
    true values ``mu = 0.3``, ``tau = 0.4``, ``beta = 0.25``. The group of each
    row is a ``pm.Data`` index. The large groups fix their intercepts, so
    ``tau`` and the ``z_g`` lie on a curved ridge (``z_g`` near
    ``alpha_g / tau``); tempering moves ``tau``'s mean by several of its sds
    per unit of variance inflation. D = n_groups + 3.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(*group_sizes, size=n_groups)
    group = np.repeat(np.arange(n_groups), sizes)
    x = rng.normal(size=group.size)
    effects = rng.normal(0.0, 0.4, size=n_groups)
    y = rng.poisson(np.exp(0.3 + effects[group] + 0.25 * x))
    with pm.Model(coords={"group": np.arange(n_groups)}) as model:
        group_index = pm.Data("group_index", group)
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, dims="group")
        beta = pm.Normal("beta", 0.0, 1.0)
        pm.Poisson("y", pm.math.exp(mu + tau * z[group_index] + beta * x), observed=y)
    key = {"model": "poisson_glmm", "n_rows": group.size, "n_groups": n_groups, "seed": seed}
    if tuple(group_sizes) != (3, 200):
        key["group_sizes"] = list(group_sizes)
    truth = {"mu": np.array(0.3), "tau": np.array(0.4), "beta": np.array(0.25)}
    return PanelModel(
        f"Poisson GLMM, non-centred N={group.size} G={n_groups}",
        model,
        group.size,
        truth=truth,
        key=key,
    )
