"""What the hand-over from the interpreted loop to the fused kernel weighs.

``python -m pymc_sgmcmc.benchmark.handover`` samples a few models with a
sampler's defaults (``batch_size=100``, one chain of 1,000 tune and 3,000
draws) and measures, per model, the two costs that
:meth:`~pymc_sgmcmc.runner.KernelRunner.handover_steps` weighs against each
other:

- the wall time per inner step of whole ``pm.sample`` runs in the
  interpreted loop and in the fused kernel (each after a run that adapts and
  compiles, so it includes the adaptation's share, the same in both);
- the time to compile the fused kernel of the chain's gradient estimate and
  metric in this process (with the on-disk caches as they are: run it twice
  for warm ones).

The break-even point is the compile time over the loop's extra cost per
step, in inner steps and in steps per operation of the gradient estimate's
graph (:meth:`~pymc_sgmcmc.compiled_model.CompiledModel.gradient_operations`),
which ``TuningConfig.steps_per_operation`` stands for.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import pymc as pm

from pymc_sgmcmc.likelihood_shapes import beta_regression, negative_binomial_regression
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.runner import CENTRED_ESTIMATORS
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.measure import FULL_DATA

__all__ = ["MODELS", "measure_handover"]

#: The models measured, by name: D = 10, 5 and 6.
MODELS = {
    "logistic": lambda: logistic_regression(5_000).model,
    "beta": lambda: beta_regression().model,
    "negative-binomial": lambda: negative_binomial_regression().model,
}

#: Sampled in the loop throughout, or in the fused kernel from the first draw.
_IN_THE_LOOP, _FUSED = 10**9, 0


def _timed_run(model, sampler, interpreted_steps: int, seed: int):
    """Return the wall time, the inner steps and the step of one chain's ``pm.sample``."""
    with model:
        step = sampler(batch_size=100, tuning=TuningConfig(interpreted_steps=interpreted_steps))
        start = time.perf_counter()
        result = pm.sample(
            step=step,
            tune=1000,
            draws=3000,
            chains=1,
            cores=1,
            random_seed=seed,
            discard_tuned_samples=False,
            progressbar=False,
            compute_convergence_checks=False,
        )
        seconds = time.perf_counter() - start
    steps = int(result.warmup_sample_stats["steps_per_draw"].sum())
    steps += int(result.sample_stats["steps_per_draw"].sum())
    return seconds, steps, step


def measure_handover(model_name: str, sampler_name: str = "SGLD", repeats: int = 3) -> dict:
    """Return the loop's and the fused kernel's cost per step and the kernel's compile time.

    Parameters
    ----------
    model_name : str
        A key of :data:`MODELS`.
    sampler_name : str, default "SGLD"
        A sampler of :data:`pymc_sgmcmc.registry.SAMPLERS` that has an interpreted loop.
    repeats : int, default 3
        Timed runs of each kind; their median cost per step is reported.
    """
    model, sampler = MODELS[model_name](), SAMPLERS[sampler_name]
    _, _, step = _timed_run(model, sampler, _IN_THE_LOOP, seed=1)
    settings = step.chain.settings
    estimator = "minibatch" if settings.estimator == FULL_DATA else settings.estimator
    loop = [_timed_run(model, sampler, _IN_THE_LOOP, seed)[:2] for seed in range(2, 2 + repeats)]
    start = time.perf_counter()
    step.compiled.kernel(step.dynamics, estimator, settings.metric.kind)
    compile_seconds = time.perf_counter() - start
    fused = [_timed_run(model, sampler, _FUSED, seed)[:2] for seed in range(2, 2 + repeats)]
    loop_step = statistics.median(seconds / steps for seconds, steps in loop)
    fused_step = statistics.median(seconds / steps for seconds, steps in fused)
    operations = step.compiled.gradient_operations(estimator)
    break_even = compile_seconds / (loop_step - fused_step)
    return {
        "model": model_name,
        "sampler": sampler_name,
        "estimator": estimator,
        "centred": estimator in CENTRED_ESTIMATORS,
        "metric": settings.metric.kind,
        "operations": operations,
        "compile_seconds": compile_seconds,
        "loop_microseconds": 1e6 * loop_step,
        "fused_microseconds": 1e6 * fused_step,
        "break_even_steps": break_even,
        "steps_per_operation": break_even / operations,
    }


def format_row(row: dict) -> str:
    """Return one Markdown table row of :func:`measure_handover`'s result."""
    return (
        f"| {row['model']} | {row['sampler']} | {row['estimator']}, {row['metric']} | "
        f"{row['operations']} | {row['compile_seconds']:.1f} | {row['loop_microseconds']:.0f} | "
        f"{row['fused_microseconds']:.0f} | {row['break_even_steps']:,.0f} | "
        f"{row['steps_per_operation']:.0f} |"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--samplers", nargs="+", default=["SGLD", "SGHMC"])
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.WARNING)
    print(
        "| model | sampler | estimate, metric | operations | compile (s) | loop (µs/step) "
        "| fused (µs/step) | break-even steps | steps per operation |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model_name in arguments.models:
        for sampler_name in arguments.samplers:
            print(format_row(measure_handover(model_name, sampler_name, arguments.repeats)))


if __name__ == "__main__":
    main()
