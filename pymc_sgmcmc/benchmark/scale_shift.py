"""How far the samplers move a regression's noise scale, against its exact posterior.

The survey regression of :mod:`pymc_sgmcmc.benchmark.new_model` has a
posterior for ``sigma`` known to quadrature: given ``sigma`` the
coefficients are Gaussian (prior ``N(0, 10^2)`` each), so they integrate out
in closed form and ``p(sigma | y)`` is one-dimensional. This module samples
the model with one sampler's settings over many seeds and reports the mean
of ``sigma``'s error in exact posterior sds, with its standard error, so that
a shift of a few hundredths of an sd stands out of the Monte Carlo error of
single runs.

Run it as ``python -m pymc_sgmcmc.benchmark.scale_shift --sampler SGHMC
--options "batch_size=476"``; each option is ``name=value`` with a Python
literal value.
"""

from __future__ import annotations

import argparse
import ast
import logging

import numpy as np
import pymc as pm
from scipy.stats import halfnorm

from pymc_sgmcmc.benchmark.new_model import survey_data, survey_regression
from pymc_sgmcmc.registry import SAMPLERS

__all__ = ["measure_shift", "noise_scale_posterior"]


def noise_scale_posterior(
    design: np.ndarray,
    response: np.ndarray,
    coefficient_scale: float = 10.0,
    scale_prior: float = 5.0,
    points: int = 20_001,
) -> tuple[float, float]:
    """Return the exact posterior mean and sd of ``sigma`` in a Gaussian linear regression.

    The model is ``y ~ N(X beta, sigma^2)``, ``beta ~ N(0, coefficient_scale^2 I)``
    and ``sigma ~ HalfNormal(scale_prior)``. The coefficients are integrated
    out in closed form; ``sigma``'s marginal is then summed on a grid of
    ``points`` values spanning 12 of its Laplace sds either side of the
    residual scale.
    """
    n_rows, n_coefficients = design.shape
    gram = design.T @ design
    projected = design.T @ response
    squares = response @ response
    fitted, *_ = np.linalg.lstsq(design, response, rcond=None)
    centre = np.sqrt(np.sum((response - design @ fitted) ** 2) / n_rows)
    width = 12.0 * centre / np.sqrt(2.0 * n_rows)
    grid = np.linspace(max(centre - width, 1e-3 * centre), centre + width, points)
    log_marginal = np.empty(points)
    for k, scale in enumerate(grid):
        precision = gram / scale**2 + np.eye(n_coefficients) / coefficient_scale**2
        factor = np.linalg.cholesky(precision)
        whitened = np.linalg.solve(factor, projected / scale**2)
        log_marginal[k] = (
            -n_rows * np.log(scale)
            - squares / (2.0 * scale**2)
            + 0.5 * whitened @ whitened
            - np.log(np.diag(factor)).sum()
        )
    log_marginal += halfnorm.logpdf(grid, scale=scale_prior)
    weights = np.exp(log_marginal - log_marginal.max())
    weights /= weights.sum()
    mean = float(weights @ grid)
    return mean, float(np.sqrt(weights @ (grid - mean) ** 2))


def measure_shift(sampler: str, options: dict, seeds=range(1, 13), draws=5000, tune=1000):
    """Return each chain's error in ``sigma``'s mean, in exact posterior sds.

    Every seed samples 2 chains of ``tune`` + ``draws`` draws with
    ``SAMPLERS[sampler](**options)``.
    """
    mean, sd = noise_scale_posterior(*survey_data())
    model = survey_regression().model
    errors = []
    for seed in seeds:
        with model:
            trace = pm.sample(
                step=SAMPLERS[sampler](**options),
                draws=draws,
                tune=tune,
                chains=2,
                cores=1,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
            )
        chain_errors = (trace.posterior["sigma"].values.mean(axis=1) - mean) / sd
        errors.extend(chain_errors)
        print(f"seed {seed}: {np.round(chain_errors, 3)}", flush=True)
    return np.array(errors)


def _option(text: str) -> tuple[str, object]:
    name, _, value = text.partition("=")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: write each option as name=value with a Python literal, e.g. batch_size=100"
        ) from None


def main(argv=None) -> None:
    """Print the mean shift of ``sigma`` and its standard error for one sampler's settings."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.scale_shift")
    parser.add_argument("--sampler", default="SGHMC", choices=list(SAMPLERS))
    parser.add_argument("--options", nargs="*", default=[], type=_option)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--draws", type=int, default=5000)
    arguments = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    errors = measure_shift(
        arguments.sampler,
        dict(arguments.options),
        seeds=range(1, arguments.seeds + 1),
        draws=arguments.draws,
    )
    standard_error = errors.std(ddof=1) / np.sqrt(len(errors))
    print(
        f"{arguments.sampler} {dict(arguments.options)}: sigma's mean shifted by "
        f"{errors.mean():+.4f} sd (standard error {standard_error:.4f}, {len(errors)} chains)"
    )


if __name__ == "__main__":
    main()
