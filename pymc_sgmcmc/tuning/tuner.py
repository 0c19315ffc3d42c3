r"""From measurements and the sampler's own hyperparameters to a chain's settings.

Near a mode, in the coordinates of a metric (:mod:`pymc_sgmcmc.metric`) or
scaled by a diagonal preconditioner, the posterior is approximately Gaussian
with curvatures between :math:`a_{\min}` and :math:`a_{\max}`, and the
gradient estimate carries noise of variance at most :math:`v`. Every sampler
declares its exact stationary variance on such a target
(:meth:`~pymc_sgmcmc.dynamics.Dynamics.gaussian_model`), for the mass,
friction and other hyperparameters it will actually run with. At
temperature :math:`\tau` the target is :math:`N(0, \tau / a)` and the noise
weighs as :math:`v / \tau`. The tuner picks the largest step size whose
predicted variance inflation stays within the bias budget at every curvature
of the range (a smaller budget where the tune draws showed that the inflation
moves the means by more than the budget in posterior sds; for steps on the
full data, whose move the draws' gradients give direction by direction, the
move itself within the budget; see :mod:`pymc_sgmcmc.tuning.tempering`), the
metric and gradient estimator with the shortest relaxation time per unit of
work (the work of an inner step counts the metric's multiply-adds against the
gradient's, ``B`` times a row's work as measured by
:func:`~pymc_sgmcmc.tuning.measure.row_work`, and the step's fixed cost,
``TuningConfig.step_overhead``; a gradient on all N rows, free of noise,
counts ``N / B`` minibatch gradients), and about one relaxation time of inner
steps per draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import brentq

from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.metric import IdentityMetric, Metric, metric_from_covariance
from pymc_sgmcmc.schedules import ConstantStepSize
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.measure import FULL_DATA, Measurements

__all__ = [
    "ChainSettings",
    "UserChoices",
    "choose_settings",
    "fixed_settings",
    "gradient_work",
    "mean_share",
    "metric_factor",
]


@dataclass(frozen=True)
class UserChoices:
    """What the user fixed when building the step method (``None``: to be chosen).

    Attributes
    ----------
    step_size : schedule or None
        The step size or schedule.
    preconditioner : ndarray or None
        A diagonal preconditioner the dynamics scale by, with no metric;
        ``None`` lets the tuner choose a metric.
    estimators : tuple of str
        The gradient estimators allowed.
    steps_per_draw : int or None
        Inner steps per draw.
    temperature : float
        Temperature of the target.
    bias_budget : float
        Largest predicted relative inflation of the posterior variance.
    metric : {"auto", "diagonal", "dense", "low_rank"}
        The metric built from the measured posterior covariance when
        ``preconditioner`` is None; "auto" chooses by predicted cost.
    weighs_second_order : bool
        Whether the second-order control variate is weighed too where a
        chain measured it (:func:`~pymc_sgmcmc.tuning.measure.with_second_order`).
    full_data_work : float
        Work of an inner step on all N rows relative to a minibatch step
        (``N / B``), where the full data's gradient
        (:data:`~pymc_sgmcmc.tuning.measure.FULL_DATA`) is weighed too;
        ``inf`` where it is not.
    """

    step_size: object
    preconditioner: np.ndarray | None
    estimators: tuple
    steps_per_draw: int | None
    temperature: float
    bias_budget: float
    metric: str = "auto"
    weighs_second_order: bool = False
    full_data_work: float = np.inf


@dataclass
class ChainSettings:
    """Everything a chain samples with, fixed before its first inner step.

    Attributes
    ----------
    estimator : str
        ``"minibatch"``, ``"control_variate"``, ``"second_order"`` or
        ``"full_data"`` (every inner step on all N rows).
    step_size : schedule
        Step size of every inner step.
    preconditioner : ndarray
        Diagonal preconditioner ``P`` of the dynamics (ones where a metric
        whitens the coordinates).
    steps_per_draw : int
        Inner steps per recorded draw.
    inputs : dict of str to ndarray
        The update rule's chain inputs (temperature, friction, ...).
    gradient_noise : float
        Measured noise variance of the gradient estimate in preconditioned
        coordinates (NaN when nothing was measured).
    predicted_inflation : float
        Predicted relative inflation of the posterior variance (NaN when
        nothing was measured or the step size follows a schedule).
    warnings : list of str
        What the user should know about these settings.
    metric : Metric
        The coordinates the dynamics run in.
    relaxation : float
        Predicted inner steps over which the slowest mode decays by e (NaN
        when nothing was measured).
    tune_clip : float
        Norm at which the gradient estimate (in the metric's coordinates) is
        clipped during tune (``inf`` for none; see ``TuningConfig.tune_clip``).
    inflation_per_curvature : float
        The largest ``eps(a) / a`` over the curvatures ``a`` the step was
        chosen for: times an :class:`~pymc_sgmcmc.tuning.tempering.EnergyWindow`'s
        sensitivity, the predicted move of the means in sds (NaN where no
        inflation is predicted).
    """

    estimator: str
    step_size: object
    preconditioner: np.ndarray
    steps_per_draw: int
    inputs: dict
    gradient_noise: float = np.nan
    predicted_inflation: float = np.nan
    warnings: list = field(default_factory=list)
    metric: Metric = field(default_factory=IdentityMetric)
    relaxation: float = np.nan
    tune_clip: float = np.inf
    inflation_per_curvature: float = np.nan


def metric_factor(metric: Metric, preconditioner: np.ndarray, size: int) -> np.ndarray:
    """Return ``A`` of the coordinates ``theta = A z`` a chain's dynamics run in.

    The metric's factor with the diagonal preconditioner's square root on
    its columns: curvatures, noise and gradients are read in these. Where
    that ``A`` is diagonal, it is returned as the vector ``P`` of
    ``A = diag(sqrt(P))``, which the measurements read in O(D^2) instead of
    the O(D^3) of a dense matrix (:func:`~pymc_sgmcmc.tuning.measure.in_coordinates`).
    """
    diagonal = metric.diagonal(size)
    if diagonal is not None:
        return diagonal**2 * preconditioner
    return metric.factor(size) * np.sqrt(preconditioner)[None, :]


def fixed_settings(dynamics: Dynamics, choices: UserChoices, size: int) -> ChainSettings:
    """Return the settings of a chain that measures nothing (everything was given)."""
    preconditioner = np.ones(size) if choices.preconditioner is None else choices.preconditioner
    inputs = dynamics.chain_inputs(preconditioner, choices.temperature, {})
    return ChainSettings(
        "minibatch", choices.step_size, preconditioner, choices.steps_per_draw, inputs
    )


def _worst_inflation(model, step_size, curvatures, noise, sensitivity=0.0) -> float:
    """Return a Gaussian model's largest inflation over ``curvatures``.

    A model with a ``largest_inflation`` method evaluates all curvatures at
    once; the others are asked curvature by curvature. With a ``sensitivity``
    ``G`` (a full-data chain's :class:`~pymc_sgmcmc.tuning.tempering.EnergyWindow`)
    the inflation ``eps(a)`` at curvature ``a`` counts ``max(1, G / a)`` times:
    the step's predicted move of the means, ``eps(a) / a * G`` sds, is bound
    by the same budget.
    """
    if sensitivity > 0:
        return max(
            model.inflation(step_size, a, noise) * max(1.0, sensitivity / a) for a in curvatures
        )
    vectorised = getattr(model, "largest_inflation", None)
    if vectorised is not None:
        return vectorised(step_size, curvatures, noise)
    return max(model.inflation(step_size, a, noise) for a in curvatures)


#: Precision of the tuned step size's logarithm (a relative precision of the step).
_STEP_PRECISION = 1e-10


def _largest_step_size(model, curvatures, noise, budget, sensitivity=0.0):
    """Largest step size whose inflation is within ``budget`` at every curvature.

    Steps a tenth apart, down from the largest stable one, bracket the
    largest step within the budget; Brent's method then finds it in log
    space, and it is moved down by twice the precision so that it stays on
    the budget's side of the root. ``sensitivity`` weighs the inflation as
    :func:`_worst_inflation` does.
    """

    def worst(step_size):
        # At the edge of stability a model's inflation can overflow, or come
        # out as 0 / 0 (handled below): neither is news to the user.
        with np.errstate(over="ignore", invalid="ignore"):
            return _worst_inflation(model, step_size, curvatures, noise, sensitivity)

    largest = model.largest_step_size(curvatures.max())
    if worst(largest) <= budget:
        return largest
    high = largest
    for _ in range(12):
        low = high / 10
        if worst(low) <= budget:
            break
        high = low
    else:
        high = largest
        # Inflation that grows as the step shrinks (e.g. a preconditioner
        # whose memory is short against the chain's relaxation): take the
        # largest step of a log grid within the budget, or the least inflated.
        grid = np.geomspace(high * 1e-6, high, 121)
        inflations = np.array([worst(step_size) for step_size in grid])
        within = np.flatnonzero(inflations <= budget)
        if within.size == 0:
            return float(grid[np.argmin(inflations)])
        low = grid[within[-1]]
        high = grid[min(within[-1] + 1, grid.size - 1)]
        if low == high:
            return float(low)
    if not np.isfinite(worst(high)):
        # The bracket's top moves just inside the edge.
        high *= 1.0 - 1e-6
    root = brentq(
        lambda log_step: worst(np.exp(log_step)) - budget,
        np.log(low),
        np.log(high),
        xtol=_STEP_PRECISION,
    )
    step_size = float(np.exp(root - 2 * _STEP_PRECISION))
    return step_size if worst(step_size) <= budget else float(low)


def choose_settings(
    dynamics: Dynamics,
    measurements: Measurements,
    choices: UserChoices,
    config: TuningConfig | None = None,
    sampler_name: str = "",
    epochs: float = np.inf,
) -> ChainSettings:
    """Choose a chain's settings from its measurements.

    Parameters
    ----------
    dynamics : Dynamics
        The sampler, with the hyperparameters the user gave it.
    measurements : Measurements
        What the chain measured around its mode.
    choices : UserChoices
        What the user fixed; a given value always wins.
    config : TuningConfig, optional
        The tuner's constants.
    sampler_name : str
        Name used in the warnings.
    epochs : float, default inf
        Inner steps per epoch of the chain's minibatches, whose noise then
        sums to zero over an epoch (:mod:`pymc_sgmcmc.tuning.epochs`); ``inf``
        where it does not (batches drawn with replacement, other step methods
        moving the rest of the model, a control-variate centre that moves).
        Counted only by dynamics whose Gaussian model is exact.

    Returns
    -------
    ChainSettings
    """
    config = config or TuningConfig()
    size = measurements.mode.size
    if (
        choices.weighs_second_order
        and "second_order" in measurements.noise_covariance
        and "second_order" not in choices.estimators
    ):
        choices = replace(choices, estimators=(*choices.estimators, "second_order"))
    options = []
    for metric, preconditioner in _candidate_metrics(dynamics, measurements, choices, config):
        factor = metric_factor(metric, preconditioner, size)
        smallest, largest = measurements.curvatures(factor)
        model = dynamics.gaussian_model(
            (smallest, largest), preconditioner, config, temperature=choices.temperature or 1.0
        )
        options.append((metric, preconditioner, factor, (smallest, largest), model))
    if options[0][-1] is None:
        if choices.step_size is None:
            raise ValueError(f"{sampler_name} has no step-size rule: give step_size.")
        # No tuning rule: the user's step size, the first metric and estimator allowed.
        metric, preconditioner, factor, _, _ = options[0]
        estimator = choices.estimators[0]
        return ChainSettings(
            estimator,
            choices.step_size,
            preconditioner,
            choices.steps_per_draw or 1,
            dynamics.chain_inputs(preconditioner, choices.temperature, {}),
            measurements.noise(estimator, factor),
            metric=metric,
        )
    warnings = []
    temperature = choices.temperature
    if temperature == 0:
        warnings.append(
            f"{sampler_name}: temperature=0 is stochastic-gradient optimisation, not sampling: "
            "the chain settles near a mode; its step size is chosen as at temperature 1."
        )
        temperature = 1.0
    given = choices.step_size
    constant = given.value if isinstance(given, ConstantStepSize) else None
    # The inflation allowed also moves skewed posteriors' means, by the
    # tempering sensitivity per unit of inflation: the move stays within the
    # budget's share for the means (mean_share), in sds.
    share = mean_share(dynamics, config)
    budget = choices.bias_budget / max(1.0, measurements.tempering_sensitivity / share)
    energy = measurements.energy_window

    candidates = []
    estimators = choices.estimators
    if np.isfinite(choices.full_data_work):
        estimators = (*estimators, FULL_DATA)
    for metric, preconditioner, factor, (smallest, largest), base_model in options:
        curvatures = np.geomspace(smallest, largest, config.curvature_grid)
        for estimator in estimators:
            noise = measurements.noise(estimator, factor)
            model = base_model
            # Only a chain on the full data's gradient has the curvature at its
            # draws checked (tuning.curvature); until then, and on minibatches,
            # a model may keep a margin against curvatures not measured.
            checked = estimator == FULL_DATA and measurements.curvature_checked
            unchecked = getattr(model, "before_curvature_check", None)
            if unchecked is not None and not checked:
                model = unchecked()
            if estimator != FULL_DATA:
                model = _on_epochs(
                    dynamics, model, measurements, factor, noise, epochs, temperature
                )
            # On the full data, a window's gradients give each direction's move
            # of the means at its own inflation (tuning.tempering), in place
            # of tempering's, which inflates every direction as the stiffest;
            # the inflation must be the chain's exact stationary one.
            limit, sensitivity = budget, 0.0
            if estimator == FULL_DATA and energy is not None and dynamics.exact_gaussian_model:
                limit, sensitivity = (
                    choices.bias_budget,
                    energy.sensitivity(factor, measurements.moving) / share,
                )
            tuned = _largest_step_size(model, curvatures, noise / temperature, limit, sensitivity)
            step_size = constant or tuned
            relaxation = max(
                model.relaxation(step_size, a, noise / temperature) for a in curvatures
            )
            if (
                estimator == FULL_DATA
                and relaxation * measurements.slowness > config.max_steps_per_draw
                and choices.full_data_work * measurements.batch_size > config.capped_full_data_rows
            ):
                # Its draws would each run the cap of inner steps on all N rows.
                continue
            cost = relaxation * _step_work(estimator, metric, measurements, choices, config)
            # At a given step size every estimator relaxes alike; what tells
            # them apart is how far their noise inflates the variance, so the
            # ones within the budget come first, then the least inflation.
            excess = 0.0
            if constant is not None:
                excess = _worst_inflation(model, step_size, curvatures, noise / temperature)
                excess = max(excess - choices.bias_budget, 0.0)
            candidates.append(
                {
                    "key": (excess, cost),
                    "estimator": estimator,
                    "noise": noise,
                    "step_size": step_size,
                    "relaxation": relaxation,
                    "metric": metric,
                    "preconditioner": preconditioner,
                    "model": model,
                    "curvatures": curvatures,
                    "factor": factor,
                    "limit": limit,
                }
            )
    best = min(candidates, key=lambda candidate: candidate["key"])
    estimator, noise, step_size = best["estimator"], best["noise"], best["step_size"]
    relaxation, metric, preconditioner = best["relaxation"], best["metric"], best["preconditioner"]
    model, curvatures, factor = best["model"], best["curvatures"], best["factor"]
    budget = best["limit"]

    # Where tune draws decorrelated more slowly than the Gaussian model
    # predicts, a draw takes that many more inner steps.
    predicted_relaxation = relaxation
    relaxation = relaxation * measurements.slowness
    steps_per_draw = choices.steps_per_draw or int(
        np.clip(np.ceil(relaxation), 1, config.max_steps_per_draw)
    )
    if given is None or constant is not None:
        schedule = dynamics.schedule(step_size, steps_per_draw, relaxation)
    else:
        schedule = given
    if given is None and predicted_relaxation > config.slow_relaxation:
        warnings.append(
            _slow_warning(
                dynamics,
                model,
                curvatures,
                budget,
                step_size,
                predicted_relaxation,
                choices,
                sampler_name,
                estimator,
                measurements.tempering_sensitivity,
            )
        )
    inflation = per_curvature = np.nan
    if constant is not None or given is None:
        inflation = _worst_inflation(model, step_size, curvatures, noise / temperature)
        per_curvature = max(
            model.inflation(step_size, a, noise / temperature) / a for a in curvatures
        )
    if constant is not None and inflation > choices.bias_budget:
        warnings.append(
            f"{sampler_name}: step_size={constant:.3g} is predicted to inflate the posterior "
            f"variance by {100 * inflation:.0f}% (budget {100 * choices.bias_budget:.0f}%); "
            "leave step_size unset to have it chosen."
        )
    elif given is None and inflation > budget:
        warnings.append(
            f"{sampler_name}: no step size keeps the predicted variance inflation within the "
            f"bias budget ({100 * inflation:.0f}% against {100 * budget:.0f}%); "
            f"{dynamics.over_budget_advice()}."
        )
    if measurements.at_start:
        warnings.append(
            f"{sampler_name}: the search found no posterior mode, so the settings come from "
            "the local picture at the chain's start; only a chain that adapts alone with "
            "tune draws (no compound step, tune > 0, no given step_size) refines them."
        )
    elif not measurements.log_concave:
        warnings.append(
            f"{sampler_name}: the Hessian where the chain was measured (its mode, or its "
            "draws' mean once it travelled) is not negative definite; the step-size rule "
            "assumes a roughly Gaussian posterior and may miss its bias budget."
        )
    mean_square = measurements.mean_square_gradient(estimator, factor, temperature)
    tuned = {
        **model.chain_inputs(),
        "mode": metric.to_coordinates(measurements.mode),
        "relaxation": float(relaxation),
        "mean_square_gradient": mean_square,
    }
    inputs = dynamics.chain_inputs(preconditioner, choices.temperature, tuned)
    # The clip reads the gradient in the metric's coordinates, before any
    # diagonal preconditioner.
    if np.any(preconditioner != 1.0):
        mean_square = measurements.mean_square_gradient(
            estimator, metric_factor(metric, np.ones(size), size), temperature
        )
    tune_clip = config.tune_clip * np.sqrt(np.sum(mean_square))
    return ChainSettings(
        estimator,
        schedule,
        preconditioner,
        steps_per_draw,
        inputs,
        noise,
        float(inflation),
        warnings,
        metric,
        float(relaxation),
        # A picture without curvature or noise gives no scale to clip at.
        float(tune_clip) if tune_clip > 0 else np.inf,
        float(per_curvature),
    )


def mean_share(dynamics: Dynamics, config: TuningConfig) -> float:
    """Return the share of the bias budget by which the step may move the means, in sds.

    ``config.mean_share`` for dynamics whose Gaussian model is their exact
    stationary law (SGLD's, SGHMC's). The others' models bound the inflation
    from above (pSGLD's, for one, by a floor that its preconditioner's noise
    sets whatever the step), so the move predicted from that bound exceeds
    the chain's own, and the means may take the whole budget.
    """
    return config.mean_share if dynamics.exact_gaussian_model else 1.0


def _slow_warning(
    dynamics,
    model,
    curvatures,
    budget,
    step_size,
    relaxation,
    choices,
    sampler_name,
    estimator,
    sensitivity,
) -> str:
    """Return the warning for a chain that relaxes over ``relaxation`` inner steps.

    Where the step without any gradient noise would be less than twice as
    large, the spread of the curvatures, not the noise, keeps the steps
    small: a larger batch or a control variate would not shorten the
    relaxation, a posterior whose scales are closer would. Where ``budget``
    is below the user's, the tune draws' means move by ``sensitivity`` sds
    per unit of variance inflation (a skewed posterior): the inflation
    allowed was cut to keep that move within the means' share of the budget
    (:func:`mean_share`), and a larger bias budget would move the means
    beyond it. A chain already on
    the full data's gradient is not advised a larger batch; one whose
    dynamics have no exact Gaussian model is pointed to SGLD and SGHMC,
    whose chains on the full data's gradient bound each direction's move of
    the means at its own inflation (:mod:`pymc_sgmcmc.tuning.tempering`)
    instead of every direction's at the stiffest one's.
    """
    slow = f"the chain decorrelates only every ~{relaxation:.0f} inner steps"
    if budget < choices.bias_budget:
        advice = [
            "write the model closer to Gaussian (a hierarchical model in its other form, "
            "centred or non-centred, whichever it is not written in)"
        ]
        if estimator != FULL_DATA:
            advice.append("use a larger batch_size")
        elif not dynamics.exact_gaussian_model:
            advice.append(
                "use SGLD or SGHMC (on the full data's gradient they bound each direction's "
                "move of the means at its own inflation, which allows larger steps)"
            )
        return (
            f"{sampler_name}: the tune draws' means move by about {sensitivity:.2g} sd per "
            "unit of variance inflation (a skewed posterior, such as a hierarchical scale's), "
            f"so the steps are cut to {step_size:.3g} and {slow}; "
            f"a larger bias_budget would move the means, so {', '.join(advice)}, or sample it "
            "with NUTS."
        )
    if step_size >= 0.5 * _largest_step_size(model, curvatures, 0.0, budget):
        spread = curvatures.max() / curvatures.min()
        return (
            f"{sampler_name}: the steps must suit the largest curvature, {spread:.3g} times "
            f"the smallest in the metric's coordinates, so at step size {step_size:.3g} {slow}, "
            f"with any batch_size; {dynamics.stiffness_advice()}."
        )
    # Where the control variate was a candidate, its noise was weighed
    # already: forcing it would not shorten the relaxation.
    advice = (
        "a larger batch_size or a larger bias_budget"
        if "control_variate" in choices.estimators
        else "control_variate=True, a larger batch_size or a larger bias_budget"
    )
    return (
        f"{sampler_name}: meeting the bias budget needs step size {step_size:.3g}, so {slow}; "
        f"use {advice}."
    )


def gradient_work(estimator: str, choices: UserChoices, config: TuningConfig) -> float:
    """Return the gradient work of one inner step of ``estimator``, in minibatch gradients.

    The full data's gradient costs ``N / B`` minibatch gradients.
    """
    if estimator == FULL_DATA:
        return choices.full_data_work * config.estimator_cost["minibatch"]
    return config.estimator_cost[estimator]


def _step_work(estimator, metric, measurements, choices, config) -> float:
    """Return the work of one inner step, in minibatch gradients.

    A gradient on ``B`` rows costs ``B`` times a row's work
    (``measurements.row_work``, about ``2 D`` multiply-adds where every row
    touches every coordinate), to which the metric's maps add their own, and
    every step has a fixed cost of about ``config.step_overhead``
    multiply-adds besides.
    """
    size = measurements.mode.size
    per_row = measurements.row_work
    if per_row is None:
        per_row = 2.0 * size
    rows = measurements.batch_size
    if estimator == FULL_DATA:
        rows = rows * choices.full_data_work
    gradients = gradient_work(estimator, choices, config)
    overhead = config.step_overhead / (measurements.batch_size * per_row)
    return gradients * (1.0 + metric.extra_work(size) / (rows * per_row)) + overhead


def _on_epochs(dynamics, model, measurements, factor, noise, epochs, temperature):
    """Return ``model`` counting the noise on epochs (:mod:`pymc_sgmcmc.tuning.epochs`).

    The control variate's noise is the part that changes with the position,
    so where it was measured the plain estimator's noise splits into that
    part and the rest; where it was not, the noise counts as independent.
    Noise variances are divided by the ``temperature``, as the model takes them.
    """
    if not (np.isfinite(epochs) and dynamics.exact_gaussian_model):
        return model
    if "control_variate" not in measurements.noise_covariance:
        return model
    position_noise = min(measurements.noise("control_variate", factor), noise)
    return model.with_epochs(epochs, position_noise / temperature)


def _candidate_metrics(dynamics, measurements, choices, config):
    """Return the (metric, diagonal preconditioner) pairs the tuner chooses among.

    A given preconditioner, or dynamics whose options are in the model's
    coordinates (e.g. a given mass), run without a metric. Otherwise the
    metrics are built from the Laplace covariance at the mode: the diagonal
    one always, the dense one up to ``config.dense_size`` coordinates, the
    low-rank one beyond, and only the diagonal one where the Hessian is not
    negative definite.
    """
    size = measurements.mode.size
    if choices.preconditioner is not None:
        return [(IdentityMetric(), choices.preconditioner)]
    if not dynamics.accepts_metric():
        return [(IdentityMetric(), measurements.laplace_variance)]
    covariance = measurements.laplace_factor @ measurements.laplace_factor.T
    if choices.metric != "auto":
        kinds = [choices.metric]
    elif not measurements.log_concave:
        kinds = ["diagonal"]
    else:
        kinds = ["diagonal", "dense" if size <= config.dense_size else "low_rank"]
    ones = np.ones(size)
    return [
        (
            metric_from_covariance(
                kind, measurements.mode, covariance, config.low_rank, config.low_rank_spread
            ),
            ones,
        )
        for kind in kinds
    ]
