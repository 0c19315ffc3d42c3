"""NUTS against SG-MCMC on Bayesian logistic regression, as N grows.

One PyMC model (D = 10 coefficients, N(0, 1) prior, no intercept) is sampled
at each data size by PyMC's NUTS, by nutpie and NumPyro NUTS where installed,
and by every sampler of the package's registry with its defaults. Each run
reports ESS per second (total and sampling phase), bulk and
tail ESS, and its accuracy against a reference posterior.

Run it as ``python -m pymc_sgmcmc.benchmark --help``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pymc_sgmcmc.benchmark.runners import (
    REQUIRES,
    RESULT_MARKER,
    SAMPLERS,
    STOCHASTIC,
    SamplerRun,
    available,
)
from pymc_sgmcmc.panel import laplace_reference, logistic_regression, nuts_reference

__all__ = [
    "DEFAULT_MAX_ROWS",
    "SAMPLERS",
    "SamplerRun",
    "choose_samplers",
    "run_benchmark",
    "run_in_fresh_process",
    "run_module",
    "save_figures",
]

#: Largest N each NUTS sampler runs at by default: NUTS pays O(N) per
#: gradient. The package's samplers run at every N.
DEFAULT_MAX_ROWS = {"pymc_nuts": 50_000, "nutpie": 50_000, "numpyro": 500_000}

#: Largest N whose reference posterior comes from a long NUTS run; above it the
#: Laplace approximation is the reference (its error shrinks like N^-1/2).
NUTS_REFERENCE_MAX_ROWS = 50_000


def reference(n_rows: int):
    """Return the benchmark model at ``n_rows`` with its reference posterior."""
    panel = logistic_regression(n_rows)
    if n_rows <= NUTS_REFERENCE_MAX_ROWS:
        return nuts_reference(panel), "nuts"
    return laplace_reference(panel), "laplace"


def run_benchmark(
    grid=(1_000, 2_000, 5_000, 50_000, 500_000, 5_000_000),
    samplers=tuple(SAMPLERS),
    chains: int = 2,
    max_rows: dict | None = None,
    sgmcmc_draws: int | None = None,
    output: str | os.PathLike | None = None,
) -> dict:
    """Run every sampler at every data size and collect the measurements.

    Parameters
    ----------
    grid : sequence of int
        Data sizes N.
    samplers : sequence of str
        Keys of :data:`SAMPLERS`; those whose package is missing are skipped
        with a message.
    chains : int, default 2
        Chains per run.
    max_rows : dict, optional
        Largest N per sampler (``None``: no limit), merged over
        :data:`DEFAULT_MAX_ROWS`.
    sgmcmc_draws : int, optional
        Recorded draws per chain of the SG-MCMC samplers (5,000 by default).
    output : path, optional
        Folder to write ``results.json`` and the figures to.

    Returns
    -------
    dict
        ``{"machine": ..., "runs": [...], "references": {...}, "truth": [...]}``.
    """
    limits = {**DEFAULT_MAX_ROWS, **(max_rows or {})}
    chosen = choose_samplers(samplers)
    results = {"machine": _machine(), "runs": [], "references": {}, "truth": None}
    for n_rows in sorted(grid):
        start = time.perf_counter()
        panel, kind = reference(n_rows)
        results["references"][str(n_rows)] = {
            "kind": kind,
            "means": panel.means["beta"].tolist(),
            "sds": panel.sds["beta"].tolist(),
        }
        results["truth"] = panel.truth["beta"].tolist()
        print(f"N = {n_rows:,}: {kind} reference ready in {time.perf_counter() - start:.0f} s")
        for sampler in chosen:
            limit = limits.get(sampler)
            if limit is not None and n_rows > limit:
                continue
            draws = sgmcmc_draws if sampler in STOCHASTIC else None
            run = SamplerRun(**run_in_fresh_process(sampler, n_rows, chains, draws))
            results["runs"].append(run.to_dict())
            print(
                f"  {sampler:>9}: {run.ess_per_second:9.1f} ESS/s total, "
                f"{run.total_seconds:6.1f} s, mean error {run.mean_error:.3f} sd, "
                f"sd ratio {run.worst_sd_ratio:.3f}{'' if run.meets_bar else '  MISSES BAR'}"
            )
    if output is not None:
        folder = Path(output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results, indent=1))
        save_figures(results, folder)
    return results


def choose_samplers(samplers) -> list[str]:
    """Return the samplers that can run, in order, skipping those whose package is missing.

    Raises
    ------
    ValueError
        If a name is not a key of :data:`SAMPLERS`.
    """
    unknown = set(samplers) - set(SAMPLERS)
    if unknown:
        raise ValueError(f"Unknown samplers {sorted(unknown)}; choose from {sorted(SAMPLERS)}.")
    chosen = []
    for sampler in samplers:
        if available(sampler):
            chosen.append(sampler)
        else:
            package = REQUIRES[sampler]
            print(f"Skipping {sampler}: install it (pip install {package}) to include it.")
    return chosen


def run_module(arguments: list[str], compile_directory: str | None = None) -> dict:
    """Run ``python -m *arguments`` in a new process and return the result it prints.

    BLAS is pinned to one thread (chains on two cores otherwise fight over
    them), and JAX gets one CPU device per core so that NumPyro runs its
    chains in parallel, as PyMC's NUTS and nutpie do.

    Parameters
    ----------
    arguments : list of str
        The module and its arguments; the module prints its result as JSON
        on a line starting with ``RESULT_MARKER``.
    compile_directory : str, optional
        A folder for the compilation caches in place of the user's:
        PyTensor's (its C and Numba caches) and Numba's own. An empty folder
        empties every cache (JAX keeps none on disk unless asked to).

    Returns
    -------
    dict
    """
    environment = dict(os.environ)
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        environment[variable] = "1"
    environment.setdefault(
        "XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count() or 1}"
    )
    if compile_directory is not None:
        flags = environment.get("PYTENSOR_FLAGS", "")
        environment["PYTENSOR_FLAGS"] = ",".join(
            filter(None, [flags, f"base_compiledir={compile_directory}/pytensor"])
        )
        environment["NUMBA_CACHE_DIR"] = f"{compile_directory}/numba"
        environment.pop("JAX_COMPILATION_CACHE_DIR", None)
    command = [sys.executable, "-m", *arguments]
    finished = subprocess.run(command, env=environment, capture_output=True, text=True)
    for line in finished.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    raise RuntimeError(f"python -m {' '.join(arguments)} failed:\n{finished.stderr[-3000:]}")


def run_in_fresh_process(
    sampler: str,
    n_rows: int,
    chains: int,
    draws: int | None = None,
    tune: int | None = None,
    empty_caches: bool = False,
) -> dict:
    """Run one measurement in a new Python process (:func:`run_module`) and return its result.

    Parameters
    ----------
    sampler : str
        Key of :data:`SAMPLERS`.
    n_rows : int
        Data size N.
    chains : int
        Chains of the run.
    draws, tune : int, optional
        Draws and tuning iterations per chain (the sampler's defaults of
        :func:`~pymc_sgmcmc.benchmark.runners.run_sampler` when not given).
    empty_caches : bool, default False
        Run with every compilation cache empty (a new temporary folder).

    Returns
    -------
    dict
        The fields of a :class:`SamplerRun`.
    """
    arguments = ["pymc_sgmcmc.benchmark.runners", "--sampler", sampler]
    arguments += ["--n-rows", str(n_rows), "--chains", str(chains)]
    if draws is not None:
        arguments += ["--draws", str(draws)]
    if tune is not None:
        arguments += ["--tune", str(tune)]
    if not empty_caches:
        return run_module(arguments)
    with tempfile.TemporaryDirectory() as caches:
        return run_module(arguments, compile_directory=caches)


def save_figures(results: dict, folder) -> list[Path]:
    """Draw the three benchmark figures into ``folder`` and return their paths.

    The figures are drawn without pyplot, so the caller's matplotlib backend
    (e.g. a notebook's inline one) is left alone.
    """
    from matplotlib.figure import Figure

    from pymc_sgmcmc.benchmark.figures import plot_accuracy, plot_ess_per_second, plot_means

    folder = Path(folder)
    runs = results["runs"]
    nuts = ("pymc_nuts", "nutpie", "numpyro")
    nuts_rows = [run["n_rows"] for run in runs if run["sampler"] in nuts]
    largest = max(nuts_rows or [run["n_rows"] for run in runs])
    reference = results["references"][str(largest)]
    drawings = {
        "ess_per_second.png": lambda ax: plot_ess_per_second(runs, ax),
        "posterior_means.png": lambda ax: plot_means(
            runs, results["truth"], reference["means"], reference["sds"], largest, ax
        ),
        "accuracy.png": lambda ax: plot_accuracy(runs, ax),
    }
    paths = []
    for name, draw in drawings.items():
        figure = Figure(figsize=(6.5, 4.5))
        draw(figure.add_subplot())
        figure.tight_layout()
        figure.savefig(folder / name, dpi=110)
        paths.append(folder / name)
    return paths


def _machine() -> dict:
    import pymc
    import pytensor

    return {
        "python": platform.python_version(),
        "pymc": pymc.__version__,
        "pytensor": pytensor.__version__,
        "cpus": os.cpu_count(),
        "blas_threads": 1,
        "protocol": "each run in a fresh process; PyTensor and Numba disk caches warm",
        "numpy": np.__version__,
    }
