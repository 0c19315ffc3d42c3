"""Checks that a model's likelihood is one exchangeable term per observed row.

Minibatching replaces every N-row array the likelihood reads by its rows at
the batch indices. That is exact only if term ``i`` of the likelihood reads
row ``i`` of those arrays and nothing else; a lag, a slice or a cumulative
sum of the observed data breaks it silently. These functions refuse such
models, and the other models a minibatch cannot represent, with one-line
errors that say what to change, before anything is compiled for speed.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
from pymc.data import MinibatchIndexRV, MinibatchOp
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.traversal import ancestors, io_toposort
from pytensor.tensor import subtensor
from pytensor.tensor.basic import Join
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.random.type import RandomType
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

#: Integer-array indexing; PyTensor 3 has one op for every case.
_INTEGER_INDEXING = (AdvancedSubtensor, getattr(subtensor, "AdvancedSubtensor1", AdvancedSubtensor))

__all__ = ["MinibatchError", "check_batch_rows", "refuse_unsupported", "rows_of_observed"]


class MinibatchError(ValueError):
    """Raised when a model cannot be sampled from minibatches as written."""


#: Shape entries are scalar graphs evaluated once: compiling them for speed
#: would cost far more than running them.
_SHAPE_MODE = "FAST_COMPILE"


def _leading_length(variable: Variable) -> int | None:
    """Return the length of the first axis of a data variable, if it has one."""
    if variable.type.ndim == 0:
        return None
    if isinstance(variable, Constant):
        return int(np.shape(variable.data)[0])
    if isinstance(variable, SharedVariable):
        return int(np.shape(variable.get_value(borrow=True))[0])
    return int(variable.shape[0].eval(mode=_SHAPE_MODE))


def rows_of_observed(model: pm.Model) -> int:
    """Return the number of rows N shared by every observed variable."""
    if not model.observed_RVs:
        raise MinibatchError(
            "The model has no observed variables, so there is no data to minibatch: "
            "add `observed=` data or sample it with pm.sample() (NUTS)."
        )
    lengths = {}
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        length = _leading_length(value)
        if length is None:
            raise MinibatchError(
                f"Observed variable '{rv.name}' is a scalar and has no rows to minibatch: "
                "give its data a leading axis of observations."
            )
        lengths[rv.name] = length
    if len(set(lengths.values())) > 1:
        listing = ", ".join(f"'{name}' has {n}" for name, n in lengths.items())
        raise MinibatchError(
            f"Observed variables have different numbers of rows ({listing}); "
            "minibatching needs one row index shared by all of them: "
            "bring them to the same rows or sample the model with NUTS."
        )
    n_rows = next(iter(lengths.values()))
    if n_rows < 2:
        raise MinibatchError(f"The observed data has {n_rows} row; minibatching needs at least 2.")
    return n_rows


def refuse_unsupported(model: pm.Model) -> None:
    """Refuse ``pm.Minibatch`` data and observed data with missing values."""
    graph = ancestors([model.rvs_to_values[rv] for rv in model.observed_RVs] + model.observed_RVs)
    for variable in graph:
        owner = variable.owner
        if owner is not None and isinstance(owner.op, MinibatchIndexRV | MinibatchOp):
            raise MinibatchError(
                "The model uses pm.Minibatch, whose random indices make its log density "
                "random; pass the full data (e.g. pm.Data) instead and let the step "
                "method draw the minibatches."
            )
    # PyMC imputes missing observations: 'y' becomes the observed 'y_observed'
    # (the rows without NaN) and the free 'y_unobserved'.
    free = {rv.name for rv in model.free_RVs}
    for rv in model.observed_RVs:
        name = rv.name.removesuffix("_observed")
        if name != rv.name and f"{name}_unobserved" in free:
            raise MinibatchError(
                f"The observed data of '{name}' has missing values (NaN), which PyMC imputes "
                f"as the free variable '{name}_unobserved': drop the rows with missing values "
                "(from the covariates too) to minibatch, or sample the model with NUTS."
            )


def refuse_unmatched_rows(terms, row_arrays, n_rows: int, error: Exception | None = None):
    """Refuse a likelihood whose arrays do not all have the observed data's rows.

    Called when no array of ``n_rows`` rows was found (``row_arrays`` empty),
    or when the likelihood failed on a minibatch (``error``): both mean that
    an array with its own number of rows is read row by row next to the data.
    """
    others = {}
    for variable in ancestors(terms):
        if variable.owner is None and variable not in row_arrays and _is_data(variable):
            length = _leading_length(variable)
            if length not in (None, 1, n_rows):
                others[_name(variable)] = length
    listing = ", ".join(f"'{name}' has {length}" for name, length in others.items())
    if not row_arrays:
        raise MinibatchError(
            f"No array the likelihood reads has the observed data's {n_rows} rows "
            f"({listing or 'none has rows'}): the observed data is probably a slice or lag "
            "of a data array (e.g. observed=y[1:]); build sliced and lagged columns outside "
            "the model and pass each as pm.Data with the observed rows, or sample with NUTS."
        )
    reason = str(error).splitlines()[0] if error is not None else "its shape is wrong"
    raise MinibatchError(
        f"The likelihood fails on a minibatch ({reason}): the observed data has {n_rows} rows "
        f"but {listing or 'some array is not indexed by row'}; give every per-row array "
        "(data, covariates, index columns) the same rows, or sample with NUTS."
    )


def _is_data(variable: Variable) -> bool:
    return (
        isinstance(variable, Constant | SharedVariable)
        and not isinstance(variable.type, RandomType)
        and variable.type.ndim > 0
    )


def _name(variable: Variable) -> str:
    return variable.name or f"a {variable.type.ndim}-d array of shape {variable.type.shape}"


def check_batch_rows(model, terms, batch_terms, indices, point, n_rows, row_arrays):
    """Evaluate the minibatch terms and check they are one exchangeable term per row.

    Each term must have one entry per batch row, and a row's term must not
    change with the other rows of its batch: a lag or a statistic built from
    the observed data (e.g. ``y[:-1]`` as a mean) would otherwise be computed
    within the batch, silently. The error names the expression of ``terms``
    (the full-data likelihood terms) that combines rows, where it finds one.

    Parameters
    ----------
    model : pm.Model
        The model.
    terms, batch_terms : list of Variable
        Likelihood terms per observed variable, on the full data and on the
        rows at ``indices``.
    indices : Variable
        The batch's row indices.
    point : dict
        The model's initial point.
    n_rows : int
        Rows of the observed data.
    row_arrays : collection of Variable
        The N-row arrays of ``terms`` that the batch terms read at ``indices``.
    """
    function = pytensor.function(
        [indices, *model.value_vars], batch_terms, on_unused_input="ignore", mode=_SHAPE_MODE
    )
    values = [point[v.name] for v in model.value_vars]
    probe = np.arange(2 if n_rows != 2 else 1, dtype="int64")
    try:
        evaluated = function(probe, *values)
    except (ValueError, IndexError) as error:
        refuse_unmatched_rows(terms, row_arrays, n_rows, error)
    for term in evaluated:
        shape = np.shape(term)
        if len(shape) == 0 or shape[0] != len(probe):
            refuse_unmatched_rows(terms, row_arrays, n_rows)
    size = min(8, n_rows // 2)
    if size < 2:
        return
    # Two batches of equal length (so terms PyMC scales by total_size / B
    # compare too) that share their first rows, in another order and with
    # other neighbours.
    first = np.arange(size, dtype="int64")
    shared = first[: size // 2]
    second = np.concatenate([shared[::-1], np.arange(size, 2 * size - len(shared))])
    # At the initial point parameters are often 0 (a lag coefficient, say),
    # which can hide the dependence: move the continuous ones off it.
    offsets = np.random.default_rng(0)
    moved = [
        value + offsets.uniform(-0.5, 0.5, np.shape(value))
        if v.dtype in pm.pytensorf.continuous_types
        else value
        for v, value in zip(model.value_vars, values, strict=True)
    ]
    pairs = zip(function(first, *moved), function(second, *moved), strict=True)
    for rv, term, (alone, mixed) in zip(model.observed_RVs, terms, pairs, strict=True):
        same = np.allclose(alone[shared], mixed[: len(shared)][::-1], rtol=1e-9, equal_nan=True)
        if not same:
            mixing = row_mixing_expression(term, row_arrays)
            where = f" through `{mixing}`" if mixing else ""
            raise MinibatchError(
                f"The log likelihood of '{rv.name}' for one row reads other rows{where} (a lag, "
                "slice, cumulative sum or statistic of the data), so its rows are not "
                "exchangeable: give such values as a data column (pm.Data) or sample the "
                "model with NUTS."
            )


def row_mixing_expression(term: Variable, row_arrays) -> str | None:
    """Describe the first expression of ``term`` that combines different rows of the data.

    Rows flow through elementwise operations, dimension shuffles that keep
    the first axis first, ``X @ beta`` and indexing by a row-wise index
    column; shapes are not values and are skipped. Anything else that reads
    a row-wise value (a slice, a join along rows, a
    cumulative sum, a reduction, indexing into row-wise data) is reported.
    Returns None when no such expression is recognised.
    """
    rowwise = set(row_arrays)
    for node in io_toposort(list(row_arrays), [term]):
        touched = [i for i, variable in enumerate(node.inputs) if variable in rowwise]
        if not touched or isinstance(node.op, Shape | Shape_i):
            continue
        if _keeps_rows(node, touched):
            rowwise.update(node.outputs)
        else:
            return _describe(node.outputs[0])
    return None


def _keeps_rows(node, touched) -> bool:
    """Whether ``node`` maps row ``i`` of its row-wise inputs to row ``i`` of its output."""
    op = node.op
    if isinstance(op, Elemwise):
        return True
    if isinstance(op, DimShuffle):
        return len(op.new_order) > 0 and op.new_order[0] == 0
    if isinstance(op, Dot):
        return touched == [0]
    if isinstance(op, _INTEGER_INDEXING):
        return 0 not in touched
    if isinstance(op, Subtensor):
        first = op.idx_list[0] if op.idx_list else slice(None)
        return touched == [0] and first == slice(None)
    # Shape bookkeeping PyMC adds (Alloc, SpecifyShape, parameter checks)
    # keeps rows; a Join along rows or a cumulative or reducing op does not.
    if isinstance(op, Join):
        return False
    name = type(op).__name__
    return name in {"Alloc", "SpecifyShape", "CheckAndRaise", "CheckParameterValue", "Assert"}


def _describe(variable: Variable, depth: int = 3) -> str:
    """Write ``variable`` as a short expression, with slices and constants spelled out."""
    if variable.name:
        return variable.name
    if isinstance(variable, Constant):
        return np.array2string(np.asarray(variable.data), threshold=3)
    node = variable.owner
    if node is None or depth == 0:
        return "..."
    arguments = [_describe(v, depth - 1) for v in node.inputs]
    op = node.op
    if isinstance(op, Subtensor):
        values = iter(arguments[1:])
        parts = []
        for entry in op.idx_list:
            if isinstance(entry, slice):
                ends = [
                    "" if e is None else next(values) for e in (entry.start, entry.stop, entry.step)
                ]
                parts.append(":".join(ends if ends[2] else ends[:2]))
            else:
                parts.append(next(values))
        return f"{arguments[0]}[{', '.join(parts)}]"
    if isinstance(op, Join):
        return f"join({', '.join(arguments[1:])}, axis={arguments[0]})"
    return f"{op}({', '.join(arguments)})"
