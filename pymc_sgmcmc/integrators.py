r"""Update rules of the stochastic-gradient samplers.

Every rule is a pure function of arrays: it works unchanged on numpy arrays
and on PyTensor variables, so the same expression is tested with numbers and
compiled into the samplers' kernels.

One convention is used everywhere. With :math:`\hat g(\theta)` the unbiased
minibatch estimate of the gradient of the log posterior, :math:`\eta` the step
size, :math:`\tau` the temperature and :math:`P` a (diagonal) preconditioner,

.. math::

    \theta \leftarrow \theta + \eta P \hat g(\theta) + \sqrt{2 \eta \tau P}\, \xi,
    \qquad \xi \sim N(0, I).

The update of Welling & Teh (2011), written with :math:`\epsilon / 2` in the
drift, is the same rule with :math:`\epsilon = 2 \eta`.
"""

from __future__ import annotations

__all__ = ["langevin_update", "underdamped_langevin_update"]


def langevin_update(position, gradient, noise, step_size, temperature=1.0, preconditioner=1.0):
    r"""Take one Euler-Maruyama step of overdamped Langevin dynamics (SGLD).

    Parameters
    ----------
    position : array
        Current state :math:`\theta`.
    gradient : array
        Estimate of the gradient of the log posterior at ``position``.
    noise : array
        Standard normal draw of the shape of ``position``.
    step_size : float
        Step size :math:`\eta`.
    temperature : float, default 1
        Temperature :math:`\tau`; 1 samples the posterior, 0 is stochastic
        gradient ascent.
    preconditioner : float or array, default 1
        Diagonal preconditioner :math:`P` (held constant, so it needs no
        correction term).

    Returns
    -------
    array
        :math:`\theta + \eta P \hat g + \sqrt{2 \eta \tau P}\, \xi`.
    """
    drift = step_size * preconditioner * gradient
    diffusion = (2.0 * step_size * temperature * preconditioner) ** 0.5 * noise
    return position + drift + diffusion


def underdamped_langevin_update(
    position, momentum, gradient, noise, step_size, friction, mass=1.0, temperature=1.0
):
    r"""Take one step of stochastic-gradient Hamiltonian Monte Carlo (SGHMC).

    The discretisation of underdamped Langevin dynamics of Chen, Fox & Guestrin
    (2014):

    .. math::

        r &\leftarrow (1 - \eta C / M)\, r + \eta \hat g(\theta)
             + \sqrt{2 \eta C \tau}\, \xi, \\
        \theta &\leftarrow \theta + \eta\, r / M,

    whose stationary law is the posterior (tempered by :math:`\tau`) for
    :math:`\theta` and :math:`N(0, \tau M)` for the momentum :math:`r`.

    Parameters
    ----------
    position, momentum : array
        Current state :math:`\theta` and momentum :math:`r`.
    gradient : array
        Estimate of the gradient of the log posterior at ``position``.
    noise : array
        Standard normal draw of the shape of ``position``.
    step_size : float
        Step size :math:`\eta`.
    friction : float or array
        Friction :math:`C`.
    mass : float or array, default 1
        Diagonal mass :math:`M`.
    temperature : float, default 1
        Temperature :math:`\tau`.

    Returns
    -------
    tuple of array
        The new ``(position, momentum)``.
    """
    momentum = (
        (1.0 - step_size * friction / mass) * momentum
        + step_size * gradient
        + (2.0 * step_size * friction * temperature) ** 0.5 * noise
    )
    position = position + step_size * momentum / mass
    return position, momentum
