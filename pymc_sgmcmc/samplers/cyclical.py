r"""Cyclical SGLD (Zhang, Li, Zhang, Chen & Wilson, 2020).

The step size follows cosine cycles (:class:`~pymc_sgmcmc.CyclicalStepSize`):
each cycle starts with large steps and decays towards zero. The first
fraction :math:`\beta` of a cycle is the exploration stage, where the chain
takes noise-free gradient steps (stochastic-gradient ascent) towards a mode,
possibly a new one; the rest is the sampling stage, where it runs SGLD,

.. math::

    \theta \leftarrow \theta + \eta_t P \hat g(\theta)
        + \sqrt{2 \eta_t \tau P}\, \xi.

Exploration steps do not give posterior draws. By default a cycle's
exploration stage runs inside the first draw of the cycle (that draw takes
more inner steps), so every recorded draw ends in a sampling stage and
``az.summary(idata)`` reads the posterior as it would for any other sampler.
With ``record_exploration=True`` the exploration stage is recorded as draws
of its own, marked by the ``exploring`` statistic, left out of the tune
windows, and dropped by :func:`sampling_draws`.

The tuner chooses the largest step size of the sampling stage (at
:math:`r = \beta`) from the bias budget as for SGLD, and a cycle of
``cycle_draws`` relaxation times (draws of the tuned inner steps, unless the
relaxation exceeds the cap on inner steps per draw), so the sampling stage
spans many. Exploration ends near a mode, which may lie far from the
posterior's mass (the joint mode of a hierarchical model written non-centred
lies many posterior sds from it), so the first
:data:`SETTLING_RELAXATIONS` relaxation times of every sampling stage end no
kept draw: the chain travels back to its stationary law first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import xarray as xr

from pymc_sgmcmc.dynamics import StateVariable
from pymc_sgmcmc.samplers.sgld import Langevin, _LangevinGaussian
from pymc_sgmcmc.schedules import CyclicalStepSize
from pymc_sgmcmc.step_method import StochasticGradientStep

__all__ = [
    "SETTLING_RELAXATIONS",
    "CyclicalLangevin",
    "CyclicalSGLD",
    "posterior_draws",
    "sampling_draws",
]

#: Relaxation times at the start of every sampling stage that end no kept
#: draw: a chain that explored to a mode d posterior sds from the mass is
#: about d e^-3 from it at the first kept draw, and its draws' mean about
#: d e^-3 / 27 at the default cycle (0.015 sd for d = 8).
SETTLING_RELAXATIONS = 3.0

#: Most draws a cycle counts per relaxation time: a chain whose steps relax
#: over more (a step size cut far below its curvatures') would otherwise get
#: cycles of billions of inner steps, whose first draw holds the exploration
#: and settling stages of hundreds of millions, longer than any run.
MAX_DRAWS_PER_RELAXATION = 100


def posterior_draws(data):
    """Return the posterior draws of any run: without exploration stages where they are marked."""
    if "exploring" in data["sample_stats"]:
        return sampling_draws(data)
    return data["posterior"]


def sampling_draws(data) -> xr.Dataset:
    """Return the posterior draws of a cyclical run without its exploration stages.

    Parameters
    ----------
    data : InferenceData or DataTree
        What ``pm.sample`` returned, with the ``exploring`` sampler statistic.

    Returns
    -------
    xarray.Dataset
        The posterior's variables at the sampling-stage draws; every chain
        keeps its first ``n`` such draws, ``n`` the fewest any chain has, so
        the result has the ``(chain, draw)`` layout ArviZ reads.
    """
    posterior = data["posterior"]
    posterior = posterior.to_dataset() if hasattr(posterior, "to_dataset") else posterior
    exploring = np.asarray(data["sample_stats"]["exploring"], dtype=bool)
    kept = [np.flatnonzero(~row) for row in exploring]
    count = min(len(rows) for rows in kept)
    if count == 0:
        raise ValueError("A chain has no sampling-stage draws; run more draws than one cycle.")
    variables = {}
    for name, variable in posterior.data_vars.items():
        values = np.asarray(variable)
        chosen = np.stack([values[chain, rows[:count]] for chain, rows in enumerate(kept)])
        variables[name] = (variable.dims, chosen)
    coordinates = {
        name: coordinate
        for name, coordinate in posterior.coords.items()
        if "draw" not in coordinate.dims
    }
    coordinates["draw"] = np.arange(count)
    return xr.Dataset(variables, coords=coordinates, attrs=dict(posterior.attrs))


def sampling_stage_mean(exploration: float) -> float:
    r"""Return the sampling stage's mean step size over its largest, for cosine cycles.

    :math:`\int_\beta^1 (\cos \pi r + 1) dr / ((1 - \beta)(\cos \pi \beta + 1))`.
    """
    stage = 1.0 - exploration
    integral = stage - np.sin(np.pi * exploration) / np.pi
    return integral / (stage * (np.cos(np.pi * exploration) + 1.0))


@dataclass(frozen=True)
class _CyclicalGaussian(_LangevinGaussian):
    """SGLD at the sampling stage's largest step size; relaxation at its mean step size."""

    mean_factor: float

    def relaxation(self, step_size, curvature, noise=0.0):
        return super().relaxation(step_size * self.mean_factor, curvature, noise)


