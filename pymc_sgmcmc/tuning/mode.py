"""Finding a posterior mode: Adam on minibatches, then Newton steps.

:func:`find_mode` runs Adam on minibatch gradients, then (on large data)
Newton steps on a subsample, and finally damped Newton steps with full-data
gradients summed in chunks, all with a Hessian estimated from a large
minibatch (all rows when that is cheap). It also says how far its end lies
from a stationary point, so that a posterior without a mode (the neck of a
centred hierarchical model's funnel) is not taken for one.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.estimators import Probe
from pymc_sgmcmc.tuning.config import TuningConfig
from pymc_sgmcmc.tuning.kinks import with_information
from pymc_sgmcmc.tuning.sparsity import (
    HessianPattern,
    PatternMismatch,
    hessian_pattern,
    hessians,
)

__all__ = [
    "checked_hessian",
    "estimate_hessian",
    "find_mode",
    "hessian_sds",
    "relative_error",
    "touched_coordinates",
]


def _adam(probe: Probe, position, batches: IndexStream, rng, n_steps, rate):
    """Climb the log density with Adam on minibatch gradients."""
    first = np.zeros_like(position)
    second = np.zeros_like(position)
    indices = batches.draw(rng, n_steps)
    for t in range(1, n_steps + 1):
        gradient = probe.minibatch_gradient(position, indices[t - 1])
        if not np.all(np.isfinite(gradient)):
            break
        first = 0.9 * first + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        corrected = (first / (1 - 0.9**t)) / (np.sqrt(second / (1 - 0.999**t)) + 1e-12)
        position = position + rate / np.sqrt(1.0 + t / 100.0) * corrected
    return position


def _higher(probe: Probe, start, end):
    """Return Adam's ``end``, or its ``start`` where the log density is higher there.

    Adam's steps are about its base rate in every coordinate, so on a
    parameter whose posterior sd is many times smaller (the coefficient of a
    covariate in the hundreds under a log link) it can overshoot far into the
    tails, where the curvature vanishes and the Newton steps that follow
    cannot climb back; its start is then the better place for them. One full
    pass at each point.
    """
    log_densities = [probe.full(point)[0] for point in (start, end)]
    if np.isfinite(log_densities[0]) and not log_densities[1] >= log_densities[0]:
        return start
    return end


def _hessian_rows(probe: Probe, size: int, rng, config: TuningConfig, search: bool, columns=None):
    """Return the rows a Hessian is estimated on, or ``None`` for all rows.

    All rows are used while their number times the Hessian's gradient
    differences (``columns``, D without a pattern) stays within
    ``config.hessian_full_work`` (a subsample would miss the rows of small
    groups); otherwise ``config.hessian_rows`` rows drawn at random, or
    ``config.hessian_rows_per_coordinate`` per coordinate if that is more (a
    model with a parameter per group needs rows of every group). A Hessian
    that only sets the directions of the Newton search (``search``) uses
    that subsample wherever N is at least four times its size: an error of a
    few percent there costs a Newton step at most, while a pass over all
    rows costs 2D full gradients.
    """
    n_rows = probe.n_rows
    rows = max(config.hessian_rows, config.hessian_rows_per_coordinate * size)
    if n_rows <= rows:
        return None
    work = n_rows * (size if columns is None else columns)
    if work <= config.hessian_full_work and not (search and n_rows >= 4 * rows):
        return None
    return rng.choice(n_rows, rows, replace=False)


def estimate_hessian(
    probe: Probe, position, rng, config: TuningConfig, search=False, scale=None, pattern=None
):
    """Estimate the Hessian of the log posterior on all rows, or on one large minibatch.

    As :func:`checked_hessian`, without saying whether the likelihood has kinks.
    """
    return checked_hessian(probe, position, rng, config, search, scale, pattern)[0]


def checked_hessian(
    probe: Probe,
    position,
    rng,
    config: TuningConfig,
    search=False,
    scale=None,
    pattern: HessianPattern | None = None,
):
    """Return the Hessian of the log posterior and whether the likelihood has kinks.

    The Hessian is estimated on all rows, or on one large minibatch. The
    rows are chosen by :func:`_hessian_rows`. The differencing steps are
    1e-3 of each coordinate's sd, taken from ``scale`` (the sds a previous
    Hessian implied) or else from a first pass with unit-scale steps. With a
    ``pattern`` of its nonzeros, coordinates that never meet are differenced
    together (:mod:`pymc_sgmcmc.tuning.sparsity`). A likelihood found to
    have kinks gets its curvature from the information identity instead
    (:func:`~pymc_sgmcmc.tuning.kinks.with_information`).
    """
    if pattern is not None:
        try:
            return _checked_hessian(probe, position, rng, config, search, scale, pattern)
        except PatternMismatch:
            # A pair the pattern missed meets here: coordinate by coordinate,
            # on rows chosen for that cost.
            pass
    return _checked_hessian(probe, position, rng, config, search, scale, None)


def _checked_hessian(probe: Probe, position, rng, config, search, scale, pattern):
    """Return :func:`checked_hessian`'s result with ``pattern`` (which may raise a mismatch)."""
    columns = None if pattern is None else pattern.differences
    rows = _hessian_rows(probe, position.size, rng, config, search, columns)
    indices = np.arange(probe.n_rows) if rows is None else rows
    # An exact Hessian on all the chosen rows gives the differencing scale or
    # the result; a checked subsample takes its halves' own.
    pair = None
    needed = scale is None or rows is None or search
    if needed and _exact_pays(probe, position, len(indices), pattern, config):
        pair = probe.exact_hessians(position, indices)
    if scale is None:
        if pair is None:
            scale = hessian_sds(probe.hessian(position, indices, np.full(position.size, 1e-4)))
        else:
            scale = hessian_sds(pair[0])
    if rows is None or search:
        if pair is None:
            pair = hessians(probe, position, indices, 1e-3 * scale, pattern)
        hessian, prior_hessian = pair
    else:
        indices, hessian, prior_hessian = _subsample_hessian(
            probe, position, rows, 1e-3 * scale, rng, config, pattern
        )
    return with_information(probe, position, indices, scale, hessian, prior_hessian, rng, config)


