"""How one chain adapts while it tunes: measure at its start, check tune windows, travel.

A chain measures the posterior before its first draw (:func:`measure`), from
its own jittered start, and the tuner turns the measurements into settings.
During ``tune`` its draws fill windows that are checked against the picture
the settings rest on (:mod:`pymc_sgmcmc.tuning.windows`). A chain whose
settings relax slowly where it was measured first travels: it runs a window
at a larger bias budget and is measured again where it went
(:mod:`pymc_sgmcmc.tuning.travel`).

:class:`ChainAdapter` holds this logic for one step method; the step method
keeps the sampler state and the kernel. Where the adapter changes a chain's
settings it returns the messages to hand to PyMC, and the step method starts
the sampler state again from the chain's position.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace

import numpy as np

from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.curvature import CURVATURE_MARGIN, largest_curvature, tightest_draws
from pymc_sgmcmc.tuning.measure import (
    FULL_DATA,
    Measurements,
    measure,
    with_second_order,
)
from pymc_sgmcmc.tuning.state import ChainState
from pymc_sgmcmc.tuning.tempering import (
    EnergyWindow,
    log_density_at_draws,
    tempering_moves,
)
from pymc_sgmcmc.tuning.travel import Travel
from pymc_sgmcmc.tuning.tuner import (
    ChainSettings,
    UserChoices,
    choose_settings,
    fixed_settings,
    gradient_work,
    mean_share,
    metric_factor,
)
from pymc_sgmcmc.tuning.windows import (
    check_coordinates,
    check_window,
    decorrelated_draws,
    independent_draws,
    refine,
    slowness,
)

__all__ = ["ChainAdapter", "ChainState"]

#: PyMC's logger, which PyMC shows at INFO level while it samples.
_log = logging.getLogger("pymc")


class ChainAdapter(Travel):
    """The adaptation of a step method's chains.

    The travel rules come from :class:`~pymc_sgmcmc.tuning.travel.Travel`.

    Parameters
    ----------
    name : str
        The step method's name, used in messages.
    dynamics : Dynamics
        The sampler's dynamics, whose tuning rule the tuner applies.
    probe : Probe
        The compiled gradients the measurements use.
    choices : UserChoices
        What the user fixed.
    tuning : TuningConfig
        The adaptation's constants.
    batch_size : int
        Rows per minibatch.
    full_batches : bool
        Whether every minibatch holds all N rows (a batch size of N without
        replacement): the gradient estimates are then exact.
    measures : bool
        Whether chains measure the posterior (otherwise every setting was given).
    other_blocks : bool
        Whether other step methods move the model's other variables (a compound step).
    epochs : float, default inf
        Inner steps per epoch of the minibatches, where their noise sums to
        zero over an epoch (see :func:`~pymc_sgmcmc.tuning.tuner.choose_settings`).
    """

    def __init__(
        self,
        name: str,
        dynamics: Dynamics,
        probe: Probe,
        choices: UserChoices,
        tuning: TuningConfig,
        batch_size: int,
        full_batches: bool,
        measures: bool,
        other_blocks: bool,
        epochs: float = np.inf,
    ):
        self.name = name
        self.dynamics = dynamics
        self.probe = probe
        self.choices = choices
        self.tuning = tuning
        self.batch_size = batch_size
        self.full_batches = full_batches
        self.measures = measures
        self.other_blocks = other_blocks
        self.epochs = epochs
        # Tune draws refine the settings only where the tuner chose the metric;
        # not in a compound step (the other blocks move under this one), nor at
        # temperature 0 (optimisation), whose draws have no spread.
        self.windows = (
            measures
            and choices.preconditioner is None
            and dynamics.accepts_metric()
            and not other_blocks
            and choices.temperature > 0
        )

    def settings(self, measurements, choices: UserChoices | None = None) -> ChainSettings:
        """Return the tuner's settings for ``measurements`` (the user's choices by default)."""
        return choose_settings(
            self.dynamics,
            measurements,
            choices or self.choices,
            self.tuning,
            self.name,
            self.epochs,
        )

    def adapt(self, chain: ChainState, position, rng, start: bool, tune: bool):
        """Measure the posterior if needed and fix the chain's settings.

        Returns
        -------
        position : ndarray
            Where the chain starts: a draw from the Laplace approximation at
            its mode when ``start``, else ``position``.
        messages : list of str
            The warnings to hand to PyMC.
        """
        size = position.size
        if not self.measures:
            chain.settings = fixed_settings(self.dynamics, self.choices, size)
        else:
            if start:
                _log.info(
                    "%s: tuning a chain (mode, curvature, gradient noise, step size) "
                    "before its first draw.",
                    self.name,
                )
            origin = self.dispersed_start(position, rng) if start else position
            measurements = self.measure_from(origin, position, rng)
            if not start and chain.measurements is not None:
                # Measured again (a compound step's end of tuning): a curvature
                # a diverging tune step showed still holds.
                measurements = replace(
                    measurements,
                    stiffness=chain.measurements.stiffness,
                    curvature_checked=chain.measurements.curvature_checked,
                )
            chain.settings = self.settings(measurements)
            chain.measurements = measurements
            self.weigh_second_order(chain, rng)
            chain.centre = chain.measurements.centre
            chain.steps_since_refresh = 0
            if start:
                position = measurements.mode
                if measurements.at_start:
                    _log.info(
                        "%s: the search for a posterior mode did not converge (the log "
                        "density rises without bound, as towards the neck of a centred "
                        "hierarchical model's funnel, or the search ended where the "
                        "curvature vanishes, as far out in a log link's tail: standardise "
                        "covariates whose scale is far from 1); the chain starts from its "
                        "initial point and adapts from its tune draws.",
                        self.name,
                    )
                else:
                    position = position + measurements.laplace_factor @ rng.standard_normal(size)
                self.travel_if_slow(chain, tune)
        return position, [] if chain.travelling else chain.settings.warnings

    def measure_from(self, origin: np.ndarray, position: np.ndarray, rng) -> Measurements:
        """Return the measurements from ``origin``, or from ``position`` where that start fails.

        A dispersed start can land where the mode search cannot recover: a
        jitter of 1 on the coefficient of a covariate in the hundreds moves a
        log link's linear predictor by hundreds, where minibatch gradients
        overflow or the search ends far from the mode. Where the search from
        ``origin`` raises or does not converge, the chain measures again from
        ``position`` (its undispersed start) on a copy of the generator; where
        that does not converge either, the first measurements and the
        generator's state after them stand.
        """

        def measured(generator, start):
            return measure(
                self.probe,
                self.batch_size,
                generator,
                start,
                self.choices.estimators,
                self.tuning,
                self.full_batches,
            )

        fallback = None if origin is position else copy.deepcopy(rng)
        try:
            measurements = measured(rng, origin)
        except RuntimeError:
            if fallback is None:
                raise
            measurements = None
        if fallback is None or (measurements is not None and not measurements.at_start):
            return measurements
        undispersed = measured(fallback, position)
        if measurements is not None and undispersed.at_start:
            return measurements
        _log.info(
            "%s: the search for a posterior mode failed from the chain's dispersed start; the "
            "chain measured again from its initial point.",
            self.name,
        )
        rng.bit_generator.state = fallback.bit_generator.state
        return undispersed

    def weigh_second_order(self, chain: ChainState, rng) -> None:
        """Weigh the second-order control variate for a chain, where the user left it automatic.

        Its centre needs the full-data Hessian, about ``2 D`` passes over the
        data; that is computed only where the chain's first-order settings
        relax slowly (over at least ``tuning.second_order_relaxation`` inner
        steps) and it costs at most as many gradient evaluations as
        ``tuning.second_order_draws`` draws with them, and the estimator is
        measured only where the Laplace picture holds
        (:func:`~pymc_sgmcmc.tuning.measure.with_second_order`). Not in a
        compound step, where the other blocks move the curvature.
        """
        settings = chain.settings
        if not self.choices.weighs_second_order or self.other_blocks or chain.travelling:
            return
        if settings.relaxation < self.tuning.second_order_relaxation:
            return
        size = chain.measurements.mode.size
        hessian_work = 2.0 * size * self.probe.n_rows
        step_work = gradient_work(settings.estimator, self.choices, self.tuning)
        draw_work = settings.steps_per_draw * self.batch_size * step_work
        if hessian_work > self.tuning.second_order_draws * draw_work:
            return
        measurements, departure = with_second_order(
            chain.measurements, self.probe, rng, self.tuning
        )
        if measurements is chain.measurements:
            _log.info(
                "%s: the likelihood's gradient departs from linear by %.2g across the "
                "Laplace approximation; the second-order control variate is not weighed.",
                self.name,
                departure,
            )
            return
        chain.measurements = measurements
        chain.settings = self.settings(measurements)

    def minibatch_settings(self, chain: ChainState) -> ChainSettings:
        """Return the settings the chain's measurements give without the full data's gradient."""
        return self.settings(chain.measurements, replace(self.choices, full_data_work=np.inf))

    def recovers_from_divergence(self, chain: ChainState) -> bool:
        """Return whether a tune step that diverged is to be taken back (see :meth:`tune_diverged`).

        Only where the tuner chose the step size, and while the chain's
        stiffness stays within ``tuning.max_stiffness``.
        """
        return (
            self.measures
            and self.choices.step_size is None
            and chain.measurements.stiffness * self.tuning.stiffening <= self.tuning.max_stiffness
        )

    def tune_diverged(self, chain: ChainState, step_size: float) -> list:
        """Take smaller steps after a tune step diverged; return the messages for PyMC.

        The step size was chosen for the curvatures measured, and a diverging
        step shows a larger one where the chain went (the neck of a funnel,
        the stiff end of a curved ridge). The chain starts again from its
        last draw (the step method does that) with the largest curvature
        counted ``tuning.stiffening`` times higher, kept through the tune
        windows that follow.
        """
        stiffness = chain.measurements.stiffness * self.tuning.stiffening
        chain.measurements = replace(chain.measurements, stiffness=stiffness)
        chain.settings = self.settings(chain.measurements)
        _log.info(
            "%s: a tune step diverged at step size %.3g; the chain went back to its last draw "
            "and steps for curvatures up to %g times the largest measured.",
            self.name,
            step_size,
            stiffness,
        )
        return chain.settings.warnings

    def record_tune_draw(self, chain: ChainState, position, rng, tune: bool):
        """Add a tune draw to the current window; refine the settings when it closes.

        Returns
        -------
        list of str or None
            ``None`` where the settings are unchanged; otherwise the messages
            for PyMC, and the sampler state is to start again at ``position``.
        """
        windows = self.tuning.windows
        chain.tune_draws += 1
        if chain.travelling:
            # Travel windows go on past the checked ones, as long as tune lasts.
            chain.window.append(position)
            if len(chain.window) >= windows[min(chain.windows_closed, len(windows) - 1)]:
                draws = np.array(chain.window)
                chain.windows_closed += 1
                return self.finish_travel(chain, draws, rng, tune)
            return None
        if chain.windows_closed >= len(windows) or not self.windows:
            return None
        chain.window.append(position)
        if len(chain.window) < windows[chain.windows_closed]:
            return None
        draws = np.array(chain.window)
        chain.window = []
        chain.windows_closed += 1
        settings = chain.settings
        if settings.estimator == FULL_DATA:
            chain.full_data_checked = True
        independent = independent_draws(len(draws), settings.steps_per_draw, settings.relaxation)
        # A given step size predicted to inflate the variance beyond the budget
        # (the user has been warned) spreads the draws by that inflation, not
        # by the posterior: measuring the metric on them would widen the steps
        # in the model's coordinates and compound the inflation.
        if settings.predicted_inflation > self.choices.bias_budget:
            return None
        slower = self.check_slowness(chain, draws)
        if slower:
            settings = chain.settings
            independent = independent_draws(
                len(draws), settings.steps_per_draw, settings.relaxation
            )
        skewed = self.check_tempering(chain, draws, independent, rng)
        stiffer = settings.estimator == FULL_DATA and self.check_curvature(chain, draws, rng)
        # A covariance needs 2 D independent draws; fewer still compare each
        # coordinate's variance with the metric's.
        temperature = self.choices.temperature
        if independent >= 2 * position.size:
            check = check_window(draws, settings.metric, independent, self.tuning, temperature)
        else:
            check = check_coordinates(draws, settings.metric, independent, self.tuning, temperature)
        disagrees = check is not None and check.disagrees
        if not (skewed or disagrees or stiffer):
            return settings.warnings if slower else None
        messages, recheck = [], False
        if disagrees:
            chain.measurements = refine(
                chain.measurements,
                check,
                settings.metric,
                draws,
                self.probe,
                rng,
                self.choices.estimators,
                self.tuning,
            )
            if settings.estimator == FULL_DATA and self.choices.step_size is None:
                self.recount_stiffness(chain, draws, rng)
            recheck = self.forget_slowness(chain)
            messages.append(
                f"{self.name}: the tune draws' variance differs from the Laplace approximation "
                f"at the mode by a factor {check.worst_ratio:.2g} along one direction; the "
                "metric, noise and step size were measured again where the chain went."
            )
        chain.settings = self.settings(chain.measurements)
        if disagrees:
            self.weigh_second_order(chain, rng)
            chain.centre = chain.measurements.centre
        switched = chain.settings.estimator == FULL_DATA and settings.estimator != FULL_DATA
        if (switched or recheck) and chain.windows_closed == len(windows):
            # One more window checks the full data's settings, or how fast
            # the chain decorrelates in the new metric.
            chain.windows_closed -= 1
        return [*messages, *(m for m in chain.settings.warnings if m not in settings.warnings)]

    def leave_unchecked_full_data(self, chain: ChainState) -> list:
        """Sample on minibatches where no tune window checked the full data's settings.

        The full data's gradient carries no noise, so its steps are as large as
        the curvature measured allows; where the posterior is not Gaussian (a
        funnel's neck, a curved ridge) that picture holds only near where it
        was measured, and a tune window's draws check it (its slowness, how far
        the inflation moves the means, the draws' covariance). Without such a
        window (tuning too short, or none) the chain takes the minibatch
        estimators' settings, whose noise keeps the steps small. Returns the
        messages for PyMC.
        """
        chain.settings = self.minibatch_settings(chain)
        _log.info(
            "%s: no tune window checked the full data's gradient where the chain went; it "
            "samples on minibatches (tune longer to have the full data weighed).",
            self.name,
        )
        return chain.settings.warnings

    def check_slowness(self, chain: ChainState, draws: np.ndarray) -> bool:
        """Give draws more inner steps where a window's draws decorrelate too slowly; True if so.

        The window's draws are compared with the relaxation the settings
        assumed (:func:`~pymc_sgmcmc.tuning.windows.slowness`); a chain
        slower by more than ``slowness_threshold`` keeps that factor in its
        measurements, and the tuner lengthens its draws by it (up to
        ``max_steps_per_draw`` inner steps).
        """
        settings = chain.settings
        if self.choices.steps_per_draw is not None:
            return False
        if settings.steps_per_draw >= self.tuning.max_steps_per_draw:
            return False
        factor = slowness(draws, settings.steps_per_draw, settings.relaxation)
        if factor <= self.tuning.slowness_threshold:
            return False
        total = min(chain.measurements.slowness * factor, chain.slowness_cap)
        chain.measurements = replace(chain.measurements, slowness=total)
        chain.settings = self.settings(chain.measurements)
        _log.info(
            "%s: the tune draws decorrelated %.3g times more slowly than the Gaussian model "
            "predicts; each draw now takes %d inner steps.",
            self.name,
            total,
            chain.settings.steps_per_draw,
        )
        return True

    def check_tempering(self, chain: ChainState, draws: np.ndarray, independent: float, rng):
        """Measure how far the chain's variance inflation moves the means; True if too far.

        The tempering sensitivity measured on a window's draws
        (:mod:`pymc_sgmcmc.tuning.tempering`) is kept in the chain's
        measurements (the largest of its windows'), where the tuner reads it.
        A given step size is left as it is. The draws count as independent
        as ``independent`` says (from the predicted relaxation), or as their
        own autocorrelation and the log density's say where that is more: a
        relaxation predicted from curvatures the posterior does not have
        (measured where the Hessian is not negative definite) must not hide
        a skewed posterior.

        A chain on the full data's gradient whose Gaussian model is its exact
        stationary law (SGLD's, SGHMC's) also keeps the window's draws and
        gradients (:class:`~pymc_sgmcmc.tuning.tempering.EnergyWindow`, the
        window whose move of the means is the largest), from which the tuner
        bounds the move of its full-data steps direction by direction; True
        then whenever the window is kept, so that the step is chosen again.
        The first-order move needs the exact inflation: the others' models are
        bounds, and cyclical SGLD's steps change along its cycle.
        """
        if self.choices.step_size is not None:
            return False
        temperature = self.choices.temperature
        settings = chain.settings
        bounds_move = settings.estimator == FULL_DATA and self.dynamics.exact_gaussian_model
        terms = log_density_at_draws(
            self.probe, draws, rng, self.tuning, temperature, gradients=bounds_move
        )
        log_density, gradients = terms if bounds_move else (terms, None)
        measured = decorrelated_draws(np.column_stack([draws, log_density]))
        counted = max(independent, measured)
        moves = tempering_moves(draws, log_density, counted)
        sensitivity = float(moves.max())
        measurements = chain.measurements
        if sensitivity > measurements.tempering_sensitivity:
            measurements = replace(measurements, tempering_sensitivity=sensitivity)
        moving = moves > 0
        if moving.any():
            if measurements.moving is not None:
                moving = moving | measurements.moving
            measurements = replace(measurements, moving=moving)
        budget = mean_share(self.dynamics, self.tuning) * self.choices.bias_budget
        if bounds_move:
            window = EnergyWindow(draws, gradients, counted, temperature)
            factor = metric_factor(settings.metric, settings.preconditioner, draws.shape[1])
            energy = window.sensitivity(factor, measurements.moving)
            kept = measurements.energy_window
            if kept is not None and kept.sensitivity(factor, measurements.moving) > energy:
                chain.measurements = measurements
                return False
            chain.measurements = replace(measurements, energy_window=window)
            move = settings.inflation_per_curvature * energy
            if move > budget:
                _log.info(
                    "%s: the tune draws show a skewed posterior whose means the step would "
                    "move by about %.2g sd; the step size is reduced to keep that within %g sd.",
                    self.name,
                    move,
                    budget,
                )
            return True
        if measurements is chain.measurements:
            return False
        chain.measurements = measurements
        move = settings.predicted_inflation * sensitivity
        if not move > budget:
            return False
        _log.info(
            "%s: the tune draws show a skewed posterior whose means the variance inflation "
            "would move by about %.2g sd; the step size is reduced to keep that within %g sd.",
            self.name,
            move,
            budget,
        )
        return True

    def check_curvature(self, chain: ChainState, draws: np.ndarray, rng) -> bool:
        """Count the curvature at a window's draws in the stiffness; True if the step changed.

        For chains on the full data's gradient, whose step only the
        discretisation limits (:mod:`pymc_sgmcmc.tuning.curvature`): the
        largest curvature at some of the window's draws, in the metric's
        coordinates, against the largest measured (beyond a margin of
        :data:`~pymc_sgmcmc.tuning.curvature.CURVATURE_MARGIN`). The first
        check also marks the curvature as checked, which lets a Gaussian
        model with ``before_curvature_check`` take its larger steps.
        """
        settings, measurements = chain.settings, chain.measurements
        ratio = self.curvature_ratio(settings, measurements, draws, rng)
        if not ratio > CURVATURE_MARGIN:
            # A first check that finds no steeper curvature still counts: some
            # integrators take larger steps once the curvature where the chain
            # goes has been measured.
            chain.measurements = replace(measurements, curvature_checked=True)
            return self.settings(chain.measurements).step_size != settings.step_size
        stiffness = measurements.stiffness * ratio
        chain.measurements = replace(measurements, stiffness=stiffness, curvature_checked=True)
        _log.info(
            "%s: the curvature at the tune draws reaches %.3g times the largest measured; "
            "the step size is chosen for it.",
            self.name,
            ratio,
        )
        return True

    def curvature_ratio(self, settings, measurements, draws: np.ndarray, rng) -> float:
        """Return the largest curvature at a window's tightest draws over the largest measured.

        Both are in the coordinates of ``settings``' metric; the measured one
        is multiplied by ``measurements.stiffness``.
        """
        factor = metric_factor(settings.metric, settings.preconditioner, draws.shape[1])
        temperature = self.choices.temperature
        log_density = log_density_at_draws(self.probe, draws, rng, self.tuning, temperature)
        largest = largest_curvature(
            self.probe, tightest_draws(draws, log_density), factor, rng, config=self.tuning
        )
        return largest / measurements.curvatures(factor)[1]

    def recount_stiffness(self, chain: ChainState, draws: np.ndarray, rng) -> None:
        """Count the curvature at a window's draws again, in the metric measured from them.

        The stiffness multiplies the largest curvature measured in the metric's
        coordinates. A metric measured again where the chain went holds the
        window's variances, so the stiffness found in the old coordinates (a
        stiff direction the old metric missed, now whitened) would count that
        curvature twice. For a chain on the full data's gradient the largest
        curvature at the window's draws is measured in the new coordinates and
        sets the stiffness (at least 1). A step too large for it still diverges
        in a tune draw, which counts the curvature higher again.
        """
        measurements = replace(chain.measurements, stiffness=1.0)
        ratio = self.curvature_ratio(self.settings(measurements), measurements, draws, rng)
        chain.measurements = replace(measurements, stiffness=max(1.0, ratio))

    def forget_slowness(self, chain: ChainState) -> bool:
        """Drop the slowness measured in a metric that a window measured again; True if so.

        The slowness is how many times more slowly than the Gaussian model
        predicts the chain's draws decorrelated, in the metric it ran with.
        A direction whose variance that metric understated is crossed slowly
        (an 8-group Poisson GLMM's SGHMC chain decorrelated 12.7 times more
        slowly than predicted in a metric that understated a variance 33
        times); the metric measured again from the window's draws takes that
        direction in, and the factor kept would lengthen every draw for a
        slowness the chain no longer has. The factor goes back to 1 where a
        tune window follows to measure it again in the new metric: one of the
        windows still to come, or the last one run once more (once per
        chain); otherwise it stays. What that window measures is kept up to
        the factor dropped: measured over draws of fewer inner steps, whose
        lag-one autocorrelations sit nearer 1, a funnel's slowness reads
        higher (the non-centred eight schools' chains: 15.5 and 20.8 against
        10.2 and 8.2, whose draws were already independent).
        """
        slowness = chain.measurements.slowness
        if slowness <= 1.0:
            return False
        if chain.windows_closed >= len(self.tuning.windows):
            if chain.slowness_rechecked:
                return False
            chain.slowness_rechecked = True
        chain.slowness_cap = min(chain.slowness_cap, slowness)
        chain.measurements = replace(chain.measurements, slowness=1.0)
        return True

    def steps_this_draw(self, chain: ChainState, tune: bool) -> int:
        """Inner steps of the next draw: one per tune draw once adaptation has settled.

        Not in a compound step, where the other step methods tune against this
        block's moves.
        """
        tuning = self.tuning
        settled = chain.tune_draws >= sum(tuning.windows) + tuning.settle_draws
        settled = settled and not chain.travelling
        if tune and self.measures and settled and not self.other_blocks:
            return 1
        return chain.settings.steps_per_draw

    def dispersed_start(self, position: np.ndarray, rng) -> np.ndarray:
        """Return the chain's own starting point: ``position`` plus a uniform jitter.

        The jitter shrinks by a factor 4 (eight times at most, then none) until
        the gradient on a large minibatch is finite there: far from the mode
        some models' gradients are not (e.g. a logistic likelihood whose
        probabilities round to 0 or 1).
        """
        probe = self.probe
        rows = min(self.tuning.hessian_rows, probe.n_rows)
        indices = rng.choice(probe.n_rows, rows, replace=False)
        jitter = self.tuning.start_jitter
        for _ in range(8):
            candidate = position + rng.uniform(-jitter, jitter, position.size)
            if np.all(np.isfinite(probe.minibatch_gradient(candidate, indices))):
                return candidate
            jitter /= 4.0
        return position
