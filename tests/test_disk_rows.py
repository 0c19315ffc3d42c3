"""Data given to the step method in place of the model's: in memory or memory-mapped files."""

import gc
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pymc as pm
import pytest
import zarr

from pymc_sgmcmc import SGHMC, SGLD, disk_rows
from pymc_sgmcmc.disk_rows import (
    PAGE_BYTES,
    PIECE_ROWS,
    RELEASE_PAGES,
    SCATTERED_ROW_BYTES,
    DiskRows,
    PageRelease,
)
from pymc_sgmcmc.postprocess import zero_variance_mean
from pymc_sgmcmc.rows import MinibatchError
from pymc_sgmcmc.tuning.config import TuningConfig

N_ROWS = 3000
SUBSET = 200


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A logistic regression's covariates and outcomes saved as ``.npy`` files."""
    rng = np.random.default_rng(5)
    covariates = rng.normal(size=(N_ROWS, 3))
    chance = 1.0 / (1.0 + np.exp(-covariates @ np.array([1.0, -0.5, 0.2])))
    outcomes = (rng.random(N_ROWS) < chance).astype("int32")
    where = tmp_path_factory.mktemp("rows")
    np.save(where / "X.npy", covariates)
    np.save(where / "y.npy", outcomes)
    return where, covariates, outcomes


def logistic(covariates, outcomes):
    with pm.Model() as model:
        rows = pm.Data("X", covariates)
        observed = pm.Data("y", outcomes)
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("obs", logit_p=rows @ beta, observed=observed)
    return model


def on_disk(where):
    return {name: np.load(where / f"{name}.npy", mmap_mode="r") for name in ("X", "y")}