def touched_coordinates(probe: Probe, point, config: TuningConfig) -> float:
    """Return how many coordinates one row's log-likelihood gradient touches, on average.

    Counted as the nonzero entries of single rows' gradients at ``point``, on
    ``config.row_probes`` rows spread evenly over the data, so that the
    count, and what is chosen by it, is the same in every run: every
    coordinate in a dense regression, a handful in a hierarchical model whose
    row reads one group's parameters.
    """
    count = min(config.row_probes, probe.n_rows)
    rows = np.unique(np.linspace(0, probe.n_rows - 1, count).astype(np.int64))
    return float(np.mean([np.count_nonzero(probe.terms(point, row)[3]) for row in rows[:, None]]))


def _exact_pays(probe: Probe, position, rows: int, pattern, config: TuningConfig) -> bool:
    """Say whether a Hessian on ``rows`` rows is taken exactly instead of differenced.

    Where D is at least ``config.hessian_exact_size``, its gradient
    differences (D, or the ``pattern``'s groups) times the rows reach
    ``config.hessian_exact_work``, the model's graph can be
    differentiated twice (:mod:`pymc_sgmcmc.exact_hessian`), and one row's
    gradient touches at least half of the coordinates
    (:func:`touched_coordinates`). Below that work the differences cost less
    than compiling the exact Hessian for a new model. Where rows touch a few
    coordinates each (a hierarchical model), the exact Hessian still carries
    all D directions through every row, and on 1,000 groups took 5.6 s where
    the 2 D differences took 2.3 s.
    """
    columns = position.size if pattern is None else pattern.differences
    if position.size < config.hessian_exact_size or not probe.exact_hessian_available:
        return False
    if columns * rows < config.hessian_exact_work:
        return False
    return touched_coordinates(probe, position, config) >= 0.5 * position.size


