"""What one chain carries from draw to draw."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pymc_sgmcmc.batches import AllRows, IndexStream
from pymc_sgmcmc.estimators import Centre
from pymc_sgmcmc.tuning.measure import Measurements
from pymc_sgmcmc.tuning.tuner import ChainSettings

__all__ = ["ChainState"]


@dataclass
class ChainState:
    """Everything one chain carries from draw to draw.

    Attributes
    ----------
    batches : IndexStream
        The chain's stream of minibatch rows (with its current epoch).
    row_generator : numpy.random.Generator or None
        The generator of the chain's minibatch rows, apart from that of its
        noise, so that the rows of several draws are drawn in one call and
        their noise in another, the same numbers as a call per draw.
    settings : ChainSettings or None
        What the chain samples with; ``None`` until it has adapted.
    state : dict of str to ndarray or None
        The sampler's state besides what PyMC holds (e.g. the momentum).
    centre : Centre or None
        The control-variate centre.
    interpreted : bool
        Whether the chain's draws run in the interpreted loop, not yet in the
        fused kernel.
    kernel_inputs : list or dict of ndarray, or None
        The kernel's chain inputs, checked once.
    steps_taken, steps_since_refresh : int
        Inner steps so far, and since the control variate was last re-centred.
    diverged : bool
        Whether the state or its gradient became non-finite.
    readapt : bool
        Whether the chain measures again before its next draw.
    warnings : list of SamplerWarning
        Warnings not yet handed to PyMC (one per draw).
    measurements : Measurements or None
        What the chain measured, refined by its tune windows.
    window : list of ndarray
        The tune draws of the current window.
    windows_closed : int
        Tune windows closed so far (counted again after travelling).
    tune_draws : int
        Tune draws since the chain first adapted, or since it last travelled.
    travelling : bool
        Whether the chain runs its current tune window at the travel budget
        (it relaxed too slowly where it was measured) and is to be measured
        again at that window's draws.
    travel_budget : float
        The bias budget the chain travels at: the adapter's, lowered each
        time a travelling step diverged.
    clips_tune_steps : bool
        Whether the chain's steps clip the gradient estimate at its settings'
        ``tune_clip``: from its first diverging tune step to the end of tune.
    last_draw : tuple or None
        The metric, the position (model coordinates) and the coordinates of
        the draw the chain last returned, so that a draw that starts where
        the last one ended skips the map into the metric's coordinates.
    last_point : tuple or None
        The point the chain's last draw handed PyMC (a dict of arrays) and
        its raveled position, so that a draw from that point skips PyMC's
        map of it into one array.
    ahead : list of tuple
        Draws the kernel has run before PyMC asked for them, the next one
        last, each with its inner steps and last step size
        (:mod:`pymc_sgmcmc.ahead`).
    periodic : tuple or None
        The settings and, for a periodic schedule (a constant step size, a
        cycle), the per-step inputs and draws' lengths built for them, by their
        place in the period (:meth:`~pymc_sgmcmc.runner.KernelRunner.step_values`).
    all_rows : AllRows or None
        Batches of all N rows, for settings whose estimator is the full
        data's gradient; ``None`` where it is not weighed.
    full_data_checked : bool
        Whether a tune window has closed on draws taken with the full data's
        gradient, checking its settings where the chain went.
    slowness_rechecked : bool
        Whether the last tune window has run once more to measure how fast
        the chain decorrelates in a metric measured again
        (:meth:`~pymc_sgmcmc.tuning.chain.ChainAdapter.forget_slowness`).
    slowness_cap : float
        The smallest slowness a window that measured the metric again
        dropped: the most a later window's measurement keeps (``inf`` where
        none was dropped).
    last_log_density : float
        The log density at the chain's last draw where its steps read all N
        rows (so that it is exact), NaN otherwise: a draw whose exact log
        density falls far below it blew up without overflowing.
    """

    batches: IndexStream
    row_generator: np.random.Generator | None = None
    settings: ChainSettings | None = None
    state: dict | None = None
    centre: Centre | None = None
    interpreted: bool = False
    kernel_inputs: list | dict | None = None
    steps_taken: int = 0
    steps_since_refresh: int = 0
    diverged: bool = False
    readapt: bool = False
    warnings: list = field(default_factory=list)
    measurements: Measurements | None = None
    window: list = field(default_factory=list)
    windows_closed: int = 0
    tune_draws: int = 0
    travelling: bool = False
    travel_budget: float = 0.0
    clips_tune_steps: bool = False
    last_draw: tuple | None = None
    last_point: tuple | None = None
    ahead: list = field(default_factory=list)
    periodic: tuple | None = None
    all_rows: AllRows | None = None
    full_data_checked: bool = False
    slowness_rechecked: bool = False
    slowness_cap: float = np.inf
    last_log_density: float = np.nan
