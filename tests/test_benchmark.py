"""The NUTS-vs-SG-MCMC benchmark: its runner, its command line and its notebook."""

import json
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from pymc_sgmcmc.benchmark import __main__ as command_line
from pymc_sgmcmc.benchmark import runners

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).parent.parent / "examples"


def test_command_line_writes_results_and_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runners, "REQUIRES", {**runners.REQUIRES, "nutpie": "no_such_package"})
    command_line.main(
        [
            "--grid", "400",
            "--samplers", "sghmc", "nutpie",
            "--sgmcmc-draws", "300",
            "--output", str(tmp_path),
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert "Skipping nutpie" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    (run,) = results["runs"]
    assert run["sampler"] == "sghmc" and run["n_rows"] == 400 and run["draws"] == 300
    assert 0 < run["sampling_seconds"] < run["total_seconds"]
    assert run["min_bulk_ess"] > 0 and run["inner_steps_per_second"] > 0
    assert len(run["means"]) == len(results["truth"]) == 10
    for name in ("ess_per_second.png", "posterior_means.png", "accuracy.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_draw_clock_times_only_the_recorded_draws(monkeypatch):
    """Two chains of 3 tuning and 4 kept draws, one second per draw."""
    ticks = iter(range(100))
    monkeypatch.setattr(runners.time, "perf_counter", lambda: float(next(ticks)))
    clock = runners._DrawClock()
    for _chain in range(2):
        for tuning in [True] * 3 + [False] * 4:
            clock(None, SimpleNamespace(tuning=tuning))
    assert clock.sampling_seconds == 8.0


def test_unknown_sampler_is_refused():
    from pymc_sgmcmc.benchmark import run_benchmark

    with pytest.raises(ValueError, match="Unknown samplers"):
        run_benchmark(grid=[400], samplers=["hmc"])


@pytest.mark.once
def test_notebook_runs_on_a_tiny_grid(monkeypatch):
    monkeypatch.setenv("SGMCMC_NOTEBOOK_GRID", "500 2000")
    # One sampler of each kind: NUTS, the package's, and the two peers.
    monkeypatch.setenv("SGMCMC_NOTEBOOK_SAMPLERS", "pymc_nuts sghmc advi hmcecs")
    notebook = nbformat.read(EXAMPLES / "nuts_vs_sgmcmc.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": EXAMPLES}}
    ).execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )
    for sampler in ("pymc_nuts", "sghmc", "advi", "hmcecs"):
        assert sampler in outputs


def test_kernel_benchmark_defaults_name_only_known_backends(monkeypatch):
    from pymc_sgmcmc.benchmark import kernels

    called = {}
    monkeypatch.setattr(kernels, "measure_kernels", lambda *args: called.setdefault("args", args))
    kernels.main([])
    _, backends, _ = called["args"]
    assert backends and set(backends) <= set(kernels.BACKENDS)


def test_every_registered_sampler_is_benchmarked():
    from pymc_sgmcmc.benchmark.figures import LABELS
    from pymc_sgmcmc.registry import SAMPLERS

    for name in SAMPLERS:
        assert name.lower() in runners.SAMPLERS and name.lower() in LABELS


def test_overhead_splits_each_draw_between_kernel_step_method_and_pymc():
    from pymc_sgmcmc.benchmark.overhead import measure_overhead

    row = measure_overhead(samplers=("SGHMC",), n_rows=500, draws=2_000, block=500)["SGHMC"]
    assert row["inner_steps"] >= 1
    assert row["kernel"] > 0
    parts = row["kernel"] + row["step_method"] + row["pymc"]
    assert parts == pytest.approx(row["total"])


def test_draws_per_call_times_a_call_per_draw_and_the_default():
    from pymc_sgmcmc.benchmark import draws_per_call
    from pymc_sgmcmc.tuning import TuningConfig

    times = draws_per_call.time_per_draw(n_rows=500, draws=(20, 60))
    assert set(times) == {("NUMBA", 0), ("NUMBA", TuningConfig.steps_per_call)}
    assert all(np.isfinite(value) for value in times.values())


