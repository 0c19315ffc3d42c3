"""The O(step size + 1/B) bias of SGLD, measured and predicted.

Section 8 of the long reference text
(``/work/shared/seeds/004_9796e1534e7c1d1e.txt``, figure 8): with a constant
step size and minibatches of B rows, SGLD samples a perturbed distribution
whose bias grows linearly with the step size at fixed B and with 1/B at
fixed step size. On a Gaussian posterior with curvature ``a`` and gradient
noise of variance ``v`` (about proportional to N / B), SGLD's stationary
variance is exactly ``(1 + eta v / 2) / (1 - eta a / 2)`` times the
posterior's, so the relative variance inflation is linear in ``v``, hence in
1/B, and, for small steps, in ``eta``.

The posterior is :func:`pymc_sgmcmc.panel.correlated_regression` with
independent covariates (N = 2,000; two coefficients, Gaussian, known in
closed form). SGLD runs with Euler-Maruyama's step (``integrator="euler_maruyama"``;
the default step's shared normal draws remove the ``1 / (1 - eta a / 2)``
factor), a given ``step_size``, ``control_variate=False``
(the plain minibatch gradient), rows drawn with replacement
(``replace=True``, which makes the minibatch noise independent from step to
step) and the preconditioner set to the exact posterior variances, so the
step size is in units where the posterior is standard normal; the tuner
still measures the gradient noise and records its prediction
(``sample_stats.predicted_inflation``, the worst direction's) and chooses the
inner steps per draw (about one relaxation time). Left: step sizes 0.0025 to
0.04 at B = 100; right: B = 20 to 1,000 at step size 0.01. The measured
inflation is the mean over both coefficients of
``E[(beta_j - exact mean)^2] / exact variance - 1`` over 2 chains of 4,000
draws, with bars of two Monte Carlo standard errors (``arviz.mcse``).

Run with ``python examples/figures/bias_law.py``; it writes
``docs/figures/bias_law.png``.
"""

import functools
from pathlib import Path

import arviz as az
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from pymc_sgmcmc import SGLD
from pymc_sgmcmc.panel import correlated_regression

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "bias_law.png"
STEP_SIZES = [0.0025, 0.005, 0.01, 0.02, 0.04]
BATCH_SIZES = [20, 50, 100, 200, 500, 1000]
FIXED_BATCH, FIXED_STEP = 100, 0.01

panel = correlated_regression(n_rows=2000, correlation=0.0)
exact_mean, exact_sd = panel.means["beta"], panel.sds["beta"]


@functools.cache
def inflation(step_size, batch_size):
    """Return the measured inflation, its Monte Carlo se and the tuner's prediction."""
    with panel.model:
        result = pm.sample(
            step=SGLD(
                batch_size=batch_size,
                integrator="euler_maruyama",
                step_size=step_size,
                control_variate=False,
                preconditioner=exact_sd**2,
                replace=True,
            ),
            draws=4000,
            tune=200,
            chains=2,
            cores=1,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
        )
    squares = (np.asarray(result.posterior["beta"]) - exact_mean) ** 2 / exact_sd**2
    per_coefficient = squares.mean(axis=(0, 1)) - 1.0
    measured = per_coefficient.mean()
    errors = [
        float(np.ravel(az.mcse(column, method="mean"))[0]) for column in np.moveaxis(squares, -1, 0)
    ]
    error = np.sqrt(np.sum(np.square(errors))) / len(errors)
    predicted = float(np.mean(result.sample_stats["predicted_inflation"][:, -1]))
    steps = int(result.sample_stats["steps_per_draw"][0, -1])
    print(
        f"step size {step_size:<7} B {batch_size:<5} inner steps per draw {steps:<4} "
        f"measured {measured:.4f} +- {error:.4f} (per coefficient {per_coefficient.round(4)}) "
        f"predicted {predicted:.4f}"
    )
    return measured, error, predicted


by_step = np.array([inflation(eta, FIXED_BATCH) for eta in STEP_SIZES])
by_batch = np.array([inflation(FIXED_STEP, b) for b in BATCH_SIZES])

inverse_batch = 1.0 / np.array(BATCH_SIZES)
slope_step = np.polyfit(STEP_SIZES, by_step[:, 0], 1)
slope_batch = np.polyfit(inverse_batch, by_batch[:, 0], 1)
print(
    f"least-squares lines: inflation = {slope_step[0]:.2f} step size + {slope_step[1]:.4f} "
    f"(B = {FIXED_BATCH}); inflation = {slope_batch[0]:.2f} / B + {slope_batch[1]:.4f} "
    f"(step size {FIXED_STEP})"
)

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
for ax, x, rows in ((left, STEP_SIZES, by_step), (right, inverse_batch, by_batch)):
    ax.errorbar(x, rows[:, 0], yerr=2 * rows[:, 1], fmt="o", capsize=3, label="measured")
    ax.plot(x, rows[:, 2], "s--", mfc="none", label="predicted by the tuner")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlim(left=0.0)
    ax.set_ylabel("relative variance inflation")
    ax.legend()
left.set_xlabel("step size (posterior sd units)")
left.set_title(f"B = {FIXED_BATCH}")
right.set_xlabel("1 / B")
right.set_title(f"step size {FIXED_STEP}")
secondary = right.secondary_xaxis("top", functions=(lambda u: 1 / np.maximum(u, 1e-9),) * 2)
secondary.set_xticks([20, 50, 100, 200])
secondary.set_xlabel("B")
fig.suptitle(f"SGLD bias on a Gaussian posterior (N = {panel.n_rows}, plain minibatch gradient)")
fig.tight_layout()
fig.savefig(OUTPUT, dpi=120)
print(f"wrote {OUTPUT}")
