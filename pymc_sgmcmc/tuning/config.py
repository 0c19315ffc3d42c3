"""Every constant of the adaptation, in one object."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TuningConfig"]


@dataclass(frozen=True)
class TuningConfig:
    """The constants a chain adapts itself with.

    The defaults are those every test and benchmark of the package runs
    with; pass another instance as ``tuning=`` to a step method to change
    them.

    Attributes
    ----------
    start_jitter : float
        Half-width of the uniform jitter added to each coordinate of a chain's
        starting point (in the unconstrained space) before it searches for a
        mode, so that chains adapt from dispersed starts.
    adam_steps, adam_rate : int, float
        Steps and base learning rate of the Adam stage of the mode search.
    hessian_rows : int
        Rows of the minibatch on which the Hessian is estimated.
    hessian_full_work : int
        Largest N times D for which the Hessian is estimated on all rows.
    hessian_rows_per_coordinate : int
        Fewest rows per coordinate the Hessian's minibatch holds.
    hessian_error, hessian_check_work : float, int
        Largest relative error, along any direction, of a Hessian estimated on
        a subsample at a point the chain is measured at, estimated from the
        difference of its two halves; a subsample whose error is larger grows
        to the rows that error asks for, while those rows times D stay within
        ``hessian_check_work`` (see :func:`~pymc_sgmcmc.tuning.mode.checked_hessian`).
    hessian_exact_work : int
        Fewest gradient differences times rows at which a Hessian is taken
        exactly, from second derivatives (:mod:`pymc_sgmcmc.exact_hessian`),
        instead of differenced, where one row's gradient touches at least half
        of the coordinates: at 200 coordinates and 6,400 rows one exact call
        replaces 400 gradient calls and takes a tenth of their time or less,
        while compiling it costs a new model a few seconds.
    hessian_exact_size : int
        Fewest coordinates at which a Hessian is taken exactly: at D = 27
        (the polynomial regression at N = 500,000) the mode search took as
        long either way, at D = 201 a fifth of the time.
    information_batches, information_batch_size : int
        Minibatches, and rows in each, from which the covariance of the rows'
        log-likelihood gradients (the information) is estimated wherever a
        Hessian is, to check it (:mod:`pymc_sgmcmc.tuning.kinks`).
    kink_step, kink_tolerance : float
        Length in sds of the coarse difference that checks the Hessian's,
        and how far apart (relative to the coarse curvature plus the
        information) the two may lie before the likelihood counts as kinked.
    kink_coordinates, kink_directions : int
        Up to ``kink_coordinates`` coordinates each axis is checked; beyond,
        ``kink_directions`` random directions.
    subsample_rows : int
        Rows of the subsample Newton stage (run when N exceeds four times it).
    newton_steps : int
        Most damped Newton steps per stage.
    newton_tolerance : float
        Newton decrement (squared distance to the mode in posterior sds) at
        which a Newton stage stops.
    mode_distance : float
        Squared distance (in posterior sds of the local quadratic picture) from
        a stationary point beyond which the search's end is not taken for a
        mode: the log density rises without bound there (the neck of a
        centred hierarchical model's funnel) and the chain adapts from its
        start and its tune draws instead.
    softest_directions : int
        Eigenvectors of the Hessian at the search's end, softest first, along
        which the log density one local sd away is checked on both sides.
    quadratic_fall : tuple of float
        Bounds on how far the log density may fall there, on average over the
        two sides (a quadratic's falls 1/2 from its peak, and on average from
        anywhere), for the end to count as a mode.
    chunk_rows : int
        Rows per chunk of a full pass over the data (bounds memory).
    interpreted_steps : int, optional
        Inner steps each chain takes with the interpreted loop
        (:mod:`pymc_sgmcmc.loop`) before the fused kernel is compiled and
        takes over; 0 compiles the fused kernel for the first draw. By
        default ``steps_per_operation`` times the operations in the graph of
        the chain's gradient estimate. The loop costs tens of microseconds
        more per step and compiles nothing; compiling the kernel costs
        seconds in proportion to that graph, cached code or not (PyTensor
        rewrites the graph at every compilation). A chain hands over once
        the loop has cost it about what the compilation will, so shorter
        runs never pay for a compilation and a longer run pays at most
        about as much again (the rule that is never worse than twice the
        better of the two choices made knowing the run's length).
        Dynamics whose fused kernel takes a step no faster than the loop
        (:meth:`~pymc_sgmcmc.dynamics.Dynamics.fused_kernel_is_faster`,
        SGRLD's) stay in the loop unless this is 0 or the kernels run on JAX.
    steps_per_operation : float
        Inner steps in the interpreted loop that cost as much more than in
        the fused kernel as one operation of the kernel's graph adds to its
        compilation (with warm caches; measured on the benchmark's models,
        see docs/performance.md).
    steps_per_call, max_draws_per_call : int
        After tuning, each call of the fused kernel takes the inner steps of
        as many whole draws as fit in ``steps_per_call`` (at most
        ``max_draws_per_call``, at least one), which PyMC then receives one
        per draw: the draws are those of one call per draw, and the call's
        fixed cost is shared. 0 takes one draw per call.
    noise_points, noise_batches : int
        Points drawn from the Laplace approximation at which the gradient
        noise is measured, and independent minibatches per point.
    curvature_grid : int
        Curvatures, log-spaced over the measured range, at which the
        predicted inflation must meet the budget.
    estimator_cost : dict of str to float
        Relative cost of one inner step of each gradient estimator.
    full_data_rows : int
        Most rows for which a chain weighs the full data's gradient at every
        step (``control_variate=None``). A gradient on all rows holds arrays
        of N rows while it runs; its work is weighed against the minibatch
        estimators' in any case.
    capped_full_data_rows : int
        Most rows on which a chain takes the full data's gradient where it
        relaxes more slowly than ``max_steps_per_draw`` allows: each draw
        then runs the cap of inner steps on all N rows. On more rows (up to
        ``full_data_rows``) it is weighed only where it relaxes within the cap.
    step_overhead : float
        Fixed cost of an inner step besides its gradients, in multiply-adds:
        drawing the batch and the noise and calling the compiled code.
        The tuner counts it when it compares the gradient estimators' work.
    arithmetic_cost, transcendental_cost : float
        Cost of one arithmetic and one transcendental (exp, log, the sigmoid)
        elementwise operation on a row, in multiply-adds; a row's gradient
        costs its operations plus two for each coordinate it touches
        (:func:`~pymc_sgmcmc.tuning.measure.row_work`).
    row_probes : int
        Rows whose single-row gradients count the coordinates a row touches.
    max_steps_per_draw : int
        Cap on the inner steps per recorded draw chosen from the relaxation time.
    slowness_threshold : float
        Factor by which a tune window's draws must decorrelate more slowly
        than the Gaussian model predicts before the chain's draws are
        lengthened by it (the smallest bulk ESS of a hundred draws scatters
        by tens of percent).
    slow_relaxation : float
        Relaxation time (inner steps) above which the step warns that the
        bias budget forces tiny steps, and above which a chain's first tune
        window travels at ``travel_budget`` instead.
    tune_clip : float
        From a chain's first diverging tune step to the end of tune, the
        gradient estimate's norm in the metric's coordinates is clipped at
        this many times its root mean square at stationarity on the chain's
        Gaussian picture (``inf`` for never). A chain measured far from the
        mass (the wide end of a centred hierarchical model's funnel) meets
        gradients far beyond that on its way in, which throw its steps out to
        overflow; at stationarity the norm lies within a few times its root
        mean square, so the clip leaves such draws alone. Draws after tune are
        clipped only at the step method's ``clip_gradient``.
    mean_share : float
        Share of the bias budget that the step may move each posterior mean
        by, in posterior sds, for dynamics whose Gaussian model is their
        exact stationary law (:func:`~pymc_sgmcmc.tuning.tuner.mean_share`).
        A variance inflated by the budget moves the sds by half of it, so the
        means are held to the same half: the bias then takes the same share
        of the accuracy bar on both (0.1 sd on means, 10% on sds), and leaves
        the rest to the Monte Carlo error of a run.
    travel_budget, travel_shift : float
        Bias budget of the first tune window of a chain that relaxes slowly at
        its mode: larger steps take it to where the posterior's mass is, where
        it is measured again. While its window's mean lies more than
        ``travel_shift`` of the window's sds from where it was last measured,
        a chain still slow there travels through the next window too; one
        that is not travels on at the bias budget where its window ended still
        drifting (its last quarter's mean ``travel_shift`` sds of the new
        picture from its third's).
    second_order_linearity : float
        Largest departure of the log posterior's gradient from linear across
        the Laplace picture (:func:`~pymc_sgmcmc.tuning.measure.linear_departure`)
        at which the automatic choice weighs the second-order control
        variate: the curvature at its centre must hold, to within a tenth,
        across the region the chain samples.
    second_order_draws : int
        The automatic choice computes the full-data Hessian for the
        second-order control variate (about 2 D passes over the data) only
        where that costs at most as many gradient evaluations as this many
        draws with the first-order settings (PyMC's default run length), so
        that it can save more than it costs.
    second_order_relaxation : float
        Predicted relaxation time (inner steps) of the first-order settings
        below which the automatic choice keeps them without weighing the
        second-order control variate: at a few dozen steps per draw there is
        less to save than compiling its Hessian-vector product costs on a
        new model (about a second).
    stiffening : float
        Factor by which a tune step that diverges raises the largest curvature
        the tuner counts on (:meth:`~pymc_sgmcmc.tuning.chain.ChainAdapter.tune_diverged`):
        4 halves a step size set by stability.
    max_stiffness : float
        The largest such factor in all; a chain that diverges beyond it stops,
        as after tuning.
    log_density_drop : float
        A draw whose exact log density (steps on all rows) falls by more than
        this plus D below the last draw's diverged, though it stayed finite:
        a chain at its stationary law moves its log density by about
        ``sqrt(D)`` from draw to draw, and by about ``D / 2`` on its way from
        the mode to the posterior's mass (PyMC's NUTS counts an energy error
        above 1,000 as a divergence). At a temperature above 1 the bound is
        that many times larger, as the log densities spread.
    dense_size : int
        Most coordinates for which a dense metric is a candidate; beyond, a
        low-rank one is.
    low_rank, low_rank_spread : int, float
        Most directions a low-rank metric keeps, and the factor by which a
        direction's variance must differ from its diagonal prediction to be kept.
    windows : tuple of int
        Tune draws (counted from the chain's first adaptation) in each window
        whose draws are compared with the metric; later windows need the
        tune phase to last that long.
    window_margin : float
        Factor by which a variance ratio must lie beyond the sampling-error
        band to count as disagreement.
    settle_draws : int
        Tune draws taken at full length after the last window; the remaining
        tune draws take one inner step each (they are discarded).
    """

    start_jitter: float = 1.0
    adam_steps: int = 1500
    adam_rate: float = 0.05
    hessian_rows: int = 4096
    hessian_full_work: int = 2_000_000
    hessian_rows_per_coordinate: int = 32
    hessian_error: float = 0.25
    hessian_check_work: int = 50_000_000
    hessian_exact_work: int = 1_000_000
    hessian_exact_size: int = 100
    information_batches: int = 64
    information_batch_size: int = 256
    kink_step: float = 0.1
    kink_tolerance: float = 0.25
    kink_coordinates: int = 50
    kink_directions: int = 16
    subsample_rows: int = 50_000
    newton_steps: int = 20
    newton_tolerance: float = 1e-4
    mode_distance: float = 1.0
    softest_directions: int = 2
    quadratic_fall: tuple = (1 / 16, 16.0)
    chunk_rows: int = 50_000
    interpreted_steps: int | None = None
    steps_per_operation: float = 200.0
    steps_per_call: int = 1000
    max_draws_per_call: int = 100
    noise_points: int = 8
    noise_batches: int = 256
    curvature_grid: int = 8
    estimator_cost: dict = field(
        default_factory=lambda: {"minibatch": 1.0, "control_variate": 2.0, "second_order": 4.0}
    )
    full_data_rows: int = 100_000
    capped_full_data_rows: int = 10_000
    step_overhead: float = 10_000.0
    arithmetic_cost: float = 0.25
    transcendental_cost: float = 6.0
    row_probes: int = 16
    max_steps_per_draw: int = 1000
    slowness_threshold: float = 3.0
    slow_relaxation: float = 500.0
    tune_clip: float = 10.0
    mean_share: float = 0.5
    travel_budget: float = 1.0
    travel_shift: float = 3.0
    second_order_linearity: float = 0.1
    second_order_draws: int = 1000
    second_order_relaxation: float = 100.0
    stiffening: float = 4.0
    max_stiffness: float = 4.0**5
    log_density_drop: float = 1000.0
    dense_size: int = 200
    low_rank: int = 10
    low_rank_spread: float = 2.0
    windows: tuple = (100, 200)
    window_margin: float = 1.5
    settle_draws: int = 50
