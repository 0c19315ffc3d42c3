"""Every registered sampler against NUTS on a Bayesian logistic regression.

The model of the head-to-head benchmark of section 12.1 of the long reference
text (``/work/shared/seeds/004_9796e1534e7c1d1e.txt``): logistic regression
with standard-normal covariates and a N(0, 1) prior, here N = 5,000 rows and
D = 6 coefficients. Each sampler of :data:`pymc_sgmcmc.registry.SAMPLERS`
runs with its defaults (only ``batch_size=100`` given), 2 chains of 1,000
tuning and 3,000 kept draws like NUTS.
The figure shows, per coefficient and sampler, the difference of the
posterior mean from NUTS's (``pm.sample`` with its defaults) in NUTS sds and
the ratio of the sds, with bars of two Monte Carlo standard errors of both
runs together (:func:`pymc_sgmcmc.diagnostics.monte_carlo_errors`, from
ArviZ's ESS); the script prints per sampler the largest
``|mean error| / NUTS sd`` and the worst ratio of sds.

Run with ``python examples/figures/logistic_posteriors.py``; it writes
``docs/figures/logistic_posteriors.png``.
"""

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

from pymc_sgmcmc.diagnostics import monte_carlo_errors
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.registry import SAMPLERS

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "logistic_posteriors.png"
SETTINGS = {
    "draws": 3000,
    "tune": 1000,
    "chains": 2,
    "cores": 1,
    "random_seed": 11,
    "progressbar": False,
    "compute_convergence_checks": False,
}

panel = logistic_regression(n_rows=5000, n_features=6)


summaries, seconds = {}, {}
for name in ["NUTS", *SAMPLERS]:
    start = time.perf_counter()
    with panel.model:
        step = {} if name == "NUTS" else {"step": SAMPLERS[name](batch_size=100)}
        result = pm.sample(**SETTINGS, **step)
    seconds[name] = time.perf_counter() - start
    beta = np.asarray(result.posterior["beta"])
    flat = beta.reshape(-1, beta.shape[-1])
    errors = np.array([monte_carlo_errors(beta[..., j]) for j in range(beta.shape[-1])])
    summaries[name] = {
        "mean": flat.mean(axis=0),
        "sd": flat.std(axis=0),
        "mean_se": errors[:, 0],
        "sd_se": errors[:, 1],
    }

nuts = summaries["NUTS"]
print(f"NUTS: {seconds['NUTS']:.0f} s")
errors, ratios = {}, {}
for name in SAMPLERS:
    summary = summaries[name]
    errors[name] = (summary["mean"] - nuts["mean"]) / nuts["sd"]
    ratios[name] = summary["sd"] / nuts["sd"]
    noise = np.sqrt(summary["mean_se"] ** 2 + nuts["mean_se"] ** 2) / nuts["sd"]
    ratio_noise = ratios[name] * np.hypot(
        summary["sd_se"] / summary["sd"], nuts["sd_se"] / nuts["sd"]
    )
    worst = ratios[name][np.argmax(np.abs(np.log(ratios[name])))]
    print(
        f"{name}: max |mean error| / NUTS sd {np.max(np.abs(errors[name])):.3f} "
        f"(Monte Carlo se of the difference {noise.mean():.3f}), "
        f"worst sd ratio {worst:.3f} (Monte Carlo se {ratio_noise.mean():.3f}), "
        f"sd ratios {ratios[name].min():.3f} to {ratios[name].max():.3f} ({seconds[name]:.0f} s)"
    )

n_coefficients = len(nuts["mean"])
width = 0.8 / len(SAMPLERS)
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
for k, name in enumerate(SAMPLERS):
    summary = summaries[name]
    offsets = np.arange(n_coefficients) - 0.4 + (k + 0.5) * width
    mean_noise = 2 * np.sqrt(summary["mean_se"] ** 2 + nuts["mean_se"] ** 2) / nuts["sd"]
    sd_noise = 2 * np.hypot(summary["sd_se"] / summary["sd"], nuts["sd_se"] / nuts["sd"])
    sd_noise = sd_noise * ratios[name]
    top.errorbar(offsets, errors[name], yerr=mean_noise, fmt="o", ms=4, capsize=2, label=name)
    bottom.errorbar(offsets, ratios[name], yerr=sd_noise, fmt="o", ms=4, capsize=2)
top.axhline(0.0, color="grey", lw=0.8)
bottom.axhline(1.0, color="grey", lw=0.8)
top.set_ylabel("(mean - NUTS mean) / NUTS sd")
bottom.set_ylabel("sd / NUTS sd")
bottom.set_xticks(np.arange(n_coefficients), [f"beta[{j}]" for j in range(n_coefficients)])
fig.suptitle(
    f"Logistic regression, N = {panel.n_rows}, D = {n_coefficients}: defaults, batch_size=100 "
    "(bars: 2 Monte Carlo se)"
)
fig.legend(*top.get_legend_handles_labels(), ncol=6, fontsize=8, loc="lower center")
fig.tight_layout(rect=(0, 0.05, 1, 1))
fig.savefig(OUTPUT, dpi=120)
print(f"wrote {OUTPUT}")
