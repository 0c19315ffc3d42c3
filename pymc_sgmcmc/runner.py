"""Running a chain's inner steps through the compiled kernels.

A :class:`KernelRunner` turns a chain's settings into the kernel's inputs,
draws the rows and the noise of the next draws, and calls the fused kernel
(or, for the first inner steps of a chain, the interpreted loop): one draw
a call while the chain tunes, the steps of several draws a call after it
(:mod:`pymc_sgmcmc.ahead`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from pymc_sgmcmc.ahead import draws_per_call
from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.interrupts import interrupts_held
from pymc_sgmcmc.kernel import KernelResult, is_jax
from pymc_sgmcmc.loop import interpretable
from pymc_sgmcmc.schedules import usable_step_sizes
from pymc_sgmcmc.tuning.measure import FULL_DATA

__all__ = ["CENTRED_ESTIMATORS", "KernelRunner"]

#: The estimators that read a control-variate centre.
CENTRED_ESTIMATORS = ("control_variate", "second_order")

#: Per-step inputs a chain keeps for a periodic schedule: a constant step
#: size's calls all start at the one place of its period, and a cycle's calls
#: of several draws at a few places in it, the same in every cycle.
PERIODIC_ENTRIES = 64

#: Most row indices (or noise values) one call of the kernel holds (32 MiB of
#: them): a draw on the full data's gradient, or a draw of more minibatch
#: steps than that holds, runs its inner steps in calls of at most this many
#: in all, each from where the last one ended.
CALL_ROWS = 2**22


def _call_width(rows, noise_shape) -> int:
    """Return the row indices or noise values, whichever are more, that one inner step reads."""
    return max(rows.batch_size, math.prod(noise_shape))


class KernelRunner:
    """Call a step method's compiled kernels for its chains.

    Parameters
    ----------
    compiled : CompiledModel
        The model's compiled functions (:mod:`pymc_sgmcmc.compiled_model`).
    dynamics : Dynamics
        The sampler's dynamics.
    tuning : TuningConfig
        The adaptation's constants (the interpreted steps, the draws per call).
    clip_gradient : float
        Norm the gradient estimate is clipped to; ``inf`` for none.
    moves_between_draws : bool
        Whether something outside the kernel moves the chain between draws
        (another step method, a control-variate centre that moves), which
        keeps every call to one draw.
    """

    def __init__(self, compiled, dynamics: Dynamics, tuning, clip_gradient, moves_between_draws):
        self.compiled = compiled
        self.dynamics = dynamics
        self.tuning = tuning
        self.clip_gradient = clip_gradient
        self.moves_between_draws = moves_between_draws
        #: Whether the dynamics has an interpreted loop, which starts a chain
        #: without waiting for the fused kernel's compilation.
        self.interprets = interpretable(dynamics)
        #: Inner steps a chain takes in the interpreted loop where they are
        #: given; None where they follow from the kernel's graph
        #: (:meth:`handover_steps`); all of them where the fused kernel would
        #: take them no faster.
        self.interpreted_steps = tuning.interpreted_steps
        if (
            self.interpreted_steps != 0
            and not dynamics.fused_kernel_is_faster()
            and not is_jax(compiled.compile_kwargs)
        ):
            self.interpreted_steps = np.inf

    def handover_steps(self, chain) -> float:
        """Return the inner steps after which ``chain`` leaves the interpreted loop.

        Unless given (:attr:`~pymc_sgmcmc.tuning.TuningConfig.interpreted_steps`),
        ``TuningConfig.steps_per_operation`` times the operations of the
        graph of the chain's gradient estimate
        (:meth:`~pymc_sgmcmc.compiled_model.CompiledModel.gradient_operations`):
        the steps whose extra cost in the loop is about what compiling the
        fused kernel costs. A count of the chain's own steps, so the draws do
        not depend on timing, on ``cores`` or on what the caches hold.
        """
        if self.interpreted_steps is not None:
            return self.interpreted_steps
        estimator = chain.settings.estimator
        # The full data's gradient is the minibatch gradient on batches of all rows.
        estimator = "minibatch" if estimator == FULL_DATA else estimator
        return self.tuning.steps_per_operation * self.compiled.gradient_operations(estimator)

    def prepare_inputs(self, chain) -> None:
        """Build the kernel's inputs from ``chain``'s settings, dropping draws run ahead.

        A chain that clips its tune steps (``chain.clips_tune_steps``) clips
        the gradient at the settings' ``tune_clip`` too, where that is below
        the step method's ``clip_gradient``.
        """
        chain.ahead.clear()
        settings = chain.settings
        clip = self.clip_gradient
        if chain.clips_tune_steps:
            clip = min(clip, settings.tune_clip)
        named = {
            **settings.inputs,
            **settings.metric.inputs(),
            "gradient_clip": clip,
        }
        if settings.estimator in CENTRED_ESTIMATORS:
            named.update(chain.centre.inputs())
        chain.interpreted = self.interprets and chain.steps_taken < self.handover_steps(chain)
        chain.kernel_inputs = self.kernel(chain).prepare(named, chain.state["position"].size)

    def kernel(self, chain):
        """Return the kernel ``chain``'s next draw runs: interpreted or fused."""
        settings = chain.settings
        # The full data's gradient is the minibatch gradient on batches of all rows.
        estimator = "minibatch" if settings.estimator == FULL_DATA else settings.estimator
        if chain.interpreted:
            return self.compiled.interpreted_kernel(self.dynamics, estimator, settings.metric.kind)
        return self.compiled.kernel(self.dynamics, estimator, settings.metric.kind)

    def run(self, chain, position, n_steps: int, step_values, rng, tune: bool) -> KernelResult:
        """Return what the kernel gives for ``chain``'s next draw, from ``position``.

        A draw the last call ran ahead is handed out where the chain still
        stands where its last draw ended; otherwise the kernel runs the inner
        steps of this draw, or after tuning those of several, keeping the
        later ones (with their inner steps and last step size) in
        ``chain.ahead`` for the next draws.
        """
        if chain.ahead:
            if chain.last_draw[1].tobytes() == position.tobytes():
                return chain.ahead.pop()[0]
            chain.ahead.clear()
        settings = chain.settings
        draws = self.draws_per_call(chain, n_steps, tune)
        if draws > 1:
            block = self._step_block(chain, draws, n_steps)
            draws = len(block["step_size"])
        noise_shape = (self.dynamics.noise_vectors, position.size)
        state = {**chain.state, "position": self.coordinates(chain, settings.metric, position)}
        if settings.estimator == FULL_DATA:
            rows = chain.all_rows
            return self._run_in_calls(chain, rows, state, n_steps, step_values, rng, noise_shape)
        batches = chain.batches
        if draws == 1 and n_steps * _call_width(batches, noise_shape) > CALL_ROWS:
            # A draw longer than one call holds (cyclical SGLD's exploration
            # and settling stages, at a small step size).
            return self._run_in_calls(chain, batches, state, n_steps, step_values, rng, noise_shape)
        # The rows and the noise of ``draws`` draws, each from its own generator
        # in one call: the numbers of a call per draw.
        indices = batches.draw(chain.row_generator, draws * n_steps)
        noise = rng.standard_normal((draws * n_steps, *noise_shape))
        if draws > 1:
            indices = indices.reshape(draws, n_steps, -1)
            noise = noise.reshape(draws, n_steps, *noise_shape)
        self.compiled.pages.read(indices)
        kernel = self.kernel(chain)
        if draws == 1:
            with interrupts_held:
                return kernel(state, indices, noise, step_values, chain.kernel_inputs)
        with interrupts_held:
            results = kernel.draws(state, indices, noise, block, chain.kernel_inputs)
        last_step_sizes = block["step_size"][:, -1].tolist()
        chain.ahead = [
            (result, n_steps, step_size)
            for result, step_size in zip(results[:0:-1], last_step_sizes[:0:-1], strict=True)
        ]
        return results[0]

    def _run_in_calls(self, chain, rows, state, n_steps, step_values, rng, noise_shape):
        """Return what the kernel gives for a draw of ``n_steps`` steps on batches from ``rows``.

        ``rows`` is the chain's minibatch stream or all its rows. The steps
        run in calls of at most :data:`CALL_ROWS` row indices (or noise
        values), each from the state the last one returned, so that memory
        does not grow with ``n_steps`` times the rows of a step; a call that
        stops at a non-finite step ends the draw. The rows and the noise are
        drawn call by call, in the order of the steps, so that they are the
        numbers of one call.
        """
        kernel = self.kernel(chain)
        length = max(1, CALL_ROWS // _call_width(rows, noise_shape))
        taken = clipped = 0
        for start in range(0, n_steps, length):
            steps = min(length, n_steps - start)
            indices = rows.draw(chain.row_generator, steps)
            noise = rng.standard_normal((steps, *noise_shape))
            self.compiled.pages.read(indices)
            values = {name: value[start : start + steps] for name, value in step_values.items()}
            with interrupts_held:
                result = kernel(state, indices, noise, values, chain.kernel_inputs)
            taken += result.steps_taken
            clipped += result.clipped_steps
            state = result.state
            if result.steps_taken < steps:
                break
        return dataclasses.replace(result, steps_taken=taken, clipped_steps=clipped)

    def draws_per_call(self, chain, n_steps: int, tune: bool) -> int:
        """Return how many draws the next kernel call may run: one unless they can run ahead.

        Several only after tuning, in the fused kernel, with nothing outside
        the kernel that moves the chain between draws. Steps on all rows take
        one draw a call: their work dwarfs a call's fixed cost, and the row
        indices of many draws would fill memory. The draws of a call also
        take the same number of inner steps (:meth:`_step_block`).
        """
        if (
            tune
            or chain.interpreted
            or chain.settings.estimator == FULL_DATA
            or self.moves_between_draws
        ):
            return 1
        tuning = self.tuning
        return draws_per_call(tuning.steps_per_call, tuning.max_draws_per_call, n_steps)

    def draw_steps(self, chain, steps: int) -> int:
        """Return the inner steps of ``chain``'s next draw, whose share of them is ``steps``."""
        step_size = chain.settings.step_size
        return self._periodic(
            chain,
            ("draw_steps", steps),
            lambda: self.dynamics.draw_steps(step_size, chain.steps_taken, steps),
        )

    def step_values(self, chain, n_steps: int) -> dict:
        """Return the per-step inputs of ``chain``'s next ``n_steps`` steps.

        Where they repeat with a period (:meth:`~pymc_sgmcmc.dynamics.Dynamics.period`:
        every step for a constant step size, every cycle for cyclical SGLD's
        schedule) they are built once per step's place in the period and reused.
        """
        step_size = chain.settings.step_size
        return self._periodic(
            chain,
            ("step_values", n_steps),
            lambda: self.dynamics.step_values(step_size, chain.steps_taken + np.arange(n_steps)),
        )

    @staticmethod
    def coordinates(chain, metric, position: np.ndarray) -> np.ndarray:
        """Return ``position`` in ``metric``'s coordinates.

        A draw that starts where the chain's last draw ended (PyMC hands the
        position back unchanged unless another step method moved it) takes
        the coordinates the kernel returned, without mapping back. The
        positions are compared byte for byte, cheaper than comparing the
        values for the lengths a metric is dense for.
        """
        last = chain.last_draw
        if last is not None and last[0] is metric and last[1].tobytes() == position.tobytes():
            return last[2]
        return metric.to_coordinates(position)

    def _step_block(self, chain, draws: int, n_steps: int) -> dict:
        """Return the per-step inputs of the next draws that take ``n_steps`` inner steps.

        At most ``draws`` draws, each a row of every input (a schedule's step
        sizes, a cycle's stages: functions of the step's number, built in one
        call for all the draws' steps, once per place in their period), up to
        the first draw that takes another number of inner steps or whose step
        sizes are not positive finite numbers (that draw then runs, and is
        checked, alone).
        """
        build = functools.partial(self._new_step_block, chain, draws, n_steps)
        return self._periodic(chain, ("step_block", draws, n_steps), build)

    def _new_step_block(self, chain, draws: int, n_steps: int) -> dict:
        """Build :meth:`_step_block`'s per-step inputs of each draw from the step numbers."""
        settings = chain.settings
        # After tuning a draw's share of the steps is the tuned steps per draw.
        firsts = chain.steps_taken + n_steps * np.arange(1, draws)
        lengths = self.dynamics.draw_steps(settings.step_size, firsts, settings.steps_per_draw)
        other = np.flatnonzero(np.broadcast_to(lengths, firsts.shape) != n_steps)
        alike = 1 + (int(other[0]) if other.size else draws - 1)
        steps = chain.steps_taken + np.arange(alike * n_steps)
        values = self.dynamics.step_values(settings.step_size, steps)
        usable = usable_step_sizes(values["step_size"].reshape(alike, n_steps), axis=1)
        if not usable.all():
            # The first draw's were checked before the call.
            alike = max(1, int(np.argmin(usable)))
        return {name: value.reshape(-1, n_steps)[:alike] for name, value in values.items()}

    def _periodic(self, chain, key: tuple, build):
        """Return ``build()``, built once per ``key`` and place in the schedule's period.

        Where the dynamics' per-step inputs repeat with a period
        (:meth:`~pymc_sgmcmc.dynamics.Dynamics.period`), what ``build``
        returns depends on the chain's steps taken only through their
        remainder by it, and is kept for the chain's current settings (at most
        :data:`PERIODIC_ENTRIES` of them). Without a period it is built anew.
        """
        settings = chain.settings
        period = self.dynamics.period(settings.step_size)
        if period is None:
            return build()
        if chain.periodic is None or chain.periodic[0] is not settings:
            chain.periodic = (settings, {})
        entries = chain.periodic[1]
        key = (*key, chain.steps_taken % period)
        if key not in entries:
            if len(entries) >= PERIODIC_ENTRIES:
                entries.clear()
            entries[key] = build()
        return entries[key]
