"""Time per recorded draw outside the kernel: the step method's and PyMC's.

``python -m pymc_sgmcmc.benchmark.overhead`` samples the benchmark's logistic
regression (D = 10, B = 100) with each named sampler and its defaults, and
times every recorded draw three ways: the whole iteration of ``pm.sample``
(from one draw's ``callback`` to the next), the step method's ``step``, and
the kernel calls inside it. The time outside the kernel splits into the step
method's own work (minibatch rows, random numbers, the metric's map,
statistics) and PyMC's (recording the draw, its sampling loop).

A run after the one that adapts and compiles is cut into blocks of
consecutive draws, long enough to hold many kernel calls each (after tuning
one call runs the inner steps of several draws); the figures are those of
the block with the median total time. Other work on the machine only adds
time, to some blocks, and a block's parts add up to its total.

Each sampler is timed twice: with the fused kernel from the first draw
(the kernel is then the compiled call alone), and with the interpreted loop
a chain starts with (the kernel is then the whole loop, see
:mod:`pymc_sgmcmc.loop`).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time

import pymc as pm

from pymc_sgmcmc.loop import interpretable
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.tuning import TuningConfig

__all__ = ["measure_overhead", "sample_draws"]


class _Timed:
    """A callable that adds the wall time of its calls to ``clock``, a one-element list."""

    def __init__(self, function, clock):
        self.function = function
        self.clock = clock

    def __call__(self, *arguments):
        start = time.perf_counter()
        try:
            return self.function(*arguments)
        finally:
            self.clock[0] += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self.function, name)


def sample_draws(step, model, draws: int, seed: int, callback=None):
    """Return ``pm.sample`` of ``draws`` draws of one chain with ``step``, without tuning draws.

    The step's adaptation at the first draw still runs. ``callback`` is
    ``pm.sample``'s, called after each recorded draw.
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
            callback=callback,
        )


def _timed_blocks(step, model, draws, block, seed, kernel_clock):
    """Return the seconds of each block of ``block`` draws: total, in ``step``, in the kernels.

    The first block, which holds the chain's adaptation at its first draw, is
    left out. Also returns the inner steps per draw.
    """
    step_clock = [0.0]
    step.step = _Timed(type(step).step.__get__(step), step_clock)
    marks = []

    def callback(**_):
        marks.append((time.perf_counter(), step_clock[0], kernel_clock[0]))

    idata = sample_draws(step, model, draws, seed, callback)
    del step.step
    steps = float(idata.sample_stats["steps_per_draw"].values.mean())
    # The marks that end each block of draws, from the first block's on.
    ends = marks[block - 1 :: block]
    blocks = [
        [after - before for after, before in zip(end, start, strict=True)]
        for start, end in itertools.pairwise(ends)
    ]
    return blocks, steps


def _timed_kernels(step, interpreted: bool, clock) -> None:
    """Wrap the kernels the step has built in timers that add to ``clock``.

    The fused kernel is timed around its compiled call; the interpreted
    loop as a whole.
    """
    if not interpreted:
        for kernel in step.compiled._kernels.values():
            kernel._call = _Timed(kernel._call, clock)
        return
    choose = step.runner.kernel
    timers = {}

    def timed_kernel(chain):
        kernel = choose(chain)
        return timers.setdefault(id(kernel), _Timed(kernel, clock))

    step.runner.kernel = timed_kernel


def measure_overhead(
    samplers=("SGLD", "SGHMC"),
    n_rows=5_000,
    draws=11_000,
    block=1_000,
    seed=0,
    interpreted=False,
):
    """Return, per sampler, the microseconds per recorded draw in and around the kernel.

    Parameters
    ----------
    samplers : sequence of str
        Names in :data:`pymc_sgmcmc.registry.SAMPLERS`.
    n_rows : int
        Rows of the logistic regression.
    draws : int
        Length of the timed run; its first ``block`` draws are left out.
    block : int
        Draws per block; the block with the median total time gives the figures.
    interpreted : bool, default False
        Time the interpreted loop instead of the fused kernel (samplers
        without an interpreted form, pSGLD with ``correction=True``, are
        left out).

    Returns
    -------
    dict of str to dict
        For each sampler: ``total``, ``kernel``, ``step_method`` (``step``
        outside the kernel) and ``pymc`` (the rest of ``pm.sample``'s loop),
        in microseconds per draw, and ``inner_steps`` per draw.
    """
    model = logistic_regression(n_rows=n_rows, seed=seed).model
    logging.getLogger("pymc").setLevel(logging.ERROR)
    # Long enough that the timed run stays in the loop, or fused from the start.
    tuning = TuningConfig(interpreted_steps=10**9 if interpreted else 0)
    results = {}
    for name in samplers:
        with model:
            step = SAMPLERS[name](tuning=tuning)
        if interpreted and not interpretable(step.dynamics):
            continue
        # Adapt (and compile) once, then wrap the kernels' calls.
        sample_draws(step, model, 10, seed)
        clock = [0.0]
        _timed_kernels(step, interpreted, clock)
        blocks, steps = _timed_blocks(step, model, draws, block, seed + 1, clock)
        total, in_step, kernel = sorted(blocks)[len(blocks) // 2]
        per_draw = 1e6 / block
        results[name] = {
            "total": total * per_draw,
            "kernel": kernel * per_draw,
            "step_method": (in_step - kernel) * per_draw,
            "pymc": (total - in_step) * per_draw,
            "inner_steps": steps,
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
