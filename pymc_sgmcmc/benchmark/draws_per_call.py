"""Time per recorded draw with one draw per kernel call and with several.

``python -m pymc_sgmcmc.benchmark.draws_per_call`` samples the benchmark's
logistic regression with SGHMC's defaults (``batch_size=100``, the fused kernel
from the first draw) on each named backend, once with a kernel call per draw
(``TuningConfig(steps_per_call=0)``) and once with the default, which runs the
steps of several draws per call after tuning (:mod:`pymc_sgmcmc.ahead`). Two
``pm.sample`` calls of different lengths are differenced after a run that
adapts and compiles, so the per-draw time includes PyMC's trace and nothing
fixed.
"""

from __future__ import annotations

import argparse
import logging
import time

from pymc_sgmcmc.benchmark.overhead import sample_draws
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.samplers.sghmc import SGHMC
from pymc_sgmcmc.tuning import TuningConfig

__all__ = ["time_per_draw"]


def time_per_draw(n_rows=50_000, backends=("NUMBA",), draws=(300, 2_300), seed=0) -> dict:
    """Return microseconds per recorded draw by backend and by ``steps_per_call``.

    Parameters
    ----------
    n_rows : int
        Rows of the logistic regression.
    backends : sequence of str
        PyTensor modes of the kernels (``"NUMBA"``, ``"JAX"``).
    draws : tuple of int
        The lengths of the two runs that are differenced.
    seed : int
        Seed of the data and of the runs.

    Returns
    -------
    dict
        ``{(backend, steps_per_call): microseconds}`` for ``steps_per_call``
        0 (a call per draw) and the default.
    """
    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = logistic_regression(n_rows=n_rows, seed=seed).model
    results = {}
    for backend in backends:
        for steps_per_call in (0, TuningConfig.steps_per_call):
            tuning = TuningConfig(interpreted_steps=0, steps_per_call=steps_per_call)
            with model:
                step = SGHMC(batch_size=100, compile_kwargs={"mode": backend}, tuning=tuning)

            def run(length, run_seed, step=step):
                start = time.perf_counter()
                sample_draws(step, model, length, run_seed)
                return time.perf_counter() - start

            run(draws[0], seed)  # adapt and compile
            short, long = (run(length, seed + 1) for length in draws)
            results[backend, steps_per_call] = (long - short) / (draws[1] - draws[0]) * 1e6
    return results


def main(argv=None) -> None:
    """Parse the arguments and print the table."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.draws_per_call")
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--backends", nargs="+", default=["NUMBA"])
    arguments = parser.parse_args(argv)
    results = time_per_draw(arguments.rows, arguments.backends)
    print(f"Microseconds per recorded draw (SGHMC, logistic regression, N = {arguments.rows}):")
    print(f"{'backend':>8} {'steps_per_call':>14} {'per draw':>9}")
    for (backend, steps_per_call), microseconds in results.items():
        print(f"{backend:>8} {steps_per_call:>14} {microseconds:>9.1f}")


if __name__ == "__main__":
    main()
