r"""Gradient estimators: how a sampler estimates the gradient of the log posterior.

An estimator is a symbolic gradient built from a
:class:`~pymc_sgmcmc.minibatch.MinibatchLogDensity` plus the named inputs it
needs besides the position and the batch. Any sampler can use any estimator:
the kernel compiles whichever it is given, and :class:`Probe` compiles the
same graphs for the measurements, so every formula exists once.

- :func:`minibatch_gradient`: :math:`\nabla \log p(\theta) + (N/B) \sum_{i \in S}
  \nabla \log p(y_i \mid \theta)`.
- :func:`control_variate_gradient` (SGLD-CV, Baker et al. 2019; SVRG-LD): with a
  centre :math:`(\hat\theta, \hat\phi)`, where :math:`\phi` are the values of
  the model's other free variables (sampled by other step methods), and the
  full-data likelihood gradient there,

  .. math::

      \nabla \log p(\theta) + \nabla L(\hat\theta, \hat\phi)
      + \frac{N}{B} \sum_{i \in S} \bigl(\nabla \log p(y_i \mid \theta, \phi)
      - \nabla \log p(y_i \mid \hat\theta, \hat\phi)\bigr),

  unbiased for every :math:`(\theta, \phi)`, with a variance that shrinks as
  the state nears the centre instead of growing with N. Keeping
  :math:`\hat\phi` in the centre is what keeps it unbiased when another step
  method moves :math:`\phi` between draws.
- :func:`second_order_control_variate_gradient`: the control variate less its
  first-order error. Its noise near the centre is the minibatch's error in
  the curvature, :math:`(\hat H_S - H)(\theta - \hat\theta)`; subtracting the
  minibatch's Hessian-vector product at the centre and adding the full
  data's,

  .. math::

      \ldots + H(\hat\theta)\, \delta
      - \frac{N}{B} \sum_{i \in S} \nabla^2 \log p(y_i \mid \hat\theta)\, \delta,
      \qquad \delta = \theta - \hat\theta,

  leaves noise of second order in :math:`\delta` (none where the likelihood
  is quadratic). It stays unbiased only with the exact full-data Hessian
  :math:`H(\hat\theta)`, summed over all rows from the same Hessian-vector
  products (:meth:`Probe.likelihood_hessian`). A step costs about two more
  gradient passes than the control variate's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.utils import ParameterValueError
from pytensor.gradient import grad
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.cluster import ClusterPasses
from pymc_sgmcmc.compiling import compile_function
from pymc_sgmcmc.direct import direct_call
from pymc_sgmcmc.disk_rows import PIECE_ROWS, PageRelease, is_run
from pymc_sgmcmc.exact_hessian import ExactHessian
from pymc_sgmcmc.minibatch import MinibatchLogDensity
from pymc_sgmcmc.operations import row_operations

__all__ = [
    "ESTIMATORS",
    "Centre",
    "GradientEstimator",
    "Probe",
    "control_variate_gradient",
    "minibatch_gradient",
    "rows_per_piece",
    "second_order_control_variate_gradient",
]


@dataclass(frozen=True)
class GradientEstimator:
    """A symbolic gradient estimate and the inputs it reads.

    Attributes
    ----------
    name : str
        A key of :data:`ESTIMATORS`.
    gradient : Variable
        The estimate, a function of ``density.position``, ``density.indices``
        and ``inputs``.
    inputs : dict of str to Variable
        Further inputs (e.g. the control-variate centre).
    coordinate_inputs : frozenset of str
        The inputs that are vectors over the sampled coordinates (their length
        is the position's).
    """

    name: str
    gradient: Variable
    inputs: dict
    coordinate_inputs: frozenset = frozenset()


@dataclass(frozen=True)
class Centre:
    """Where a control variate is centred.

    Attributes
    ----------
    position : ndarray
        The sampled variables at the centre.
    likelihood_gradient : ndarray
        Full-data log-likelihood gradient there.
    blocks : tuple of ndarray
        Values of the other free variables at the centre, in the order of
        ``density.other_blocks``.
    likelihood_hessian : ndarray, optional
        Full-data log-likelihood Hessian there, for the second-order control variate.
    """

    position: np.ndarray
    likelihood_gradient: np.ndarray
    blocks: tuple = ()
    likelihood_hessian: np.ndarray | None = None

    def inputs(self) -> dict[str, np.ndarray]:
        """Return the control-variate estimators' inputs by name."""
        named = {"centre": self.position, "centre_likelihood_gradient": self.likelihood_gradient}
        named.update({f"centre_block_{i}": value for i, value in enumerate(self.blocks)})
        if self.likelihood_hessian is not None:
            named["centre_likelihood_hessian"] = self.likelihood_hessian
        return named


def minibatch_gradient(density: MinibatchLogDensity) -> GradientEstimator:
    """Return the plain minibatch gradient estimate."""
    return GradientEstimator("minibatch", density.gradient, {})


def control_variate_gradient(density: MinibatchLogDensity) -> GradientEstimator:
    """Return the control-variate gradient estimate centred at an input point."""
    inputs, at_centre = _at_centre(density)
    gradient = (
        density.prior_gradient
        + inputs["centre_likelihood_gradient"]
        + density.likelihood_gradient
        - at_centre
    )
    coordinates = frozenset({"centre", "centre_likelihood_gradient"})
    return GradientEstimator("control_variate", gradient, inputs, coordinates)


def _at_centre(density: MinibatchLogDensity):
    """Return the centre's inputs and the minibatch likelihood gradient at the centre."""
    centre = pt.vector("centre", dtype="float64")
    centre_gradient = pt.vector("centre_likelihood_gradient", dtype="float64")
    blocks = {
        f"centre_block_{i}": shared.type(f"centre_block_{i}")
        for i, shared in enumerate(density.other_blocks)
    }
    replacements = {density.position: centre}
    replacements.update(zip(density.other_blocks, blocks.values(), strict=True))
    at_centre = graph_replace(density.likelihood_gradient, replacements, strict=False)
    inputs = {"centre": centre, "centre_likelihood_gradient": centre_gradient, **blocks}
    return inputs, at_centre


def hessian_vector_product(gradient: Variable, wrt: Variable, direction: Variable) -> Variable:
    """Return the product of the Jacobian of ``gradient`` (by ``wrt``) with ``direction``.

    ``direction`` must not depend on ``wrt``: reverse mode over the gradient,
    with the direction held fixed.
    """
    return grad(pt.sum(gradient * direction), wrt, consider_constant=[direction])


def second_order_control_variate_gradient(density: MinibatchLogDensity) -> GradientEstimator:
    """Return the control-variate estimate less its first-order error (see the module docstring)."""
    inputs, at_centre = _at_centre(density)
    centre, centre_gradient = inputs["centre"], inputs["centre_likelihood_gradient"]
    hessian = pt.matrix("centre_likelihood_hessian", dtype="float64")
    direction = pt.vector("direction", dtype="float64")
    product = hessian_vector_product(at_centre, centre, direction)
    displacement = density.position - centre
    product = graph_replace(product, {direction: displacement}, strict=False)
    gradient = (
        density.prior_gradient
        + centre_gradient
        + pt.dot(hessian, displacement)
        + density.likelihood_gradient
        - at_centre
        - product
    )
    inputs = {**inputs, "centre_likelihood_hessian": hessian}
    coordinates = frozenset({"centre", "centre_likelihood_gradient"})
    return GradientEstimator("second_order", gradient, inputs, coordinates)


#: Builders of the gradient estimators, by name.
ESTIMATORS = {
    "minibatch": minibatch_gradient,
    "control_variate": control_variate_gradient,
    "second_order": second_order_control_variate_gradient,
}


#: Bytes of data rows one call of the terms function reads at most. The
#: function's intermediates grow with its rows, and once they leave the
#: processor's caches each row costs several times more: on a logistic
#: regression with 50 covariates (408 bytes a row), 113 ns a row up to 4,096
#: rows and 983 ns at 65,536.
PIECE_BYTES = 2**20


def rows_per_piece(density: MinibatchLogDensity) -> int:
    """Return how many rows of ``density``'s data one call of the terms function reads at most.

    About :data:`PIECE_BYTES` of the data's rows, at least 1,024 rows.
    """
    arrays = [data.get_value(borrow=True) for data in density.data]
    row_bytes = sum(array.itemsize * int(np.prod(array.shape[1:])) for array in arrays)
    return max(1024, PIECE_BYTES // max(row_bytes, 1))


class Probe:
    """Numerical access to a minibatch log density and its estimators, for tuning.

    Parameters
    ----------
    density : MinibatchLogDensity
        The symbolic density.
    compile_kwargs : dict, optional
        Passed to :func:`pytensor.function`.
    chunk_rows : int, default 50,000
        Rows per chunk when summing over the full data, which bounds memory.
    cluster : ClusterPasses, optional
        Run the full-data passes on a Dask cluster's workers
        (:mod:`pymc_sgmcmc.cluster`).
    pages : PageRelease, optional
        Counts the rows read from memory-mapped files and releases their
        pages; one of its own by default, the kernels' where they read the
        same files.
    piece_rows : int, optional
        Rows one call of the compiled terms reads at most (a larger set is
        evaluated in pieces, see :meth:`terms`); by default about
        :data:`PIECE_BYTES` of the data's rows (:func:`rows_per_piece`).

    Attributes
    ----------
    row_operations : tuple of int
        The arithmetic and the other (transcendental) elementwise operations
        a row costs in the compiled terms
        (:func:`~pymc_sgmcmc.operations.row_operations`).
    """

    def __init__(
        self,
        density: MinibatchLogDensity,
        compile_kwargs=None,
        chunk_rows=50_000,
        cluster: ClusterPasses | None = None,
        pages: PageRelease | None = None,
        piece_rows: int | None = None,
    ):
        self.density = density
        self.n_rows = density.n_rows
        self.chunk_rows = int(chunk_rows)
        self.piece_rows = rows_per_piece(density) if piece_rows is None else int(piece_rows)
        self.compile_kwargs = dict(compile_kwargs or {})
        self._position_dtype = density.position.dtype
        terms = compile_function(
            [density.position, density.indices],
            [
                density.log_prior,
                density.prior_gradient,
                density.log_likelihood,
                density.likelihood_gradient,
            ],
            **self.compile_kwargs,
        )
        self._terms = direct_call(terms, 2)
        # The compiled graph's inputs are the position and the indices, in that order.
        graph = terms.maker.fgraph
        self.row_operations = row_operations(graph, graph.inputs[1])
        if pages is None:
            pages = PageRelease([data.get_value(borrow=True) for data in density.data])
        self.pages = pages
        self._estimators = {}
        # The terms take no other blocks' values, so only without other
        # step methods can they give the control variate's centre term.
        self._control_variate_from_terms = not density.other_blocks
        self._hessian_product = None
        self._exact_hessian = ExactHessian(density)
        self.cluster = cluster

    def __reduce__(self):
        # Compiled code does not survive pickling (PyMC pickles the step
        # methods for chain processes it does not fork): compile again.
        arguments = (
            self.density,
            self.compile_kwargs,
            self.chunk_rows,
            self.cluster,
            self.pages,
            self.piece_rows,
        )
        return (Probe, arguments)

    def terms(self, position, indices):
        """Return log prior, its gradient, likelihood estimate and its gradient on ``indices``.

        Where the model's parameter checks fail (e.g. a probability computed
        as NaN far from the mode) the log density is -inf and the gradients
        NaN, so that a search treats the point as outside the support.

        More rows than :attr:`piece_rows` (a full pass, a large Hessian
        subsample) are evaluated in pieces of that many, in order, and the
        pieces' estimates averaged by their rows. Data on disk
        (:mod:`pymc_sgmcmc.disk_rows`) is read at most
        :data:`~pymc_sgmcmc.disk_rows.PIECE_ROWS` scattered rows at a time.
        """
        if len(indices) > self.piece_rows:
            return self._terms_in_pieces(position, indices, self.piece_rows)
        if self.pages.active and len(indices) > PIECE_ROWS and not is_run(indices):
            return self._terms_in_pieces(position, indices, PIECE_ROWS)
        # The compiled functions trust their inputs: a strided or differently
        # typed array would make Numba compile the whole function again.
        position = np.ascontiguousarray(position, dtype=self._position_dtype)
        self.pages.read(indices)
        try:
            return tuple(self._terms(position, np.ascontiguousarray(indices, dtype=np.int64)))
        except ParameterValueError:
            nowhere = np.full_like(position, np.nan)
            return -np.inf, nowhere, -np.inf, nowhere

    def _terms_in_pieces(self, position, indices, piece_rows: int):
        """Return :meth:`terms` on ``indices``, from pieces of rows evaluated one after another."""
        pieces = [
            (len(piece), self.terms(position, piece))
            for piece in np.array_split(indices, -(-len(indices) // piece_rows))
        ]
        log_prior, prior_gradient = pieces[0][1][:2]
        weights = [length / len(indices) for length, _ in pieces]
        likelihood = sum(w * terms[2] for w, (_, terms) in zip(weights, pieces, strict=True))
        gradient = sum(w * terms[3] for w, (_, terms) in zip(weights, pieces, strict=True))
        return log_prior, prior_gradient, likelihood, gradient

    def gradient(self, estimator: str, position, indices, inputs=None):
        """Return the estimate of ``estimator`` (a key of :data:`ESTIMATORS`) on ``indices``.

        ``inputs`` are the estimator's inputs by name (e.g. ``Centre.inputs()``).
        The function is compiled from the estimator's graph on first use.
        """
        if estimator == "minibatch":
            return self.minibatch_gradient(position, indices)
        if estimator == "control_variate" and self._control_variate_from_terms:
            return self.control_variate_gradient(position, indices, inputs)
        if estimator == "second_order" and self._control_variate_from_terms:
            return self.second_order_gradient(position, indices, inputs)
        if estimator not in self._estimators:
            symbolic = ESTIMATORS[estimator](self.density)
            function = compile_function(
                [self.density.position, self.density.indices, *symbolic.inputs.values()],
                [symbolic.gradient],
                on_unused_input="ignore",
                **self.compile_kwargs,
            )
            types = {name: variable.type for name, variable in symbolic.inputs.items()}
            self._estimators[estimator] = (direct_call(function, 2 + len(types)), types)
        function, types = self._estimators[estimator]
        self.pages.read(indices)
        values = [np.asarray(inputs[name], dtype=kind.dtype) for name, kind in types.items()]
        (estimate,) = function(
            np.ascontiguousarray(position, dtype=self._position_dtype),
            np.ascontiguousarray(indices, dtype=np.int64),
            *values,
        )
        return estimate

    def gradients(self, estimators, position, indices, inputs=None) -> list:
        """Return the estimates of several ``estimators`` on the same rows ``indices``.

        Where the control variate is built from the terms, it shares the
        plain minibatch gradient at ``position`` with the plain estimator:
        two calls of the terms function for both instead of three.
        """
        if "control_variate" in estimators and self._control_variate_from_terms:
            plain = self.minibatch_gradient(position, indices)
            shared = {
                "minibatch": plain,
                "control_variate": self.control_variate_gradient(
                    position, indices, inputs, plain=plain
                ),
            }
        else:
            shared = {}
        return [
            shared[name] if name in shared else self.gradient(name, position, indices, inputs)
            for name in estimators
        ]

    def control_variate_gradient(self, position, indices, inputs, plain=None):
        """Return the control-variate estimate from the terms at ``position`` and at the centre.

        Two calls of the terms function, compiled once for every estimator,
        instead of a function of its own: a new model's compilation is the
        larger cost, about as long as the terms' own. Only where no other
        step method moves variables of the model, whose centre values the
        terms function does not take. ``plain``, the minibatch gradient at
        ``position`` on ``indices``, saves one of the calls where it is known.
        """
        _, _, _, at_centre = self.terms(inputs["centre"], indices)
        centre_gradient = np.asarray(inputs["centre_likelihood_gradient"], self._position_dtype)
        if plain is None:
            plain = self.minibatch_gradient(position, indices)
        return plain + centre_gradient - at_centre

    def second_order_gradient(self, position, indices, inputs, plain=None):
        """Return the second-order control-variate estimate from the terms and one product.

        As :meth:`control_variate_gradient`, less the minibatch's
        Hessian-vector product at the centre along ``position - centre``,
        plus the full data's (``inputs["centre_likelihood_hessian"]``).
        """
        centre = np.asarray(inputs["centre"], dtype=self._position_dtype)
        displacement = np.asarray(position, dtype=self._position_dtype) - centre
        estimate = self.control_variate_gradient(position, indices, inputs, plain)
        hessian = np.asarray(inputs["centre_likelihood_hessian"], dtype=self._position_dtype)
        product = self.likelihood_hessian_product(centre, indices, displacement)
        return estimate + hessian @ displacement - product

    def likelihood_hessian_product(self, position, indices, direction):
        """Return the minibatch likelihood's Hessian at ``position`` times ``direction``.

        Exact (reverse mode over the gradient), with the likelihood scaled by
        N/B as in :meth:`terms`. Compiled on first use.
        """
        if self._hessian_product is None:
            symbolic = pt.vector("direction", dtype=self._position_dtype)
            product = hessian_vector_product(
                self.density.likelihood_gradient, self.density.position, symbolic
            )
            # A piecewise-linear likelihood has a product of zero that never
            # reads the direction.
            function = compile_function(
                [self.density.position, self.density.indices, symbolic],
                [product],
                **{**self.compile_kwargs, "on_unused_input": "ignore"},
            )
            self._hessian_product = direct_call(function, 3)
        self.pages.read(indices)
        (product,) = self._hessian_product(
            np.ascontiguousarray(position, dtype=self._position_dtype),
            np.ascontiguousarray(indices, dtype=np.int64),
            np.ascontiguousarray(direction, dtype=self._position_dtype),
        )
        return product

    def likelihood_hessian(self, position):
        """Return the full-data log-likelihood Hessian at ``position``.

        Summed over chunks of rows in order, one Hessian-vector product per
        coordinate and chunk, from the function the second-order control
        variate's minibatch products come from: the pair stays unbiased to
        rounding. Costs D full passes over the data.
        """
        position = np.asarray(position, dtype=self._position_dtype)
        size = position.size
        hessian = np.zeros((size, size))
        chunk_rows = min(self.chunk_rows, self.piece_rows)
        for start in range(0, self.n_rows, chunk_rows):
            rows = np.arange(start, min(start + chunk_rows, self.n_rows))
            weight = len(rows) / self.n_rows
            for j, unit in enumerate(np.eye(size)):
                hessian[:, j] += weight * self.likelihood_hessian_product(position, rows, unit)
        return hessian

    def minibatch_gradient(self, position, indices):
        """Return the plain minibatch gradient estimate (from the terms, compiled once)."""
        _, prior_gradient, _, likelihood_gradient = self.terms(position, indices)
        return prior_gradient + likelihood_gradient

    def full(self, position):
        """Return the exact log posterior, its gradient and the log-likelihood gradient.

        The likelihood is summed over the data in chunks.
        """
        log_prior, prior_gradient, _, _ = self.terms(position, np.arange(1))
        log_likelihood, likelihood_gradient = self.full_likelihood(position)
        return (
            log_prior + log_likelihood,
            prior_gradient + likelihood_gradient,
            likelihood_gradient,
        )

    def full_likelihood(self, position):
        """Return the full-data log likelihood and its gradient, in chunks of rows.

        The chunks are summed in the order of the rows, in this process or,
        with a cluster, on its workers (the same numbers either way).
        """
        starts = range(0, self.n_rows, self.chunk_rows)
        if self.cluster is None:
            chunks = [self.chunk_terms(position, start) for start in starts]
        else:
            chunks = self.cluster.chunk_sums(position, self.blocks(), self.n_rows)
        total, gradient = 0.0, np.zeros_like(position)
        for start, (value, chunk_gradient) in zip(starts, chunks, strict=True):
            weight = (min(start + self.chunk_rows, self.n_rows) - start) / self.n_rows
            total += weight * value
            gradient += weight * chunk_gradient
        return total, gradient

    def chunk_terms(self, position, start: int):
        """Return the likelihood estimate and its gradient on the chunk of rows from ``start``."""
        rows = np.arange(start, min(start + self.chunk_rows, self.n_rows))
        _, _, value, gradient = self.terms(position, rows)
        return value, gradient

    def blocks(self) -> tuple:
        """Return the current values of the other free variables."""
        return tuple(
            np.array(shared.get_value(borrow=True), copy=True)
            for shared in self.density.other_blocks
        )

    def centre(self, position, likelihood_gradient=None, hessian=False) -> Centre:
        """Return a control-variate centre at ``position`` and the other variables' values now.

        ``likelihood_gradient`` is the full-data likelihood gradient there,
        computed (one full pass) when not given; with ``hessian`` the centre
        holds the full-data likelihood Hessian too (:meth:`likelihood_hessian`).
        """
        if likelihood_gradient is None:
            _, likelihood_gradient = self.full_likelihood(position)
        position = np.array(position, copy=True)
        matrix = self.likelihood_hessian(position) if hessian else None
        return Centre(position, likelihood_gradient, self.blocks(), matrix)

    def hessian(self, position, indices, steps):
        """Return the Hessian of the minibatch log density on ``indices``.

        Central differences of the gradient, with the same rows on both sides
        (so the minibatch noise cancels) and step ``steps[j]`` along
        coordinate ``j``; symmetrised.
        """
        return self.hessians(position, indices, steps)[0]

    def exact_hessians(self, position, indices):
        """Return the Hessians of the minibatch log density and of the log prior, exactly.

        As :meth:`hessians`, from second derivatives instead of differences
        (:class:`~pymc_sgmcmc.exact_hessian.ExactHessian`), in pieces of at
        most :attr:`piece_rows` rows; ``None`` where the model's graph cannot
        be differentiated twice.
        """
        piece_rows = self.piece_rows
        if self.pages.active and not is_run(indices):
            piece_rows = min(piece_rows, PIECE_ROWS)
        self.pages.read(indices)
        return self._exact_hessian(position, indices, piece_rows)

    @property
    def exact_hessian_available(self) -> bool:
        """Whether :meth:`exact_hessians` has not been found unable to differentiate twice."""
        return self._exact_hessian.available

    def gradient_difference(self, position, indices, offset):
        """Return the prior's and the likelihood's gradient differences across ``±offset``.

        Both sides read the rows ``indices``, so that the minibatch noise cancels.
        """
        _, prior_forward, _, forward = self.terms(position + offset, indices)
        _, prior_backward, _, backward = self.terms(position - offset, indices)
        return prior_forward - prior_backward, forward - backward

    def hessians(self, position, indices, steps):
        """Return the Hessians of the minibatch log density and of the log prior alone.

        As :meth:`hessian`; the prior's comes from the same gradient calls.
        """
        columns, prior_columns = [], []
        for j, step in enumerate(steps):
            offset = np.zeros_like(position)
            offset[j] = step
            prior, likelihood = self.gradient_difference(position, indices, offset)
            prior_columns.append(prior / (2.0 * step))
            columns.append(prior_columns[-1] + likelihood / (2.0 * step))
        return tuple(
            0.5 * (matrix + matrix.T)
            for matrix in (np.stack(columns, axis=1), np.stack(prior_columns, axis=1))
        )
