"""Time per recorded draw outside the kernel: the step method's and PyMC's.

``python -m pymc_sgmcmc.benchmark.overhead`` samples the benchmark's logistic
regression (D = 10, B = 100) with each named sampler and its defaults, and
times every recorded draw three ways: the whole iteration of ``pm.sample``,
the step method's ``step``, and the kernel call inside it. Two runs of
different lengths from the same step are differenced, so the chain's
adaptation at its first draw and every other fixed cost cancel. The time
outside the kernel splits into the step method's own work (minibatch
indices, random numbers, the metric's map, statistics) and PyMC's
(recording the draw, its sampling loop).

Each sampler is timed twice: with the fused kernel from the first draw
(the kernel is then the compiled call alone), and with the interpreted loop
a chain starts with (the kernel is then the whole loop, see
:mod:`pymc_sgmcmc.loop`).
"""

from __future__ import annotations

import argparse
import logging
import time

import pymc as pm

from pymc_sgmcmc.loop import interpretable
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.tuning import TuningConfig

__all__ = ["measure_overhead", "sample_draws"]


class _Timed:
    """A callable that adds up the wall time of its calls."""

    def __init__(self, function):
        self.function = function
        self.seconds = 0.0

    def __call__(self, *arguments):
        start = time.perf_counter()
        try:
            return self.function(*arguments)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self.function, name)


def sample_draws(step, model, draws: int, seed: int):
    """Return ``pm.sample`` of ``draws`` draws of one chain with ``step``, without tuning draws.

    The step's adaptation at the first draw still runs; the benchmarks
    difference two such runs so that it cancels.
    """
    with model:
        return pm.sample(
            step=step,
            tune=0,
            draws=draws,
            chains=1,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )


def _timed_run(step, model, draws, seed, kernels):
    """Return the seconds of ``pm.sample``, of ``step`` and of the kernels, and the steps."""
    timed_step = step.step = _Timed(type(step).step.__get__(step))
    seconds = [kernel.seconds for kernel in kernels]
    start = time.perf_counter()
    idata = sample_draws(step, model, draws, seed)
    total = time.perf_counter() - start
    kernel = sum(k.seconds - s for k, s in zip(kernels, seconds, strict=True))
    steps = int(idata.sample_stats["steps_per_draw"].values.sum())
    return total, timed_step.seconds, kernel, steps


def _timed_kernels(step, interpreted: bool) -> list:
    """Wrap the kernels the step has built in timers and return the timers.

    The fused kernel is timed around its compiled call; the interpreted
    loop as a whole.
    """
    if not interpreted:
        kernels = list(step.compiled._kernels.values())
        for kernel in kernels:
            kernel._call = _Timed(kernel._call)
        return [kernel._call for kernel in kernels]
    choose = step.runner.kernel
    timers = {}

    def timed_kernel(chain):
        kernel = choose(chain)
        return timers.setdefault(id(kernel), _Timed(kernel))

    step.runner.kernel = timed_kernel
    timed_kernel(step.chain)
    return list(timers.values())


def measure_overhead(
    samplers=("SGLD", "SGHMC"), n_rows=5_000, draws=(200, 5_200), seed=0, interpreted=False
):
    """Return, per sampler, the microseconds per recorded draw in and around the kernel.

    Parameters
    ----------
    samplers : sequence of str
        Names in :data:`pymc_sgmcmc.registry.SAMPLERS`.
    n_rows : int
        Rows of the logistic regression.
    draws : tuple of int
        The lengths of the two runs that are differenced.
    interpreted : bool, default False
        Time the interpreted loop instead of the fused kernel (samplers
        without an interpreted form are left out).

    Returns
    -------
    dict of str to dict
        For each sampler: ``total``, ``kernel``, ``step_method`` (``step``
        outside the kernel) and ``pymc`` (the rest of ``pm.sample``'s loop),
        in microseconds per draw, and ``inner_steps`` per draw.
    """
    model = logistic_regression(n_rows=n_rows, seed=seed).model
    logging.getLogger("pymc").setLevel(logging.ERROR)
    # Long enough that the timed runs stay in the loop, or fused from the start.
    tuning = TuningConfig(interpreted_steps=10**9 if interpreted else 0)
    results = {}
    for name in samplers:
        with model:
            step = SAMPLERS[name](tuning=tuning)
        if interpreted and not interpretable(step.dynamics):
            continue
        # Adapt (and compile) once, then wrap the kernels' calls.
        _timed_run(step, model, 10, seed, [])
        kernels = _timed_kernels(step, interpreted)
        short, long = (_timed_run(step, model, n, seed + 1, kernels) for n in draws)
        per_draw = [(b - a) / (draws[1] - draws[0]) * 1e6 for a, b in zip(short, long, strict=True)]
        total, in_step, kernel, steps = per_draw
        results[name] = {
            "total": total,
            "kernel": kernel,
            "step_method": in_step - kernel,
            "pymc": total - in_step,
            "inner_steps": steps / 1e6,
        }
    return results


def main(argv=None) -> None:
    """Parse the arguments and print the tables."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.overhead")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--rows", type=int, default=5_000)
    arguments = parser.parse_args(argv)
    for interpreted in (False, True):
        results = measure_overhead(arguments.samplers, arguments.rows, interpreted=interpreted)
        kind = "the interpreted loop" if interpreted else "the fused kernel"
        print(f"Microseconds per recorded draw, {kind} (logistic regression, D = 10, B = 100):")
        print(
            f"{'sampler':>13} {'inner steps':>11} {'kernel':>8} {'per step':>8} "
            f"{'step method':>11} {'PyMC':>7} {'outside kernel':>14} {'total':>8}"
        )
        for name, row in results.items():
            print(
                f"{name:>13} {row['inner_steps']:>11.1f} {row['kernel']:>8.1f} "
                f"{row['kernel'] / row['inner_steps']:>8.1f} {row['step_method']:>11.1f} "
                f"{row['pymc']:>7.1f} {row['step_method'] + row['pymc']:>14.1f} "
                f"{row['total']:>8.1f}"
            )


if __name__ == "__main__":
    main()