class CyclicalLangevin(Langevin):
    r"""Langevin dynamics whose noise is switched off in the exploration stage.

    Parameters
    ----------
    cycle_draws : int, default 40
        Length of a cycle of the step size, in draws of the tuned inner
        steps, or in relaxation times where these exceed the inner steps
        per draw.
    exploration : float, default 0.25
        Fraction :math:`\beta` of every cycle spent exploring.
    record_exploration : bool, default False
        Record the exploration stage and the settling steps after it as
        draws (marked by ``exploring``) instead of running them inside the
        first draw of each cycle.
    """

    name = "csgld"
    state = (StateVariable("exploring", scalar=True),)
    step_inputs = ("step_size", "noise_scale", "kept")
    stats: ClassVar[dict] = {"exploring": bool}
    exact_gaussian_model = False

    def __init__(self, cycle_draws=40, exploration=0.25, record_exploration=False):
        if isinstance(cycle_draws, bool) or not isinstance(cycle_draws, int) or cycle_draws < 2:
            raise ValueError(f"cycle_draws must be an integer >= 2, got {cycle_draws!r}.")
        if not 0 <= exploration < 1:
            raise ValueError(f"exploration must be in [0, 1), got {exploration!r}.")
        super().__init__("euler_maruyama")
        self.cycle_draws = cycle_draws
        self.exploration = float(exploration)
        self.record_exploration = bool(record_exploration)

    @staticmethod
    def step(state, gradient, noise, inputs):
        """Take a Langevin step whose noise is scaled by ``noise_scale`` (0 or 1).

        ``kept`` (0 or 1) says whether a draw may end at this step; the
        state's ``exploring`` is its complement.
        """
        step_size, preconditioner = inputs["step_size"], inputs["preconditioner"]
        drift = step_size * preconditioner * gradient
        diffusion = (2.0 * step_size * inputs["temperature"] * preconditioner) ** 0.5 * noise[0]
        return {
            "position": state["position"] + drift + inputs["noise_scale"] * diffusion,
            "exploring": 1.0 - inputs["kept"],
        }

    def gaussian_model(self, curvatures, preconditioner, config, temperature=1.0):
        """Return SGLD's model, relaxing at the sampling stage's mean step size.

        The inflation is SGLD's at the stage's largest step; the inner steps
        per draw follow the mean step, so a draw spans about one relaxation
        time on average over the stage.
        """
        return _CyclicalGaussian(sampling_stage_mean(self.exploration))

    def initial_state(self, position, inputs, rng):
        """Start outside the exploration stage."""
        return {"position": position, "exploring": np.float64(0.0)}

    def statistics(self, state):
        """Return whether the draw ended in an exploration stage."""
        return {"exploring": bool(state["exploring"] > 0.5)}

    def schedule(self, step_size, steps_per_draw, relaxation=np.nan):
        """Return cycles whose sampling stage starts at ``step_size``.

        A cycle spans ``cycle_draws`` draws of ``steps_per_draw`` inner steps,
        or as many more draws as it takes to span ``cycle_draws`` relaxation
        times (counting at most :data:`MAX_DRAWS_PER_RELAXATION` draws per
        relaxation time); its sampling stage starts with :data:`SETTLING_RELAXATIONS`
        relaxation times (at most half the stage) that end no kept draw.
        """
        peak = 2.0 / (np.cos(np.pi * self.exploration) + 1.0)
        known = np.isfinite(relaxation)
        draws_per_relaxation = int(np.ceil(relaxation / steps_per_draw)) if known else 1
        draws_per_relaxation = min(draws_per_relaxation, MAX_DRAWS_PER_RELAXATION)
        cycle_length = self.cycle_draws * steps_per_draw * max(1, draws_per_relaxation)
        stage = cycle_length - int(np.ceil(self.exploration * cycle_length))
        settling = int(np.ceil(SETTLING_RELAXATIONS * relaxation)) if known else 0
        return CyclicalStepSize(
            step_size * peak, cycle_length, self.exploration, min(settling, stage // 2)
        )

    def draw_steps(self, schedule, first_step, steps):
        """Return the inner steps of a draw that starts at step ``first_step``.

        ``steps``, unless the draw would end while exploring or settling:
        then the rest of those stages and ``steps`` sampling steps after
        them. Recorded exploration stages take ``steps`` per draw. For an
        array of first steps, an array of the draws' inner steps.
        """
        kept = getattr(schedule, "kept", None)
        if self.record_exploration or kept is None:
            return steps
        last = np.asarray(first_step) + steps - 1
        cycle_start = last - last % schedule.cycle_length
        kept_start = cycle_start + schedule.sampling_start + schedule.settling
        lengths = np.where(kept(last), steps, kept_start - first_step + steps)
        return int(lengths) if lengths.ndim == 0 else lengths

    def period(self, schedule):
        """Return the cycle's length: the stages, step sizes and draws repeat every cycle."""
        if isinstance(schedule, CyclicalStepSize):
            return schedule.cycle_length
        return super().period(schedule)

    def step_values(self, schedule, steps):
        """Return the step sizes, the noise switch (off while exploring) and where draws may end."""
        exploring = getattr(schedule, "exploring", None)
        if exploring is None:
            noise_scale = kept = np.ones(len(steps))
        else:
            noise_scale, kept = 1.0 - exploring(steps), schedule.kept(steps)
        return {
            "step_size": np.asarray(schedule(steps), dtype="float64"),
            "noise_scale": noise_scale.astype("float64"),
            "kept": kept.astype("float64"),
        }


class CyclicalSGLD(StochasticGradientStep):
    r"""Cyclical SGLD (Zhang et al., 2020).

    The step size follows cosine cycles of ``cycle_draws`` draws; in the
    first ``exploration`` fraction of each cycle the chain takes noise-free
    gradient steps, then it runs SGLD. The exploration stage runs inside the
    first draw of each cycle, so every recorded draw is a posterior draw and
    a cycle records ``(1 - exploration) * cycle_draws`` of them. With
    ``record_exploration=True`` the exploration stage is recorded too, marked
    by ``sample_stats.exploring``; drop those draws before summarising:
    ``az.summary(sampling_draws(idata))`` (:func:`sampling_draws`).

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    cycle_draws : int, default 40
        Draws per cycle.
    exploration : float, default 0.25
        Fraction of each cycle spent exploring.
    record_exploration : bool, default False
        Record the exploration stage's draws (marked by ``exploring``).
    step_size : float or schedule, optional
        A number is the largest step size of the sampling stage (the cycle
        starts :math:`2 / (1 + \cos \pi \beta)` times higher); a schedule such
        as :class:`~pymc_sgmcmc.CyclicalStepSize` is used as given. Chosen
        from the bias budget by default.
    **kwargs
        As for :class:`~pymc_sgmcmc.SGLD`.

    Notes
    -----
    Besides the statistics of
    :class:`~pymc_sgmcmc.step_method.StochasticGradientStep`, ``exploring``
    is True for draws that end in an exploration stage (only with
    ``record_exploration=True``); ``steps_per_draw`` shows the longer first
    draw of each cycle.
    """

    name = "csgld"
    dynamics_class = CyclicalLangevin
