"""SGHMC against SGLD on an anisotropic Gaussian posterior, in the model's coordinates.

Section 7.6 of the long reference text
(``/work/shared/seeds/004_9796e1534e7c1d1e.txt``, figure 7): on a long, thin
Gaussian, overdamped Langevin dynamics needs O(kappa) steps to mix and
underdamped (SGHMC) dynamics O(sqrt(kappa)). The posterior here is the
regression of :func:`pymc_sgmcmc.panel.correlated_regression` with
covariates of correlation 0.95 (N = 2,000): a Gaussian with correlation
-0.95 between its two coefficients, condition number about 39, known
exactly. Both samplers run with ``preconditioner=None`` (the model's
coordinates, no whitening metric), ``batch_size=100`` and the default bias
budget 0.05, which fixes each one's step size and inner steps per draw.

The figure shows the autocorrelation of the coordinate with the smaller
effective sample size (``arviz.autocorr``) against the lag in inner steps,
and the ESS per 1,000 inner steps (``arviz.ess``; inner steps are the sum of
``steps_per_draw`` over all kept draws of both chains; each inner step
evaluates one minibatch gradient, two with control variates, which both
samplers use here). The script prints the ESS, the inner steps and their
ratio for each sampler, and the ratio SGHMC / SGLD.

Run with ``python examples/figures/anisotropic_mixing.py``; it writes
``docs/figures/anisotropic_mixing.png``.
"""

from pathlib import Path

import arviz as az
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from pymc_sgmcmc import SGHMC, SGLD
from pymc_sgmcmc.panel import correlated_regression

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "anisotropic_mixing.png"

panel = correlated_regression(n_rows=2000, correlation=0.95)
exact_sd = panel.sds["beta"]
condition = (1 + abs(panel.correlation)) / (1 - abs(panel.correlation))
print(
    f"exact posterior correlation {panel.correlation:.3f}, sds {exact_sd.round(4)}, "
    f"condition number about {condition:.0f}"
)

results = {}
for sampler in (SGLD, SGHMC):
    with panel.model:
        result = pm.sample(
            step=sampler(batch_size=100, preconditioner=None),
            draws=1000,
            tune=500,
            chains=2,
            cores=1,
            random_seed=5,
            progressbar=False,
            compute_convergence_checks=False,
        )
    stats = result.sample_stats
    draws = np.asarray(result.posterior["beta"])
    inner_steps = int(np.asarray(stats["steps_per_draw"]).sum())
    ess = np.asarray(az.ess(result, var_names=["beta"])["beta"])
    results[sampler.__name__] = {
        "draws": draws,
        "ess": ess,
        "inner_steps": inner_steps,
        "steps_per_draw": int(np.asarray(stats["steps_per_draw"])[0, -1]),
    }
    print(
        f"{sampler.__name__}: step size {float(stats['step_size'][0, -1]):.3g}, "
        f"steps per draw {np.asarray(stats['steps_per_draw'])[:, -1]}, "
        f"control variate {bool(stats['control_variate'][0, -1])}, "
        f"sd / exact sd {(draws.reshape(-1, 2).std(axis=0) / exact_sd).round(3)}"
    )
    print(
        f"  ESS {ess.round(0)} over {inner_steps} inner steps: "
        f"{(1000 * ess / inner_steps).round(2)} per 1,000 inner steps"
    )

slowest = int(np.argmin(results["SGLD"]["ess"]))
per_step = {name: 1000 * r["ess"][slowest] / r["inner_steps"] for name, r in results.items()}
ratio = per_step["SGHMC"] / per_step["SGLD"]
print(
    f"ESS per 1,000 inner steps of beta[{slowest}]: "
    + ", ".join(f"{name} {value:.2f}" for name, value in per_step.items())
)
print(f"SGHMC / SGLD: {ratio:.1f}")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for name, r in results.items():
    chain = r["draws"][0, :, slowest]
    acf = az.autocorr(chain)[:200]
    lags = np.arange(len(acf)) * r["steps_per_draw"]
    left.plot(lags, acf, label=f"{name} ({r['steps_per_draw']} inner steps per draw)")
left.axhline(0.0, color="grey", lw=0.8)
left.set_xlim(0, 3000)
left.set_xlabel("lag (inner steps)")
left.set_ylabel(f"autocorrelation of beta[{slowest}]")
left.legend()
left.set_title("Autocorrelation, chain 0")
names = list(per_step)
right.bar(names, [per_step[name] for name in names], color=["C0", "C1"])
right.set_ylabel("ESS per 1,000 inner steps")
right.set_title(f"beta[{slowest}]: SGHMC / SGLD = {ratio:.1f}")
fig.suptitle(
    f"Gaussian posterior, correlation {panel.correlation:.2f}, model coordinates "
    "(preconditioner=None), bias budget 0.05"
)
fig.tight_layout()
fig.savefig(OUTPUT, dpi=120)
print(f"wrote {OUTPUT}")