def _hessians(probe: Probe, position, indices, steps, pattern, config, sample_rows: int):
    """Return the Hessians of the log density and of the log prior on ``indices``.

    Exact where :func:`_exact_pays` for a sample of ``sample_rows`` rows
    (``indices`` may be half of it) and the graph allows, else differenced
    (:func:`~pymc_sgmcmc.tuning.sparsity.hessians`).
    """
    if _exact_pays(probe, position, sample_rows, pattern, config):
        pair = probe.exact_hessians(position, indices)
        if pair is not None:
            return pair
    return hessians(probe, position, indices, steps, pattern)


def _subsample_hessian(
    probe: Probe, position, rows, steps, rng, config: TuningConfig, pattern=None
):
    """Return the rows, the Hessian and the prior's Hessian, on rows enough for the error.

    The Hessian on a random subsample is the mean of those on its two
    halves, whose difference estimates its error (:func:`relative_error`).
    On a design whose columns are nearly collinear a few percent of error in
    each entry is a factor of several along the softest directions, which a
    metric built on it carries into every step. Where the error exceeds
    ``config.hessian_error`` the subsample grows by the factor
    ``(error / hessian_error)^2`` that Monte Carlo error's ``1/sqrt(rows)``
    asks for (at least doubling), up to all rows, and is checked again; it
    stays as it is where the rows asked for, times the Hessian's gradient
    differences (D without a ``pattern``), exceed ``config.hessian_check_work``.
    Each half's Hessian is exact where that pays for the whole subsample
    (:func:`_hessians`).
    """
    n_rows = probe.n_rows
    columns = position.size if pattern is None else pattern.differences
    while True:
        half = len(rows) // 2
        first, prior_hessian = _hessians(
            probe, position, rows[:half], steps, pattern, config, len(rows)
        )
        second, _ = _hessians(probe, position, rows[half:], steps, pattern, config, len(rows))
        weight = half / len(rows)
        hessian = weight * first + (1.0 - weight) * second
        error = relative_error(hessian, 0.5 * (first - second))
        if error <= config.hessian_error:
            return rows, hessian, prior_hessian
        growth = max(2.0, (error / config.hessian_error) ** 2)
        wanted = min(n_rows, int(np.ceil(growth * len(rows))))
        if wanted * columns > config.hessian_check_work:
            return rows, hessian, prior_hessian
        if wanted == n_rows:
            indices = np.arange(n_rows)
            return (
                indices,
                *_hessians(probe, position, indices, steps, pattern, config, n_rows),
            )
        rows = rng.choice(n_rows, wanted, replace=False)


def relative_error(hessian, error) -> float:
    """Return the largest relative error ``error`` makes in ``hessian`` along any direction.

    The largest absolute eigenvalue of ``error`` in the coordinates that
    whiten ``hessian`` (by the absolute values of its eigenvalues, so that a
    Hessian that is not negative definite is measured too; infinite where
    one of them is 0).
    """
    values, vectors = np.linalg.eigh(hessian)
    scales = np.abs(values)
    if not np.all(scales > 0):
        return np.inf
    whitening = vectors / np.sqrt(scales)
    return float(np.abs(np.linalg.eigvalsh(whitening.T @ error @ whitening)).max())


def hessian_sds(hessian):
    """Return the sds implied by the diagonal of ``hessian`` (1 where it is not negative)."""
    curvature = np.abs(np.diag(hessian))
    return 1.0 / np.sqrt(np.where(curvature > 0, curvature, 1.0))


def _newton_direction(hessian, gradient):
    """Return an ascent direction, its decrement and whether ``hessian`` is negative definite.

    Where it is, the Newton step ``solve(-H, g)``, through the Cholesky
    factor so that the decrement ``g @ step`` (the squared distance to the
    quadratic picture's mode, in its sds) is never negative. Elsewhere the
    saddle-free step: the eigenvalues of ``-H`` replaced by their absolute
    values (floored at 1e-8 of the largest), which keeps the curvature's
    scales in every direction and climbs out of saddles, where a gradient
    step scaled by the diagonal crawls.
    """
    try:
        factor = np.linalg.cholesky(-hessian)
    except np.linalg.LinAlgError:
        values, vectors = np.linalg.eigh(-hessian)
        scales = np.abs(values)
        scales = np.maximum(scales, 1e-8 * scales.max())
        projection = vectors.T @ gradient
        # A Hessian without curvature (all zeros, far out in a log link's
        # tails) gives a direction that is not finite, which the line search
        # rejects.
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = projection / scales
            return vectors @ scaled, float(projection @ scaled), False
    whitened = solve_triangular(factor, gradient, lower=True)
    direction = solve_triangular(factor.T, whitened, lower=False)
    return direction, float(whitened @ whitened), True


