r"""Step-size schedules.

A schedule maps the number of inner steps already taken in a chain,
:math:`t = 0, 1, \dots`, to the step size :math:`\eta_t` of the next step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ConstantStepSize", "PolynomialDecay", "as_schedule"]


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


def as_schedule(step_size) -> ConstantStepSize | PolynomialDecay:
    """Return ``step_size`` as a schedule (a number becomes a constant schedule)."""
    if callable(step_size):
        return step_size
    if isinstance(step_size, bool) or not isinstance(step_size, int | float | np.floating):
        raise TypeError(
            f"step_size must be a positive number or a schedule such as "
            f"PolynomialDecay(a, b, gamma), got {step_size!r}."
        )
    return ConstantStepSize(float(step_size))
