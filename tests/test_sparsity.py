"""Hessians of sparse structure: coordinates that never meet are differenced together."""

import numpy as np
import pytest
from probes import assert_same_search, count_gradient_calls, counted_search, probe_and_start

import pymc_sgmcmc.tuning.mode as mode_module
import pymc_sgmcmc.tuning.sparsity as sparsity
from pymc_sgmcmc.panel import logistic_regression
from pymc_sgmcmc.real_posteriors import radon_like
from pymc_sgmcmc.tuning import TuningConfig
from pymc_sgmcmc.tuning.mode import checked_hessian, hessian_sds
from pymc_sgmcmc.tuning.sparsity import (
    HessianPattern,
    PatternMismatch,
    hessian_pattern,
    hessians,
)


@pytest.fixture(scope="module")
def hierarchical():
    """The non-centred radon-like model (20 groups), a point off its initial one, and steps."""
    probe, start = probe_and_start(radon_like(n_rows=400, n_groups=20, centred=False).model)
    point = start + np.random.default_rng(1).normal(scale=0.3, size=start.size)
    rows = np.arange(probe.n_rows)
    plain, _ = probe.hessians(point, rows, np.full(point.size, 1e-4))
    return probe, point, rows, 1e-3 * hessian_sds(plain), plain


def test_a_hierarchical_hessian_takes_a_difference_per_shared_parameter_and_one_for_the_groups(
    hierarchical, monkeypatch
):
    """mu, tau, beta and sigma meet every group's z; the z's meet only them and themselves."""
    probe, point, rows, steps, plain = hierarchical
    pattern = hessian_pattern(plain)
    assert pattern is not None
    assert len(pattern.dense) == 4
    assert len(pattern.groups) == 1 and len(pattern.groups[0]) == point.size - 4
    calls = count_gradient_calls(probe, monkeypatch)
    hessian, prior = hessians(probe, point, rows, steps, pattern)
    # Two calls per difference, two per check direction.
    assert calls[0] == 2 * (pattern.differences + sparsity.CHECK_DIRECTIONS) == 14
    monkeypatch.undo()
    # The shared parameters' rows of the z's columns come from symmetry, not from the z's
    # own differences: the two agree to the differences' error (steps of 1e-3 sd).
    expected, expected_prior = probe.hessians(point, rows, steps)
    assert np.abs(hessian - expected).max() < 1e-7 * np.abs(expected).max()
    assert np.abs(prior - expected_prior).max() < 1e-7 * np.abs(expected_prior).max()


def test_a_pattern_that_misses_a_pair_is_caught_and_the_hessian_differenced_coordinatewise(
    hierarchical, monkeypatch
):
    """A pattern read where a pair's entry happened to be zero (tau and the z's at z = 0)
    groups tau with the z's; the check along random directions sees the products disagree,
    and the mode's Hessian is differenced coordinate by coordinate. Without the check it is
    wrong."""
    probe, point, rows, steps, plain = hierarchical
    right = hessian_pattern(plain)
    tau = right.dense[1]
    dense = np.delete(right.dense, 1)
    rows_of = list(right.rows)
    rows_of[tau] = np.array([tau])
    wrong = HessianPattern(dense, (np.append(right.groups[0], tau),), tuple(rows_of))
    with pytest.raises(PatternMismatch):
        hessians(probe, point, rows, steps, wrong)
    config = TuningConfig()
    scale = hessian_sds(plain)
    expected, _ = checked_hessian(probe, point, np.random.default_rng(0), config, scale=scale)
    found, _ = checked_hessian(
        probe, point, np.random.default_rng(0), config, scale=scale, pattern=wrong
    )
    assert np.array_equal(found, expected)
    monkeypatch.setattr(sparsity, "_agrees", lambda *arguments: True)
    unchecked, _ = hessians(probe, point, rows, steps, wrong)
    assert np.abs(unchecked - expected).max() > 0.1 * np.abs(expected[:, tau]).max()


def test_a_dense_hessian_has_no_pattern():
    """Every coefficient of a regression meets every other: no difference can be saved."""
    probe, start = probe_and_start(logistic_regression(n_rows=200).model)
    plain, _ = probe.hessians(start, np.arange(probe.n_rows), np.full(start.size, 1e-4))
    assert hessian_pattern(plain) is None


def test_the_mode_search_differences_never_meeting_coordinates_together(monkeypatch):
    """Where D differences on all rows exceed ``hessian_full_work``, the search reads the
    pattern off its first Hessian and uses it for every later one: the same mode and Hessian
    as differencing coordinate by coordinate, in fewer calls. Below it nothing changes."""
    probe, start = probe_and_start(radon_like(n_rows=400, n_groups=20, centred=False).model)
    costly = TuningConfig(hessian_full_work=1000)
    results = {}
    for name, config, patterned in [
        ("costly", costly, True),
        ("plain", costly, False),
        ("cheap", TuningConfig(), True),
    ]:
        if not patterned:
            monkeypatch.setattr(mode_module, "hessian_pattern", lambda hessian: None)
        results[name] = counted_search(probe, start, config, monkeypatch)
    assert_same_search(results["costly"], results["plain"])
    calls, plain_calls = results["costly"][3], results["plain"][3]
    # Each Hessian after the first takes 14 calls (5 differences, 2 checks) instead of 2 D = 48.
    assert plain_calls - calls >= 2 * start.size - 14
    cheap_mode, cheap_hessian, _, cheap_calls = results["cheap"]
    plain_mode, plain_hessian = results["plain"][:2]
    assert cheap_calls == plain_calls
    assert np.array_equal(cheap_hessian, plain_hessian) and np.array_equal(cheap_mode, plain_mode)
