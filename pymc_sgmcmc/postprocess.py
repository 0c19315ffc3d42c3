r"""Posterior estimators computed from a returned trace.

Two estimators of posterior means that use more than the plain average of
the draws:

- :func:`step_size_weighted_mean` weights each draw by the step size that
  produced it, the estimator for chains run with a decreasing step-size
  schedule (Welling & Teh 2011):

  .. math:: \hat h = \sum_t \eta_t\, h(\theta_t) \Big/ \sum_t \eta_t .

- :func:`zero_variance_mean` adds to each quantity a multiple of the score
  (the gradient of the log density) fitted by least squares, the first-order
  zero-variance control variates of Mira, Solgi & Imparato (2013):

  .. math:: \hat\phi_{ZV} = \phi + a^\top \nabla_z \log \pi(z),
            \qquad a = -\operatorname{Var}(\nabla_z \log\pi)^{-1}
            \operatorname{Cov}(\nabla_z \log \pi, \phi).

Both take what ``pm.sample`` returns: an ``arviz.InferenceData`` (PyMC 5) or
an xarray ``DataTree`` (PyMC 6); they read its ``posterior`` group (and, for
the step sizes, its ``sample_stats`` group) as xarray datasets.

:func:`unconstrained_draws` maps the draws of a trace to the model's
unconstrained space and evaluates the score there; the zero-variance
estimator and the kernel Stein discrepancy (:mod:`pymc_sgmcmc.stein`) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import xarray as xr
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.compiling import compile_function
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.minibatch import (
    build_minibatch_log_density,
    refuse_row_latents_in_minibatches,
    with_data,
)
from pymc_sgmcmc.step_method import PROBE_MODE
from pymc_sgmcmc.tuning.config import TuningConfig

__all__ = [
    "UnconstrainedDraws",
    "step_size_weighted_mean",
    "trace_group",
    "unconstrained_draws",
    "zero_variance_mean",
]

SAMPLE_DIMS = ("chain", "draw")


def trace_group(trace, name: str) -> xr.Dataset:
    """Return group ``name`` of a trace as an xarray Dataset.

    Parameters
    ----------
    trace : arviz.InferenceData, xarray.DataTree or xarray.Dataset
        What ``pm.sample`` returned (PyMC 5 or PyMC 6). A Dataset is taken to
        be the group itself.
    name : str
        The group, e.g. ``"posterior"`` or ``"sample_stats"``.

    Returns
    -------
    xarray.Dataset

    Raises
    ------
    ValueError
        If the trace has no such group.
    """
    if isinstance(trace, xr.Dataset):
        return trace
    try:
        group = trace[name]
    except (KeyError, AttributeError, TypeError):
        raise ValueError(f"The trace has no '{name}' group.") from None
    if isinstance(group, xr.Dataset):
        return group
    if hasattr(group, "to_dataset"):
        return group.to_dataset()
    raise ValueError(f"The '{name}' group of the trace is not an xarray dataset.")


def _select(posterior: xr.Dataset, var_names: Sequence[str] | str | None) -> xr.Dataset:
    if var_names is None:
        return posterior
    names = [var_names] if isinstance(var_names, str) else list(var_names)
    missing = [name for name in names if name not in posterior.data_vars]
    if missing:
        raise ValueError(f"The posterior has no variables {missing}.")
    return posterior[names]


# Step-size weighted mean ----------------------------------------------------------


def step_size_weighted_mean(
    trace,
    var_names: Sequence[str] | str | None = None,
    function: Callable[[xr.Dataset], xr.Dataset | xr.DataArray] | None = None,
    per_chain: bool = False,
) -> xr.Dataset | xr.DataArray:
    r"""Posterior means with each draw weighted by the step size that produced it.

    For a chain run with decreasing step sizes :math:`\eta_t`, the draws
    :math:`\theta_t` are a discretisation of the Langevin diffusion in which
    draw :math:`t` stands for a time :math:`\eta_t`; the time average

    .. math:: \hat h = \frac{\sum_t w_t\, h(\theta_t)}{\sum_t w_t}, \qquad w_t = \eta_t,

    (Welling & Teh 2011) has a smaller variance than the plain average,
    which over-weights the late, slowly mixing and strongly correlated
    draws. With a constant step size it is the plain average.

    Each draw is weighted by ``sample_stats["step_size"]`` times
    ``sample_stats["steps_per_draw"]`` when the trace records it: a draw is
    the last of ``steps_per_draw`` inner steps, so it stands for the time of
    all of them. When ``steps_per_draw`` is the same for every draw (or
    absent) the weights are the step sizes. (The recorded step size is that
    of the draw's last inner step; a schedule that changes much within one
    draw's inner steps makes the weight an approximation.) Chains are pooled
    by default: every draw of every chain enters one weighted sum.

    Parameters
    ----------
    trace : arviz.InferenceData or xarray.DataTree
        What ``pm.sample`` returned, with ``posterior`` and ``sample_stats``
        groups; ``sample_stats`` holds ``step_size`` (one value per chain and
        draw).
    var_names : str or sequence of str, optional
        Posterior variables to average; all of them when omitted.
    function : callable, optional
        Applied to the (selected) posterior dataset before averaging, e.g.
        ``lambda posterior: posterior**2`` for second moments; it must keep
        the ``chain`` and ``draw`` dimensions.
    per_chain : bool, default False
        Average within each chain, returning estimates with a ``chain``
        dimension.

    Returns
    -------
    xarray.Dataset or xarray.DataArray
        The weighted means, laid out as ``posterior.mean(("chain", "draw"))``
        (``posterior.mean("draw")`` with ``per_chain=True``; a DataArray when
        ``function`` returns one).

    Raises
    ------
    ValueError
        If the trace records no step sizes, or one is not a positive finite
        number.
    """
    posterior = _select(trace_group(trace, "posterior"), var_names)
    statistics = trace_group(trace, "sample_stats")
    if "step_size" not in statistics.data_vars:
        raise ValueError("The trace's sample_stats group has no 'step_size'.")
    weights = statistics["step_size"].astype(float)
    if "steps_per_draw" in statistics.data_vars:
        weights = weights * statistics["steps_per_draw"]
    values = np.asarray(weights)
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError("The step sizes must be positive finite numbers to weight the draws.")
    data = posterior if function is None else function(posterior)
    return data.weighted(weights).mean("draw" if per_chain else SAMPLE_DIMS)


# Draws in the unconstrained space and their scores -------------------------------------


@dataclass(frozen=True)
class UnconstrainedDraws:
    """Draws in the model's unconstrained space, with the score at each.

    Attributes
    ----------
    positions : ndarray of shape (chain, draw, size)
        The continuous value variables (transformed, e.g. ``sigma_log__``),
        raveled and joined in the order of ``value_names``.
    scores : ndarray of shape (chain, draw, size)
        The gradient of the model's log density with respect to
        ``positions``, Jacobians of the transforms included: the full-data
        gradient, or its unbiased minibatch estimate when a batch size was
        given (an independent batch at every draw).
    value_names : tuple of str
        Names of the value variables, in order.
    coordinates : dict of str to slice
        The columns of each free variable, by the name it has in the trace
        (e.g. ``"sigma"`` for the value variable ``sigma_log__``).
    batch_size : int or None
        The minibatch size of the scores; None for full-data scores.
    """

    positions: np.ndarray
    scores: np.ndarray
    value_names: tuple
    coordinates: dict
    batch_size: int | None = None

    def columns(self, var_names: Sequence[str] | str | None = None) -> np.ndarray:
        """Return the column indices of the free variables ``var_names`` (all when None)."""
        if var_names is None:
            return np.arange(self.positions.shape[-1])
        names = [var_names] if isinstance(var_names, str) else list(var_names)
        unknown = [name for name in names if name not in self.coordinates]
        if unknown:
            raise ValueError(
                f"{unknown} are not continuous free variables of the model; "
                f"choose among {sorted(self.coordinates)}."
            )
        return np.concatenate(
            [np.arange(self.positions.shape[-1])[self.coordinates[n]] for n in names]
        )


def _forward_function(model: pm.Model):
    """Compile the map from the free variables as stored to their value variables."""
    free = list(model.free_RVs)
    placeholders = [rv.type(name=rv.name) for rv in free]
    outputs = []
    for rv, placeholder in zip(free, placeholders, strict=True):
        transform = model.rvs_to_transforms.get(rv)
        value = (
            placeholder if transform is None else transform.forward(placeholder, *rv.owner.inputs)
        )
        outputs.append(value.astype(model.rvs_to_values[rv].dtype))
    # The transforms' parameters (e.g. an Interval's bounds) may be other free
    # variables: they take their values at the same draw.
    outputs = graph_replace(outputs, dict(zip(free, placeholders, strict=True)), strict=False)
    function = compile_function(placeholders, outputs, mode=PROBE_MODE, on_unused_input="ignore")
    return free, function


def _score_function(model: pm.Model, continuous, batch_size: int | None, data=None):
    """Compile the score of the continuous value variables; return it, its shared inputs, N."""
    point = model.initial_point()
    shared = make_shared_replacements(point, continuous, model)
    if data is not None:
        return _score_on_data(model, continuous, shared, batch_size, data)
    if batch_size is None:
        [log_density], position = join_nonshared_inputs(
            point, [model.logp(jacobian=True)], continuous, shared
        )
        gradient = pytensor.grad(log_density, position)
        function = compile_function([position], gradient, mode=PROBE_MODE)
        return function, shared, None
    density = build_minibatch_log_density(model, continuous, shared)
    _check_batch_size(batch_size, density.n_rows)
    refuse_row_latents_in_minibatches(density, batch_size == density.n_rows)
    function = compile_function(
        [density.position, density.indices], density.gradient, mode=PROBE_MODE
    )
    return function, shared, density.n_rows


def _score_on_data(model, continuous, shared, batch_size, data):
    """Return the score over ``data`` (arrays standing for the model's ``pm.Data``).

    With ``batch_size`` the minibatch estimate, as from the model's own data;
    otherwise the full-data score, summed over chunks of rows as the step
    methods' full passes are (:meth:`pymc_sgmcmc.estimators.Probe.full`).
    """
    containers = {variable.name: variable for variable in model.data_vars}
    density = with_data(build_minibatch_log_density(model, continuous, shared), data, containers)
    n_rows = density.n_rows
    if batch_size is not None:
        _check_batch_size(batch_size, n_rows)
        refuse_row_latents_in_minibatches(density, batch_size == n_rows)
        function = compile_function(
            [density.position, density.indices], density.gradient, mode=PROBE_MODE
        )
        return function, shared, n_rows
    probe = Probe(density, {"mode": PROBE_MODE}, TuningConfig().chunk_rows)

    def score(position):
        return probe.full(position)[1]

    return score, shared, None


def _check_batch_size(batch_size, n_rows: int) -> None:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int | np.integer)
        or not 1 <= batch_size <= n_rows
    ):
        raise ValueError(
            f"batch_size must be an integer between 1 and the {n_rows} rows, got {batch_size!r}."
        )


def unconstrained_draws(
    trace,
    model: pm.Model | None = None,
    batch_size: int | None = None,
    random_seed=None,
    data: dict | None = None,
) -> UnconstrainedDraws:
    r"""Map the draws of a trace to the unconstrained space and evaluate the score there.

    The trace stores the free variables as the model defines them (e.g.
    ``sigma > 0``); each is mapped through its transform's ``forward`` (e.g.
    ``sigma_log__ = log(sigma)``), and the gradient of ``model.logp()`` with
    the transforms' Jacobians (the log density of the transformed variables,
    which the samplers target) is evaluated by PyTensor at every draw. That
    density lives on all of :math:`\mathbb{R}^D`, where the identity
    :math:`E_\pi[\nabla_z \log \pi(z)] = 0` holds.

    Discrete free variables are read from the trace and held fixed in each
    draw's gradient; only the continuous value variables are differentiated.

    Parameters
    ----------
    trace : arviz.InferenceData, xarray.DataTree or xarray.Dataset
        What ``pm.sample`` returned, or its ``posterior`` group; it must hold
        every free variable of the model.
    model : pm.Model, optional
        The model the trace was sampled from; the one in context by default.
    batch_size : int, optional
        Use the unbiased minibatch estimate of the score,
        ``grad log prior + (N / B) * grad sum of B rows' log likelihood``,
        with an independent batch of ``batch_size`` rows (without
        replacement) at every draw: each gradient costs O(B D) instead of
        O(N D). The full-data gradient by default.
    random_seed : int or numpy.random.Generator, optional
        Seeds the minibatches.
    data : dict, optional
        The full data the step method was given (``data=``) where the model
        holds a subset of the rows; the score is then taken over it.

    Returns
    -------
    UnconstrainedDraws

    Raises
    ------
    ValueError
        If the trace lacks a free variable, the model has no continuous free
        variable, or a score is not finite.
    """
    model = pm.modelcontext(model)
    posterior = trace_group(trace, "posterior")
    continuous = list(model.continuous_value_vars)
    if not continuous:
        raise ValueError("The model has no continuous free variables.")
    missing = [rv.name for rv in model.free_RVs if rv.name not in posterior.data_vars]
    if missing:
        raise ValueError(f"The trace has no draws of the free variables {missing}.")

    free, forward = _forward_function(model)
    score, shared, n_rows = _score_function(model, continuous, batch_size, data)
    values_to_rvs = {value: rv for rv, value in model.rvs_to_values.items()}
    value_index = {model.rvs_to_values[rv]: i for i, rv in enumerate(free)}
    draws = [np.asarray(posterior[rv.name].transpose(*SAMPLE_DIMS, ...)) for rv in free]
    draws = [array.astype(rv.dtype, copy=False) for array, rv in zip(draws, free, strict=True)]
    n_chains, n_draws = draws[0].shape[:2]
    rng = np.random.default_rng(random_seed)

    positions, scores = [], []
    for chain in range(n_chains):
        for draw in range(n_draws):
            values = forward(*(array[chain, draw] for array in draws))
            for value_variable, shared_variable in shared.items():
                shared_variable.set_value(values[value_index[value_variable]])
            position = np.concatenate(
                [np.ravel(values[value_index[variable]]) for variable in continuous]
            ).astype(float)
            if n_rows is None:
                gradient = score(position)
            else:
                gradient = score(position, rng.choice(n_rows, int(batch_size), replace=False))
            positions.append(position)
            scores.append(gradient)
    positions = np.reshape(positions, (n_chains, n_draws, -1))
    scores = np.reshape(scores, (n_chains, n_draws, -1))
    if not np.all(np.isfinite(scores)):
        raise ValueError("The score is not finite at some draws (outside the model's support?).")

    coordinates, start, point = {}, 0, model.initial_point()
    for variable in continuous:
        size = int(np.prod(point[variable.name].shape, dtype=int))
        coordinates[values_to_rvs[variable].name] = slice(start, start + size)
        start += size
    return UnconstrainedDraws(
        positions,
        scores,
        tuple(variable.name for variable in continuous),
        coordinates,
        None if batch_size is None else int(batch_size),
    )


# Zero-variance control variates ----------------------------------------------------


def _control_variate_means(quantities: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Return the intercepts of the least-squares fits of ``quantities`` on ``scores``.

    ``quantities`` is (n, P) and ``scores`` (n, D); the intercept
    ``mean(phi) - mean(s) @ b`` with ``b`` the slope is the mean of
    ``phi + a' s`` with ``a = -b = -Var(s)^-1 Cov(s, phi)``.
    """
    centred_scores = scores - scores.mean(axis=0)
    centred = quantities - quantities.mean(axis=0)
    slopes = np.linalg.lstsq(centred_scores, centred, rcond=None)[0]
    return quantities.mean(axis=0) - scores.mean(axis=0) @ slopes


