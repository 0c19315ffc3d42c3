"""A model's compiled probe and initial point, for the tests of the adaptation."""

from pymc.blocking import DictToArrayBijection

from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import build_minibatch_log_density


def probe_and_start(model):
    """The model's compiled probe and its initial point as one vector."""
    density = build_minibatch_log_density(model, model.value_vars)
    point = {v.name: model.initial_point()[v.name] for v in model.value_vars}
    return Probe(density), DictToArrayBijection.map(point).data
