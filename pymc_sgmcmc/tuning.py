r"""Step-size rules from a Gaussian model of the chain.

Near a mode, in preconditioned coordinates, the posterior is approximately
Gaussian with curvatures (Hessian eigenvalues) :math:`a` between
:math:`a_{\min}` and :math:`a_{\max}`, and the gradient estimate carries noise
of variance at most :math:`v`. On such a target both samplers are linear
recursions whose stationary variance is known exactly, so the step size that
keeps the variance inflation (from discretisation and gradient noise
together) within a budget :math:`b` can be computed instead of hand-tuned.

SGLD, :math:`x \leftarrow x + \eta(-a x + n) + \sqrt{2\eta}\,\xi`, has
stationary variance :math:`(1 + \eta v / 2) / (a (1 - \eta a / 2))`.
SGHMC's stationary covariance solves a 2x2 discrete Lyapunov equation.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "langevin_relaxation_steps",
    "langevin_step_size",
    "langevin_variance_inflation",
    "underdamped_relaxation_steps",
    "underdamped_step_size",
    "underdamped_variance_inflation",
]


def langevin_variance_inflation(step_size, curvature, noise=0.0):
    """Return the relative excess of SGLD's stationary variance on ``N(0, 1/curvature)``.

    Parameters
    ----------
    step_size : float
        Step size (in the coordinates where ``curvature`` is measured).
    curvature : float or array
        Curvature ``a`` of the Gaussian target.
    noise : float, default 0
        Variance ``v`` of the gradient-estimate noise.
    """
    return (1.0 + step_size * noise / 2.0) / (1.0 - step_size * curvature / 2.0) - 1.0


def langevin_step_size(budget, largest_curvature, noise=0.0):
    """Return the largest SGLD step size whose variance inflation is ``budget`` at most.

    The inflation grows with the curvature, so the bound is solved at
    ``largest_curvature``.
    """
    return 2.0 * budget / (noise + (1.0 + budget) * largest_curvature)


def langevin_relaxation_steps(step_size, smallest_curvature):
    """Return the number of steps over which SGLD's slowest mode decays by a factor e."""
    return -1.0 / np.log(abs(1.0 - step_size * smallest_curvature))


def _underdamped_transition(step_size, friction, curvature):
    return np.array(
        [
            [1.0 - step_size**2 * curvature, step_size * (1.0 - step_size * friction)],
            [-step_size * curvature, 1.0 - step_size * friction],
        ]
    )


def underdamped_variance_inflation(step_size, friction, curvature, noise=0.0):
    """Return the relative excess of SGHMC's stationary position variance on ``N(0, 1/curvature)``.

    Unit mass, friction ``friction``; ``inf`` where the recursion is unstable.
    """
    transition = _underdamped_transition(step_size, friction, curvature)
    if np.max(np.abs(np.linalg.eigvals(transition))) >= 1.0:
        return np.inf
    variance = step_size**2 * noise + 2.0 * step_size * friction
    shocks = variance * np.array([[step_size**2, step_size], [step_size, 1.0]])
    # The stationary covariance solves C = T C T' + Q; for 2 x 2 matrices the
    # vectorised form (I - T kron T) vec(C) = vec(Q) is the quickest solve.
    covariance = np.linalg.solve(np.eye(4) - np.kron(transition, transition), shocks.ravel())
    return curvature * covariance[0] - 1.0


def underdamped_relaxation_steps(step_size, friction, smallest_curvature):
    """Return the number of steps over which SGHMC's slowest mode decays by a factor e."""
    transition = _underdamped_transition(step_size, friction, smallest_curvature)
    radius = np.max(np.abs(np.linalg.eigvals(transition)))
    return np.inf if radius >= 1.0 else -1.0 / np.log(radius)


def underdamped_step_size(budget, curvatures, friction, noise=0.0):
    """Return the largest SGHMC step size meeting ``budget`` at every curvature in ``curvatures``.

    Found by bisection on a log scale, to a relative precision of 1e-9;
    ``friction`` is per unit mass.
    """
    curvatures = np.asarray(curvatures, dtype=float)

    def worst(step_size):
        return max(
            underdamped_variance_inflation(step_size, friction, a, noise) for a in curvatures
        )

    low = 1e-12
    high = min(1.0 / friction, 2.0 / np.sqrt(curvatures.max()))
    if worst(high) <= budget:
        return high
    while high > (1.0 + 1e-9) * low:
        middle = np.sqrt(low * high)
        if worst(middle) <= budget:
            low = middle
        else:
            high = middle
    return low
