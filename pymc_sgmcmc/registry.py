"""Every sampler of the package, in one place.

The validation panel, the benchmark, the figures and the tests read this
registry; a new sampler is its own module under :mod:`pymc_sgmcmc.samplers`
plus one entry here.
"""

from __future__ import annotations

from pymc_sgmcmc.samplers import cyclical, psgld, sghmc, sgld, sgnht, sgrld
from pymc_sgmcmc.step_method import StochasticGradientStep

__all__ = ["SAMPLERS"]

#: Public step methods by name, in the order tables and figures list them.
SAMPLERS: dict[str, type[StochasticGradientStep]] = {
    sampler.__name__: sampler
    for sampler in (
        sgld.SGLD,
        sghmc.SGHMC,
        psgld.PSGLD,
        sgnht.SGNHT,
        sgrld.SGRLD,
        cyclical.CyclicalSGLD,
    )
}
