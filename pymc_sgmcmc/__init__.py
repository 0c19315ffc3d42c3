"""Stochastic-gradient MCMC step methods for PyMC."""

from pymc_sgmcmc.minibatch import MinibatchError, build_minibatch_log_density
from pymc_sgmcmc.schedules import ConstantStepSize, PolynomialDecay
from pymc_sgmcmc.step_methods import SGHMC, SGLD

__all__ = [
    "SGHMC",
    "SGLD",
    "ConstantStepSize",
    "MinibatchError",
    "PolynomialDecay",
    "build_minibatch_log_density",
]

__version__ = "0.1.0"
