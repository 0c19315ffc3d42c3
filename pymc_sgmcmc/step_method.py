"""The PyMC adapter: any sampler declaration becomes a PyMC step method."""

from __future__ import annotations

import logging
import math
from typing import ClassVar

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from pymc_sgmcmc.arguments import (
    check_bias_budget,
    check_clip_gradient,
    check_control_variate,
    check_data,
    check_preconditioner,
    check_temperature,
    estimators_to_weigh,
    is_integer,
    positive_integer,
    sampled_variables,
)
from pymc_sgmcmc.batches import AllRows, IndexStream
from pymc_sgmcmc.cluster import check_client
from pymc_sgmcmc.compiled_model import compiled_model
from pymc_sgmcmc.dynamics import Dynamics
from pymc_sgmcmc.interrupts import interrupted
from pymc_sgmcmc.kernel import as_state, is_jax
from pymc_sgmcmc.minibatch import MinibatchError, refuse_row_latents_in_minibatches
from pymc_sgmcmc.runner import CENTRED_ESTIMATORS, KernelRunner
from pymc_sgmcmc.schedules import ConstantStepSize, as_schedule, usable_step_sizes
from pymc_sgmcmc.tuning import TuningConfig, UserChoices
from pymc_sgmcmc.tuning.chain import ChainAdapter, ChainState
from pymc_sgmcmc.tuning.epochs import epoch_steps
from pymc_sgmcmc.tuning.measure import FULL_DATA

__all__ = ["ChainState", "StochasticGradientState", "StochasticGradientStep"]

#: PyMC's logger, which PyMC shows at INFO level while it samples.
_log = logging.getLogger("pymc")

#: PyTensor backend of the compiled kernels unless ``compile_kwargs`` names a
#: ``mode``. Numba ships with PyTensor and runs a fused loop of minibatch steps
#: several times faster than the C backend (see docs/performance.md).
DEFAULT_MODE = "NUMBA"

#: Arguments that pickled step methods leave out of their constructor arguments.
_NOT_PICKLED = frozenset({"client", "data"})

#: Backend of the tuning functions (tens of thousands of calls per chain, the
#: interpreted loop's among them) unless ``compile_kwargs`` names a ``mode``.
#: Numba compiles them about as fast as the C backend on a first run and runs
#: them faster, on PyTensor 2 and 3 alike; PyTensor 3's C backend also finds
#: no BLAS when installed from pip (see docs/performance.md).
PROBE_MODE = "NUMBA"

#: Statistics every stochastic-gradient step records, one value per draw.
BASE_STATS = {
    "step_size": (np.float64, []),
    "gradient_norm": (np.float64, []),
    "log_density": (np.float64, []),
    "diverging": (bool, []),
    "control_variate": (bool, []),
    "steps_per_draw": (np.int64, []),
    "gradient_noise": (np.float64, []),
    "predicted_inflation": (np.float64, []),
    "gradient_clipped": (np.float64, []),
    "warning": (SamplerWarning, None),
}


@dataclass_state
class StochasticGradientState(StepMethodState):
    """The sampling state of a stochastic-gradient step, as PyMC snapshots it."""

    chain: ChainState | None = None