def test_advi_and_hmcecs_rows_measure_accuracy_against_the_reference():
    from pymc_sgmcmc.benchmark import reference
    from pymc_sgmcmc.benchmark.runners import run_sampler

    panel, _ = reference(400)
    advi = run_sampler("advi", panel, chains=2, tune=3_000, draws=200)
    assert advi.draws == 200 and advi.tune == 3_000
    assert np.isnan(advi.min_bulk_ess) and np.isnan(advi.ess_per_second)
    assert np.isfinite(advi.mean_error) and advi.total_seconds > 0
    hmcecs = run_sampler("hmcecs", panel, chains=1, tune=200, draws=200)
    assert hmcecs.min_bulk_ess > 0 and np.isfinite(hmcecs.mean_error)
    assert len(hmcecs.means) == len(panel.means["beta"])


@pytest.mark.jax
def test_the_hmcecs_proxy_is_centred_at_the_posterior_mode():
    """The L-BFGS mode of the NumPyro model is PyMC's MAP of the same model."""
    import jax.numpy as jnp
    import pymc as pm

    from pymc_sgmcmc.benchmark.peers import _data, _numpyro_model, posterior_mode_numpyro
    from pymc_sgmcmc.panel import logistic_regression

    panel = logistic_regression(400)
    x, y = _data(panel)
    mode = posterior_mode_numpyro(_numpyro_model, jnp.asarray(x), jnp.asarray(y), None)
    with panel.model:
        expected = pm.find_MAP(progressbar=False)["beta"]
    np.testing.assert_allclose(np.asarray(mode["beta"]), expected, atol=1e-4)


def test_new_model_regressions_have_the_documented_parameters():
    from pymc_sgmcmc.benchmark.new_model import MODELS

    counts = {"survey": 10, "interaction": 5, "earnings": 4}
    for name, builder in MODELS.items():
        panel = builder()
        sizes = [np.size(value) for value in panel.model.initial_point().values()]
        assert sum(sizes) == counts[name], name


def test_noise_scale_posterior_matches_a_two_dimensional_quadrature():
    from scipy.stats import halfnorm, norm

    from pymc_sgmcmc.benchmark.scale_shift import noise_scale_posterior

    rng = np.random.default_rng(3)
    design = np.column_stack([np.ones(12), rng.normal(size=12)])
    response = design @ np.array([0.5, 1.5]) + rng.normal(0.0, 0.7, size=12)
    mean, sd = noise_scale_posterior(design, response, coefficient_scale=2.0, scale_prior=1.0)
    # Every parameter on a grid: the two coefficients, then sigma one value at a time.
    first, second = np.meshgrid(np.linspace(-2.5, 3.5, 151), np.linspace(-1.0, 4.0, 151))
    fitted = first[..., None] * design[:, 0] + second[..., None] * design[:, 1]
    prior = norm.logpdf(first, 0.0, 2.0) + norm.logpdf(second, 0.0, 2.0)
    scales = np.linspace(0.05, 3.0, 300)
    log_marginal = np.array(
        [
            np.logaddexp.reduce((norm.logpdf(response, fitted, scale).sum(axis=-1) + prior).ravel())
            for scale in scales
        ]
    ) + halfnorm.logpdf(scales, scale=1.0)
    weights = np.exp(log_marginal - log_marginal.max())
    weights /= weights.sum()
    grid_mean = weights @ scales
    grid_sd = np.sqrt(weights @ (scales - grid_mean) ** 2)
    assert mean == pytest.approx(grid_mean, rel=1e-3)
    assert sd == pytest.approx(grid_sd, rel=1e-2)


def test_the_hessian_benchmark_times_both_searches_to_the_same_mode():
    from pymc_sgmcmc.benchmark.hessians import dense_regression, time_mode_searches

    row = time_mode_searches(dense_regression(10_000, 100), repeats=1)
    assert row["size"] == 101 and row["n_rows"] == 10_000
    assert row["exact_calls"] < row["differenced_calls"] - 2 * row["size"]
    assert row["mode_distance"] < 1e-3 and row["hessian_difference"] < 1e-4
    assert row["ratio"] == row["exact_seconds"] / row["differenced_seconds"]