def sample(model, step, seed=4):
    with model:
        result = pm.sample(
            draws=20,
            tune=20,
            chains=1,
            cores=1,
            step=step,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    return result.posterior["beta"].values


@pytest.mark.parametrize("interpreted_steps", [30_000, 0], ids=["interpreted", "fused"])
@pytest.mark.parametrize("sampler", [SGLD, SGHMC], ids=["SGLD", "SGHMC"])
def test_rows_on_disk_give_the_draws_of_the_same_rows_in_memory(files, sampler, interpreted_steps):
    where, covariates, outcomes = files
    tuning = TuningConfig(interpreted_steps=interpreted_steps)
    whole = logistic(covariates, outcomes)
    expected = sample(whole, sampler(tuning=tuning, model=whole))

    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    step = sampler(tuning=tuning, model=subset, data=on_disk(where))
    assert step.density.n_rows == N_ROWS
    np.testing.assert_array_equal(sample(subset, step), expected)
    # The model keeps its subset, so NUTS and PyMC's checks still run on it.
    assert subset["X"].get_value().shape == (SUBSET, 3)
    assert subset["y"].get_value().shape == (SUBSET,)


def test_rows_on_disk_that_differ_give_other_draws(files):
    """Negative control: the draws read the file, not the model's subset."""
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    flipped = outcomes.copy()
    flipped[SUBSET:] = 1 - flipped[SUBSET:]
    changed = {"X": covariates, "y": flipped}
    draws = sample(subset, SGLD(model=subset, data=changed))
    assert not np.array_equal(draws, sample(subset, SGLD(model=subset, data=on_disk(where))))


def test_a_step_reading_files_pickles_their_names_not_their_rows(files):
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    step = SGLD(model=subset, data=on_disk(where))
    pickled = pickle.dumps(step.compiled.density.data)
    assert len(pickled) < covariates.nbytes / 10
    unpickled = pickle.loads(pickled)
    assert sorted(data.name for data in unpickled) == ["X", "y"]
    for data in unpickled:
        value = data.get_value(borrow=True)
        assert isinstance(value, DiskRows)
        np.testing.assert_array_equal(value, np.load(where / f"{data.name}.npy"))


def _resident_file_pages() -> int:
    """Bytes of mapped files resident in this process (Linux)."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"RssFile:\s+(\d+) kB", status).group(1)) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_released_pages_leave_the_process(tmp_path):
    rows = np.arange(4_000_000, dtype=np.float64).reshape(-1, 4)  # 128 MB
    np.save(tmp_path / "rows.npy", rows)
    (mapped,) = on_disk_arrays([tmp_path / "rows.npy"])
    release = PageRelease([mapped])
    assert release.active
    before = _resident_file_pages()
    assert mapped[:, 0].sum() == rows[:, 0].sum()  # reads every page
    assert _resident_file_pages() - before > rows.nbytes / 2
    release.read(np.arange(1000))  # a run of rows spans a few pages: nothing is due
    assert _resident_file_pages() - before > rows.nbytes / 2
    scattered = RELEASE_PAGES * PAGE_BYTES // SCATTERED_ROW_BYTES
    release.read(np.arange(scattered) * 7)
    assert _resident_file_pages() - before < rows.nbytes / 20


def test_rows_read_in_a_run_count_the_pages_they_span(tmp_path):
    np.save(tmp_path / "rows.npy", np.zeros((1000, 4)))
    (mapped,) = on_disk_arrays([tmp_path / "rows.npy"])
    release = PageRelease([mapped])
    release.read(np.arange(500))
    assert release._pages == pytest.approx(500 * mapped.strides[0] / PAGE_BYTES + 1)
    release.read(np.array([3, 1]))
    assert release._pages == pytest.approx(
        500 * mapped.strides[0] / PAGE_BYTES + 1 + 2 * SCATTERED_ROW_BYTES / PAGE_BYTES
    )


def test_many_scattered_rows_are_read_in_pieces_with_the_same_terms(files):
    where, covariates, outcomes = files
    whole = logistic(covariates, outcomes)
    in_memory = SGLD(model=whole).compiled.probe
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    on_file = SGLD(model=subset, data=on_disk(where)).compiled.probe
    indices = np.random.default_rng(0).choice(N_ROWS, 3 * PIECE_ROWS + 7, replace=False)
    position = np.array([0.3, -0.2, 0.1])
    releases = on_file.pages.releases
    for expected, given in zip(
        in_memory.terms(position, indices), on_file.terms(position, indices), strict=True
    ):
        np.testing.assert_allclose(given, expected, rtol=1e-12)
    # Four pieces, each read after the pages of the one before were released.
    assert on_file.pages.releases - releases == 4


def in_zarr(where, covariates, outcomes, chunk_rows=700):
    """Return the data as Zarr arrays whose chunks do not divide the rows."""
    arrays = {}
    for name, values in (("X", covariates), ("y", outcomes)):
        stored = zarr.create_array(
            store=str(where / f"{name}.zarr"),
            shape=values.shape,
            chunks=(chunk_rows, *values.shape[1:]),
            dtype=values.dtype,
            overwrite=True,
        )
        stored[:] = values
        arrays[name] = zarr.open_array(str(where / f"{name}.zarr"), mode="r")
    return arrays


def test_a_zarr_array_gives_the_draws_of_the_same_rows_in_memory(files, tmp_path):
    _, covariates, outcomes = files
    whole = logistic(covariates, outcomes)
    expected = sample(whole, SGHMC(model=whole))
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    step = SGHMC(model=subset, data=in_zarr(tmp_path, covariates, outcomes))
    assert step.density.n_rows == N_ROWS
    np.testing.assert_array_equal(sample(subset, step), expected)


def test_a_zarr_array_is_copied_in_slabs_of_whole_chunks_once_and_removed_with_it(
    files, tmp_path, monkeypatch
):
    _, covariates, outcomes = files
    arrays = in_zarr(tmp_path, covariates, outcomes)
    read = []
    original = type(arrays["X"]).__getitem__

    def counted(self, selection):
        read.append(selection)
        return original(self, selection)

    monkeypatch.setattr(type(arrays["X"]), "__getitem__", counted)
    # Slabs of two 700-row chunks of X (3 float64 columns: 16,800 bytes).
    monkeypatch.setattr(disk_rows, "STAGE_BYTES", 2 * 700 * 24 + 100)
    copy = disk_rows.prepare_rows("X", arrays["X"], covariates[:SUBSET])
    assert [(s.start, s.stop) for s in read] == [(0, 1400), (1400, 2800), (2800, 4200)]
    assert isinstance(copy, DiskRows)
    np.testing.assert_array_equal(copy, covariates)
    assert disk_rows.prepare_rows("X", arrays["X"], covariates[:SUBSET]) is copy
    assert len(read) == 3
    path = Path(copy.filename)
    assert path.exists()
    del arrays, copy
    gc.collect()
    assert not path.exists()


def test_a_zarr_array_grown_after_its_copy_is_copied_again(files, tmp_path):
    _, covariates, outcomes = files
    in_zarr(tmp_path, covariates[:1000], outcomes[:1000])
    stored = zarr.open_array(str(tmp_path / "X.zarr"), mode="a")
    first = disk_rows.prepare_rows("X", stored, covariates[:SUBSET])
    stored.resize((N_ROWS, 3))
    stored[1000:] = covariates[1000:]
    second = disk_rows.prepare_rows("X", stored, covariates[:SUBSET])
    assert len(first) == 1000
    np.testing.assert_array_equal(second, covariates)


def test_a_forked_process_that_drops_the_zarr_array_leaves_its_copy(files, tmp_path):
    _, covariates, outcomes = files
    arrays = in_zarr(tmp_path, covariates, outcomes)
    path = Path(disk_rows.prepare_rows("X", arrays["X"], covariates[:SUBSET]).filename)
    child = os.fork()
    if child == 0:
        arrays.clear()
        gc.collect()
        os._exit(0)
    os.waitpid(child, 0)
    assert path.exists()
    arrays.clear()
    gc.collect()
    assert not path.exists()


def test_a_zarr_array_of_another_shape_or_of_values_the_container_cannot_hold_is_refused(
    files, tmp_path
):
    _, covariates, outcomes = files
    arrays = in_zarr(tmp_path, covariates[:, :2], outcomes + 0.5)
    with pytest.raises(ValueError, match=r"has shape \(3000, 2\) .* not in shape"):
        disk_rows.prepare_rows("X", arrays["X"], covariates[:SUBSET])
    with pytest.raises(ValueError, match=r"store the array as int32"):
        disk_rows.prepare_rows("y", arrays["y"], outcomes[:SUBSET])


def test_the_kernels_and_the_tuning_functions_count_pages_together(files):
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    compiled = SGLD(model=subset, data=on_disk(where)).compiled
    assert compiled.probe.pages is compiled.pages
    assert compiled.pages.active


def on_disk_arrays(paths):
    from pymc_sgmcmc.disk_rows import prepare_rows

    return [prepare_rows("rows", np.load(path, mmap_mode="r"), np.zeros((1, 4))) for path in paths]


def test_arrays_in_memory_read_nothing_from_disk():
    assert not PageRelease([np.zeros((10, 2))]).active


def test_integers_of_another_width_in_memory_are_converted(files):
    _, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    step = SGLD(model=subset, data={"X": covariates, "y": outcomes.astype("int64")})
    values = {data.name: data.get_value(borrow=True) for data in step.density.data}
    assert values["y"].dtype == np.int32


def _errors(where, covariates, outcomes, tmp_path):
    wide = tmp_path / "y64.npy"
    np.save(wide, outcomes.astype("int64"))
    fortran = tmp_path / "X_fortran.npy"
    np.save(fortran, np.asfortranarray(covariates))
    disk = on_disk(where)
    return {
        "missing": ({"X": disk["X"]}, MinibatchError, "give every array"),
        "unknown": ({**disk, "Z": disk["X"]}, MinibatchError, "'Z'"),
        "dtype of a file": (
            {**disk, "y": np.load(wide, mmap_mode="r")},
            ValueError,
            "store the array as int32",
        ),
        "shape": ({**disk, "X": covariates[:, :2]}, ValueError, "not in shape"),
        "order": ({**disk, "X": np.load(fortran, mmap_mode="r")}, ValueError, "C order"),
        "lengths": ({**disk, "X": covariates[:100]}, MinibatchError, "same number of rows"),
        "slice of a file": ({**disk, "X": disk["X"][10:]}, ValueError, "view of a memory-mapped"),
        "not an array": ({**disk, "X": covariates.tolist()}, TypeError, "NumPy array"),
        "not a dict": ([disk["X"]], TypeError, "data must be a dict"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "unknown",
        "dtype of a file",
        "shape",
        "order",
        "lengths",
        "slice of a file",
        "not an array",
        "not a dict",
    ],
)
def test_data_that_cannot_stand_for_the_models_is_refused(files, tmp_path, case):
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    data, error, message = _errors(where, covariates, outcomes, tmp_path)[case]
    with pytest.raises(error, match=re.escape(message)):
        SGLD(model=subset, data=data)


def test_observed_values_outside_pm_data_are_named(files):
    where, covariates, outcomes = files
    with pm.Model() as model:
        rows = pm.Data("X", covariates[:SUBSET])
        beta = pm.Normal("beta", 0, 1, shape=3)
        pm.Bernoulli("obs", logit_p=rows @ beta, observed=outcomes[:SUBSET])
    message = "reads 'obs' by row from an array given directly"
    with pytest.raises(MinibatchError, match=re.escape(message)):
        SGLD(model=model, data=on_disk(where))


def test_zero_variance_means_take_the_score_over_the_given_rows(files):
    where, covariates, outcomes = files
    whole = logistic(covariates, outcomes)
    with whole:
        trace = pm.sample(
            draws=30,
            tune=20,
            chains=1,
            step=SGLD(),
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    expected = zero_variance_mean(trace, whole)["beta"].values
    given = zero_variance_mean(trace, subset, data=on_disk(where))["beta"].values
    np.testing.assert_allclose(given, expected, rtol=1e-9)
    # Negative control: the subset's score moves the estimates.
    alone = zero_variance_mean(trace, subset)["beta"].values
    assert np.max(np.abs(alone - expected)) > 100 * np.max(np.abs(given - expected))


def test_a_full_pass_counts_the_pages_its_chunks_span(files):
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    probe = SGLD(model=subset, data=on_disk(where)).compiled.probe
    probe.full_likelihood(np.zeros(3))
    row_bytes = covariates.strides[0] + outcomes.strides[0]
    # About 21 pages (counted as scattered rows: three million).
    assert probe.pages._pages <= 2 * (N_ROWS * row_bytes / PAGE_BYTES + 2 * 2)


def test_files_are_refused_by_the_jax_backend(files, tmp_path):
    where, covariates, outcomes = files
    subset = logistic(covariates[:SUBSET], outcomes[:SUBSET])
    for data in (on_disk(where), in_zarr(tmp_path, covariates, outcomes)):
        with pytest.raises(ValueError, match="sample data on disk with the default backend"):
            SGLD(model=subset, data=data, compile_kwargs={"mode": "JAX"})


def test_a_step_given_data_refuses_to_share_the_model_with_other_steps(files):
    """Another step method would sample its variables from the model's subset."""
    where, covariates, outcomes = files
    with pm.Model() as model:
        rows = pm.Data("X", covariates[:SUBSET])
        observed = pm.Data("y", outcomes[:SUBSET])
        beta = pm.Normal("beta", 0, 1, shape=3)
        shift = pm.Normal("shift", 0, 1)
        pm.Bernoulli("obs", logit_p=rows @ beta + shift, observed=observed)
    with pytest.raises(MinibatchError, match="sample every free variable"):
        SGLD(vars=[beta], model=model, data=on_disk(where))
    SGLD(vars=[beta, shift], model=model, data=on_disk(where))
