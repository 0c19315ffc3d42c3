"""Neal's funnel with data: SGLD and Riemannian SGLD against NUTS and the exact posterior.

Section 10 of the long reference text
(``/work/shared/seeds/004_9796e1534e7c1d1e.txt``, figure 10): on Neal's
funnel the curvature of the group effects is ``exp(-v)``, so no single step
size serves both the wide mouth and the narrow neck; Riemannian SGLD
(Patterson & Teh 2013) uses a position-dependent metric to follow it.

The funnel here is a hierarchical model with data, so it can be minibatched:
``v ~ N(0, 3)``, ``x_j ~ N(0, exp(v / 2))`` for J = 8 groups (centred), and
50 rows per group ``y_i ~ N(x_g(i), 10)`` (N = 400), which inform each
``x_j`` weakly (data sd 1.4). Given ``v`` everything is Gaussian, so the
exact marginal ``p(v | y)`` and the joint density of ``(x_1, v)`` come from
a one-dimensional grid. Runs, 2 chains each: NUTS (``pm.sample`` defaults,
1,000 tuning and 1,000 kept draws, its divergences counted), SGLD and SGRLD
with their defaults (``batch_size=100`` only; 300 tuning and 150 kept
draws), and SGLD in the model's coordinates with a given step size, the
plain minibatch gradient and 100 inner steps per draw (300 tuning and 2,000
kept draws; it measures nothing and starts at the model's initial point,
like the vanilla SGLD of the reference text). "Coverage of the neck" is the fraction
of draws with ``v`` at or below NUTS's 5% quantile of ``v`` and at or below
the exact one.

Run with ``python examples/figures/funnel.py``; it writes
``docs/figures/funnel.png``.
"""

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
from scipy.stats import norm

from pymc_sgmcmc import SGLD, SGRLD

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "funnel.png"
GROUPS, ROWS_PER_GROUP, NOISE, V_SD = 8, 50, 10.0, 3.0
SG_SETTINGS = {"draws": 150, "tune": 300}

rng = np.random.default_rng(1)
group = np.repeat(np.arange(GROUPS), ROWS_PER_GROUP)
y = rng.normal(size=GROUPS)[group] + NOISE * rng.normal(size=group.size)

with pm.Model() as model:
    group_index = pm.Data("group_index", group)
    v = pm.Normal("v", 0.0, V_SD)
    x = pm.Normal("x", 0.0, pm.math.exp(v / 2.0), shape=GROUPS)
    pm.Normal("y", x[group_index], NOISE, observed=y)

# Exact posterior: y-bar_j | v ~ N(0, exp(v) + NOISE^2 / n_j), and x_1 | v, y is Gaussian.
v_grid = np.linspace(-40.0, 10.0, 20001)
group_means = np.bincount(group, y) / ROWS_PER_GROUP
data_variance = NOISE**2 / ROWS_PER_GROUP
log_marginal = norm.logpdf(v_grid, 0.0, V_SD) + norm.logpdf(
    group_means, 0.0, np.sqrt(np.exp(v_grid)[:, None] + data_variance)
).sum(axis=1)
v_density = np.exp(log_marginal - log_marginal.max())
v_density /= np.trapezoid(v_density, v_grid)
v_cdf = np.cumsum(v_density) * (v_grid[1] - v_grid[0])


def exact_quantile(p):
    """Return the exact posterior quantile ``p`` of ``v``."""
    return float(np.interp(p, v_cdf, v_grid))


def exact_x1(v_values):
    """Return the exact mean and sd of ``x_1`` given ``v`` and the data."""
    precision = np.exp(-v_values) + 1.0 / data_variance
    return group_means[0] / data_variance / precision, 1.0 / np.sqrt(precision)


# The joint density's highest point: for each v, the x_j that maximise it are the shrunk means.
mean_given_v, sd_given_v = exact_x1(v_grid)
shrinkage = mean_given_v / group_means[0]
best_x = shrinkage[:, None] * group_means[None, :]
log_joint_profile = (
    norm.logpdf(v_grid, 0.0, V_SD)
    + norm.logpdf(best_x, 0.0, np.exp(v_grid / 2.0)[:, None]).sum(axis=1)
    - ((group_means - best_x) ** 2).sum(axis=1) / (2.0 * data_variance)
)
joint_mode = v_grid[np.argmax(log_joint_profile)]
at_median = np.interp(exact_quantile(0.5), v_grid, log_joint_profile)
print(
    f"joint density highest at v = {joint_mode:.1f}, {log_joint_profile.max() - at_median:.0f} "
    "nats above its highest point at the exact median of v"
)

