"""Four separated modes: SGLD against cyclical SGLD.

A 2-D posterior with four modes, written as an ordinary PyMC model with
data: two observed columns ``y_j ~ N(1 - exp(-theta_j^2 / 2), 3)``,
``j = 1, 2``, with ``theta_j ~ N(0, 1)`` and N = 1,000 rows. The mean is even
in ``theta_j``, so the posterior has a mode at every ``(+-a_1, +-a_2)``, all
four of equal mass, separated by barriers of about 11 and 20 nats (13 to 15
posterior sds); the gradient stays bounded, so large step sizes do not
overflow. Cyclical SGLD (section 12.2 of the long reference text,
``/work/shared/seeds/004_9796e1534e7c1d1e.txt``) starts every cycle with
large, noise-free steps meant to carry the chain to another mode.

Four runs of 2 chains, ``batch_size=100`` each: SGLD with its defaults,
CyclicalSGLD with its defaults, with ``step_size=2`` (the largest step of
the sampling stage; the cycle starts 1.17 times higher) and with
``step_size=0.3, exploration=0.8`` (the cycle starts 10.5 times higher) on
plain minibatch gradients, as in Zhang et al. (``control_variate=False``).
A run whose chains diverged is marked as such. Each run has 500 tuning and
4,000 kept draws per chain; a cyclical run's exploration stages run inside
the first draw of each cycle, so all its draws are sampling-stage draws. A
chain visits a mode when at least 2% of its draws are nearer that mode than
any other. The script prints, per
run and chain, the modes visited and the share of draws at each, and the sd
of ``|theta_j|`` against the exact one (from the log density on a grid).

Run with ``python examples/figures/mixture_modes.py``; it writes
``docs/figures/mixture_modes.png``.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_sgmcmc import SGLD, CyclicalSGLD

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "mixture_modes.png"
N_ROWS, NOISE = 1000, 3.0
COLUMN_MEANS = np.array([0.45, 0.6])
VISIT_SHARE = 0.02

rng = np.random.default_rng(0)
standardised = rng.normal(size=(N_ROWS, 2))
standardised = (standardised - standardised.mean(axis=0)) / standardised.std(axis=0)
y = COLUMN_MEANS + NOISE * standardised

with pm.Model() as model:
    theta = pm.Normal("theta", 0.0, 1.0, shape=2)
    pm.Normal("y", 1.0 - pt.exp(-(theta**2) / 2.0), NOISE, observed=y)

# The modes solve 1 - exp(-a^2 / 2) = mean(y_j) up to the prior's pull: take them from the grid.
grid = np.linspace(-2.6, 2.6, 261)
log_density = model.compile_logp()
surface = np.array(
    [[log_density({"theta": np.array([t1, t2])}) for t1 in grid] for t2 in grid]
)  # rows: theta_2, columns: theta_1
weights = np.exp(surface - surface.max())
marginals = [weights.sum(axis=0), weights.sum(axis=1)]
marginals = [m / m.sum() for m in marginals]
peaks = np.array([abs(grid[np.argmax(m)]) for m in marginals])
modes = np.array([[s1 * peaks[0], s2 * peaks[1]] for s1 in (1, -1) for s2 in (1, -1)])
exact_abs_mean = np.array([(np.abs(grid) * m).sum() for m in marginals])
exact_abs_sd = np.sqrt(
    [((np.abs(grid) - mu) ** 2 * m).sum() for mu, m in zip(exact_abs_mean, marginals, strict=True)]
)
centre = len(grid) // 2
barriers = [
    surface.max() - surface[:, centre].max(),  # crossing theta_0 = 0
    surface.max() - surface[centre, :].max(),  # crossing theta_1 = 0
]
print(
    f"modes at (+-{peaks[0]:.2f}, +-{peaks[1]:.2f}); exact sd of |theta|: {exact_abs_sd.round(3)}; "
    f"barriers {barriers[0]:.1f} and {barriers[1]:.1f} nats"
)

RUNS = {
    "SGLD, defaults": (SGLD, {}),
    "CyclicalSGLD, defaults": (CyclicalSGLD, {}),
    "CyclicalSGLD, step_size=2": (CyclicalSGLD, {"step_size": 2.0}),
    "CyclicalSGLD, step_size=0.3, exploration=0.8,\ncontrol_variate=False": (
        CyclicalSGLD,
        {"step_size": 0.3, "exploration": 0.8, "control_variate": False},
    ),
}


def plot_run(ax, label, result, cyclical):
    """Print and draw the modes each chain visits; annotate a run whose chains diverged."""
    stats = result.sample_stats
    diverged = np.asarray(stats["diverging"]).any(axis=1)
    print(
        f"{label}: largest step size {float(stats['step_size'].max()):.3g}, "
        f"steps per draw {np.asarray(stats['steps_per_draw'])[:, -1]}, "
        f"chains diverged {diverged.tolist()}"
    )
    ax.contour(grid, grid, surface - surface.max(), levels=np.arange(-30, 1, 3), cmap="Greys")
    ax.set_xlabel("theta[0]")
    if diverged.any():
        title = f"{label}\ndiverged chains: {int(diverged.sum())} of {len(diverged)}"
        ax.set_title(title, fontsize=9)
        ax.text(0.0, 0.0, "no draws: the chains diverged", ha="center", va="center")
        return
    draws = np.asarray(result.posterior["theta"])
    visited_by_chain = []
    for chain, chain_draws in enumerate(draws):
        nearest = np.argmin(((chain_draws[:, None, :] - modes) ** 2).sum(axis=-1), axis=1)
        shares = np.bincount(nearest, minlength=len(modes)) / len(nearest)
        visited_by_chain.append(int((shares >= VISIT_SHARE).sum()))
        print(
            f"  chain {chain}: {len(nearest)} draws, {visited_by_chain[-1]} modes visited, "
            f"shares {shares.round(3)}"
        )
        ax.plot(*chain_draws.T, ".", ms=1.5, alpha=0.4, color=f"C{chain}")
    sd_ratio = np.abs(draws).reshape(-1, 2).std(axis=0) / exact_abs_sd
    print(f"  sd of |theta| / exact: {sd_ratio.round(2)}")
    ax.set_title(
        f"{label}\nmodes visited per chain: {visited_by_chain}, "
        f"sd of |theta| / exact: {sd_ratio.max():.2f}",
        fontsize=9,
    )


fig, axes = plt.subplots(1, len(RUNS), figsize=(4.2 * len(RUNS), 4.4), sharex=True, sharey=True)
for ax, (label, (sampler, options)) in zip(axes, RUNS.items(), strict=True):
    with model:
        result = pm.sample(
            step=sampler(batch_size=100, **options),
            draws=4000,
            tune=500,
            chains=2,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    plot_run(ax, label, result, sampler is CyclicalSGLD)
axes[0].set_ylabel("theta[1]")
axes[0].set_xlim(grid[0], grid[-1])
axes[0].set_ylim(grid[0], grid[-1])
fig.suptitle("Four-mode posterior: draws of two chains (colours) over log-density contours")
fig.tight_layout()
fig.savefig(OUTPUT, dpi=110)
print(f"wrote {OUTPUT}")
