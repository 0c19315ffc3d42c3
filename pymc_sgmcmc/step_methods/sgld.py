"""Stochastic gradient Langevin dynamics."""

from __future__ import annotations

from pymc_sgmcmc.integrators import langevin_update
from pymc_sgmcmc.step_methods.base import StochasticGradientStep
from pymc_sgmcmc.tuning import (
    langevin_relaxation_steps,
    langevin_step_size,
    langevin_variance_inflation,
)

__all__ = ["SGLD"]


class SGLD(StochasticGradientStep):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh, 2011).

    Each inner step draws a minibatch of ``batch_size`` rows, estimates the
    gradient of the log posterior and moves

    .. math::

        \theta \leftarrow \theta + \eta P \hat g(\theta) + \sqrt{2 \eta \tau P}\, \xi.

    With the defaults, every chain adapts itself before its first draw: it
    finds a mode, sets the diagonal preconditioner :math:`P` to the posterior
    scale there, measures the gradient noise, picks control variates where
    they pay, and chooses the largest step size whose predicted inflation of
    the posterior variance stays within ``bias_budget``.

    Parameters
    ----------
    vars : list of variables, optional
        Variables to sample; all continuous free variables by default.
    batch_size : int, optional
        Rows per minibatch B; ``min(100, N)`` by default.
    step_size : float or schedule, optional
        Step size :math:`\eta`, a number or a schedule such as
        :class:`~pymc_sgmcmc.PolynomialDecay`; chosen from the bias budget by
        default. A given value always wins.
    temperature : float, default 1
        Temperature :math:`\tau`; 1 samples the posterior.
    steps_per_draw : int, optional
        Inner steps per recorded draw; by default about the chain's
        predicted relaxation time, so draws are close to independent.
    preconditioner : "auto", None or array, default "auto"
        Diagonal :math:`P`: the Laplace posterior variance at the mode
        ("auto"), the identity (None) or given values.
    control_variate : bool, optional
        Use the control-variate gradient centred at the mode (True), the plain
        minibatch gradient (False), or whichever the measured noise says mixes
        faster per unit of work (None, the default).
    control_variate_refresh : int, optional
        Re-centre the control variate at the current state every so many
        inner steps (one full pass over the data each time); never by default.
    bias_budget : float, default 0.05
        Largest predicted relative inflation of the posterior variance
        (0.05: about 2.5% on the sds) from discretisation and gradient noise.
    replace : bool, default False
        Draw rows with replacement instead of in shuffled epochs.
    model : pm.Model, optional
        The model, from the context by default.
    initial_point : dict, optional
        Point used to build the graphs; ``model.initial_point()`` by default.
    compile_kwargs : dict, optional
        Passed to :func:`pymc.compile`; ``{"mode": "NUMBA"}`` unless it names
        another ``mode`` (e.g. ``"FAST_RUN"`` for the C backend).
    blocked, rng
        As for every PyMC step method.

    Notes
    -----
    Sampler statistics are those of
    :class:`~pymc_sgmcmc.step_methods.base.StochasticGradientStep`.
    """

    name = "sgld"

    @staticmethod
    def update(position, *, gradient, noise, step_size, temperature, preconditioner):
        """Apply :func:`~pymc_sgmcmc.integrators.langevin_update`."""
        return langevin_update(position, gradient, noise, step_size, temperature, preconditioner)

    def choose_step_size(self, curvatures, noise):
        """Return the largest step size within the bias budget (see :mod:`~pymc_sgmcmc.tuning`)."""
        smallest, largest = curvatures
        step_size = langevin_step_size(self.bias_budget, largest, noise)
        return step_size, {}, langevin_relaxation_steps(step_size, smallest)

    def predicted_inflation(self, step_size, curvatures, noise, extra):
        """Return the predicted variance inflation at the largest curvature."""
        return float(langevin_variance_inflation(step_size, curvatures[1], noise))