RUNS = {
    "NUTS": None,
    "SGLD, defaults": lambda: SGLD(batch_size=100),
    "SGRLD, defaults": lambda: SGRLD(batch_size=100),
    "SGLD, step_size=1e-3, model coordinates": lambda: SGLD(
        batch_size=100,
        step_size=1e-3,
        preconditioner=None,
        control_variate=False,
        steps_per_draw=100,
    ),
}
draws, seconds, divergences = {}, {}, {}
for label, step in RUNS.items():
    start = time.perf_counter()
    with model:
        options = {} if step is None else {"step": step(), **SG_SETTINGS}
        if label.startswith("SGLD, step_size"):
            options["draws"] = 2000
        result = pm.sample(
            chains=2,
            cores=1,
            random_seed=4,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
            **options,
        )
    seconds[label] = time.perf_counter() - start
    draws[label] = {name: np.asarray(result.posterior[name]) for name in ("v", "x")}
    divergences[label] = int(np.asarray(result.sample_stats["diverging"]).sum())
    if step is None:
        for chain, chain_v in enumerate(draws[label]["v"]):
            repeats = np.unique(chain_v, return_counts=True)[1].max()
            print(
                f"{label} chain {chain}: lowest v {chain_v.min():.2f}, "
                f"most draws at one value {repeats}"
            )
    else:
        stats = result.sample_stats
        first_tune_v = np.asarray(result.warmup_posterior["v"])[:, 0]
        print(
            f"{label}: v at the first tune draw {first_tune_v.round(2)}, "
            f"step size {np.asarray(stats['step_size'])[:, -1]}, "
            f"steps per draw {np.asarray(stats['steps_per_draw'])[:, -1]}"
        )

nuts_threshold = float(np.quantile(draws["NUTS"]["v"], 0.05))
exact_threshold = exact_quantile(0.05)
print(
    f"exact v quantiles 1%, 5%, 50%: {exact_quantile(0.01):.2f}, {exact_threshold:.2f}, "
    f"{exact_quantile(0.5):.2f}; P(v < NUTS's 5% quantile {nuts_threshold:.2f}) = "
    f"{np.interp(nuts_threshold, v_grid, v_cdf):.3f}"
)
coverage = {}
for label, values in draws.items():
    v_draws = values["v"]
    coverage[label] = (np.mean(v_draws <= nuts_threshold), np.mean(v_draws <= exact_threshold))
    quantiles = np.quantile(v_draws, [0.01, 0.05, 0.5]).round(2)
    chain_means = v_draws.mean(axis=1).round(2)
    print(
        f"{label}: {seconds[label]:.0f} s, {v_draws.size} draws, divergences {divergences[label]}, "
        f"v quantiles 1%, 5%, 50%: {quantiles}, chain means of v {chain_means}, "
        f"fraction at or below NUTS's 5% quantile {coverage[label][0]:.3f}, "
        f"at or below the exact one {coverage[label][1]:.3f}"
    )

fig, axes = plt.subplots(2, 3, figsize=(13, 8))
scatter_axes = [axes[0, 0], axes[0, 1], axes[0, 2], axes[1, 0]]
x_grid = np.linspace(-4.0, 4.0, 201)
contour_v = v_grid[(v_grid > -12) & (v_grid < 8)][::20]
mean, sd = exact_x1(contour_v)
log_joint = np.interp(contour_v, v_grid, np.log(v_density))[:, None] + norm.logpdf(
    x_grid[None, :], mean[:, None], sd[:, None]
)
for ax, (label, values) in zip(scatter_axes, draws.items(), strict=True):
    ax.contour(
        x_grid, contour_v, log_joint - log_joint.max(), levels=np.arange(-12, 1, 2), cmap="Greys"
    )
    for chain in range(values["v"].shape[0]):
        ax.plot(values["x"][chain, :, 0], values["v"][chain], ".", ms=2, alpha=0.5)
    ax.axhline(exact_threshold, color="C3", lw=0.8, ls="--")
    ax.set_ylim(-30.0, 8.0)
    ax.set_xlim(x_grid[0], x_grid[-1])
    ax.set_xlabel("x[0]")
    ax.set_ylabel("v")
    ax.set_title(f"{label}\ndivergences: {divergences[label]}", fontsize=9)

marginal = axes[1, 1]
marginal.plot(v_grid, v_density, "k", lw=2, label="exact")
bins = np.linspace(-30.0, 8.0, 77)
for label, values in draws.items():
    marginal.hist(values["v"].ravel(), bins=bins, density=True, histtype="step", label=label)
marginal.set_xlim(-30.0, 8.0)
marginal.set_xlabel("v")
marginal.set_title("marginal of v")
marginal.legend(fontsize=7)

bars = axes[1, 2]
labels = list(coverage)
positions = np.arange(len(labels))
bars.bar(positions - 0.2, [coverage[k][0] for k in labels], 0.4, label="v <= NUTS 5% quantile")
bars.bar(positions + 0.2, [coverage[k][1] for k in labels], 0.4, label="v <= exact 5% quantile")
bars.axhline(np.interp(nuts_threshold, v_grid, v_cdf), color="C0", lw=0.8, ls=":")
bars.axhline(0.05, color="C1", lw=0.8, ls=":")
short = ["NUTS", "SGLD\ndefaults", "SGRLD\ndefaults", "SGLD\nstep 1e-3"]
bars.set_xticks(positions, short, fontsize=8)
bars.set_ylabel("fraction of draws")
bars.set_title("coverage of the neck (dotted: exact)")
bars.legend(fontsize=7)
fig.suptitle(
    f"Funnel with data: J = {GROUPS} groups, N = {group.size} rows (dashed: exact 5% quantile of v)"
)
fig.tight_layout()
fig.savefig(OUTPUT, dpi=110)
print(f"wrote {OUTPUT}")