def zero_variance_mean(
    trace,
    model: pm.Model | None = None,
    var_names: Sequence[str] | str | None = None,
    batch_size: int | None = None,
    per_chain: bool = False,
    random_seed=None,
    data: dict | None = None,
) -> xr.Dataset:
    r"""Posterior means with first-order zero-variance control variates.

    For a quantity :math:`\phi` (each element of each variable, as stored in
    the trace) and the score :math:`s(z) = \nabla_z \log \pi(z)` in the
    unconstrained space,

    .. math:: \hat\phi_{ZV} = \frac{1}{T}\sum_t \bigl(\phi(z_t) + a^\top s(z_t)\bigr),
              \qquad a = -\widehat{\operatorname{Var}}(s)^{-1}\,
              \widehat{\operatorname{Cov}}(s, \phi),

    i.e. the intercept of the least-squares regression of :math:`\phi` on the
    score (Mira, Solgi & Imparato 2013). Since :math:`E_\pi[s] = 0`, any
    :math:`a` leaves the expectation unchanged and the fitted one minimises
    the variance; the coefficients are estimated from the same draws, which
    adds a bias of order 1/T. For a Gaussian posterior and :math:`\phi = z`
    the control variate is exact and the estimate has no Monte Carlo error.

    A constrained variable is estimated on the scale the trace stores it:
    for ``sigma ~ HalfNormal``, :math:`\phi = \sigma = e^z` while the score is
    taken with respect to :math:`z` = ``sigma_log__``, with the Jacobian; this
    is valid because :math:`E_\pi[s(z)] = 0` for the density of :math:`z` on
    :math:`\mathbb{R}` and :math:`\phi` may be any function of :math:`z`
    (with finite variance). Deterministics in the posterior are estimated
    likewise.

    Parameters
    ----------
    trace : arviz.InferenceData or xarray.DataTree
        What ``pm.sample`` returned; its posterior must hold every free
        variable of the model.
    model : pm.Model, optional
        The model the trace was sampled from; the one in context by default.
    var_names : str or sequence of str, optional
        Posterior variables (free or deterministic) to estimate; all of them
        by default. Discrete variables are estimated too, with the score of
        the continuous ones.
    batch_size : int, optional
        Use a minibatch estimate of the score (see
        :func:`unconstrained_draws`): each gradient costs O(B D) instead of
        O(N D). The control variate stays unbiased, but its minibatch noise
        is uncorrelated with :math:`\phi`, so the fitted coefficients shrink
        and less variance is removed (nothing when the noise dominates the
        score's spread).
    per_chain : bool, default False
        Fit the coefficients and average within each chain, returning
        estimates with a ``chain`` dimension. By default all draws of all
        chains are pooled into one fit and one mean.
    random_seed : int or numpy.random.Generator, optional
        Seeds the minibatches.
    data : dict, optional
        As for :func:`unconstrained_draws`: the full data where the model
        holds a subset of the rows.

    Returns
    -------
    xarray.Dataset
        The estimates, laid out as ``posterior.mean(("chain", "draw"))``
        (``posterior.mean("draw")`` with ``per_chain=True``).

    Raises
    ------
    ValueError
        If there are not more draws per fit than score coordinates plus one.

    Notes
    -----
    The cost is one gradient per draw, O(N D) each (O(B D) with
    minibatches), and a least-squares fit, O(T D (D + P)) for T draws, D
    coordinates of the score and P estimated quantities.
    """
    posterior = _select(trace_group(trace, "posterior"), var_names)
    draws = unconstrained_draws(trace, model, batch_size, random_seed, data)
    scores = draws.scores
    n_chains, n_draws, size = scores.shape
    if per_chain:
        groups = [(scores[chain], (chain,)) for chain in range(n_chains)]
    else:
        groups = [(scores.reshape(n_chains * n_draws, size), ())]
    if groups[0][0].shape[0] <= size + 1:
        raise ValueError(
            f"The control variates need more draws per fit ({groups[0][0].shape[0]}) than "
            f"score coordinates plus one ({size + 1})."
        )

    dims = ("draw",) if per_chain else SAMPLE_DIMS
    result = posterior.mean(dims)
    for name, variable in posterior.data_vars.items():
        variable = variable.transpose(*SAMPLE_DIMS, ...)
        values = np.asarray(variable, dtype=float)
        estimate = np.empty((n_chains, *values.shape[2:]) if per_chain else values.shape[2:])
        for group_scores, index in groups:
            selected = values[index[0]] if per_chain else values.reshape(n_chains * n_draws, -1)
            flat = selected.reshape(selected.shape[0], -1)
            estimate[index] = _control_variate_means(flat, group_scores).reshape(values.shape[2:])
        template = result[name]
        result[name] = (
            variable.dims[:1] + variable.dims[2:] if per_chain else variable.dims[2:],
            estimate,
        )
        result[name].attrs = template.attrs
    return result
