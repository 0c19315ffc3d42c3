"""A new model: SGHMC against PyMC's NUTS the first time a model is sampled.

A user who writes a model pays its compilation once; on small data sets that
cost decides which sampler is faster. This module measures it on three small
regressions shaped like the first data sets people try (a survey regression
with dummies and a skewed income, a child-test-score regression with an
interaction of uncentred covariates, and an earnings regression on height),
each new to both samplers:

1. Reference posteriors come from long NUTS runs, cached on disk, computed
   with the user's compilation caches.
2. A new, empty PyTensor compile directory is warmed by sampling a different
   model (the benchmark's logistic regression) with both samplers.
3. Each model is sampled by each sampler in a fresh process using that
   directory: 2 chains x 1,000 tuning + 1,000 kept draws, the whole
   ``pm.sample`` call timed, its accuracy checked against the reference.

Run it as ``python -m pymc_sgmcmc.benchmark.new_model``.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np
import pymc as pm

from pymc_sgmcmc.benchmark import reference, run_module
from pymc_sgmcmc.benchmark.runners import RESULT_MARKER, run_sampler
from pymc_sgmcmc.panel import PanelModel, nuts_reference

__all__ = [
    "MODELS",
    "earnings_regression",
    "interaction_regression",
    "measure_new_models",
    "survey_data",
    "survey_regression",
]


def survey_data(n_rows: int = 476, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return the survey regression's design (intercept first) and response."""
    rng = np.random.default_rng(seed)
    level = rng.choice(7, size=n_rows, p=[0.35, 0.25, 0.15, 0.1, 0.08, 0.04, 0.03])
    dummies = (level[:, None] == np.arange(1, 7)).astype(float)
    income = np.exp(rng.normal(3.5, 0.6, size=n_rows))
    age = rng.uniform(18, 80, size=n_rows)
    x = np.column_stack([np.ones(n_rows), dummies, income, age])
    true_beta = np.array([2.0, 0.3, -0.2, 0.5, 0.1, -0.4, 0.6, 0.01, 0.02])
    y = x @ true_beta + rng.normal(0.0, 1.0, size=n_rows)
    return x, y


def survey_regression(n_rows: int = 476, seed: int = 0) -> PanelModel:
    """Linear regression on an unbalanced seven-level category, a skewed income and age.

    Nine coefficients: an intercept, six dummies (some levels with a dozen
    rows), income in thousands (log-normal) and age in years, uncentred as a
    user would enter them, plus the noise scale: ``beta ~ N(0, 10)``,
    ``sigma ~ HalfNormal(5)`` (:func:`survey_data`).
    """
    x, y = survey_data(n_rows, seed)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=x.shape[1])
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", x @ beta, sigma, observed=y)
    key = {"model": "survey", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"survey regression N={n_rows}", model, n_rows, key=key)


def interaction_regression(n_rows: int = 434, seed: int = 0) -> PanelModel:
    """Child test score on the mother's IQ, her schooling and their interaction.

    The IQ enters uncentred (mean 100, sd 15), so the intercept and the
    slopes are strongly correlated a posteriori.
    """
    rng = np.random.default_rng(seed)
    school = (rng.random(n_rows) < 0.8).astype(float)
    iq = rng.normal(100.0, 15.0, size=n_rows)
    y = -11.0 + 51.0 * school + 0.97 * iq - 0.48 * school * iq + rng.normal(0, 18, n_rows)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 100.0)
        slopes = pm.Normal("slopes", 0.0, 10.0, shape=3)
        sigma = pm.HalfNormal("sigma", 50.0)
        mean = intercept + slopes[0] * school + slopes[1] * iq + slopes[2] * school * iq
        pm.Normal("y", mean, sigma, observed=y)
    key = {"model": "interaction", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"interaction regression N={n_rows}", model, n_rows, key=key)


