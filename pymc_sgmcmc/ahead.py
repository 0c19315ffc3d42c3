"""Several recorded draws from one call of the fused kernel.

After tuning, a chain's draws all take the same number of inner steps with
the same per-step inputs, so one call of the fused kernel
(:meth:`~pymc_sgmcmc.kernel.Kernel.draws`) can run the inner steps of several
draws, which the step method then hands to PyMC one per draw. The random
numbers are drawn draw by draw, in the order one call per draw would draw
them, so the draws are the same either way: only the call's fixed cost (its
arguments, the compiled code's entry, the statistics of the call) is shared.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.batches import IndexStream

__all__ = ["draw_inputs", "draws_per_call"]


def draws_per_call(steps_per_call: int, max_draws: int, steps_per_draw: int) -> int:
    """Return how many draws of ``steps_per_draw`` inner steps one kernel call takes.

    As many whole draws as fit in ``steps_per_call`` inner steps, at most
    ``max_draws`` and at least one.
    """
    return max(1, min(max_draws, steps_per_call // max(steps_per_draw, 1)))


def draw_inputs(
    batches: IndexStream,
    rng: np.random.Generator,
    draws: int,
    steps_per_draw: int,
    noise_shape: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Return the minibatch rows and standard normal draws of ``draws`` draws.

    Each draw's rows (``steps_per_draw`` batches from ``batches``) come
    before its noise (``steps_per_draw`` arrays of ``noise_shape``), as in a
    call per draw, so that the generator gives the same numbers.

    Returns
    -------
    indices : ndarray
        ``draws x steps_per_draw x B`` row indices.
    noise : ndarray
        ``draws x steps_per_draw x noise_shape`` standard normal draws.
    """
    indices = np.empty((draws, steps_per_draw, batches.batch_size), dtype=np.int64)
    noise = np.empty((draws, steps_per_draw, *noise_shape))
    for draw in range(draws):
        indices[draw] = batches.draw(rng, steps_per_draw)
        rng.standard_normal(out=noise[draw])
    return indices, noise
