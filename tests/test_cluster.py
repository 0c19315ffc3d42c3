"""Full-data passes on a two-worker Dask cluster: the same numbers as in the process."""

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from distributed import Client, LocalCluster

from pymc_sgmcmc import SGHMC, SGLD, cluster
from pymc_sgmcmc.tuning.config import TuningConfig

N_ROWS = 20_000
SUBSET = 500

#: 20 chunks, so each of the cluster's 8 tasks sums two or three.
TUNING = TuningConfig(chunk_rows=1_000)

#: The issue's bar for a pass on the cluster against the pass in process.
RELATIVE = 1e-8


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        Client(local) as connected,
    ):
        yield connected


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    rng = np.random.default_rng(11)
    covariates = rng.normal(size=(N_ROWS, 3))
    chance = 1.0 / (1.0 + np.exp(-covariates @ np.array([0.8, -0.6, 0.3])))
    outcomes = (rng.random(N_ROWS) < chance).astype("int32")
    where = tmp_path_factory.mktemp("cluster")
    np.save(where / "X.npy", covariates)
    np.save(where / "y.npy", outcomes)
    return where, covariates, outcomes


def logistic(covariates, outcomes, scale=None):
    with pm.Model() as model:
        rows = pm.Data("X", covariates)
        observed = pm.Data("y", outcomes)
        beta = pm.Normal("beta", 0, 1, shape=3)
        if scale is None:
            pm.Bernoulli("obs", logit_p=rows @ beta, observed=observed)
        else:
            spread = pm.HalfNormal("spread", 1.0)
            pm.Normal("obs", rows @ beta, spread, observed=observed)
    return model


def workers_holding(client, step) -> int:
    """Return how many workers built the tuning functions of ``step``."""
    token = step.compiled.cluster._recipe.token
    held = client.run(lambda: list(cluster._WORKER_PROBES))
    return sum(token in tokens for tokens in held.values())


def test_full_passes_of_data_on_disk_on_the_cluster_match_the_pass_in_process(client, rows):
    where, covariates, outcomes = rows
    model = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    data = {name: np.load(where / f"{name}.npy", mmap_mode="r") for name in ("X", "y")}
    in_process = SGHMC(model=model, data=data, tuning=TUNING)
    on_cluster = SGHMC(model=model, data=data, tuning=TUNING, client=client)
    for position in (np.zeros(3), np.array([0.8, -0.6, 0.3]), np.array([-2.0, 1.5, 4.0])):
        expected = in_process.compiled.probe.full(position)
        found = on_cluster.compiled.probe.full(position)
        for value, reference in zip(found, expected, strict=True):
            np.testing.assert_allclose(value, reference, rtol=RELATIVE, atol=0)
    assert workers_holding(client, on_cluster) == 2


def test_passes_set_the_other_step_methods_variables_on_the_workers(client, rows):
    _, covariates, outcomes = rows
    model = logistic(covariates, outcomes.astype(float), scale=True)
    beta = model["beta"]
    in_process = SGLD(vars=[beta], model=model, tuning=TUNING)
    on_cluster = SGLD(vars=[beta], model=model, tuning=TUNING, client=client)
    position = np.array([0.1, -0.2, 0.3])
    for spread in (0.5, 2.0):
        for step in (in_process, on_cluster):
            (block,) = step.compiled.density.other_blocks
            block.set_value(np.log(spread))
        expected = in_process.compiled.probe.full(position)
        found = on_cluster.compiled.probe.full(position)
        for value, reference in zip(found, expected, strict=True):
            np.testing.assert_allclose(value, reference, rtol=RELATIVE, atol=0)


def test_data_set_anew_after_a_pass_reaches_the_workers(client, rows):
    _, covariates, outcomes = rows
    model = logistic(covariates, outcomes)
    in_process = SGLD(model=model, tuning=TUNING)
    on_cluster = SGLD(model=model, tuning=TUNING, client=client)
    position = np.array([0.3, -0.4, 0.2])
    on_cluster.compiled.probe.full(position)
    with model:
        pm.set_data({"X": covariates[::-1].copy(), "y": outcomes})
    expected = in_process.compiled.probe.full(position)
    found = on_cluster.compiled.probe.full(position)
    for value, reference in zip(found, expected, strict=True):
        np.testing.assert_allclose(value, reference, rtol=RELATIVE, atol=0)


@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_chains_with_a_client_give_the_draws_of_chains_without(client, rows, context):
    _, covariates, outcomes = rows
    model = logistic(covariates, outcomes)

    def draws(**options):
        step = SGHMC(model=model, tuning=TUNING, control_variate=True, **options)
        with model:
            result = pm.sample(
                draws=30,
                tune=30,
                chains=2,
                cores=2,
                mp_ctx=context,
                step=step,
                random_seed=21,
                progressbar=False,
                compute_convergence_checks=False,
            )
        return step, result.posterior["beta"].values

    _, expected = draws(control_variate_refresh=50)
    step, found = draws(control_variate_refresh=50, client=client)
    np.testing.assert_allclose(found, expected, rtol=RELATIVE, atol=0)
    assert workers_holding(client, step) == 2


def test_a_step_with_a_client_pickles_without_the_connection(client, rows):
    _, covariates, outcomes = rows
    model = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    step = SGLD(model=model, client=client)
    copy = cloudpickle.loads(cloudpickle.dumps(step))
    assert copy.compiled.cluster.address == client.scheduler.address
    np.testing.assert_array_equal(
        copy.compiled.probe.full(np.ones(3))[1], step.compiled.probe.full(np.ones(3))[1]
    )


def test_client_must_be_a_dask_client(rows):
    _, covariates, outcomes = rows
    model = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    with pytest.raises(TypeError, match=r"client must be a dask.distributed.Client"):
        SGLD(model=model, client="tcp://127.0.0.1:8786")
