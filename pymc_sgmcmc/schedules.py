r"""Step-size schedules.

A schedule maps the number of inner steps already taken in a chain,
:math:`t = 0, 1, \dots`, to the step size :math:`\eta_t` of the next step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ConstantStepSize",
    "CyclicalStepSize",
    "PolynomialDecay",
    "as_schedule",
    "usable_step_sizes",
]


@dataclass(frozen=True)
class ConstantStepSize:
    """The same step size at every step.

    Parameters
    ----------
    value : float
        The step size.
    """

    value: float

    def __post_init__(self):
        if not np.isfinite(self.value) or self.value <= 0:
            raise ValueError(f"step_size must be a positive finite number, got {self.value!r}.")

    def __call__(self, step: np.ndarray) -> np.ndarray:
        """Return the step sizes of the steps numbered ``step``."""
        return np.full(np.shape(step), float(self.value))


@dataclass(frozen=True)
class PolynomialDecay:
    r"""The decay :math:`\eta_t = a / (b + t)^\gamma` of Welling & Teh (2011).

    For :math:`0.5 < \gamma \le 1` the steps satisfy the Robbins-Monro
    conditions :math:`\sum \eta_t = \infty`, :math:`\sum \eta_t^2 < \infty`.

    Parameters
    ----------
    a : float
        Scale; :math:`\eta_0 = a / b^\gamma`.
    b : float, default 1
        Offset that slows the early decay.
    gamma : float, default 0.55
        Decay exponent.
    """

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __post_init__(self):
        if self.a <= 0 or self.b <= 0:
            raise ValueError("PolynomialDecay needs a > 0 and b > 0.")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"PolynomialDecay needs 0 <= gamma <= 1, got {self.gamma!r}.")

    def __call__(self, step: np.ndarray) -> np.ndarray:
        """Return the step sizes of the steps numbered ``step``."""
        return self.a / (self.b + np.asarray(step, dtype=float)) ** self.gamma


@dataclass(frozen=True)
class CyclicalStepSize:
    r"""The cosine cycles of Zhang et al. (2020), with an exploration stage.

    With :math:`r_t = (t \bmod L) / L` the position of step :math:`t` in its
    cycle of :math:`L` steps,

    .. math::

        \eta_t = \frac{\eta_{\max}}{2} \left(\cos(\pi r_t) + 1\right),

    and step :math:`t` belongs to the exploration stage while
    :math:`r_t < \beta`. The first ``settling`` steps of the sampling stage
    after it carry the chain from where exploration left it (a mode, which
    may lie far from the posterior's mass) back to its stationary law: they
    run with noise, but end no kept draw.

    Parameters
    ----------
    maximum : float
        Step size at the start of every cycle, :math:`\eta_{\max}`.
    cycle_length : int
        Inner steps per cycle, :math:`L`.
    exploration : float, default 0.5
        Fraction :math:`\beta` of every cycle spent exploring.
    settling : int, default 0
        Sampling steps after each exploration stage that end no kept draw.
    """

    maximum: float
    cycle_length: int
    exploration: float = 0.5
    settling: int = 0

    def __post_init__(self):
        if not np.isfinite(self.maximum) or self.maximum <= 0:
            raise ValueError(f"maximum must be a positive finite number, got {self.maximum!r}.")
        if int(self.cycle_length) < 1:
            raise ValueError(f"cycle_length must be a positive integer, got {self.cycle_length!r}.")
        if not 0 <= self.exploration < 1:
            raise ValueError(f"exploration must be in [0, 1), got {self.exploration!r}.")
        if int(self.settling) < 0 or self.sampling_start + self.settling >= self.cycle_length:
            raise ValueError(
                f"settling must leave steps of the sampling stage to keep: between 0 and "
                f"{self.cycle_length - self.sampling_start - 1}, got {self.settling!r}."
            )

    def position(self, step: np.ndarray) -> np.ndarray:
        """Return :math:`r_t`, the fraction of its cycle before step ``step``."""
        return np.mod(np.asarray(step), self.cycle_length) / self.cycle_length

    def __call__(self, step: np.ndarray) -> np.ndarray:
        """Return the step sizes of the steps numbered ``step``."""
        return 0.5 * self.maximum * (np.cos(np.pi * self.position(step)) + 1.0)

    def exploring(self, step: np.ndarray) -> np.ndarray:
        """Return whether the steps numbered ``step`` belong to the exploration stage."""
        return self.position(step) < self.exploration

    @property
    def sampling_start(self) -> int:
        """Return the first step of a cycle's sampling stage, counted from the cycle's start."""
        return int(np.ceil(self.exploration * self.cycle_length))

    def kept(self, step: np.ndarray) -> np.ndarray:
        """Return whether a draw may end at the steps numbered ``step``.

        Not while exploring, nor in the settling steps after it.
        """
        settled = np.mod(np.asarray(step), self.cycle_length) >= self.sampling_start + self.settling
        return settled & ~self.exploring(step)

    @property
    def sampling_maximum(self) -> float:
        r"""Return the largest step size of the sampling stage (at :math:`r = \beta`)."""
        return 0.5 * self.maximum * (np.cos(np.pi * self.exploration) + 1.0)


def as_schedule(step_size):
    """Return ``step_size`` as a schedule (a number becomes a constant schedule)."""
    if callable(step_size):
        return step_size
    if isinstance(step_size, bool) or not isinstance(step_size, int | float | np.floating):
        raise TypeError(
            f"step_size must be a positive number or a schedule such as "
            f"PolynomialDecay(a, b, gamma), got {step_size!r}."
        )
    return ConstantStepSize(float(step_size))


def usable_step_sizes(step_sizes: np.ndarray, axis=None) -> np.ndarray:
    """Return whether the step sizes (along ``axis``, or all) are positive finite numbers."""
    step_sizes = np.asarray(step_sizes)
    return np.all(np.isfinite(step_sizes) & (step_sizes > 0), axis=axis)
