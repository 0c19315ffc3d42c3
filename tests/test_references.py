"""Reference posteriors of the panel: the Laplace reference and its cache."""

import numpy as np
import pytest

from pymc_sgmcmc.panel import (
    correlated_regression,
    laplace_reference,
    normal_inverse_gamma_regression,
)


def test_laplace_reference_is_exact_on_a_gaussian_posterior(tmp_path, monkeypatch):
    monkeypatch.setenv("PYMC_SGMCMC_CACHE", str(tmp_path))
    exact = correlated_regression(n_rows=2000, correlation=0.5)
    computed = laplace_reference(correlated_regression(n_rows=2000, correlation=0.5))
    np.testing.assert_allclose(computed.means["beta"], exact.means["beta"], rtol=1e-8)
    np.testing.assert_allclose(computed.sds["beta"], exact.sds["beta"], rtol=1e-8)
    assert len(list(tmp_path.glob("laplace-*.json"))) == 1
    cached = laplace_reference(correlated_regression(n_rows=2000, correlation=0.5))
    np.testing.assert_array_equal(cached.sds["beta"], computed.sds["beta"])


def test_laplace_reference_refuses_constrained_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("PYMC_SGMCMC_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="unconstrained"):
        laplace_reference(normal_inverse_gamma_regression(n_rows=200))


def test_a_panel_without_a_key_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PYMC_SGMCMC_CACHE", str(tmp_path))
    panel = correlated_regression(n_rows=200)
    panel.key = {}
    with pytest.raises(ValueError, match="key"):
        laplace_reference(panel)
