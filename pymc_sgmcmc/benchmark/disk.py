"""Sampling from data on disk: wall time, peak memory and accuracy against the Laplace picture.

``python -m pymc_sgmcmc.benchmark.disk --rows 100000000 --directory DIR``
writes the benchmark's logistic regression (D = 10, standard-normal
covariates, ``beta ~ N(0, 1)``) to ``DIR/X.npy`` and ``DIR/y.npy`` chunk by
chunk, finds its posterior mode and Hessian by Newton's method over the files
(the reference: at this N the posterior is Gaussian to far better than the
bar), and then samples it in a fresh process with SGHMC's defaults, the
model holding 10,000 rows and the step method reading the files
(``data=``). It prints the sampling process's wall time, its peak resident
memory, and the means' largest error and the sds' ratios against the
reference. With ``--zarr`` the step method is given Zarr copies of the files
(``DIR/X.zarr``, ``DIR/y.zarr``, chunks of :data:`ZARR_CHUNK_ROWS` rows,
written once), which it copies into a temporary ``.npy`` file before sampling.
"""

from __future__ import annotations

import argparse
import json
import mmap
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: Rows written and reduced at a time.
CHUNK_ROWS = 1_000_000
#: Rows the model holds (NUTS could sample it).
SUBSET_ROWS = 10_000
N_FEATURES = 10
#: Rows per chunk of the Zarr copies.
ZARR_CHUNK_ROWS = 100_000
RESULT_MARKER = "DISK-RESULT "


