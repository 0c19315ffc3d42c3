"""Time of the adaptation's Hessians: exact second derivatives against gradient differences.

``python -m pymc_sgmcmc.benchmark.hessians`` times the mode search
(:func:`~pymc_sgmcmc.tuning.mode.find_mode`, which estimates every Hessian
the measurements start from) twice on each model, in alternating runs in
the same process: with the defaults, which take a Hessian exactly where
:mod:`pymc_sgmcmc.exact_hessian` pays, and with every Hessian differenced
(``hessian_exact_work`` beyond any work). It prints both times, their ratio,
how far apart the two modes and Hessians are, and the mode search's
gradient calls. The exact Hessian is compiled once, before the first timed
run, as it is for every chain of a step method after the first.

The models: a linear regression on ``D`` correlated covariates (rows that
touch every coordinate) and the hierarchical regression with 1,000 groups
scaled to the same rows (rows that touch four coordinates, whose Hessians
stay differenced by their pattern).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.real_posteriors import many_groups_regression
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.mode import find_mode, hessian_sds

__all__ = ["dense_regression", "time_mode_searches"]


def dense_regression(n_rows: int, size: int, seed: int = 0) -> pm.Model:
    """Return a regression on ``size`` correlated covariates with unknown noise sd."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(size, size)) / np.sqrt(size)
    covariance = 0.3 * np.eye(size) + mixing @ mixing.T
    design = rng.multivariate_normal(np.zeros(size), covariance, size=n_rows)
    y = design @ rng.normal(size=size) + rng.normal(size=n_rows)
    with pm.Model() as model:
        covariates = pm.Data("X", design)
        beta = pm.Normal("beta", 0.0, 10.0, shape=size)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("y", covariates @ beta, sigma, observed=y)
    return model


def _search(probe: Probe, start, config: TuningConfig, seed: int):
    """Return the mode search's result, its wall time and its gradient calls."""
    calls = [0]
    terms = probe.terms

    def counted(position, indices):
        calls[0] += 1
        return terms(position, indices)

    probe.terms = counted
    try:
        began = time.perf_counter()
        found = find_mode(probe, start, 100, np.random.default_rng(seed), config)
        return found, time.perf_counter() - began, calls[0]
    finally:
        del probe.terms


def time_mode_searches(model: pm.Model, repeats: int = 2, seed: int = 0) -> dict:
    """Return the mode search's times and gradient calls with and without exact Hessians.

    ``repeats`` alternating runs of each; the figures are each setting's
    fastest run, the largest distance between the two modes in posterior sds
    and the largest difference between the two Hessians relative to the
    largest entry.
    """
    probe = Probe(build_minibatch_log_density(model, model.value_vars))
    point = {v.name: model.initial_point()[v.name] for v in model.value_vars}
    start = DictToArrayBijection.map(point).data
    settings = {
        "exact": TuningConfig(),
        "differenced": TuningConfig(hessian_exact_work=np.iinfo(np.int64).max),
    }
    probe.exact_hessians(start, np.arange(min(probe.n_rows, 16)))
    results = {name: [] for name in settings}
    for _ in range(repeats):
        for name, config in settings.items():
            results[name].append(_search(probe, start, config, seed))
    (mode, *_, hessian, _), _, calls = results["exact"][0]
    (plain_mode, *_, plain_hessian, _), _, plain_calls = results["differenced"][0]
    sds = hessian_sds(plain_hessian)
    exact_seconds = min(run[1] for run in results["exact"])
    plain_seconds = min(run[1] for run in results["differenced"])
    return {
        "size": start.size,
        "n_rows": probe.n_rows,
        "exact_seconds": exact_seconds,
        "differenced_seconds": plain_seconds,
        "ratio": exact_seconds / plain_seconds,
        "mode_distance": float(np.max(np.abs(mode - plain_mode) / sds)),
        "hessian_difference": float(
            np.max(np.abs(hessian - plain_hessian)) / np.max(np.abs(plain_hessian))
        ),
        "exact_calls": calls,
        "differenced_calls": plain_calls,
    }


def main(argv=None) -> None:
    """Print the mode search's times with and without exact Hessians, as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200, help="covariates of the regression")
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args(argv)
    models = {
        f"regression, {arguments.size} correlated covariates": dense_regression(
            arguments.rows, arguments.size
        ),
        "hierarchical regression, 1,000 groups": many_groups_regression(
            n_rows=arguments.rows, n_groups=1000
        ).model,
    }
    print(
        "| model | N | D | exact, s | differenced, s | ratio | mode apart (sd) "
        "| Hessians apart | gradient calls (exact / differenced) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model in models.items():
        row = time_mode_searches(model, arguments.repeats)
        print(
            f"| {name} | {row['n_rows']:,} | {row['size']:,} | {row['exact_seconds']:.2f} "
            f"| {row['differenced_seconds']:.2f} | {row['ratio']:.2f} "
            f"| {row['mode_distance']:.1e} | {row['hessian_difference']:.1e} "
            f"| {row['exact_calls']:,} / {row['differenced_calls']:,} |"
        )


if __name__ == "__main__":
    main()
