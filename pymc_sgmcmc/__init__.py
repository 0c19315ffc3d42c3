"""Stochastic-gradient MCMC step methods for PyMC."""

from pymc_sgmcmc.minibatch import MinibatchError, build_minibatch_log_density
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.schedules import ConstantStepSize, PolynomialDecay
from pymc_sgmcmc.step_method import StochasticGradientStep
from pymc_sgmcmc.tuning import TuningConfig

# Every registered sampler is a public name of the package.
globals().update(SAMPLERS)

__all__ = [
    *SAMPLERS,
    "ConstantStepSize",
    "MinibatchError",
    "PolynomialDecay",
    "StochasticGradientStep",
    "TuningConfig",
    "build_minibatch_log_density",
]

__version__ = "0.1.0"
