"""Travel: a chain slow where it was measured takes larger steps until it reaches the mass.

At a mode far from the posterior's mass (the joint mode of a hierarchical
model written non-centred, the neck of a funnel) the gradient noise can be
thousands of times the curvature, and the bias budget then allows steps so
small that the chain would not leave the mode during tune. Such a chain runs
its tune windows at a larger bias budget (its tune draws are discarded) and
is measured again where it went. :class:`Travel` holds these rules for
:class:`~pymc_sgmcmc.tuning.chain.ChainAdapter`, which inherits them.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from pymc_sgmcmc.tuning.measure import FULL_DATA, measure_at_draws
from pymc_sgmcmc.tuning.state import ChainState

__all__ = ["Travel"]

#: PyMC's logger, which PyMC shows at INFO level while it samples.
_log = logging.getLogger("pymc")


class Travel:
    """The travel rules of a chain adapter.

    They read the adapter's ``name``, ``choices``, ``tuning``, ``probe`` and
    ``windows`` and call its ``settings``, ``minibatch_settings`` and
    ``weigh_second_order``.
    """

    def travel_if_slow(
        self, chain: ChainState, tune: bool, budget: float | None = None, moving: bool = False
    ) -> None:
        """Run the next tune window at the travel budget if the chain is slow where measured.

        At a mode far from the posterior's mass (the joint mode of a
        hierarchical model written non-centred, the neck of a funnel) the
        gradient noise can be thousands of times the curvature, and the bias
        budget then allows steps so small that the chain would not leave the
        mode during tune. Its tune draws are discarded, so the first window
        takes larger steps instead, and the chain is measured again at that
        window's draws (:meth:`finish_travel`). A chain whose posterior has
        no mode (measured at its start) travels too. ``budget`` is the bias
        budget to travel at (:meth:`travel_budget` by default). A chain
        ``moving`` (not yet arrived, see :meth:`finish_travel`) that is not
        slow, or would not relax faster at that budget, travels on at the
        bias budget with the settings chosen where it was measured.
        """
        if not (tune and self.windows and self.choices.step_size is None):
            return
        # The minibatches' noise against the curvature tells a mode far from
        # the mass, which the full data's gradient, free of noise, would hide.
        current = chain.settings
        if current.estimator == FULL_DATA:
            current = self.minibatch_settings(chain)
        slow = current.relaxation > self.tuning.slow_relaxation
        if (slow or chain.measurements.at_start) and self._travel_faster(chain, current, budget):
            return
        if moving:
            chain.travelling = True
            chain.travel_budget = self.choices.bias_budget

    def _travel_faster(self, chain: ChainState, current, budget: float | None) -> bool:
        """Travel at ``budget`` where that relaxes faster than ``current``; True if so."""
        budget = self.travel_budget() if budget is None else budget
        # The second-order control variate extrapolates the curvature at the
        # centre; a travelling chain leaves the region where that holds.
        estimators = tuple(name for name in self.choices.estimators if name != "second_order")
        # Minibatches travel: their noise keeps the large steps of the travel
        # budget from running away where the curvature grows beyond the measured.
        travel_choices = replace(
            self.choices,
            bias_budget=budget,
            estimators=estimators,
            weighs_second_order=False,
            full_data_work=np.inf,
        )
        travel = self.settings(chain.measurements, travel_choices)
        if not travel.relaxation < current.relaxation:
            return False
        chain.settings = travel
        chain.travelling = True
        chain.travel_budget = budget
        return True

    def unchecked_after_travel(self, chain: ChainState) -> list:
        """Return the messages for PyMC where tune ended before a window checked a travelled chain.

        A chain travels because the Gaussian picture at its start does not
        describe the posterior (no mode, or one far from the mass), so the
        settings chosen where it went are what its tune windows check: how
        slowly the draws decorrelate, how far the variance inflation moves a
        skewed posterior's means, the draws' covariance. A tune phase that
        ends before the first of those windows closes leaves them unchecked,
        and the means can then be off by more than the bias budget. Called
        once, when tuning stops.
        """
        # Travel windows count as closed until the chain stops travelling.
        checked = chain.windows_closed > 0 and not chain.travelling
        if chain.settings is None or chain.travel_budget == 0.0 or checked:
            return []
        window = self.tuning.windows[0]
        return [
            f"{self.name}: tuning ended before a tune window checked the settings chosen where "
            "the chain travelled to, so how far their variance inflation moves a skewed "
            "posterior's means was not measured; tune longer (a travel window and a check "
            f"window take {2 * window} tune draws; PyMC's default tune=1000 leaves room)."
        ]

    def travel_budget(self) -> float:
        """Return the bias budget a travelling window runs at (never below the user's)."""
        return max(self.tuning.travel_budget, self.choices.bias_budget)

    def finish_travel(self, chain: ChainState, draws: np.ndarray, rng, tune: bool) -> list:
        """Measure again around the travel window's draws; return the messages for PyMC."""
        chain.travelling = False
        chain.window = []
        previous = chain.measurements
        # A chain that travelled at the bias budget was travelling on, not yet arrived.
        moving_on = chain.travel_budget == self.choices.bias_budget
        if previous.at_start:
            reason = "was measured at its start"
        elif moving_on and chain.travel_budget < self.travel_budget():
            reason = "was still moving where it was measured"
        else:
            reason = "relaxed slowly where it was measured"
        if len(draws) >= self.tuning.windows[0] // 10:
            chain.measurements = measure_at_draws(
                previous, self.probe, draws, rng, self.choices.estimators, self.tuning
            )
        chain.settings = self.settings(chain.measurements)
        self.weigh_second_order(chain, rng)
        chain.centre = chain.measurements.centre
        chain.steps_since_refresh = 0
        _log.info(
            "%s: the chain %s; it travelled %d tune draws at a bias budget of %g and was "
            "measured again where it went.",
            self.name,
            reason,
            len(draws),
            chain.travel_budget,
        )
        # Still moving (the draws' mean several of their sds from where the
        # chain was last measured): travel on through the next window where
        # the chain is still slow. Where it is not, a window that ends still
        # drifting (its last draws moving by several of the sds just measured)
        # shows a chain not yet arrived, whose next tune window would count the
        # drift as the posterior's variance: it travels on at the bias budget,
        # window by window, as long as it keeps moving.
        spread = np.std(draws, axis=0)
        shift = np.abs(draws.mean(axis=0) - previous.mode)
        moved = np.max(shift / np.where(spread > 0, spread, np.inf))
        if moved > self.tuning.travel_shift:
            drifting = _drift(draws, chain.measurements.laplace_variance) > self.tuning.travel_shift
            self.travel_if_slow(chain, tune, chain.travel_budget, moving=moving_on or drifting)
        return self._travel_messages(chain)

    def _travel_messages(self, chain: ChainState) -> list:
        """Return the messages for PyMC once a travel window has closed.

        A chain that stopped travelling starts its tune windows again, to
        check the settings chosen where it arrived.
        """
        if chain.travelling:
            return []
        chain.window = []
        chain.windows_closed = 0
        chain.tune_draws = 0
        return chain.settings.warnings

    def travel_diverged(self, chain: ChainState) -> list:
        """Travel on at a quarter of the budget after a travelling step diverged.

        The travel budget allows steps near the edge of stability, and a
        curvature beyond the measured range (a funnel's neck) can push them
        over it. The chain starts again from its last draw (the step method
        does that) and travels at a quarter of the budget, or, once that is
        no larger than the bias budget, samples with the settings chosen for
        the bias budget. Returns the messages for PyMC.
        """
        budget = chain.travel_budget / 4.0
        chain.travelling = False
        chain.settings = self.settings(chain.measurements)
        _log.info(
            "%s: a travelling step diverged at a bias budget of %g; the chain went back to "
            "its last draw.",
            self.name,
            chain.travel_budget,
        )
        if budget > self.choices.bias_budget:
            self.travel_if_slow(chain, True, budget)
        return self._travel_messages(chain)


def _drift(draws: np.ndarray, variance: np.ndarray) -> float:
    """Return how far the mean of the last quarter of ``draws`` lies from the third's.

    In sds of ``variance`` (the picture measured around the draws), the
    largest over the coordinates: a chain at stationarity moves its quarters'
    means by a fraction of the posterior's sd, a chain on its way by several.
    """
    quarter = len(draws) // 4
    if quarter == 0:
        return 0.0
    last = draws[-quarter:].mean(axis=0)
    third = draws[-2 * quarter : -quarter].mean(axis=0)
    scale = np.sqrt(np.where(variance > 0, variance, np.inf))
    return float(np.max(np.abs(last - third) / scale))
