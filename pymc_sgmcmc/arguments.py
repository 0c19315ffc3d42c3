"""Checks of a step method's arguments: bad input is refused in one line that names the fix."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pymc as pm
from pymc.util import get_value_vars_from_user_vars

from pymc_sgmcmc.disk_rows import is_on_disk
from pymc_sgmcmc.kernel import is_jax

__all__ = [
    "METRIC_CHOICES",
    "check_bias_budget",
    "check_clip_gradient",
    "check_control_variate",
    "check_data",
    "check_preconditioner",
    "check_temperature",
    "estimators_to_weigh",
    "is_integer",
    "positive_integer",
    "sampled_variables",
]

#: What ``preconditioner`` may name: the tuner's choice or one kind of metric.
METRIC_CHOICES = ("auto", "diagonal", "dense", "low_rank")

#: The gradient estimators the tuner weighs, by the user's ``control_variate``.
_ESTIMATORS = {
    None: ("minibatch", "control_variate"),
    True: ("control_variate",),
    False: ("minibatch",),
    "second_order": ("minibatch", "control_variate", "second_order"),
}


def is_integer(value) -> bool:
    """Return whether ``value`` is an integer (not a bool)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def positive_integer(name: str, value) -> int:
    """Return ``value`` as an int, refusing anything but a positive integer."""
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def check_data(data, compile_kwargs) -> dict | None:
    """Return ``data`` as a dict of arrays by name, or None."""
    if data is None:
        return None
    if not isinstance(data, Mapping) or not all(isinstance(name, str) for name in data):
        raise TypeError(
            "data must be a dict from the names of the model's pm.Data to arrays, "
            f"got {type(data).__name__}."
        )
    if is_jax(compile_kwargs) and any(map(is_on_disk, data.values())):
        raise ValueError(
            "The JAX backend copies the data to its device, which would read the whole "
            "memory-mapped file or Zarr array into memory: sample data on disk with the "
            "default backend."
        )
    return dict(data)


def sampled_variables(model, vars, sampler: str) -> list:
    """Return the value variables ``sampler`` samples: ``vars``, or all continuous ones."""
    vars = (
        model.continuous_value_vars if vars is None else get_value_vars_from_user_vars(vars, model)
    )
    discrete = [var.name for var in vars if var.dtype not in pm.pytensorf.continuous_types]
    if discrete:
        raise ValueError(
            f"{sampler} samples continuous variables only; assign another "
            f"step method (e.g. pm.Metropolis) to {discrete}."
        )
    if not vars:
        raise ValueError(f"The model has no continuous free variables for {sampler}.")
    return vars


def check_temperature(temperature) -> float:
    """Return the temperature, a finite number >= 0."""
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}.")
    return float(temperature)


def check_bias_budget(bias_budget) -> float:
    """Return the bias budget, a number between 0 and 1."""
    if not 0 < bias_budget < 1:
        raise ValueError(f"bias_budget must be between 0 and 1, got {bias_budget!r}.")
    return float(bias_budget)


def check_clip_gradient(clip_gradient) -> float:
    """Return the norm the gradient estimate is clipped to; ``inf`` for None."""
    if clip_gradient is None:
        return np.inf
    if not (
        isinstance(clip_gradient, int | float | np.floating)
        and not isinstance(clip_gradient, bool)
        and clip_gradient > 0
    ):
        raise ValueError(f"clip_gradient must be a positive number or None, got {clip_gradient!r}.")
    return float(clip_gradient)


def check_control_variate(control_variate) -> bool | str | None:
    """Return ``control_variate`` as None, a bool or ``"second_order"``."""
    if isinstance(control_variate, bool | np.bool_):
        return bool(control_variate)
    if control_variate is None or (
        isinstance(control_variate, str) and control_variate == "second_order"
    ):
        return control_variate
    raise ValueError(
        "control_variate must be None (automatic), True, False or 'second_order', "
        f"got {control_variate!r}."
    )


def estimators_to_weigh(control_variate) -> tuple[str, ...]:
    """Return the gradient estimators the tuner weighs for a checked ``control_variate``."""
    return _ESTIMATORS[control_variate]


def check_preconditioner(preconditioner, size: int):
    """Return the given diagonal preconditioner (or None) and the metric to build."""
    if isinstance(preconditioner, str):
        if preconditioner not in METRIC_CHOICES:
            raise ValueError(
                f"preconditioner must be one of {', '.join(map(repr, METRIC_CHOICES))}, "
                f"None or an array, got {preconditioner!r}."
            )
        return None, preconditioner
    if preconditioner is None:
        return np.ones(size), "auto"
    values = np.broadcast_to(np.asarray(preconditioner, dtype=float), (size,)).copy()
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError("preconditioner must hold positive finite numbers.")
    return values, "auto"