def _newton(evaluate, position, hessian, max_steps, tolerance, refresh=None):
    """Climb ``evaluate`` by damped Newton steps.

    ``evaluate(position)`` returns ``(log_density, gradient, extra)``. The
    Hessian stays fixed while full Newton steps succeed; where a step had to
    be damped, or the Hessian is not negative definite, ``refresh(position)``
    (if given) estimates it again at the new position, since the quadratic
    picture failed there. Stops when the Newton decrement (squared distance
    to the mode in posterior sds) falls below ``tolerance``. Returns the
    final position, its evaluation, the Hessian and whether it moved.
    """
    current = evaluate(position)
    moved = False
    for _ in range(max_steps):
        direction, decrement, concave = _newton_direction(hessian, current[1])
        if concave and decrement < tolerance:
            break
        step = 1.0
        while step > 1e-6:
            candidate = position + step * direction
            evaluated = evaluate(candidate)
            if np.isfinite(evaluated[0]) and evaluated[0] >= current[0]:
                break
            step /= 2.0
        else:
            break
        position, current, moved = candidate, evaluated, True
        if refresh is not None and (step < 1.0 or not concave):
            hessian = refresh(position)
    return position, current, hessian, moved


def find_mode(probe: Probe, position, batch_size, rng, config: TuningConfig | None = None):
    """Find a posterior mode.

    Adam on minibatch gradients comes first. On more than four times
    ``config.subsample_rows`` rows, Newton steps on the likelihood of one
    random subsample of that many rows (scaled to N) come next, which brings
    the position to within a few sds of the mode at a fraction of a full pass
    per step. Newton steps with full-data gradients finish, until the
    position is within about 0.01 posterior sd of the mode.

    Parameters
    ----------
    probe : Probe
        Numerical access to the model's log density.
    position : ndarray
        Where to start.
    batch_size : int
        Rows per minibatch for the Adam stage.
    rng : numpy.random.Generator
        Generator of the minibatches and subsamples.
    config : TuningConfig, optional
        The constants (step counts, rows, tolerance).

    Returns
    -------
    mode, log_density, likelihood_gradient, hessian : ndarray, float, ndarray, ndarray
        The mode, the full log density and log-likelihood gradient there, and
        the Hessian there.
    distance : float
        Squared distance, in posterior sds of the quadratic picture there,
        from the end of the search to a stationary point: near 0 at a mode,
        large where the log density rises without bound (the search then
        ends where its steps stop, e.g. deep in a funnel's neck), and
        infinite where the log density one local sd along the softest
        directions does not fall as a quadratic's would
        (:func:`_quadratic_along_softest`). Divided by D where the likelihood
        has kinks.
    """
    config = config or TuningConfig()
    start = np.array(position, dtype=float)
    position = _adam(
        probe,
        start,
        IndexStream(probe.n_rows, batch_size),
        rng,
        config.adam_steps,
        config.adam_rate,
    )
    position = _higher(probe, start, position)
    hessian = estimate_hessian(probe, position, rng, config, search=True)
    # Where D differences on all rows would cost more than a Hessian may,
    # its exact zeros show which coordinates never meet, and later Hessians
    # difference those together.
    pattern = None
    if probe.n_rows * position.size > config.hessian_full_work and np.all(np.isfinite(hessian)):
        pattern = hessian_pattern(hessian)
    if probe.n_rows > 4 * config.subsample_rows:
        rows = np.sort(rng.choice(probe.n_rows, config.subsample_rows, replace=False))

        def on_subsample(point):
            log_prior, prior_gradient, log_likelihood, likelihood_gradient = probe.terms(
                point, rows
            )
            return log_prior + log_likelihood, prior_gradient + likelihood_gradient, None

        position, _, _, moved = _newton(
            on_subsample, position, hessian, config.newton_steps, config.newton_tolerance
        )
        if moved:
            hessian = estimate_hessian(
                probe, position, rng, config, True, hessian_sds(hessian), pattern
            )

    def refresh(point):
        # The last search Hessian's sds set the differencing steps, as they
        # do for the Hessian at the mode: a pass less per refresh.
        nonlocal hessian
        hessian = estimate_hessian(probe, point, rng, config, True, hessian_sds(hessian), pattern)
        return hessian

    position, (log_density, gradient, likelihood_gradient), hessian, _ = _newton(
        probe.full, position, hessian, config.newton_steps, config.newton_tolerance, refresh
    )
    # The search's Hessian set directions only; the one at the mode is
    # estimated on the final rows, with steps scaled by the search's.
    hessian, kinked = checked_hessian(
        probe, position, rng, config, scale=hessian_sds(hessian), pattern=pattern
    )
    distance = _distance(hessian, gradient)
    quadratic = _quadratic_along_softest(probe, position, log_density, hessian, config)
    if quadratic and not kinked and config.mode_distance < distance < np.inf:
        # The search's Hessians, estimated on the way, can misjudge the softest
        # directions of an ill-conditioned posterior and stop it short of a
        # mode the checked Hessian sees: Newton steps with that one finish it.
        position, (log_density, gradient, likelihood_gradient), _, moved = _newton(
            probe.full, position, hessian, config.newton_steps, config.newton_tolerance
        )
        if moved:
            hessian, kinked = checked_hessian(
                probe, position, rng, config, scale=hessian_sds(hessian), pattern=pattern
            )
            distance = _distance(hessian, gradient)
            quadratic = _quadratic_along_softest(probe, position, log_density, hessian, config)
    if not quadratic:
        distance = np.inf
    if kinked:
        # At the maximum of a likelihood with kinks the gradient is the sum
        # of one-sided jumps, not zero: about one per coordinate (the rows
        # that sit at their kinks), so the distance is counted per coordinate.
        distance /= position.size
    return position, log_density, likelihood_gradient, hessian, distance