class StochasticGradientStep(ArrayStepShared):
    r"""A PyMC step method running the sampler declared by ``dynamics_class``.

    A public sampler is a subclass that names its
    :class:`~pymc_sgmcmc.dynamics.Dynamics` (``dynamics_class``); options the
    dynamics takes (e.g. SGHMC's ``friction``) pass through as keyword
    arguments. Everything else (minibatches, gradient estimators, adaptation,
    random numbers, statistics, divergence handling, per-chain state) lives
    here and in the modules it calls.

    Adaptation runs when a chain takes its first draw (during ``tune``): from
    a jittered copy of its starting point and with its own generator, the
    chain finds a mode, estimates the posterior covariance and the gradient
    noise there, and :func:`~pymc_sgmcmc.tuning.choose_settings` fixes the
    gradient estimator, the metric (dense, low-rank or diagonal), the step size meeting
    ``bias_budget`` for this sampler's actual temperature, friction and mass,
    and the inner steps per draw, unless the user gave them. The chain then
    starts from its own draw of the Laplace approximation at its mode. When
    other step methods sample the model's other variables (a compound step),
    the chain measures again at the end of tuning, where those variables
    have reached their posterior.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    batch_size : int, optional
        Rows per minibatch B; ``min(100, N)`` by default. A batch size larger
        than N uses all N rows in every batch.
    step_size : float or schedule, optional
        Step size :math:`\eta`, a number or a schedule such as
        :class:`~pymc_sgmcmc.PolynomialDecay`; chosen from the bias budget by
        default. A given value always wins.
    temperature : float, default 1
        Temperature :math:`\tau`; 1 samples the posterior.
    steps_per_draw : int, optional
        Inner steps per recorded draw; by default about the chain's
        predicted relaxation time, so draws are close to independent.
    preconditioner : str, None or array, default "auto"
        The coordinates the chain samples in (:mod:`pymc_sgmcmc.metric`),
        built from the Laplace covariance at the chain's mode: "diagonal"
        (the posterior sds), "dense" (its Cholesky factor), "low_rank" (the
        sds and the most stretched directions of the posterior correlation),
        or "auto", which chooses the one with the shortest predicted
        relaxation per unit of work (dense up to ``tuning.dense_size``
        coordinates, low-rank beyond). ``None`` samples in the model's
        coordinates; an array is a given diagonal preconditioner :math:`P`.
    control_variate : bool or "second_order", optional
        Use the control-variate gradient centred at the mode (True), the plain
        minibatch gradient (False), or whichever the measured noise says mixes
        faster per unit of work (None, the default). The second-order control
        variate
        (:func:`~pymc_sgmcmc.estimators.second_order_control_variate_gradient`)
        subtracts the minibatch's error in the curvature at the centre, the
        noise that binds chains on regressions whose rows differ in leverage,
        for about two more gradient passes per step and the exact full-data
        Hessian at each centre (D passes over the data). The default weighs it
        too where that Hessian costs at most 1,000 first-order draws and the
        likelihood's gradient is linear across the Laplace approximation to
        within 10% (:func:`~pymc_sgmcmc.tuning.measure.with_second_order`),
        and the centre stays (no ``control_variate_refresh``);
        ``"second_order"`` weighs it everywhere. Off that region its larger
        steps can carry a chain out of where the centre's curvature holds (as
        along a non-centred hierarchical model's ridge): check R-hat and ESS.
        The default also weighs the gradient on all N rows at every step (no
        noise, ``N / B`` times a minibatch step's work) where the data are in
        memory; True and False leave it out.
    control_variate_refresh : int, optional
        Re-centre the control variate at the current state every so many
        inner steps (one full pass over the data each time, and D more for the
        second-order control variate's Hessian); never by default.
    bias_budget : float, default 0.05
        Largest predicted relative inflation of the posterior variance
        (0.05: about 2.5% on the sds) from discretisation and gradient noise,
        and, once the tune draws have shown how far that inflation moves the
        posterior means of a skewed posterior, twice the largest predicted
        move of a mean in posterior sds (0.05: 0.025 sd, as on the sds; the
        whole budget for samplers whose model bounds the inflation, see
        :func:`pymc_sgmcmc.tuning.tuner.mean_share`).
    clip_gradient : float, optional
        Clip the gradient estimate to this Euclidean norm, in the coordinates
        the chain samples in (with the default metric, coordinates in which
        the posterior is roughly standard normal, so typical norms are about
        the square root of the number of coordinates): ``g min(1, c / |g|)``.
        Clipping guards against exploding gradients and biases the draws
        whenever it acts; ``gradient_clipped`` records how often it did.
        None (the default) never clips.
    replace : bool, default False
        Draw rows with replacement instead of in shuffled epochs.
    tuning : TuningConfig, optional
        The adaptation's constants.
    model : pm.Model, optional
        The model, from the context by default.
    initial_point : dict, optional
        Point used to build the graphs; ``model.initial_point()`` by default.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile`; ``{"mode": "NUMBA"}`` for the kernels
        unless it names another ``mode`` (``"CVM"`` for the C backend,
        ``"JAX"`` to run the kernels with JAX, on a GPU where JAX has one),
        and the tuning functions' backend (:data:`PROBE_MODE`) unless it
        names one other than ``"JAX"``.
    data : dict, optional
        The full data, by the names of the model's ``pm.Data``, where the
        model holds a subset of the rows (data too large for memory): NumPy
        arrays, memory-mapped ``.npy`` files (``np.load(path, mmap_mode="r")``)
        read in place, or Zarr arrays, copied once into such a file. Every
        array the likelihood reads by row must be given. The model keeps its values
        (NUTS and PyMC's checks run on the subset); see
        :mod:`pymc_sgmcmc.disk_rows`.
    client : distributed.Client, optional
        A Dask cluster to run the full-data passes on (finding the mode,
        centring the control variate): a map over chunks of rows on its
        workers, summed in order in the chain's process, the same numbers
        as the pass in process (:mod:`pymc_sgmcmc.cluster`). Minibatch
        steps stay in the chain's process.
    blocked, rng
        As for every PyMC step method.
    **options
        Options of the sampler's dynamics (e.g. ``friction`` and ``mass``).

    Notes
    -----
    Sampler statistics, one value per recorded draw:

    - ``step_size``: step size of the last inner step.
    - ``gradient_norm``: Euclidean norm of the gradient estimate at the start
      of the last inner step, in the metric's coordinates.
    - ``log_density``: minibatch estimate of the log posterior (up to a
      constant) at the end of the draw.
    - ``diverging``: True once the state or its gradient became non-finite;
      the chain then stays at its last finite state.
    - ``control_variate``: whether the chain uses control variates.
    - ``steps_per_draw``: inner steps of this draw (one per tune draw once
      the tune windows have closed and the chain has settled).
    - ``gradient_noise``: measured variance of the gradient-estimate noise, in
      preconditioned coordinates.
    - ``predicted_inflation``: predicted relative inflation of the posterior
      variance from discretisation and gradient noise.
    - ``gradient_clipped``: fraction of the draw's inner steps whose gradient
      estimate was clipped (0 without ``clip_gradient``, but in tune draws
      after one of the chain's tune steps diverged, see
      ``TuningConfig.tune_clip``).
    - the statistics the sampler's dynamics declares.

    Warnings reach PyMC as ``SamplerWarning`` objects in the ``warning``
    statistic, which PyMC logs (and drops from the result unless
    ``keep_warning_stat=True``).
    """

    name = "stochastic_gradient"
    default_blocked = True
    dynamics_class: ClassVar[type[Dynamics]]
    stats_dtypes_shapes: ClassVar[dict] = BASE_STATS
    _state_class = StochasticGradientState

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "dynamics_class"):
            extra = {name: (dtype, []) for name, dtype in cls.dynamics_class.stats.items()}
            cls.stats_dtypes_shapes = {**BASE_STATS, **extra}

    def __init__(
        self,
        vars=None,
        *,
        batch_size: int | None = None,
        step_size=None,
        temperature: float = 1.0,
        steps_per_draw: int | None = None,
        preconditioner="auto",
        control_variate: bool | None = None,
        control_variate_refresh: int | None = None,
        bias_budget: float = 0.05,
        clip_gradient: float | None = None,
        replace: bool = False,
        tuning: TuningConfig | None = None,
        model=None,
        initial_point=None,
        compile_kwargs: dict | None = None,
        data: dict | None = None,
        client=None,
        blocked: bool = True,
        rng=None,
        **options,
    ):
        try:
            self.dynamics = self.dynamics_class(**options)
        except TypeError:
            raise TypeError(
                f"{type(self).__name__} got unknown arguments {sorted(options)}."
            ) from None
        model = pm.modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        vars = sampled_variables(model, vars, type(self).__name__)
        temperature = check_temperature(temperature)
        bias_budget = check_bias_budget(bias_budget)
        clip_gradient = check_clip_gradient(clip_gradient)
        control_variate = check_control_variate(control_variate)
        probe_kwargs = {"mode": PROBE_MODE, **(compile_kwargs or {})}
        if is_jax(probe_kwargs):
            # JAX runs the kernels (on its device, e.g. a GPU); the tuning
            # functions, called many times on changing shapes, keep their backend.
            probe_kwargs["mode"] = PROBE_MODE
        compile_kwargs = {
            "mode": self.dynamics.kernel_mode() or DEFAULT_MODE,
            **(compile_kwargs or {}),
        }
        self.tuning = tuning or TuningConfig()
        shared = make_shared_replacements(initial_point, vars, model)
        self.compiled = compiled_model(
            model,
            vars,
            initial_point,
            shared,
            compile_kwargs,
            self.tuning.chunk_rows,
            probe_kwargs,
            check_data(data, compile_kwargs),
            check_client(client),
        )
        density = self.compiled.density
        if batch_size is None:
            batch_size = min(100, density.n_rows)
        elif is_integer(batch_size) and batch_size > density.n_rows:
            _log.info(
                "batch_size=%d is more than the %d rows of the data: every batch holds all "
                "rows (exact gradients).",
                batch_size,
                density.n_rows,
            )
            batch_size = density.n_rows
        self._batches = IndexStream(density.n_rows, batch_size, replace=replace)
        self.batch_size = self._batches.batch_size
        refuse_row_latents_in_minibatches(density, self._batches.full)
        size = sum(int(np.prod(initial_point[v.name].shape, dtype=int)) for v in vars)
        self.dynamics.check_size(size)
        given_preconditioner, metric = check_preconditioner(preconditioner, size)
        if metric != "auto" and not self.dynamics.accepts_metric():
            raise ValueError(
                f"preconditioner={metric!r} needs the sampler's options in the metric's "
                "coordinates; leave friction and mass unset, or use preconditioner='auto'."
            )
        self.choices = UserChoices(
            step_size=None if step_size is None else as_schedule(step_size),
            preconditioner=given_preconditioner,
            metric=metric,
            estimators=estimators_to_weigh(control_variate),
            steps_per_draw=(
                None
                if steps_per_draw is None
                else positive_integer("steps_per_draw", steps_per_draw)
            ),
            temperature=temperature,
            bias_budget=bias_budget,
            # A centre that moves would buy the full-data Hessian again at
            # every refresh, which the automatic choice's cost rule does not count.
            weighs_second_order=control_variate is None and control_variate_refresh is None,
            full_data_work=self._full_data_work(control_variate),
        )
        self.control_variate_refresh = (
            None
            if control_variate_refresh is None
            else positive_integer("control_variate_refresh", control_variate_refresh)
        )
        self.measures = self._needs_measurements()
        self.adapter = ChainAdapter(
            type(self).__name__,
            self.dynamics,
            self.compiled.probe,
            self.choices,
            self.tuning,
            self.batch_size,
            self._batches.full,
            self.measures,
            bool(self.density.other_blocks),
            self._epochs(),
        )
        # Compiled (with Numba, at its first call) before PyMC forks its chain
        # processes, so they share it.
        self.runner = KernelRunner(
            self.compiled,
            self.dynamics,
            self.tuning,
            clip_gradient,
            bool(self.density.other_blocks) or self.control_variate_refresh is not None,
        )
        if self.measures or self.runner.interprets:
            point = {v.name: initial_point[v.name] for v in vars}
            self.compiled.probe.terms(DictToArrayBijection.map(point).data, np.arange(1))
        else:
            self.compiled.kernel(self.dynamics, "minibatch")
        super().__init__(vars, shared, blocked=blocked, rng=rng)
        self.chain = self._new_chain()

    def __getnewargs_ex__(self):
        # Unpickling calls __new__ with these and restores the state from
        # __dict__, which PyMC keeps them in too: the live connection of a
        # Dask client cannot travel (the compiled model carries what
        # reconnects to its scheduler), and the data travels once, inside the
        # compiled model.
        args, kwargs = super().__getnewargs_ex__()
        return args, {name: value for name, value in kwargs.items() if name not in _NOT_PICKLED}

    def __getstate__(self):
        stored = super().__getnewargs_ex__()
        kept = self.__getnewargs_ex__()
        return {name: kept if value is stored else value for name, value in vars(self).items()}

    def _full_data_work(self, control_variate) -> float:
        """Return the work of a step on all rows relative to a minibatch step, if weighed.

        Where the estimator is left to the tuner, a chain may take every inner
        step on all N rows: no gradient noise, and with it none of the bias
        and the small steps that the noise brings, at ``N / B`` times a
        minibatch step's work; on small data that can relax faster per unit
        of work. Not weighed (``inf``) where the user chose the estimator,
        where the batches hold all rows already, on more than
        ``tuning.full_data_rows`` rows, where a full pass reads the data from
        disk or from a cluster, and in a compound step (whose other blocks
        move after the tune windows that would check it).
        """
        batches = self._batches
        if (
            control_variate is not None
            or self.density.other_blocks
            or batches.full
            or batches.n_rows > self.tuning.full_data_rows
            or self.compiled.pages.active
            or self.compiled.cluster is not None
        ):
            return np.inf
        return batches.n_rows / batches.batch_size

    def _epochs(self) -> float:
        """Return the inner steps per epoch over which the minibatch noise sums to zero.

        ``inf`` where it does not: batches drawn with replacement, other step
        methods moving the rest of the model between draws, or a control-variate
        centre that moves (``control_variate_refresh``).
        """
        batches = self._batches
        if batches.replace or self.density.other_blocks or self.control_variate_refresh:
            return np.inf
        steps = epoch_steps(batches.n_rows, batches.batch_size)
        # An epoch of one batch holds every row: such batches have no noise.
        return steps if steps >= 2 else np.inf

    def _needs_measurements(self) -> bool:
        choices = self.choices
        fixed = (
            choices.step_size is not None
            and choices.preconditioner is not None
            and choices.estimators == ("minibatch",)
            and choices.steps_per_draw is not None
        )
        return not fixed or self.dynamics.needs_measurements()

    @property
    def density(self):
        """The symbolic minibatch log density of the sampled variables."""
        return self.compiled.density

    # Chain life cycle -----------------------------------------------------------

    def _new_chain(self) -> ChainState:
        # A chain tunes until PyMC calls stop_tuning (its parallel sampler
        # never sets ``tune``; the sequential one sets it after this).
        self.tune = True
        self._check_data()
        batches = self._batches
        all_rows = None
        if np.isfinite(self.choices.full_data_work):
            all_rows = AllRows(batches.n_rows)
        return ChainState(
            IndexStream(batches.n_rows, batches.batch_size, batches.replace),
            # Seeded from the chain's generator: the same seed, the same rows.
            row_generator=np.random.default_rng(self.rng.integers(2**63, size=2)),
            all_rows=all_rows,
        )

    def _check_data(self) -> None:
        """Refuse data whose number of rows changed (``pm.set_data``) since the step was built."""
        n_rows = self.density.n_rows
        lengths = sorted({len(data.get_value(borrow=True)) for data in self.density.data})
        if lengths != [n_rows]:
            raise MinibatchError(
                f"The model's data now has {', '.join(map(str, lengths))} rows, but "
                f"{type(self).__name__} was built for {n_rows}: build the step method again "
                "after pm.set_data."
            )

    def set_rng(self, rng) -> None:
        """Start a chain with generator ``rng`` (PyMC 5)."""
        self.rng = get_random_generator(rng, copy=False)
        self.chain = self._new_chain()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """Start a chain with generator ``rng`` (PyMC 6)."""
        self.rng = get_random_generator(rng, copy=False)
        self.chain = self._new_chain()

    def reset_tuning(self) -> None:
        """Nothing to reset: a chain adapts at its first draw (PyMC's sequential hook)."""

    def stop_tuning(self) -> None:
        """End tuning; in a compound step, measure again before the next draw.

        A chain that travelled and whose settings no tune window checked
        since warns (:meth:`~pymc_sgmcmc.tuning.travel.Travel.unchecked_after_travel`).
        """
        self.tune = False
        chain = self.chain
        chain.warnings.extend(
            SamplerWarning(WarningType.BAD_PARAMS, message, "warn")
            for message in self.adapter.unchecked_after_travel(chain)
        )
        chain.window = []
        chain.ahead.clear()
        if chain.clips_tune_steps:
            # Draws are clipped at clip_gradient alone.
            chain.clips_tune_steps = False
            self.runner.prepare_inputs(chain)
        if chain.settings is not None and self.measures and self.density.other_blocks:
            chain.readapt = True

    def _adapt(self, position: np.ndarray, start: bool) -> np.ndarray:
        """Measure the posterior if needed, fix the chain's settings, return where to start."""
        position, messages = self.adapter.adapt(self.chain, position, self.rng, start, self.tune)
        self._start_from(position, messages)
        self.chain.readapt = False
        return position

    def _start_from(self, position: np.ndarray, messages) -> None:
        """Start the sampler state at ``position`` with the chain settings; queue ``messages``."""
        chain = self.chain
        settings = chain.settings
        coordinates = settings.metric.to_coordinates(position)
        chain.state = as_state(self.dynamics.initial_state(coordinates, settings.inputs, self.rng))
        self.runner.prepare_inputs(chain)
        chain.warnings.extend(
            SamplerWarning(WarningType.BAD_PARAMS, message, "warn") for message in messages
        )

    # Sampling ---------------------------------------------------------------------

    def step(self, point: dict) -> tuple[dict, list[dict]]:
        """Take one draw from ``point`` and return the new point and its statistics.

        As :meth:`pymc.step_methods.arraystep.ArrayStepShared.step`, with two
        shortcuts: a point whose sampled variables are the very arrays the
        chain's last draw returned (PyMC hands them back unless another step
        method replaced them) reuses that draw's raveled position instead of
        concatenating them again, and the new point's arrays are views into
        the draw's position where their dtype is its dtype, not copies.
        """
        for name, shared_variable in self.shared.items():
            shared_variable.set_value(point[name], borrow=True)
        last = self.chain.last_point
        if last is not None and all(point[name] is last[0][name] for name in self.var_names):
            q0 = last[1]
        else:
            q0 = DictToArrayBijection.map({name: point[name] for name in self.var_names})
        draw, stats = self.astep(q0)
        data = draw.data
        new_point = dict(point)
        start = 0
        for name, shape, size, dtype in draw.point_map_info:
            values = data[start : start + size].reshape(shape)
            new_point[name] = values if values.dtype == dtype else values.astype(dtype)
            start += size
        self.chain.last_point = (new_point, draw)
        return new_point, stats

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        """Run the chain's inner steps for one draw from ``q0`` and return the last state.

        A Ctrl-C reaches PyMC as a ``KeyboardInterrupt``, so ``pm.sample``
        returns the draws so far: one that arrives while compiled Numba code
        calls back into Python otherwise surfaces as a ``SystemError``.
        """
        try:
            return self._draw(q0)
        except SystemError as error:
            if interrupted(error):
                raise KeyboardInterrupt from None
            raise

    def _draw(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        chain = self.chain
        position = q0.data
        if chain.ahead and position is chain.last_draw[1]:
            # After tuning, from where the last draw ended: the next draw the
            # kernel ran ahead, unless it stopped or vanished.
            result, n_steps, step_size = chain.ahead[-1]
            if result.steps_taken == n_steps and self._landed(result.log_density) is None:
                chain.ahead.pop()
                chain.state = result.state
                chain.steps_taken += n_steps
                chain.steps_since_refresh += n_steps
                return self._record(q0, result, n_steps, step_size)
        if chain.settings is None:
            position = self._adapt(position, start=True)
        elif chain.readapt:
            self._adapt(position, start=False)
        if chain.travelling and not self.tune:
            # The tune phase ended before the travel window closed.
            draws = np.array([*chain.window, position])
            self._start_from(position, self.adapter.finish_travel(chain, draws, self.rng, False))
        if not self.tune and chain.settings.estimator == FULL_DATA and not chain.full_data_checked:
            self._start_from(position, self.adapter.leave_unchecked_full_data(chain))
        settings = chain.settings
        n_steps = self.runner.draw_steps(chain, self.adapter.steps_this_draw(chain, self.tune))
        step_values = self.runner.step_values(chain, n_steps)
        step_sizes = step_values["step_size"]
        # A constant step size was checked when it was made; a schedule's
        # values are checked at every draw.
        constant = isinstance(settings.step_size, ConstantStepSize)
        if not constant and not usable_step_sizes(step_sizes):
            raise ValueError(
                f"The step-size schedule {settings.step_size!r} gave a value that is not a "
                "positive finite number; a schedule must return step sizes > 0."
            )
        if chain.diverged:
            return q0, [self._stats(step_sizes[-1], np.nan, np.nan, n_steps, 0)]
        if chain.interpreted and chain.steps_taken >= self.runner.handover_steps(chain):
            # The chain has run long enough for the fused kernel to pay.
            self.runner.prepare_inputs(chain)
        if (
            settings.estimator in CENTRED_ESTIMATORS
            and self.control_variate_refresh is not None
            and chain.steps_since_refresh >= self.control_variate_refresh
        ):
            second_order = settings.estimator == "second_order"
            chain.centre = self.compiled.probe.centre(position, hessian=second_order)
            chain.steps_since_refresh = 0
            self.runner.prepare_inputs(chain)
        if self._exact() and not math.isfinite(chain.last_log_density):
            # A chain's first draw on all rows (at its start, or after draws on
            # minibatches) has its fall measured from where it starts.
            chain.last_log_density = self.compiled.probe.full(position)[0]

        result = self.runner.run(chain, position, n_steps, step_values, self.rng, self.tune)
        chain.state = result.state
        chain.steps_taken += result.steps_taken
        chain.steps_since_refresh += result.steps_taken
        stopped = result.steps_taken < n_steps
        # A draw that ends where the density vanishes (a finite state far out
        # in the tails), or far below the last draw's, is no draw either.
        fall = self._landed(result.log_density)
        vanished = fall is not None
        if stopped or vanished:
            failed_step = step_sizes[min(result.steps_taken, n_steps - 1)]
            taken_back = self.tune and (
                chain.travelling or self.adapter.recovers_from_divergence(chain)
            )
            chain.clips_tune_steps = chain.clips_tune_steps or taken_back
            if taken_back and chain.travelling:
                # The travel budget's steps left the curvatures they were chosen for.
                self._start_from(position, self.adapter.travel_diverged(chain))
            elif taken_back:
                # A curvature beyond the measured range: smaller steps from the last draw.
                self._start_from(position, self.adapter.tune_diverged(chain, failed_step))
            else:
                what = "the state or its gradient became non-finite" if stopped else fall
                self._diverge(failed_step, what)
                chain.ahead.clear()
            if taken_back or vanished:
                stats = self._stats(step_sizes[-1], np.nan, np.nan, n_steps, result.clipped_steps)
                # Where the draw started: at the first draw, the adapted start, not q0.
                return RaveledVars(position, q0.point_map_info), [stats]
        return self._record(q0, result, n_steps, step_sizes[-1])

    def _exact(self) -> bool:
        """Return whether the chain's draws read all N rows, so that their log density is exact."""
        return self.chain.settings.estimator == FULL_DATA or self.chain.batches.full

    def _landed(self, log_density: float) -> str | None:
        """Return what went wrong where a draw ends at ``log_density``; None where nothing did.

        A draw diverged where its log density is not finite, or where it is
        exact (steps on all N rows) and falls more than
        ``TuningConfig.log_density_drop`` plus D below the last draw's, or
        below where it started for a chain's first exact draw (times the
        temperature above 1, which spreads the draws' log densities).
        """
        if not math.isfinite(log_density):
            return "the log density became non-finite"
        chain = self.chain
        if not self._exact():
            # An estimate, or an exact value after an estimate: nothing to compare.
            return None
        fall = chain.last_log_density - log_density
        reach = self.tuning.log_density_drop + chain.state["position"].size
        if fall > reach * max(1.0, self.choices.temperature):
            return f"the log density fell by {fall:.3g} in one draw"
        return None

    def _record(self, q0, result, n_steps: int, step_size) -> tuple[RaveledVars, list[dict]]:
        """Return ``result``, a draw of ``n_steps`` steps the chain took, with its statistics."""
        chain = self.chain
        chain.last_log_density = result.log_density if self._exact() else np.nan
        stats = self._stats(
            step_size,
            result.log_density,
            result.gradient_norm,
            n_steps,
            result.clipped_steps,
        )
        # Draws a sampler marks as exploration (cyclical SGLD) are not
        # posterior draws, so the tune windows leave them out.
        if self.tune and not chain.diverged and not stats.get("exploring", False):
            messages = self.adapter.record_tune_draw(chain, result.position, self.rng, True)
            if messages is not None:
                self._start_from(result.position, messages)
        # The chain state's coordinates: those a tune window's new metric gave,
        # if it changed the metric at this draw.
        chain.last_draw = (chain.settings.metric, result.position, chain.state["position"])
        return RaveledVars(result.position, q0.point_map_info), [stats]

    def _diverge(
        self, step_size: float, what: str = "the state or its gradient became non-finite"
    ) -> None:
        self.chain.diverged = True
        advice = "Reduce step_size."
        if self.choices.step_size is None:
            # The tuner sized the steps for the curvatures it measured; a
            # steeper one where the chain went is a funnel's neck, most often.
            advice = (
                "Reduce step_size, or reparameterise: a hierarchical scale near 0 makes a "
                "funnel whose neck is steeper than the curvatures measured (write such a "
                "model non-centred), and a covariate far from unit scale under a log link "
                "makes rates that change by orders of magnitude within the steps "
                "(standardise it)."
            )
        message = (
            f"{type(self).__name__}: {what} after "
            f"{self.chain.steps_taken} inner steps at step size {step_size:.3g}; the chain stops "
            f"moving. {advice}"
        )
        self.chain.warnings.append(SamplerWarning(WarningType.DIVERGENCE, message, "warn"))

    def _stats(self, step_size, log_density, gradient_norm, n_steps, clipped_steps) -> dict:
        chain = self.chain
        settings = chain.settings
        return {
            "step_size": float(step_size),
            "gradient_norm": float(gradient_norm),
            "log_density": float(log_density),
            "diverging": chain.diverged,
            "control_variate": settings.estimator in CENTRED_ESTIMATORS,
            "steps_per_draw": n_steps,
            "gradient_noise": settings.gradient_noise,
            "predicted_inflation": settings.predicted_inflation,
            "gradient_clipped": clipped_steps / n_steps,
            "warning": chain.warnings.pop(0) if chain.warnings else None,
            **self.dynamics.statistics(chain.state),
        }
