r"""Metrics: the linear change of coordinates a chain samples in.

A sampler's dynamics run in coordinates :math:`z` with
:math:`\theta = \mu + A z`, where :math:`A A^\top = \Sigma` approximates the
posterior covariance. The gradient in :math:`z` is :math:`A^\top \hat g`,
so overdamped Langevin dynamics in :math:`z` with unit preconditioner is
Langevin dynamics in :math:`\theta` preconditioned by the full matrix
:math:`\Sigma`:

.. math::

    \theta \leftarrow \theta + \eta \Sigma \hat g + \sqrt{2 \eta \tau}\, A \xi,
    \qquad A \xi \sim N(0, \Sigma).

Every sampler of the package gets a dense or low-rank preconditioner this way
without knowing it: the kernel composes the metric with the sampler's update
rule. The metrics:

- :class:`IdentityMetric`: :math:`\theta = z` (the sampler's own diagonal
  preconditioner, if any, does the scaling);
- :class:`DiagonalMetric`: :math:`A = \mathrm{diag}(s)`, cost O(D) per step;
- :class:`DenseMetric`: :math:`A = L`, the lower Cholesky factor of
  :math:`\Sigma`, cost O(D^2) per step;
- :class:`LowRankMetric`: :math:`\Sigma = S (I + U (\Lambda - I) U^\top) S`
  with :math:`S` diagonal and :math:`k` orthonormal columns :math:`U`,
  :math:`A = S (I + U (\Lambda^{1/2} - I) U^\top)`, cost O(D k) per step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.linalg.lapack import dtrtrs

__all__ = [
    "METRICS",
    "DenseMetric",
    "DiagonalMetric",
    "IdentityMetric",
    "LowRankMetric",
    "Metric",
    "metric_from_covariance",
]


class Metric(ABC):
    """A linear change of coordinates ``theta = shift + A z``.

    Subclasses declare their inputs (:attr:`input_shapes`) and implement
    the two maps the kernel needs, written so that they run on numpy arrays
    and on PyTensor variables alike, and the numpy-only inverse.

    Attributes
    ----------
    kind : str
        Short name; one compiled kernel per kind.
    input_shapes : dict of str to tuple
        The shape of each input the maps read: ``"D"`` for the number of
        coordinates, another name for a length some inputs share, ``None``
        for any length.
    """

    kind: ClassVar[str]
    input_shapes: ClassVar[dict[str, tuple]] = {}

    @staticmethod
    @abstractmethod
    def to_position(coordinates, inputs: Mapping):
        """Return ``theta = shift + A z`` for ``z = coordinates``."""

    @staticmethod
    @abstractmethod
    def pull_gradient(gradient, inputs: Mapping):
        """Return the gradient in the sampler's coordinates, ``A' g``."""

    @abstractmethod
    def inputs(self) -> dict[str, np.ndarray]:
        """Return the inputs the maps read."""

    @abstractmethod
    def to_coordinates(self, position: np.ndarray) -> np.ndarray:
        """Return ``z = A^-1 (theta - shift)``."""

    @abstractmethod
    def factor(self, size: int) -> np.ndarray:
        """Return ``A`` as a dense ``size x size`` matrix (for the tuner's measurements)."""

    def diagonal(self, size: int) -> np.ndarray | None:
        """Return the diagonal of ``A`` where ``A`` is diagonal, ``None`` otherwise."""
        return None

    def extra_work(self, size: int) -> float:
        """Return the multiply-adds the maps add to one inner step."""
        return 0.0

    def position(self, coordinates: np.ndarray) -> np.ndarray:
        """Return ``theta`` of ``coordinates`` (numpy)."""
        return np.asarray(self.to_position(coordinates, self.inputs()), dtype=float)


@dataclass(frozen=True)
class IdentityMetric(Metric):
    """The sampler runs in the model's unconstrained coordinates."""

    kind: ClassVar[str] = "identity"

    @staticmethod
    def to_position(coordinates, inputs):
        """Return ``theta = shift + A z``."""
        return coordinates

    @staticmethod
    def pull_gradient(gradient, inputs):
        """Return ``A' g``."""
        return gradient

    def inputs(self):
        """Return the inputs the maps read."""
        return {}

    def to_coordinates(self, position):
        """Return ``z = A^-1 (theta - shift)``."""
        return np.array(position, dtype=float)

    def factor(self, size):
        """Return ``A`` as a dense matrix."""
        return np.eye(size)

    def diagonal(self, size):
        """Return the diagonal of ``A``."""
        return np.ones(size)


@dataclass(frozen=True)
class DiagonalMetric(Metric):
    """``theta = shift + scale * z``: the posterior sds as a diagonal preconditioner."""

    shift: np.ndarray
    scale: np.ndarray
    kind: ClassVar[str] = "diagonal"
    input_shapes: ClassVar[dict[str, tuple]] = {"metric_shift": ("D",), "metric_scale": ("D",)}

    @staticmethod
    def to_position(coordinates, inputs):
        """Return ``theta = shift + A z``."""
        return inputs["metric_shift"] + inputs["metric_scale"] * coordinates

    @staticmethod
    def pull_gradient(gradient, inputs):
        """Return ``A' g``."""
        return inputs["metric_scale"] * gradient

    def inputs(self):
        """Return the inputs the maps read."""
        return {"metric_shift": self.shift, "metric_scale": self.scale}

    def to_coordinates(self, position):
        """Return ``z = A^-1 (theta - shift)``."""
        return (position - self.shift) / self.scale

    def factor(self, size):
        """Return ``A`` as a dense matrix."""
        return np.diag(self.scale)

    def diagonal(self, size):
        """Return the diagonal of ``A``."""
        return np.asarray(self.scale, dtype=float)

    def extra_work(self, size):
        """Return the multiply-adds the maps add to one inner step."""
        return 2.0 * size


@dataclass(frozen=True)
class DenseMetric(Metric):
    """``theta = shift + L z`` with ``L`` lower triangular, ``L L' = Sigma``."""

    shift: np.ndarray
    cholesky: np.ndarray
    kind: ClassVar[str] = "dense"
    input_shapes: ClassVar[dict[str, tuple]] = {
        "metric_shift": ("D",),
        "metric_factor": ("D", "D"),
    }

    @staticmethod
    def to_position(coordinates, inputs):
        """Return ``theta = shift + A z``."""
        return inputs["metric_shift"] + inputs["metric_factor"] @ coordinates

    @staticmethod
    def pull_gradient(gradient, inputs):
        """Return ``A' g``."""
        return inputs["metric_factor"].T @ gradient

    def inputs(self):
        """Return the inputs the maps read."""
        return {"metric_shift": self.shift, "metric_factor": self.cholesky}

    def to_coordinates(self, position):
        """Return ``z = A^-1 (theta - shift)``.

        LAPACK's triangular solve, called as :func:`scipy.linalg.solve_triangular`
        calls it but without its checks of the inputs, which cost several times
        the solve itself once per draw.
        """
        cholesky = self.cholesky
        if cholesky.flags.f_contiguous:
            coordinates, info = dtrtrs(cholesky, position - self.shift, lower=True)
        else:
            # LAPACK reads Fortran order: solve with the transpose of the transpose.
            coordinates, info = dtrtrs(cholesky.T, position - self.shift, lower=False, trans=1)
        if info != 0:
            raise np.linalg.LinAlgError("The metric's Cholesky factor is singular.")
        return coordinates

    def factor(self, size):
        """Return ``A`` as a dense matrix."""
        return self.cholesky

    def extra_work(self, size):
        """Return the multiply-adds the maps add to one inner step."""
        return 2.0 * size**2


@dataclass(frozen=True)
class LowRankMetric(Metric):
    r"""``Sigma = S (I + U (Lambda - I) U') S``: a diagonal scale and k stretched directions.

    Attributes
    ----------
    shift : ndarray
        The centre :math:`\mu`.
    scale : ndarray
        The diagonal of :math:`S`.
    basis : ndarray
        ``D x k`` orthonormal columns :math:`U`.
    variances : ndarray
        The ``k`` variances :math:`\Lambda` along the columns (in units of ``scale``).
    """

    shift: np.ndarray
    scale: np.ndarray
    basis: np.ndarray
    variances: np.ndarray
    kind: ClassVar[str] = "low_rank"
    input_shapes: ClassVar[dict[str, tuple]] = {
        "metric_shift": ("D",),
        "metric_scale": ("D",),
        "metric_basis": ("D", "rank"),
        "metric_stretch": ("rank",),
    }

    @staticmethod
    def to_position(coordinates, inputs):
        """Return ``theta = shift + A z``."""
        basis = inputs["metric_basis"]
        stretched = coordinates + basis @ (inputs["metric_stretch"] * (basis.T @ coordinates))
        return inputs["metric_shift"] + inputs["metric_scale"] * stretched

    @staticmethod
    def pull_gradient(gradient, inputs):
        """Return ``A' g``."""
        basis = inputs["metric_basis"]
        scaled = inputs["metric_scale"] * gradient
        return scaled + basis @ (inputs["metric_stretch"] * (basis.T @ scaled))

    def inputs(self):
        """Return the inputs the maps read."""
        return {
            "metric_shift": self.shift,
            "metric_scale": self.scale,
            "metric_basis": self.basis,
            "metric_stretch": np.sqrt(self.variances) - 1.0,
        }

    def to_coordinates(self, position):
        """Return ``z = A^-1 (theta - shift)``."""
        scaled = (position - self.shift) / self.scale
        shrink = 1.0 / np.sqrt(self.variances) - 1.0
        return scaled + self.basis @ (shrink * (self.basis.T @ scaled))

    def factor(self, size):
        """Return ``A`` as a dense matrix."""
        stretch = np.sqrt(self.variances) - 1.0
        return self.scale[:, None] * (np.eye(size) + (self.basis * stretch) @ self.basis.T)

    def extra_work(self, size):
        """Return the multiply-adds the maps add to one inner step."""
        return 2.0 * size + 4.0 * size * self.basis.shape[1]


#: Metric classes by kind.
METRICS: dict[str, type[Metric]] = {
    cls.kind: cls for cls in (IdentityMetric, DiagonalMetric, DenseMetric, LowRankMetric)
}


def metric_from_covariance(
    kind: str, shift: np.ndarray, covariance: np.ndarray, rank: int = 10, spread: float = 2.0
) -> Metric:
    """Return the metric of ``kind`` that approximates ``covariance`` (positive definite).

    Parameters
    ----------
    kind : {"diagonal", "dense", "low_rank"}
        Which metric.
    shift : ndarray
        The centre.
    covariance : ndarray
        The posterior covariance to whiten.
    rank : int, default 10
        Most directions a low-rank metric keeps.
    spread : float, default 2
        A low-rank metric keeps the eigenvectors of the correlation matrix
        whose eigenvalue lies outside ``[1 / spread, spread]``.
    """
    scale = np.sqrt(np.diag(covariance))
    if kind == "diagonal":
        return DiagonalMetric(shift, scale)
    if kind == "dense":
        return DenseMetric(shift, np.linalg.cholesky(covariance))
    if kind == "low_rank":
        correlation = covariance / np.outer(scale, scale)
        values, vectors = np.linalg.eigh(correlation)
        distance = np.abs(np.log(values))
        keep = np.argsort(distance)[::-1][:rank]
        keep = keep[distance[keep] > np.log(spread)]
        if keep.size == 0:
            return DiagonalMetric(shift, scale)
        return LowRankMetric(shift, scale, vectors[:, keep], values[keep])
    raise ValueError(f"Unknown metric kind {kind!r}; use one of {sorted(METRICS)}.")
