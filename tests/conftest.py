"""Shared fixtures: the reference cache lives in a temporary directory."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def reference_cache(tmp_path_factory):
    """Keep cached reference posteriors out of the user's cache directory."""
    patcher = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("reference-cache")
    patcher.setenv("PYMC_SGMCMC_CACHE", str(path))
    yield path
    patcher.undo()
