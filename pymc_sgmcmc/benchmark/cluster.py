"""Full-data passes on a Dask cluster against the pass in process: agreement and wall time.

``python -m pymc_sgmcmc.benchmark.cluster --rows 100000000 --directory DIR``
writes the logistic regression of :mod:`pymc_sgmcmc.benchmark.disk` to
``DIR`` (unless it is there), starts a local Dask cluster of ``--workers``
worker processes, and computes the full-data log posterior, its gradient and
the log-likelihood gradient (:meth:`pymc_sgmcmc.estimators.Probe.full`, as
mode finding and the control variate's centre do) at three points, once in
this process and once on the cluster (``SGHMC(..., client=client)``, the
workers mapping the same files). It prints each pass's wall time and the
largest relative difference between the two.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from pymc_sgmcmc.benchmark.disk import N_FEATURES, SUBSET_ROWS, write_data


def relative_difference(found, expected) -> float:
    """Return the largest relative difference of the pass's outputs, each against its size."""
    return max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))
        for a, b in zip(found, expected, strict=True)
    )


def compare_passes(directory: Path, workers: int, seed: int = 2) -> list[dict]:
    """Return, per point, the wall time of both passes and their largest relative difference."""
    import pymc as pm
    from distributed import Client, LocalCluster

    from pymc_sgmcmc import SGHMC

    full = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in ("X", "y")}
    with pm.Model() as model:
        rows = pm.Data("X", np.array(full["X"][:SUBSET_ROWS]))
        observed = pm.Data("y", np.array(full["y"][:SUBSET_ROWS]))
        beta = pm.Normal("beta", 0.0, 1.0, shape=N_FEATURES)
        pm.Bernoulli("obs", logit_p=rows @ beta, observed=observed)
    points = np.random.default_rng(seed).normal(scale=[[0.0], [0.5], [2.0]], size=(3, N_FEATURES))
    results = []
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        in_process = SGHMC(model=model, data=full).compiled.probe
        on_cluster = SGHMC(model=model, data=full, client=client).compiled.probe
        # The workers build their tuning functions on their first pass.
        on_cluster.full(points[0])
        for point in points:
            start = time.perf_counter()
            expected = in_process.full(point)
            middle = time.perf_counter()
            found = on_cluster.full(point)
            end = time.perf_counter()
            results.append(
                {
                    "in_process_seconds": middle - start,
                    "cluster_seconds": end - middle,
                    "relative_difference": relative_difference(found, expected),
                }
            )
    return results


def main(argv=None) -> None:
    """Write the data if needed, compare the passes, report."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.cluster")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args(argv)
    directory = arguments.directory
    existing = directory / "y.npy"
    if not existing.exists() or len(np.load(existing, mmap_mode="r")) != arguments.rows:
        write_data(directory, arguments.rows)
    print(f"N = {arguments.rows:,}, full-data pass, {arguments.workers} Dask workers:")
    for number, result in enumerate(compare_passes(directory, arguments.workers), start=1):
        ratio = result["in_process_seconds"] / result["cluster_seconds"]
        print(
            f"point {number}: in process {result['in_process_seconds']:.2f} s, "
            f"on the cluster {result['cluster_seconds']:.2f} s ({ratio:.2f}x), "
            f"largest relative difference {result['relative_difference']:.1e}"
        )


if __name__ == "__main__":
    main()
