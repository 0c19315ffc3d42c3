"""Compiling the package's PyTensor functions, every one with the same Numba flags.

Numba's fast-math flags let LLVM assume that values are finite, which would
remove a kernel's check for a diverging step, so the kernels are compiled
without them. Numba's on-disk cache keeps one entry for the code PyTensor
generates for an operation, whichever flags compiled it: a tuning function
compiled with them and a kernel compiled without them would overwrite each
other's code, and a first run (which compiles) and a later run (which reads
the cache) would compute with different code, so that the same seed gave
other draws. Every function of the package is therefore compiled without them.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import apply_ancestors
from pytensor.scalar.math import Psi
from pytensor.tensor.elemwise import Elemwise

__all__ = ["cacheable", "compile_function", "digamma", "numba_flags"]

#: The digamma's argument is raised by this much, by its recurrence, before its
#: asymptotic series, whose first omitted term is then below 1e-16.
DIGAMMA_SHIFT = 10

#: ``B_2k / 2k`` for k = 1 to 7, the asymptotic series' coefficients of ``y^-2k``.
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def numba_flags():
    """Return the context in which the package compiles: Numba without fast-math flags."""
    return pytensor.config.change_flags(numba__fastmath=False)


def compile_function(inputs, outputs, **kwargs):
    """Return :func:`pytensor.function` of ``inputs`` and :func:`cacheable` ``outputs``.

    Compiled in :func:`numba_flags`.
    """
    with numba_flags():
        return pytensor.function(inputs, cacheable(outputs), **kwargs)


def digamma(x):
    r"""Return the digamma function of ``x`` as a graph of operations Numba's cache can hold.

    For :math:`x > 0`, :math:`\psi(x) = \psi(x + n) - \sum_{k < n} 1 / (x + k)`
    with :math:`n` = :data:`DIGAMMA_SHIFT`, and :math:`\psi(y)` for
    :math:`y \ge n` from its asymptotic series,
    :math:`\log y - 1 / 2y - \sum_k B_{2k} / (2k\, y^{2k})` to :math:`k = 7`.
    Elsewhere the reflection :math:`\psi(x) = \psi(1 - x) - \pi / \tan \pi x`.
    """
    positive = pt.switch(x > 0, x, 1.0 - x)
    shifted = positive + DIGAMMA_SHIFT
    inverse_square = 1.0 / shifted**2
    series = pt.zeros_like(shifted)
    for coefficient in reversed(_DIGAMMA_SERIES):
        series = (series + coefficient) * inverse_square
    recurrence = sum(1.0 / (positive + k) for k in range(DIGAMMA_SHIFT))
    value = pt.log(shifted) - 0.5 / shifted - series - recurrence
    return pt.switch(x > 0, value, value - np.pi / pt.tan(np.pi * x))


def cacheable(outputs):
    """Return ``outputs`` with every digamma replaced by :func:`digamma`'s graph.

    PyTensor's Numba backend calls SciPy's digamma through a pointer to its
    compiled code, and Numba's on-disk cache does not keep code that holds
    one: every new process compiled a model with a digamma in its gradient (a
    Gamma, negative binomial, Beta or Student-t likelihood with an unknown
    shape) again, 15 to 20 s for a kernel. Other graphs are returned as they
    are.
    """
    for _ in range(8):
        replacements = {
            node.outputs[0]: pt.cast(digamma(node.inputs[0]), node.outputs[0].dtype)
            for node in apply_ancestors(outputs if isinstance(outputs, list | tuple) else [outputs])
            if isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, Psi)
        }
        if not replacements:
            return outputs
        outputs = graph_replace(outputs, replacements, strict=False)
    return outputs