def _quadratic_along_softest(probe: Probe, position, log_density, hessian, config) -> bool:
    """Say whether the full log density falls as the quadratic picture says along its softest axes.

    One local sd from a mode along an eigenvector of ``-hessian``, the log
    density of a posterior falls by about 1/2, even a skewed one (by 0.3 to
    4 on the real-data posteriors of :mod:`pymc_sgmcmc.real_posteriors`). In
    a funnel's neck the curvature of the scale's direction is lost to
    rounding next to the intercepts' ``1 / tau^2``: the picture's sd there
    is arbitrary, and a step of it sends the log density off (to minus
    infinity, or up). A Newton decrement computed from that Hessian is
    rounding too, so it cannot tell the neck from a mode; this check can.
    It checks ``config.softest_directions`` directions, and accepts the mean
    of the falls each way between the bounds ``config.quadratic_fall``: a
    search that ends a fraction ``x`` of an sd from the mode along such a
    direction sees falls of ``1/2 - x`` and ``1/2 + x``, whose mean is the
    curvature's ``1/2`` all the same.
    """
    if not np.all(np.isfinite(hessian)):
        return False
    values, vectors = np.linalg.eigh(-hessian)
    lowest, highest = config.quadratic_fall
    for index in np.argsort(np.abs(values))[: config.softest_directions]:
        offset = vectors[:, index] / np.sqrt(np.abs(values[index]))
        falls = [log_density - probe.full(position + sign * offset)[0] for sign in (1.0, -1.0)]
        if not lowest <= np.mean(falls) <= highest:
            return False
    return True


def _distance(hessian, gradient) -> float:
    """Return the squared distance, in local posterior sds, from a stationary point.

    The decrement of :func:`_newton_direction`: the Newton decrement where
    ``hessian`` is negative definite, its saddle-free analogue elsewhere;
    infinite where either input is not finite.
    """
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(gradient))):
        return np.inf
    return _newton_direction(hessian, gradient)[1]
