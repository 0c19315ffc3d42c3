"""Several recorded draws from one call of the fused kernel.

After tuning, nothing outside the kernel moves a chain between its draws, so
one call of the fused kernel (:meth:`~pymc_sgmcmc.kernel.Kernel.draws`) can
run the inner steps of several draws, which the step method then hands to
PyMC one per draw. The draws of one call take the same number of inner steps,
each with the per-step inputs it would have on its own: the same at every
draw for a constant step size, a schedule's values, a cycle's stages (the
longer first draw of a cycle starts a call of its own). The minibatch rows
come from a generator of their own and the noise from the chain's, each
drawn for all the draws in one call: the numbers a call per draw would draw,
so the draws are the same either way. Only the call's fixed cost (its
arguments, the compiled code's entry, the random numbers' calls, the
statistics of the call) is shared.
"""

from __future__ import annotations

__all__ = ["draws_per_call"]


def draws_per_call(steps_per_call: int, max_draws: int, steps_per_draw: int) -> int:
    """Return how many draws of ``steps_per_draw`` inner steps one kernel call takes.

    As many whole draws as fit in ``steps_per_call`` inner steps, at most
    ``max_draws`` and at least one.
    """
    return max(1, min(max_draws, steps_per_call // max(steps_per_draw, 1)))
