"""Sample one PyMC model with each sampler and measure speed and accuracy.

Every runner takes the model as the user wrote it and times the whole call
that a user would make, compilation and tuning included.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import asdict, dataclass, field

import arviz as az
import numpy as np
import pymc as pm

from pymc_sgmcmc.benchmark.peers import ADVI_ITERATIONS, fit_advi, sample_hmcecs
from pymc_sgmcmc.diagnostics import accuracy
from pymc_sgmcmc.panel import PanelModel
from pymc_sgmcmc.registry import SAMPLERS as STEP_METHODS
from pymc_sgmcmc.samplers.cyclical import posterior_draws

__all__ = [
    "NUTS_SAMPLERS",
    "PEERS",
    "SAMPLERS",
    "STOCHASTIC",
    "SamplerRun",
    "available",
    "run_sampler",
]

#: NUTS implementations, by the ``nuts_sampler`` name PyMC knows them by.
NUTS_SAMPLERS = {"pymc_nuts": "pymc", "nutpie": "nutpie", "numpyro": "numpyro"}

#: The package's samplers, by lower-case name (every sampler in the registry).
STOCHASTIC = {name.lower(): step_method for name, step_method in STEP_METHODS.items()}

#: What a user with a large data set would run instead of NUTS
#: (:mod:`pymc_sgmcmc.benchmark.peers`).
PEERS = {"advi": fit_advi, "hmcecs": sample_hmcecs}

#: Samplers and the PyMC ``nuts_sampler``, step class or peer each one runs.
SAMPLERS = {**NUTS_SAMPLERS, **STOCHASTIC, **PEERS}

#: Python package each optional sampler needs.
REQUIRES = {"nutpie": "nutpie", "numpyro": "numpyro", "hmcecs": "numpyro"}


def available(sampler: str) -> bool:
    """Return whether ``sampler``'s optional package is installed."""
    package = REQUIRES.get(sampler)
    return package is None or importlib.util.find_spec(package) is not None


@dataclass
class SamplerRun:
    """Speed and accuracy of one sampler on one data size.

    Attributes
    ----------
    sampler : str
        Key of :data:`SAMPLERS`.
    n_rows : int
        Number of observed rows N.
    chains, tune, draws : int
        Settings of the run (``draws`` per chain; for ADVI, one chain of
        draws from the approximation and ``tune`` its optimisation steps).
    total_seconds : float
        Wall time of the whole call, compilation and tuning included.
    sampling_seconds : float
        Wall time of the recorded draws only (estimated from the share of
        iterations for the NUTS samplers, which time no phases separately).
    min_bulk_ess, median_bulk_ess, min_tail_ess, median_tail_ess : float
        Bulk and tail ESS over the coefficients (NaN for ADVI, whose draws
        are independent draws from an approximation, not a Markov chain).
    ess_per_second : float
        Minimum bulk ESS per second of total wall time.
    sampling_ess_per_second : float
        Minimum bulk ESS per second of sampling.
    mean_error : float
        Largest absolute error of a posterior mean, in reference posterior sds.
    worst_sd_ratio : float
        Posterior sd over reference sd, farthest from 1.
    meets_bar : bool
        Means within 0.1 sd and sds within 10% of the reference.
    inner_steps_per_second : float
        SG-MCMC inner steps per second of sampling (NaN for the others).
    steps_per_draw : float
        SG-MCMC inner steps per recorded draw, averaged (NaN for the others).
    means, lower, upper : list of float
        Posterior mean and 94% interval of each coefficient (of every
        variable with a reference, flattened in order).
    """

    sampler: str
    n_rows: int
    chains: int
    tune: int
    draws: int
    total_seconds: float
    sampling_seconds: float
    min_bulk_ess: float
    median_bulk_ess: float
    min_tail_ess: float
    median_tail_ess: float
    ess_per_second: float
    sampling_ess_per_second: float
    mean_error: float
    worst_sd_ratio: float
    meets_bar: bool
    inner_steps_per_second: float
    steps_per_draw: float = float("nan")
    means: list = field(default_factory=list)
    lower: list = field(default_factory=list)
    upper: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """Return the run as plain JSON-ready values."""
        return asdict(self)


def _coefficients(posterior, name: str) -> np.ndarray:
    """Return the draws of ``name`` as an array (chain, draw, coefficient)."""
    values = np.asarray(posterior[name])
    return values.reshape(*values.shape[:2], -1)


def _ess(draws: np.ndarray, method: str) -> np.ndarray:
    # The tail ESS is that of the 5% and 95% quantiles (ArviZ 0.x's fixed
    # choice; ArviZ 1.x asks for it).
    options = {"prob": (0.05, 0.95)} if method == "tail" else {}
    return np.array(
        [float(az.ess(draws[..., j], method=method, **options)) for j in range(draws.shape[-1])]
    )


