"""Stochastic-gradient MCMC step methods for PyMC."""

from pymc_sgmcmc.minibatch import MinibatchError, build_minibatch_log_density
from pymc_sgmcmc.postprocess import step_size_weighted_mean, zero_variance_mean
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.samplers.cyclical import sampling_draws
from pymc_sgmcmc.schedules import ConstantStepSize, CyclicalStepSize, PolynomialDecay
from pymc_sgmcmc.stein import kernel_stein_discrepancy
from pymc_sgmcmc.step_method import StochasticGradientStep
from pymc_sgmcmc.tuning import TuningConfig

# Every registered sampler is a public name of the package.
globals().update(SAMPLERS)

__all__ = [
    *SAMPLERS,
    "ConstantStepSize",
    "CyclicalStepSize",
    "MinibatchError",
    "PolynomialDecay",
    "StochasticGradientStep",
    "TuningConfig",
    "build_minibatch_log_density",
    "kernel_stein_discrepancy",
    "sampling_draws",
    "step_size_weighted_mean",
    "zero_variance_mean",
]

__version__ = "0.1.0"
