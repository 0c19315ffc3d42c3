"""The declared update rules applied with numpy, as references for the fused kernels."""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.metric import IdentityMetric


def position_terms(dynamics, density, state, inputs, metric=None):
    """Return the dynamics' position terms at ``state``, compiled from the same declaration.

    The gradient enters as a free vector, so this reproduces terms built from
    the log prior (SGRLD's metric and its correction) and terms that do not
    differentiate the gradient.
    """
    if not dynamics.position_inputs:
        return {}
    metric = metric or IdentityMetric()
    metric_inputs = metric.inputs()
    symbols = {
        name: pt.as_tensor(np.asarray(value, dtype="float64")).type(name)
        for name, value in {**state, **inputs, **metric_inputs}.items()
    }
    metric_symbols = {name: symbols[name] for name in metric_inputs}

    def log_prior(value):
        return graph_replace(
            density.log_prior,
            {density.position: type(metric).to_position(value, metric_symbols)},
            strict=False,
        )

    gradient = pt.vector("gradient", dtype="float64")
    state_symbols = {name: symbols[name] for name in state}
    input_symbols = {name: symbols[name] for name in inputs}
    terms = dynamics.position_terms(state_symbols, gradient, log_prior, input_symbols)
    names = list(terms)
    function = pytensor.function(
        [*symbols.values(), gradient], [terms[name] for name in names], on_unused_input="ignore"
    )
    values = function(
        *(np.asarray(v, dtype="float64") for v in {**state, **inputs, **metric_inputs}.values()),
        np.zeros(np.size(state["position"])),
    )
    return dict(zip(names, values, strict=True))
