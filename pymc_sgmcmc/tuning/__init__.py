"""Adaptation: what a chain measures, the tuner that turns it into settings, and its constants."""

from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.measure import Measurements, measure
from pymc_sgmcmc.tuning.mode import find_mode
from pymc_sgmcmc.tuning.tuner import ChainSettings, UserChoices, choose_settings, fixed_settings

__all__ = [
    "ChainSettings",
    "Measurements",
    "TuningConfig",
    "UserChoices",
    "choose_settings",
    "find_mode",
    "fixed_settings",
    "measure",
]
