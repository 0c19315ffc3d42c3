"""The elementwise operations a row of the data costs in a compiled graph.

The tuner prices a gradient by the work of its rows
(:func:`~pymc_sgmcmc.tuning.measure.row_work`); a row's elementwise operations
are counted here, in the graph PyTensor compiled, so that the count is the
same for every seed and machine.
"""

from __future__ import annotations

import pytensor.scalar.basic as scalar
from pytensor.tensor.elemwise import Elemwise

__all__ = ["row_operations"]

# Scalar operations of about a multiply-add's cost; the others (exp, log,
# the sigmoid and its kin) cost several.
_ARITHMETIC = (
    scalar.Add,
    scalar.Sub,
    scalar.Mul,
    scalar.Neg,
    scalar.TrueDiv,
    scalar.IntDiv,
    scalar.Reciprocal,
    scalar.Mod,
    scalar.Sqr,
    scalar.Abs,
    scalar.Sign,
    scalar.GT,
    scalar.LT,
    scalar.GE,
    scalar.LE,
    scalar.EQ,
    scalar.NEQ,
    scalar.OR,
    scalar.AND,
    scalar.XOR,
    scalar.Invert,
    scalar.Switch,
    scalar.Identity,
    scalar.Cast,
    scalar.ScalarMaximum,
    scalar.ScalarMinimum,
    scalar.Second,
)


def row_operations(graph, indices) -> tuple[int, int]:
    """Return the elementwise operations a row costs in ``graph``: (arithmetic, others).

    Counted over the elementwise nodes that depend on ``indices`` (the
    batch's rows) and hold arrays, each operation inside a fused node
    counted once, and inside a node that holds a graph of its own (PyTensor
    fuses elementwise operations with the sums over the rows into one); the
    others are the transcendental functions.
    """
    rows = {indices}
    counts = [0, 0]
    for node in graph.toposort():
        if any(variable in rows for variable in node.inputs):
            rows.update(node.outputs)
            _count_operations(node, counts)
    return counts[0], counts[1]


def _count_operations(node, counts: list) -> None:
    """Add ``node``'s elementwise operations on arrays to ``counts`` (arithmetic, others)."""
    if isinstance(node.op, Elemwise):
        if node.outputs[0].ndim >= 1:
            for operation in _scalar_operations(node.op.scalar_op):
                counts[0 if isinstance(operation, _ARITHMETIC) else 1] += 1
        return
    inner = getattr(node.op, "fgraph", None)
    if inner is not None:
        for inner_node in inner.toposort():
            _count_operations(inner_node, counts)


def _scalar_operations(operation) -> list:
    """Return the scalar operations of ``operation``, those inside a fused one included."""
    if isinstance(operation, scalar.Composite):
        return [
            inner for node in operation.fgraph.toposort() for inner in _scalar_operations(node.op)
        ]
    return [operation]