def run_sampler(
    sampler: str,
    panel: PanelModel,
    *,
    chains: int = 2,
    tune: int | None = None,
    draws: int | None = None,
    seed: int = 1,
) -> SamplerRun:
    """Sample ``panel``'s model with ``sampler`` and measure the run.

    Parameters
    ----------
    sampler : str
        Key of :data:`SAMPLERS`.
    panel : PanelModel
        The model and its reference posterior (``means`` and ``sds`` set).
    chains : int, default 2
        Number of chains.
    tune, draws : int, optional
        Tuning iterations and draws per chain: 1,000 each for NUTS and
        HMCECS; for the SG-MCMC samplers 200 and 5,000 recorded draws (each
        of many inner steps; the tuning itself happens at the first draw);
        for ADVI, ``pm.fit``'s 10,000 optimisation steps and 1,000 draws per
        chain from the approximation.
    seed : int, default 1
        ``random_seed`` of the run.

    Returns
    -------
    SamplerRun
    """
    target = SAMPLERS[sampler]
    stochastic = sampler in STOCHASTIC
    if sampler == "advi":
        tune = tune if tune is not None else ADVI_ITERATIONS
        draws = draws if draws is not None else 1000
    else:
        tune = tune if tune is not None else (200 if stochastic else 1000)
        draws = draws if draws is not None else (5000 if stochastic else 1000)
    options = {
        "draws": draws,
        "tune": tune,
        "chains": chains,
        "random_seed": seed,
        "progressbar": False,
        "compute_convergence_checks": False,
    }
    start = time.perf_counter()
    if sampler == "advi":
        result = fit_advi(panel, draws=chains * draws, seed=seed, iterations=tune)
    elif sampler == "hmcecs":
        result = sample_hmcecs(panel, chains=chains, tune=tune, draws=draws, seed=seed)
    else:
        with panel.model:
            if stochastic:
                clock = _DrawClock()
                options["cores"] = 1
                result = pm.sample(step=target(), callback=clock, **options)
            else:
                options["nuts_sampler"] = target
                if target == "pymc":
                    options["cores"] = chains
                result = pm.sample(**options)
    total = time.perf_counter() - start

    posterior = posterior_draws(result) if stochastic else result["posterior"]
    coefficients = np.concatenate([_coefficients(posterior, name) for name in panel.means], -1)
    flat = coefficients.reshape(-1, coefficients.shape[-1])
    scores = accuracy(posterior, panel.means, panel.sds)
    if sampler == "advi":
        bulk = tail = np.full(coefficients.shape[-1], np.nan)
    else:
        bulk = _ess(coefficients, "bulk")
        tail = _ess(coefficients, "tail")

    if stochastic:
        stats = result.sample_stats
        sampling = clock.sampling_seconds
        steps = float(np.sum(np.asarray(stats["steps_per_draw"])))
        steps_per_second = steps / sampling
        steps_per_draw = float(np.mean(np.asarray(stats["steps_per_draw"])))
    elif sampler == "advi":
        sampling = steps_per_second = steps_per_draw = float("nan")
    else:
        sampling = total * draws / (draws + tune)
        steps_per_second = steps_per_draw = float("nan")
    lower, upper = np.quantile(flat, [0.03, 0.97], axis=0)
    return SamplerRun(
        sampler=sampler,
        n_rows=panel.n_rows,
        chains=chains,
        tune=tune,
        draws=draws,
        total_seconds=total,
        sampling_seconds=sampling,
        min_bulk_ess=float(bulk.min()),
        median_bulk_ess=float(np.median(bulk)),
        min_tail_ess=float(tail.min()),
        median_tail_ess=float(np.median(tail)),
        ess_per_second=float(bulk.min() / total),
        sampling_ess_per_second=float(bulk.min() / sampling),
        mean_error=scores.mean_error,
        worst_sd_ratio=scores.worst_sd_ratio,
        meets_bar=scores.meets(),
        inner_steps_per_second=steps_per_second,
        steps_per_draw=steps_per_draw,
        means=flat.mean(axis=0).tolist(),
        lower=lower.tolist(),
        upper=upper.tolist(),
    )


class _DrawClock:
    """``pm.sample`` callback that times the recorded draws of sequential chains."""

    def __init__(self):
        self.sampling_seconds = 0.0
        self._last = None

    def __call__(self, trace, draw):
        now = time.perf_counter()
        if not draw.tuning and self._last is not None:
            self.sampling_seconds += now - self._last
        self._last = now


def main(argv=None) -> None:
    """Run one sampler at one N and print the measurements as JSON.

    The benchmark starts every run in a fresh process this way, so that no
    run profits from what an earlier one compiled in memory (the on-disk
    compilation caches of PyTensor and Numba are used, as after a first use).
    """
    import argparse
    import json

    from pymc_sgmcmc.benchmark import reference

    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.benchmark.runners")
    parser.add_argument("--sampler", required=True, choices=list(SAMPLERS))
    parser.add_argument("--n-rows", type=int, required=True)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=None)
    parser.add_argument("--draws", type=int, default=None)
    arguments = parser.parse_args(argv)
    panel, _ = reference(arguments.n_rows)
    run = run_sampler(
        arguments.sampler,
        panel,
        chains=arguments.chains,
        tune=arguments.tune,
        draws=arguments.draws,
    )
    print(RESULT_MARKER + json.dumps(run.to_dict()))


#: Prefix of the line that carries a run's measurements on standard output.
RESULT_MARKER = "BENCHMARK-RESULT "

if __name__ == "__main__":
    main()
