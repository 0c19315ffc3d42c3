"""Shared fixtures: the reference cache lives in a temporary directory."""

import pytest


def pytest_collection_modifyitems(items):
    """Run the tests that start JAX last.

    JAX starts threads, and a process forked after that can deadlock; the
    tests that sample with ``cores > 1`` fork PyMC's chain processes.
    """
    items.sort(key=lambda item: item.get_closest_marker("jax") is not None)


@pytest.fixture(autouse=True, scope="session")
def reference_cache(tmp_path_factory):
    """Keep cached reference posteriors out of the user's cache directory."""
    patcher = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("reference-cache")
    patcher.setenv("PYMC_SGMCMC_CACHE", str(path))
    yield path
    patcher.undo()
