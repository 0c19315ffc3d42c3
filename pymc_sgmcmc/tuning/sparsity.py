"""Hessians of sparse structure from a few gradient differences.

Differencing the gradient along each coordinate costs ``2 D`` gradient calls
per Hessian. A hierarchical model's Hessian is mostly zeros: a group's
intercept meets the rows of its group and the few parameters every group
shares, never another group's intercept. Coordinates whose Hessian columns
have no nonzero row in common can be moved together, and each one's column
read off the one gradient difference (Curtis, Powell & Reid, 1974). The
shared parameters meet every coordinate, so they are differenced one at a
time, and their rows of the other columns come from symmetry.

The pattern of nonzeros is read from a Hessian differenced coordinate by
coordinate, whose entries for coordinates that never meet are exact zeros
(the same operations on the same numbers on both sides). A pattern read on a
subsample of rows can miss pairs that meet only in rows outside it, so every
Hessian computed with one is checked against the gradient differenced along
random directions, and computed coordinate by coordinate where they disagree.
On the hierarchical model with 1,000 groups (D = 1,004) a Hessian then takes
10 gradient calls, and 4 for its check, instead of 2,008.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_sgmcmc.estimators import Probe

__all__ = ["HessianPattern", "PatternMismatch", "hessian_pattern", "hessians"]

#: Coordinates that meet more than this many others, or the square root of D
#: if that is more, are differenced one at a time.
DENSE_ROWS = 16
#: Random directions each patterned Hessian is checked along.
CHECK_DIRECTIONS = 2
#: Largest relative disagreement of a patterned Hessian's product with the
#: gradient differenced along a check direction; the differences' own error
#: at steps of 1e-3 sd is orders of magnitude below it.
CHECK_TOLERANCE = 1e-2


class PatternMismatch(Exception):
    """A Hessian computed with a pattern failed the check along random directions."""


@dataclass(frozen=True)
class HessianPattern:
    """Which coordinates a Hessian's gradient differences move together.

    Attributes
    ----------
    dense : ndarray of int
        Coordinates differenced one at a time (they meet many others).
    groups : tuple of ndarray of int
        The other coordinates, in groups whose columns have no nonzero row
        in common outside ``dense``; each group is differenced at once.
    rows : tuple of ndarray of int
        For each coordinate, its column's nonzero rows outside ``dense``
        (empty for the dense coordinates).
    """

    dense: np.ndarray
    groups: tuple
    rows: tuple

    @property
    def differences(self) -> int:
        """Return the gradient differences (two calls each) one Hessian takes."""
        return len(self.dense) + len(self.groups)


def hessian_pattern(hessian) -> HessianPattern | None:
    """Return the pattern of ``hessian``'s nonzeros, or ``None`` where it saves little.

    ``hessian`` was differenced coordinate by coordinate, so that entries of
    coordinates that never meet are exact zeros. Coordinates are grouped
    greedily, those meeting the most first. ``None`` where the pattern would
    take more than half of the ``D`` differences of the plain Hessian.
    """
    hessian = np.asarray(hessian)
    size = hessian.shape[0]
    nonzero = (hessian != 0) | (hessian.T != 0) | np.eye(size, dtype=bool)
    counts = nonzero.sum(axis=0)
    dense_mask = counts > max(DENSE_ROWS, int(np.sqrt(size)))
    sparse_rows = nonzero & ~dense_mask[:, None]
    rows = tuple(
        np.flatnonzero(sparse_rows[:, column]) if not dense_mask[column] else np.empty(0, int)
        for column in range(size)
    )
    groups, covered = [], []
    for column in sorted(np.flatnonzero(~dense_mask), key=lambda column: -counts[column]):
        for members, mask in zip(groups, covered, strict=True):
            if not mask[rows[column]].any():
                members.append(column)
                mask[rows[column]] = True
                break
        else:
            groups.append([column])
            mask = np.zeros(size, dtype=bool)
            mask[rows[column]] = True
            covered.append(mask)
    pattern = HessianPattern(
        np.flatnonzero(dense_mask), tuple(np.array(members) for members in groups), rows
    )
    return pattern if 2 * pattern.differences <= size else None


def _difference(probe: Probe, position, indices, offset):
    """Return the log density's and the log prior's gradient differences along ``offset``."""
    prior, likelihood = probe.gradient_difference(position, indices, offset)
    return prior + likelihood, prior


def _patterned(probe: Probe, position, indices, steps, pattern: HessianPattern):
    """Return the Hessian and the log prior's, from the pattern's differences."""
    size = position.size
    matrices = (np.zeros((size, size)), np.zeros((size, size)))
    for column in pattern.dense:
        offset = np.zeros(size)
        offset[column] = steps[column]
        changes = _difference(probe, position, indices, offset)
        for matrix, change in zip(matrices, changes, strict=True):
            matrix[:, column] = change / (2.0 * steps[column])
    dense = pattern.dense
    for members in pattern.groups:
        offset = np.zeros(size)
        offset[members] = steps[members]
        changes = _difference(probe, position, indices, offset)
        for column in members:
            rows = pattern.rows[column]
            for matrix, change in zip(matrices, changes, strict=True):
                matrix[rows, column] = change[rows] / (2.0 * steps[column])
                matrix[dense, column] = matrix[column, dense]
    return tuple(0.5 * (matrix + matrix.T) for matrix in matrices)


def _agrees(probe: Probe, position, indices, steps, hessian) -> bool:
    """Say whether ``hessian`` gives the gradient's differences along random directions.

    The directions are random signs times ``steps`` (so each coordinate
    moves by its own step), drawn from a fixed generator so that the chain's
    own random numbers are untouched.
    """
    generator = np.random.default_rng(0)
    for _ in range(CHECK_DIRECTIONS):
        direction = generator.choice([-1.0, 1.0], size=position.size) * steps
        measured = _difference(probe, position, indices, direction)[0] / 2.0
        predicted = hessian @ direction
        if not np.all(np.isfinite(measured)):
            return False
        if np.linalg.norm(measured - predicted) > CHECK_TOLERANCE * np.linalg.norm(measured):
            return False
    return True


def hessians(probe: Probe, position, indices, steps, pattern: HessianPattern | None = None):
    """Return the Hessians of the log density on ``indices`` and of the log prior alone.

    Central differences of the gradient with step ``steps[j]`` along
    coordinate ``j`` (:meth:`~pymc_sgmcmc.estimators.Probe.hessians`), or,
    with a ``pattern``, along its groups of coordinates at once, checked
    along random directions.

    Raises
    ------
    PatternMismatch
        Where the check fails: the caller differences coordinate by
        coordinate instead, on rows chosen for that cost.
    """
    if pattern is None:
        return probe.hessians(position, indices, steps)
    hessian, prior_hessian = _patterned(probe, position, indices, steps, pattern)
    if not _agrees(probe, position, indices, steps, hessian):
        raise PatternMismatch
    return hessian, prior_hessian
