"""Minibatch log-density of an unmodified PyMC model.

The log posterior of a model whose observed rows are exchangeable is

    log p(theta | y) = log p(theta) + sum_i log p(y_i | theta) + const.

Given a vector of row indices of length B, :func:`build_minibatch_log_density`
returns the PyTensor graph of the unbiased estimate

    log p(theta) + (N / B) * sum_{i in batch} log p(y_i | theta)

and of its gradient with respect to the (transformed, raveled) value variables.
The graph is built from the model's own log-probability terms: every array
with N leading rows that the likelihood reads (observed data, covariates given
as ``pm.Data`` or as numpy arrays, index columns) is replaced by its rows at
the batch indices, so each evaluation costs O(B) instead of O(N). The model
itself is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import join_nonshared_inputs
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors, io_toposort
from pytensor.tensor.basic import Alloc
from pytensor.tensor.random.type import RandomType
from pytensor.tensor.shape import SpecifyShape

from pymc_sgmcmc.disk_rows import prepare_rows
from pymc_sgmcmc.rows import (
    _SHAPE_MODE,
    MinibatchError,
    _leading_length,
    check_batch_rows,
    refuse_unmatched_rows,
    refuse_unsupported,
    rows_of_observed,
)

__all__ = [
    "MinibatchError",
    "MinibatchLogDensity",
    "build_minibatch_log_density",
    "refuse_row_latents_in_minibatches",
    "with_data",
]


@dataclass(frozen=True)
class MinibatchLogDensity:
    """Symbolic minibatch estimate of a model's log density.

    Attributes
    ----------
    position : TensorVariable
        Flat vector of the sampled (transformed) value variables.
    indices : TensorVariable
        Integer vector of the rows in the minibatch.
    log_prior : TensorVariable
        Log prior density of the value variables, with the Jacobians of their
        transforms and the model's potentials.
    log_likelihood : TensorVariable
        ``(N / B) * minibatch log likelihood``, an unbiased estimate of the
        full-data log likelihood (terms written with ``total_size=`` are
        scaled by PyMC itself and not rescaled again).
    prior_gradient, likelihood_gradient : TensorVariable
        Their gradients with respect to ``position``.
    n_rows : int
        Number of rows N shared by all observed variables.
    other_blocks : tuple of SharedVariable
        The values of the model's other free variables (sampled by other step
        methods), which the graphs read as shared variables.
    data : tuple of SharedVariable
        The N-row arrays the graphs gather minibatch rows from.
    row_latents : tuple of str
        Names of the value variables with one entry per row (per-row latent
        variables), which the likelihood reads at the batch's rows; sampled
        with full batches only (:func:`refuse_row_latents_in_minibatches`).
    """

    position: Variable
    indices: Variable
    log_prior: Variable
    log_likelihood: Variable
    prior_gradient: Variable
    likelihood_gradient: Variable
    n_rows: int
    other_blocks: tuple = ()
    data: tuple = ()
    row_latents: tuple = ()

    @property
    def log_density(self) -> Variable:
        """Minibatch estimate of the log posterior (up to a constant)."""
        return self.log_prior + self.log_likelihood

    @property
    def gradient(self) -> Variable:
        """Gradient of :attr:`log_density` with respect to :attr:`position`."""
        return self.prior_gradient + self.likelihood_gradient


def _constant_value(variable: Variable) -> int | None:
    """Return the value of a scalar shape entry that needs no value variable."""
    if isinstance(variable, Constant):
        return int(variable.data)
    inputs = [v for v in ancestors([variable]) if v.owner is None]
    if all(isinstance(v, Constant | SharedVariable) for v in inputs):
        return int(variable.eval(mode=_SHAPE_MODE))
    return None


def _rebuild(outputs, replacements, n_rows, batch_length):
    """Rebuild ``outputs`` with data replaced by its minibatch rows.

    Nodes that broadcast to, or assert, a leading length of N (PyMC's ``Alloc``
    to the variable's size and ``SpecifyShape`` from ``shape=``/``dims=``) get
    the batch length instead; otherwise they would silently broadcast the
    minibatch terms back to N rows.
    """
    memo = dict(replacements)
    for node in io_toposort([], outputs):
        new_inputs = [memo.get(variable, variable) for variable in node.inputs]
        if all(new is old for new, old in zip(new_inputs, node.inputs, strict=True)):
            continue
        if isinstance(node.op, Alloc) and len(new_inputs) > 1:
            if _constant_value(node.inputs[-node.outputs[0].type.ndim]) == n_rows:
                new_inputs[-node.outputs[0].type.ndim] = batch_length
        if isinstance(node.op, SpecifyShape) and len(new_inputs) > 1:
            first = node.inputs[1]
            if not isinstance(first.type, pytensor.tensor.type_other.NoneTypeT):
                if _constant_value(first) == n_rows:
                    new_inputs[1] = pt.constant(None)
        new_node = node.clone_with_new_inputs(new_inputs, strict=False)
        for old, new in zip(node.outputs, new_node.outputs, strict=True):
            memo[old] = new
    return [memo.get(output, output) for output in outputs]


def _data_replacements(terms, point, value_variables, n_rows, indices):
    """Map every N-row array read by the likelihood to its rows at ``indices``.

    Returns the data's replacements and, apart, those of the free variables
    with one entry per row (per-row latent variables), read at the same rows.
    """
    replacements, latents = {}, {}
    for variable in ancestors(terms):
        if variable.owner is not None or isinstance(variable.type, RandomType):
            continue
        if variable.type.ndim == 0:
            continue
        if variable in value_variables:
            shape = point[variable.name].shape
            if shape and shape[0] == n_rows:
                latents[variable] = variable[indices]
            continue
        if isinstance(variable, Constant | SharedVariable) and _leading_length(variable) == n_rows:
            replacements[variable] = _as_input(variable)[indices]
    return replacements, latents


def refuse_row_latents_in_minibatches(density: MinibatchLogDensity, full_batches: bool) -> None:
    """Refuse per-row latent variables unless every batch holds all rows.

    A per-row latent variable's likelihood gradient is only seen when its row
    is in the batch, scaled by N/B: unbiased, but noisy beyond use unless the
    batches hold the full data.

    Raises
    ------
    MinibatchError
        If ``density`` has per-row latent variables and the batches are not
        ``full_batches`` (all N rows, without replacement).
    """
    if density.row_latents and not full_batches:
        names = ", ".join(repr(name) for name in density.row_latents)
        raise MinibatchError(
            f"Free variable {names} has one entry per observed row (length {density.n_rows}); "
            f"per-row latent variables are sampled with full batches only: pass "
            f"batch_size={density.n_rows} (without replacement), marginalise them out or "
            "sample the model with NUTS."
        )


def _as_input(variable: Variable) -> Variable:
    """Return data held as a constant as a shared variable over the same array.

    Compiled functions then read the data as an input instead of embedding it
    in their code, so they compile (and are cached) independently of N.
    """
    if isinstance(variable, SharedVariable):
        return variable
    shape = (None, *variable.type.shape[1:])
    return pytensor.shared(variable.data, name=variable.name or "data", shape=shape, borrow=True)


def build_minibatch_log_density(
    model: pm.Model,
    value_variables: list[Variable],
    shared: dict[Variable, Variable] | None = None,
) -> MinibatchLogDensity:
    """Build the minibatch log-density graph of ``model``.

    Parameters
    ----------
    model : pm.Model
        The model, as the user wrote it; it is not modified.
    value_variables : list of Variable
        The value variables to sample; they are raveled into one vector.
    shared : dict, optional
        Replacements of the other value variables by shared variables (as made
        by ``pymc.pytensorf.make_shared_replacements``), when another step samples them.

    Returns
    -------
    MinibatchLogDensity
        The symbolic estimate and its gradient.

    Raises
    ------
    MinibatchError
        If the model has no observed rows to minibatch, observed variables of
        different lengths, per-row latent variables or ``pm.Minibatch`` data.
    """
    n_rows = rows_of_observed(model)
    refuse_unsupported(model)

    point = model.initial_point()
    terms = model.logp(vars=model.observed_RVs, sum=False)
    indices = pt.vector("minibatch_indices", dtype="int64")
    batch_length = indices.shape[0]
    replacements, latents = _data_replacements(terms, point, set(model.value_vars), n_rows, indices)
    if not replacements:
        refuse_unmatched_rows(terms, replacements, n_rows)
    batch_terms = _rebuild(terms, {**replacements, **latents}, n_rows, batch_length)

    # N is read from the data, not written into the graph as a number, so the
    # compiled code is the same for data sets of any length.
    data_rows = next(iter(replacements.values())).owner.inputs[0].shape[0]
    scale = pt.cast(data_rows, "float64") / pt.cast(batch_length, "float64")
    likelihood = pt.constant(0.0, dtype="float64")
    for rv, term in zip(model.observed_RVs, batch_terms, strict=True):
        if term.type.ndim == 0:
            raise MinibatchError(
                f"The log likelihood of '{rv.name}' does not factor over rows "
                "(it is one joint term, as pm.AR's or an MvNormal's across rows); it cannot "
                "be minibatched. Write one term per row given data (for a time series, pass "
                "the lagged values as pm.Data and model each y[t] on them), or sample it "
                "with NUTS."
            )
        already_scaled = isinstance(rv.owner.op, MinibatchRandomVariable)
        likelihood = likelihood + (term.sum() if already_scaled else scale * term.sum())
    prior = model.logp(vars=model.free_RVs + model.potentials)
    check_batch_rows(model, terms, batch_terms, indices, point, n_rows, replacements)
    [prior, likelihood], position = join_nonshared_inputs(
        point, [prior, likelihood], value_variables, shared
    )
    return MinibatchLogDensity(
        position,
        indices,
        prior,
        likelihood,
        pytensor.grad(prior, position, disconnected_inputs="ignore"),
        pytensor.grad(likelihood, position, disconnected_inputs="ignore"),
        n_rows,
        tuple((shared or {}).values()),
        tuple(gather.owner.inputs[0] for gather in replacements.values()),
        tuple(variable.name for variable in latents),
    )


def with_data(density: MinibatchLogDensity, arrays: dict, containers: dict) -> MinibatchLogDensity:
    """Return ``density`` reading ``arrays`` where it read the model's ``pm.Data``.

    The graphs gather their rows from new shared variables holding the given
    arrays, and N is their number of rows; the model's containers keep their
    values.

    Parameters
    ----------
    density : MinibatchLogDensity
        The density built from the model (with a subset of the rows).
    arrays : dict
        The full arrays by container name (see :func:`~pymc_sgmcmc.disk_rows.prepare_rows`).
    containers : dict
        The model's ``pm.Data`` by name.

    Raises
    ------
    MinibatchError
        If ``arrays`` leaves out an array the likelihood reads by row, names
        one it does not, or gives arrays of different lengths, or of another
        length than the model's per-row latent variables.
    """
    rows = {variable.name: variable for variable in density.data}
    loose = sorted(name for name in rows if containers.get(name) is not rows[name])
    if loose:
        raise MinibatchError(
            f"data= replaces the model's pm.Data, but the likelihood reads "
            f"{', '.join(map(repr, loose))} by row from an array given directly: hold it in "
            "pm.Data (with a subset of the rows) and give the full array in data=."
        )
    unknown = sorted(set(arrays) - set(rows))
    if unknown:
        raise MinibatchError(
            f"data= names {', '.join(map(repr, unknown))}, which the likelihood does not read "
            f"by row; it reads {', '.join(map(repr, sorted(rows)))}."
        )
    missing = sorted(set(rows) - set(arrays))
    if missing:
        raise MinibatchError(
            "data= must give every array the likelihood reads by row: add "
            f"{', '.join(map(repr, missing))}."
        )
    replacements = {}
    for name, old in rows.items():
        array = prepare_rows(name, arrays[name], old.get_value(borrow=True))
        new = pytensor.shared(array, name=name, shape=(None, *old.type.shape[1:]), borrow=True)
        # The shared value is a plain view of a mapped file, which would pickle
        # the file's contents; the file itself pickles as its name.
        new.container.storage[0] = array
        replacements[old] = new
    lengths = {
        name: len(new.get_value(borrow=True))
        for name, new in zip(rows, replacements.values(), strict=True)
    }
    if len(set(lengths.values())) > 1:
        raise MinibatchError(
            "data= arrays must have the same number of rows, got "
            + ", ".join(f"{name}: {length}" for name, length in lengths.items())
            + "."
        )
    n_rows = next(iter(lengths.values()))
    if density.row_latents and n_rows != density.n_rows:
        names = ", ".join(repr(name) for name in density.row_latents)
        raise MinibatchError(
            f"data= gives {n_rows} rows, but the per-row latent variable {names} has one entry "
            f"for each of the model's {density.n_rows}: give the model all rows, not data=."
        )
    outputs = graph_replace(
        [
            density.log_prior,
            density.log_likelihood,
            density.prior_gradient,
            density.likelihood_gradient,
        ],
        replacements,
        strict=False,
    )
    return replace(
        density,
        log_prior=outputs[0],
        log_likelihood=outputs[1],
        prior_gradient=outputs[2],
        likelihood_gradient=outputs[3],
        n_rows=n_rows,
        data=tuple(replacements.values()),
    )
