"""PyMC step methods."""

from pymc_sgmcmc.step_methods.base import StochasticGradientStep
from pymc_sgmcmc.step_methods.sghmc import SGHMC
from pymc_sgmcmc.step_methods.sgld import SGLD

__all__ = ["SGHMC", "SGLD", "StochasticGradientStep"]
