"""Figures of the NUTS-vs-SG-MCMC benchmark."""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.registry import SAMPLERS

__all__ = ["LABELS", "STYLE", "plot_accuracy", "plot_ess_per_second", "plot_means"]

#: Display name of each sampler.
LABELS = {
    "pymc_nuts": "PyMC NUTS",
    "nutpie": "nutpie NUTS",
    "numpyro": "NumPyro NUTS",
    **{name.lower(): f"{name} (defaults)" for name in SAMPLERS},
    "advi": "PyMC minibatch ADVI",
    "hmcecs": "NumPyro HMCECS",
}
#: Colour, marker and line style of each sampler.
STYLE = {
    "pymc_nuts": ("tab:blue", "o", "-"),
    "advi": ("tab:gray", "d", ":"),
    "hmcecs": ("black", "<", "--"),
    "nutpie": ("tab:cyan", "v", "-"),
    "numpyro": ("tab:purple", "s", "-"),
    **{
        name.lower(): (color, marker, "-")
        for name, color, marker in zip(
            SAMPLERS,
            ("tab:orange", "tab:red", "tab:green", "tab:brown", "tab:pink", "tab:olive"),
            "D^P*Xh",
            strict=False,
        )
    },
}


def _by_sampler(runs):
    grouped = {}
    for run in sorted(runs, key=lambda r: r["n_rows"]):
        grouped.setdefault(run["sampler"], []).append(run)
    return grouped


def plot_ess_per_second(runs, ax=None):
    """Plot minimum bulk ESS per second of total wall time against N (log-log).

    Runs that miss the accuracy bar are drawn hollow.
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4.2))[1]
    for sampler, group in _by_sampler(runs).items():
        color, marker, line = STYLE[sampler]
        n = [run["n_rows"] for run in group]
        rate = [run["ess_per_second"] for run in group]
        ax.plot(n, rate, line, color=color, marker=marker, label=LABELS[sampler])
        missed = [run for run in group if not run["meets_bar"]]
        ax.plot(
            [run["n_rows"] for run in missed],
            [run["ess_per_second"] for run in missed],
            marker,
            color="white",
            markeredgecolor=color,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows N")
    ax.set_ylabel("min bulk ESS per second (total wall time)")
    ax.set_title("(a) Effective samples per second")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_means(runs, truth, reference_means, reference_sds, n_rows, ax=None):
    """Plot each sampler's posterior means and 94% intervals at ``n_rows``.

    The true coefficients are black crosses; the reference posterior mean is
    a grey bar of plus or minus one reference sd.
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4.2))[1]
    selected = [run for run in runs if run["n_rows"] == n_rows]
    truth = np.asarray(truth)
    reference_means = np.asarray(reference_means)
    reference_sds = np.asarray(reference_sds)
    # Coefficients minus the reference mean, in reference sds, so that the
    # interval widths stay visible for every coefficient.
    positions = np.arange(truth.size)
    width = 0.8 / max(len(selected), 1)
    ax.axhspan(-1, 1, color="0.85", label="reference mean +/- 1 sd")
    ax.plot(
        positions,
        (truth - reference_means) / reference_sds,
        "kx",
        markersize=8,
        label="true coefficient",
    )
    for i, run in enumerate(selected):
        color, marker, _ = STYLE[run["sampler"]]
        offset = positions - 0.4 + width * (i + 0.5)
        means = (np.asarray(run["means"]) - reference_means) / reference_sds
        lower = (np.asarray(run["lower"]) - reference_means) / reference_sds
        upper = (np.asarray(run["upper"]) - reference_means) / reference_sds
        ax.errorbar(
            offset,
            means,
            yerr=[means - lower, upper - means],
            fmt=marker,
            color=color,
            markersize=4,
            label=LABELS[run["sampler"]],
        )
    ax.set_xticks(positions, [f"beta[{j}]" for j in positions], rotation=45, fontsize=8)
    ax.set_ylabel("(value - reference mean) / reference sd")
    ax.set_title(f"(b) Posterior means and 94% intervals, N = {n_rows:,}")
    # An approximation far off (ADVI stopped early) would flatten the others.
    low, high = np.clip(ax.get_ylim(), -8.0, 8.0)
    ax.set_ylim(low, high + 0.45 * (high - low))
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    return ax


def plot_accuracy(runs, ax=None):
    """Plot the largest mean error (in sds) and sd error against N."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4.2))[1]
    for sampler, group in _by_sampler(runs).items():
        color, marker, _ = STYLE[sampler]
        n = [run["n_rows"] for run in group]
        mean_errors = [run["mean_error"] for run in group]
        sd_errors = [abs(run["worst_sd_ratio"] - 1.0) for run in group]
        label = LABELS[sampler]
        ax.plot(n, mean_errors, "-", color=color, marker=marker, label=f"{label}: mean")
        ax.plot(n, sd_errors, ":", color=color, marker=marker, label=f"{label}: sd")
    ax.axhline(0.1, color="k", linewidth=1)
    ax.text(0.01, 0.1, "bar", va="bottom", transform=ax.get_yaxis_transform())
    ax.set_xscale("log")
    ax.set_xlabel("rows N")
    ax.set_ylabel("error against the reference")
    if ax.get_ylim()[1] > 1.0:
        # Errors of several sds (ADVI stopped early) next to errors of a few
        # hundredths: a logarithmic axis shows both.
        ax.set_yscale("log")
    else:
        ax.set_ylim(0.0, max(0.15, ax.get_ylim()[1]))
    ax.set_title("(c) Accuracy: |mean error| / sd (solid), |sd ratio - 1| (dotted)", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    return ax