def earnings_regression(n_rows: int = 1192, seed: int = 0) -> PanelModel:
    """Log earnings on height in inches (uncentred) and sex."""
    rng = np.random.default_rng(seed)
    male = (rng.random(n_rows) < 0.4).astype(float)
    height = rng.normal(64.0 + 5.0 * male, 3.0)
    log_earnings = 6.0 + 0.06 * height + 0.4 * male + rng.normal(0.0, 0.9, size=n_rows)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 10.0)
        slopes = pm.Normal("slopes", 0.0, 1.0, shape=2)
        sigma = pm.HalfNormal("sigma", 2.0)
        mean = intercept + slopes[0] * height + slopes[1] * male
        pm.Normal("y", mean, sigma, observed=log_earnings)
    key = {"model": "earnings", "n_rows": n_rows, "seed": seed}
    return PanelModel(f"earnings regression N={n_rows}", model, n_rows, key=key)


#: The measured models, by name.
MODELS = {
    "survey": survey_regression,
    "interaction": interaction_regression,
    "earnings": earnings_regression,
}

#: Samplers compared: PyMC's default NUTS and the package's SGHMC.
SAMPLERS = ("pymc_nuts", "sghmc")


def _panel(name: str) -> PanelModel:
    if name == "warm-up":
        return reference(1000)[0]
    return nuts_reference(MODELS[name]())


def _run(model_and_sampler: list[str], caches: str) -> dict:
    return run_module(
        ["pymc_sgmcmc.benchmark.new_model", "--run", *model_and_sampler], compile_directory=caches
    )


def measure_new_models(models=tuple(MODELS), samplers=SAMPLERS) -> list[dict]:
    """Time each sampler on each model, every model new to the compilation caches.

    Returns
    -------
    list of dict
        One row per model and sampler: ``model``, ``sampler``, ``seconds``,
        ``mean_error``, ``worst_sd_ratio``, ``meets_bar``, ``min_bulk_ess``
        and, for SGHMC, ``steps_per_draw`` (inner steps per kept draw).
    """
    for name in ("warm-up", *models):
        _panel(name)  # the references, computed outside the measured caches
    rows = []
    with tempfile.TemporaryDirectory() as caches:
        for sampler in samplers:
            _run(["warm-up", sampler], caches)
        for name in models:
            for sampler in samplers:
                run = _run([name, sampler], caches)
                rows.append({"model": name, **run})
                print(
                    f"{name:>12} {sampler:>10}: {run['seconds']:6.1f} s, mean error "
                    f"{run['mean_error']:.3f} sd, sd ratio {run['worst_sd_ratio']:.3f}"
                    f"{'' if run['meets_bar'] else '  MISSES BAR'}",
                    flush=True,
                )
    return rows


def _measure_one(name: str, sampler: str) -> dict:
    run = run_sampler(sampler, _panel(name), chains=2, tune=1000, draws=1000)
    return {
        "sampler": sampler,
        "seconds": run.total_seconds,
        "mean_error": run.mean_error,
        "worst_sd_ratio": run.worst_sd_ratio,
        "meets_bar": run.meets_bar,
        "min_bulk_ess": run.min_bulk_ess,
        "steps_per_draw": run.steps_per_draw,
    }


def main(argv=None) -> None:
    """Measure every model, or with ``--run MODEL SAMPLER`` one run (used internally)."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.new_model")
    parser.add_argument("--run", nargs=2, metavar=("MODEL", "SAMPLER"))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--output", default=None, help="JSON file for the rows")
    arguments = parser.parse_args(argv)
    if arguments.run:
        print(RESULT_MARKER + json.dumps(_measure_one(*arguments.run)))
        return
    rows = measure_new_models(arguments.models)
    nuts = {row["model"]: row["seconds"] for row in rows if row["sampler"] == "pymc_nuts"}
    for row in rows:
        if row["sampler"] != "pymc_nuts":
            ratio = row["seconds"] / nuts[row["model"]]
            print(f"{row['model']:>12}: {row['sampler']} takes {ratio:.2f}x PyMC NUTS's wall time")
    if arguments.output:
        with open(arguments.output, "w") as stream:
            json.dump(rows, stream, indent=1)


if __name__ == "__main__":
    main()
