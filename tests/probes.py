"""A model's compiled probe and initial point, for the tests of the adaptation."""

import numpy as np
from pymc.blocking import DictToArrayBijection

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density
from pymc_sgmcmc.tuning.mode import find_mode, hessian_sds


def probe_and_start(model):
    """The model's compiled probe and its initial point as one vector."""
    density = build_minibatch_log_density(model, model.value_vars)
    point = {v.name: model.initial_point()[v.name] for v in model.value_vars}
    return Probe(density), DictToArrayBijection.map(point).data


def count_gradient_calls(probe, monkeypatch) -> list:
    """Count ``probe``'s gradient calls, its own Hessians' included, in the returned list."""
    calls = [0]
    terms = probe.terms

    def counted(position, indices):
        calls[0] += 1
        return terms(position, indices)

    monkeypatch.setattr(probe, "terms", counted)
    return calls


def counted_search(probe, start, config, monkeypatch):
    """Search for the mode from ``start`` (seed 3) and undo ``monkeypatch``'s changes.

    Returns the mode, the Hessian there, the search's distance from a
    stationary point and the gradient calls it took.
    """
    calls = count_gradient_calls(probe, monkeypatch)
    found = find_mode(probe, start, 100, np.random.default_rng(3), config)
    monkeypatch.undo()
    return found[0], found[3], found[4], calls[0]


def assert_same_search(found, plain):
    """Assert that two :func:`counted_search` results reach the same mode and Hessian.

    Both end within 0.01 sd of a stationary point, their modes within 1e-3
    of the smallest sd apart and their Hessians within 1e-4 of the largest
    entry.
    """
    mode, hessian, distance, _ = found
    plain_mode, plain_hessian, plain_distance, _ = plain
    sds = hessian_sds(plain_hessian)
    assert distance < 1e-2 and plain_distance < 1e-2
    assert np.abs(mode - plain_mode).max() < 1e-3 * sds.min()
    assert np.abs(hessian - plain_hessian).max() < 1e-4 * np.abs(plain_hessian).max()
