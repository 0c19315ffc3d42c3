"""The exact Hessian of a minibatch log density, from one compiled call per piece of rows.

Differencing the gradient costs two gradient calls per coordinate (or per
group of coordinates that never meet, :mod:`pymc_sgmcmc.tuning.sparsity`),
each a pass over the rows. PyTensor can instead differentiate the gradient
once more along every coordinate at once: the Hessian-vector product
(reverse mode over the gradient) vectorised over the ``D`` unit directions
(:func:`pytensor.graph.replace.vectorize_graph`). On a regression that graph
multiplies the design by a ``D`` by ``D`` matrix in one call instead of by a
vector ``2 D`` times, and the result carries no differencing error. Its
intermediates hold ``D`` numbers per row, so the rows are taken in pieces of
at most :data:`PIECE_ELEMENTS` such numbers.

The graph is compiled with PyTensor's C backend (:data:`EXACT_HESSIAN_MODE`):
it is autodiff over autodiff, which C compiles in seconds once its code is in
PyTensor's cache, and whose Numba compilation PyTensor 2 repeats in every new
process. A graph PyTensor cannot differentiate twice leaves the Hessian to
the differences (:meth:`ExactHessian.__call__` returns ``None``).
"""

from __future__ import annotations

import logging

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.utils import ParameterValueError
from pytensor.compile.mode import Mode
from pytensor.gradient import grad
from pytensor.graph.replace import vectorize_graph

from pymc_sgmcmc.compiling import compile_function
from pymc_sgmcmc.direct import direct_call
from pymc_sgmcmc.minibatch import MinibatchLogDensity

__all__ = ["EXACT_HESSIAN_MODE", "PIECE_ELEMENTS", "ExactHessian"]

#: PyTensor mode the exact Hessian is compiled with: the C backend after the
#: rewrites of ``FAST_COMPILE`` only. Some vectorised second derivatives (a
#: hierarchical regression's, on PyTensor 2) send the full set of rewrites
#: into minutes of work; these few leave the vectorised products as built.
EXACT_HESSIAN_MODE = Mode(linker="cvm", optimizer="fast_compile")
#: Rows times coordinates one call reads at most (its intermediates' size).
PIECE_ELEMENTS = 2**21

_log = logging.getLogger("pymc")


def _products(gradient, position, directions):
    """Return the Jacobian of ``gradient`` times each row of ``directions``, as rows.

    The Hessian-vector product (reverse mode over the gradient, the direction
    held fixed) vectorised over a matrix of directions given at call time.
    Unit directions written into the graph as a constant would let PyTensor
    fold them with the model's constant data into arrays of D times N numbers.
    """
    direction = pt.vector("direction", dtype=position.dtype)
    product = grad(pt.sum(gradient * direction), position, consider_constant=[direction])
    return vectorize_graph(product, replace={direction: directions})


class ExactHessian:
    """The Hessians of a minibatch log density and of its log prior, exact to rounding.

    Parameters
    ----------
    density : MinibatchLogDensity
        The symbolic density; the likelihood on ``B`` rows is scaled by
        ``N / B`` as in its gradient.
    """

    def __init__(self, density: MinibatchLogDensity):
        self.density = density
        self._function = None
        self._failed = False

    def __reduce__(self):
        # Compiled code does not survive pickling: compile again on first use.
        return (ExactHessian, (self.density,))

    @property
    def available(self) -> bool:
        """Whether the graph has not been found impossible to differentiate twice."""
        return not self._failed

    def _compiled(self):
        """Return the compiled function, or ``None`` where PyTensor cannot build it."""
        if self._function is None and not self._failed:
            density = self.density
            try:
                directions = pt.matrix("directions", dtype=density.position.dtype)
                prior, likelihood = (
                    _products(gradient, density.position, directions)
                    for gradient in (density.prior_gradient, density.likelihood_gradient)
                )
                function = compile_function(
                    [density.position, density.indices, directions],
                    [prior, likelihood],
                    mode=EXACT_HESSIAN_MODE,
                    on_unused_input="ignore",
                )
            except (NotImplementedError, TypeError, ValueError) as error:
                # An operation without a second derivative: differences instead.
                _log.debug("No exact Hessian for this model (%s); differencing.", error)
                self._failed = True
                return None
            self._function = direct_call(function, 3)
        return self._function

    def __call__(self, position, indices, piece_rows: int | None = None):
        """Return the Hessians of the log density on ``indices`` and of the log prior alone.

        The likelihood's is the mean over pieces of rows, each weighted by its
        rows, as the gradient's in :meth:`~pymc_sgmcmc.estimators.Probe.terms`;
        ``piece_rows`` caps a piece's rows further. Both are ``NaN`` where the
        model's parameter checks fail at ``position``, and ``None`` is
        returned where the graph cannot be differentiated twice.
        """
        function = self._compiled()
        if function is None:
            return None
        dtype = self.density.position.dtype
        position = np.ascontiguousarray(position, dtype=dtype)
        indices = np.asarray(indices, dtype=np.int64)
        rows = max(1, PIECE_ELEMENTS // max(position.size, 1))
        if piece_rows is not None:
            rows = min(rows, piece_rows)
        directions = np.eye(position.size, dtype=dtype)
        prior_hessian, likelihood_hessian = None, np.zeros((position.size, position.size))
        for piece in np.array_split(indices, -(-len(indices) // rows)):
            try:
                prior, likelihood = function(position, np.ascontiguousarray(piece), directions)
            except ParameterValueError:
                nowhere = np.full((position.size, position.size), np.nan)
                return nowhere, nowhere
            prior_hessian = prior
            likelihood_hessian += len(piece) / len(indices) * likelihood
        prior_hessian = 0.5 * (prior_hessian + prior_hessian.T)
        likelihood_hessian = 0.5 * (likelihood_hessian + likelihood_hessian.T)
        return prior_hessian + likelihood_hessian, prior_hessian
