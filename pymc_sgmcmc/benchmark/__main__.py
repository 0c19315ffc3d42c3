"""Command line: ``python -m pymc_sgmcmc.benchmark``."""

from __future__ import annotations

import argparse

from pymc_sgmcmc.benchmark import SAMPLERS, run_benchmark


def main(argv=None) -> None:
    """Parse the arguments and run the benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m pymc_sgmcmc.benchmark",
        description="NUTS against SG-MCMC (ESS per second and accuracy) on Bayesian "
        "logistic regression with D = 10, for a grid of data sizes N.",
    )
    parser.add_argument(
        "--grid",
        type=int,
        nargs="+",
        default=[1_000, 2_000, 5_000, 50_000, 500_000, 5_000_000],
        help="data sizes N",
    )
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument(
        "--nuts-max-rows",
        type=int,
        default=None,
        help="largest N for every NUTS sampler (default: 50,000 for PyMC and nutpie, "
        "500,000 for NumPyro)",
    )
    parser.add_argument(
        "--sgmcmc-draws", type=int, default=None, help="recorded draws per SG-MCMC chain"
    )
    parser.add_argument("--output", default="benchmark-results", help="output folder")
    arguments = parser.parse_args(argv)
    limits = None
    if arguments.nuts_max_rows is not None:
        limits = dict.fromkeys(("pymc_nuts", "nutpie", "numpyro"), arguments.nuts_max_rows)
    run_benchmark(
        grid=arguments.grid,
        samplers=arguments.samplers,
        chains=arguments.chains,
        max_rows=limits,
        sgmcmc_draws=arguments.sgmcmc_draws,
        output=arguments.output,
    )
    print(f"Results and figures written to {arguments.output}/")


if __name__ == "__main__":
    main()
