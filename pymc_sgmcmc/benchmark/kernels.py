"""Cost of one fused inner step against the compiled minibatch-gradient floor.

``python -m pymc_sgmcmc.benchmark.kernels`` builds the benchmark's logistic
regression (B = 100, D = 10) at each N, compiles SGHMC's kernels on each
PyTensor backend, and prints microseconds per inner step next to the cost of
one call of the compiled minibatch gradient on the same backend (JAX runs on
its default device). With
``--metrics`` it prints instead the cost of one control-variate step in each
kind of metric (:mod:`pymc_sgmcmc.metric`) on the Numba backend.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm

from pymc_sgmcmc import SGHMC
from pymc_sgmcmc.direct import direct_call
from pymc_sgmcmc.estimators import Centre
from pymc_sgmcmc.kernel import as_state, is_jax
from pymc_sgmcmc.metric import METRICS, metric_from_covariance
from pymc_sgmcmc.panel import logistic_regression

__all__ = ["measure_kernels", "measure_metrics"]

BACKENDS = {"numba": "NUMBA", "c": "CVM", "jax": "JAX"}


def _per_call(function, arguments, repeats):
    function(*arguments)
    start = time.perf_counter()
    for _ in range(repeats):
        function(*arguments)
    return (time.perf_counter() - start) / repeats


def measure_kernels(grid=(1_000, 1_000_000), backends=("numba", "c"), steps=100, seed=0):
    """Return per-step costs of the fused kernels, in microseconds.

    Parameters
    ----------
    grid : sequence of int
        Data sizes N.
    backends : sequence of str
        Keys of :data:`BACKENDS`.
    steps : int, default 100
        Inner steps per kernel call (K).
    seed : int
        Seed of the indices and noise.

    Returns
    -------
    list of dict
        One row per backend and N: ``floor`` (one compiled minibatch-gradient
        call), ``minibatch`` and ``control_variate`` (one fused inner step of
        SGHMC with that estimator), all in microseconds.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for backend in backends:
        for n_rows in grid:
            panel = logistic_regression(n_rows)
            compile_kwargs = {"mode": BACKENDS[backend]}
            with panel.model:
                step = SGHMC(compile_kwargs=compile_kwargs)
            density = step.density
            gradient = pm.compile(
                [density.position, density.indices], density.gradient, **compile_kwargs
            )
            gradient.trust_input = True
            if is_jax(compile_kwargs):
                # Without the data copied to the device at every call, as the kernel.
                gradient = direct_call(gradient, 2, on_device=True)
            position = np.zeros(10)
            batch = rng.integers(n_rows, size=100)
            row = {"backend": backend, "n_rows": n_rows}
            row["floor"] = 1e6 * _per_call(gradient, (position, batch), 2000)
            indices = rng.integers(n_rows, size=(steps, 100))
            step_sizes = np.full(steps, 1e-4)
            size = position.size
            dynamics = step.dynamics
            inputs = dynamics.chain_inputs(np.ones(size), 1.0, {"critical_friction": 2.0})
            state = as_state(dynamics.initial_state(position, inputs, rng))
            noise = rng.standard_normal((steps, dynamics.noise_vectors, size))
            for estimator in ("minibatch", "control_variate"):
                kernel = step.compiled.kernel(type(dynamics), estimator)
                centre = Centre(position, np.zeros(size))
                values = kernel.prepare({**inputs, **centre.inputs()}, size)
                arguments = (state, indices, noise, {"step_size": step_sizes}, values)
                row[estimator] = 1e6 * _per_call(kernel, arguments, 200) / steps
            rows.append(row)
            print(
                f"{backend:>6} N={n_rows:>10,}: gradient call {row['floor']:6.1f} us; "
                f"fused step {row['minibatch']:6.1f} us (minibatch, "
                f"{row['minibatch'] / row['floor']:.2f}x), {row['control_variate']:6.1f} us "
                f"(control variate, {row['control_variate'] / row['floor']:.2f}x)"
            )
    return rows


def measure_metrics(n_rows=100_000, steps=100, seed=0):
    """Return the cost of one control-variate SGHMC step in each kind of metric (microseconds).

    The metrics are built from a covariance with correlated pairs of
    coordinates, so the low-rank metric keeps two directions.
    """
    rng = np.random.default_rng(seed)
    panel = logistic_regression(n_rows)
    with panel.model:
        step = SGHMC()
    size = 10
    covariance = np.eye(size)
    covariance[0, 1] = covariance[1, 0] = covariance[2, 3] = covariance[3, 2] = 0.9
    dynamics = step.dynamics
    inputs = dynamics.chain_inputs(np.ones(size), 1.0, {"critical_friction": 2.0})
    state = as_state(dynamics.initial_state(np.zeros(size), inputs, rng))
    indices = rng.integers(n_rows, size=(steps, 100))
    noise = rng.standard_normal((steps, dynamics.noise_vectors, size))
    centre = Centre(np.zeros(size), np.zeros(size))
    costs = {}
    for kind in METRICS:
        metric_inputs = {}
        if kind != "identity":
            metric = metric_from_covariance(kind, np.zeros(size), covariance, rank=2)
            metric_inputs = metric.inputs()
        kernel = step.compiled.kernel(type(dynamics), "control_variate", kind)
        values = kernel.prepare({**inputs, **centre.inputs(), **metric_inputs}, size)
        arguments = (state, indices, noise, {"step_size": np.full(steps, 1e-4)}, values)
        costs[kind] = 1e6 * _per_call(kernel, arguments, 200) / steps
        print(
            f"N={n_rows:,}, D={size}, B=100: control-variate step in the {kind} metric "
            f"{costs[kind]:6.1f} us ({costs[kind] / costs['identity']:.2f}x identity)",
            flush=True,
        )
    return costs


def main(argv=None) -> None:
    """Parse the arguments and print the table."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.kernels")
    parser.add_argument("--grid", type=int, nargs="+", default=[1_000, 100_000, 10_000_000])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--steps", type=int, default=100, help="inner steps per call (K)")
    parser.add_argument(
        "--metrics", action="store_true", help="cost of a step in each kind of metric instead"
    )
    arguments = parser.parse_args(argv)
    if arguments.metrics:
        measure_metrics(steps=arguments.steps)
    else:
        measure_kernels(arguments.grid, arguments.backends, arguments.steps)


if __name__ == "__main__":
    main()