def write_data(directory: Path, n_rows: int, seed: int = 0) -> None:
    """Write ``X.npy`` (float64) and ``y.npy`` (int32) of ``n_rows`` rows, chunk by chunk."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    true_beta = rng.normal(size=N_FEATURES)
    covariates = np.lib.format.open_memmap(
        directory / "X.npy", mode="w+", dtype=np.float64, shape=(n_rows, N_FEATURES)
    )
    outcomes = np.lib.format.open_memmap(
        directory / "y.npy", mode="w+", dtype=np.int32, shape=(n_rows,)
    )
    for start in range(0, n_rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n_rows)
        x = rng.normal(size=(stop - start, N_FEATURES))
        covariates[start:stop] = x
        outcomes[start:stop] = rng.random(stop - start) < 1.0 / (1.0 + np.exp(-(x @ true_beta)))
        covariates.flush()
        outcomes.flush()
        # Written pages leave the process once flushed; the file cache keeps them.
        covariates.base.madvise(mmap.MADV_DONTNEED)
        outcomes.base.madvise(mmap.MADV_DONTNEED)
    del covariates, outcomes


def write_zarr(directory: Path) -> None:
    """Write Zarr copies of ``X.npy`` and ``y.npy`` (Zarr's default compression)."""
    import zarr

    for name in ("X", "y"):
        source = np.load(directory / f"{name}.npy", mmap_mode="r")
        target = zarr.create_array(
            store=str(directory / f"{name}.zarr"),
            shape=source.shape,
            chunks=(ZARR_CHUNK_ROWS, *source.shape[1:]),
            dtype=source.dtype,
            overwrite=True,
        )
        for start in range(0, len(source), CHUNK_ROWS):
            target[start : start + CHUNK_ROWS] = np.asarray(source[start : start + CHUNK_ROWS])


def laplace_reference(directory: Path, iterations: int = 8):
    """Return the posterior mode and covariance (Newton's method over the files)."""
    covariates = np.load(directory / "X.npy", mmap_mode="r")
    outcomes = np.load(directory / "y.npy", mmap_mode="r")
    beta = np.zeros(N_FEATURES)
    for _ in range(iterations):
        gradient, hessian = -beta, -np.eye(N_FEATURES)
        for start in range(0, len(outcomes), CHUNK_ROWS):
            x = np.asarray(covariates[start : start + CHUNK_ROWS])
            y = np.asarray(outcomes[start : start + CHUNK_ROWS])
            chance = 1.0 / (1.0 + np.exp(-(x @ beta)))
            gradient += x.T @ (y - chance)
            hessian -= (x * (chance * (1.0 - chance))[:, None]).T @ x
        beta = beta - np.linalg.solve(hessian, gradient)
    return beta, np.linalg.inv(-hessian)


def peak_resident_bytes() -> int:
    """Return this process's peak resident memory.

    Linux's high-water mark of the process's own memory (``VmHWM``): the
    ``ru_maxrss`` of a process started by another counts the parent's
    memory before the new program replaced it.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sample_from_disk(directory: Path, draws: int, seed: int = 1, stored: str = "npy") -> dict:
    """Sample with SGHMC's defaults reading the files; return the draws' summary and costs."""
    import arviz as az
    import pymc as pm

    from pymc_sgmcmc import SGHMC

    start = time.perf_counter()
    if stored == "zarr":
        import zarr

        full = {name: zarr.open_array(str(directory / f"{name}.zarr")) for name in ("X", "y")}
    else:
        full = {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in ("X", "y")}
    with pm.Model():
        rows = pm.Data("X", np.array(full["X"][:SUBSET_ROWS]))
        observed = pm.Data("y", np.array(full["y"][:SUBSET_ROWS]))
        beta = pm.Normal("beta", 0.0, 1.0, shape=N_FEATURES)
        pm.Bernoulli("obs", logit_p=rows @ beta, observed=observed)
        result = pm.sample(
            draws=draws,
            chains=2,
            cores=1,
            step=SGHMC(data=full),
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    seconds = time.perf_counter() - start
    values = np.asarray(result.posterior["beta"]).reshape(-1, N_FEATURES)
    return {
        "seconds": seconds,
        "peak_resident_bytes": peak_resident_bytes(),
        "means": values.mean(axis=0).tolist(),
        "sds": values.std(axis=0).tolist(),
        "min_bulk_ess": float(np.min(np.asarray(az.ess(result, var_names=["beta"])["beta"]))),
    }


def main(argv=None) -> None:
    """Write the data if needed, compute the reference, sample in a fresh process, report."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.disk")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--zarr", action="store_true", help="give the data as Zarr arrays")
    parser.add_argument("--sample-only", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    directory = arguments.directory
    stored = "zarr" if arguments.zarr else "npy"
    if arguments.sample_only:
        result = sample_from_disk(directory, arguments.draws, stored=stored)
        print(RESULT_MARKER + json.dumps(result))
        return
    existing = directory / "y.npy"
    if not existing.exists() or len(np.load(existing, mmap_mode="r")) != arguments.rows:
        start = time.perf_counter()
        write_data(directory, arguments.rows)
        print(f"wrote {arguments.rows:,} rows in {time.perf_counter() - start:.1f} s")
    if arguments.zarr and not (directory / "y.zarr").exists():
        start = time.perf_counter()
        write_zarr(directory)
        print(f"wrote the Zarr copies in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    mode, covariance = laplace_reference(directory)
    print(f"Laplace reference in {time.perf_counter() - start:.1f} s")
    command = [sys.executable, "-m", "pymc_sgmcmc.benchmark.disk", "--sample-only"]
    command += ["--directory", str(directory), "--draws", str(arguments.draws)]
    command += ["--zarr"] if arguments.zarr else []
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    run = json.loads(output.split(RESULT_MARKER, 1)[1])
    sds = np.sqrt(np.diag(covariance))
    errors = np.abs(np.asarray(run["means"]) - mode) / sds
    ratios = np.asarray(run["sds"]) / sds
    memory = run["peak_resident_bytes"] / 2**30
    print(
        f"N = {arguments.rows:,} ({stored}): SGHMC, 2 chains x {arguments.draws} draws, "
        f"{run['seconds']:.1f} s, peak resident memory {memory:.2f} GiB, "
        f"largest mean error {errors.max():.3f} sd, sd ratios {ratios.min():.3f} to "
        f"{ratios.max():.3f}, min bulk ESS {run['min_bulk_ess']:.0f}"
    )


if __name__ == "__main__":
    main()
