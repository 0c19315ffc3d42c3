"""Accuracy of a sampler's draws against a reference posterior."""

from __future__ import annotations

from dataclasses import dataclass

import arviz as az
import numpy as np

__all__ = ["Accuracy", "accuracy", "monte_carlo_errors"]


def monte_carlo_errors(draws) -> tuple[float, float, float]:
    """Return the Monte Carlo standard errors of the mean and of the sd, and the bulk ESS.

    Parameters
    ----------
    draws : array of shape (chain, draw)
        Draws of one scalar quantity.

    Returns
    -------
    mean_se, sd_se, ess : float
        ArviZ's MCSE of the mean; the MCSE of the sd from the ESS of the
        squared deviations (the delta method, as ArviZ computes it); the bulk
        ESS.
    """
    draws = np.asarray(draws, dtype=float)
    mean_se = float(np.ravel(az.mcse(draws, method="mean"))[0])
    squares = (draws - draws.mean()) ** 2
    variance = squares.mean()
    squares_ess = float(np.ravel(az.ess(squares, method="mean"))[0])
    variance_of_variance = ((squares**2).mean() - variance**2) / squares_ess
    sd_se = float(np.sqrt(variance_of_variance / variance / 4))
    return mean_se, sd_se, float(np.ravel(az.ess(draws))[0])


@dataclass(frozen=True)
class Accuracy:
    """Worst-case agreement of draws with a reference posterior.

    Attributes
    ----------
    mean_error : float
        Largest ``|mean - reference mean| / reference sd`` over all coordinates.
    sd_error : float
        Largest ``|sd / reference sd - 1|``.
    worst_sd_ratio : float
        The ``sd / reference sd`` farthest from 1.
    min_ess : float
        Smallest bulk effective sample size.
    """

    mean_error: float
    sd_error: float
    worst_sd_ratio: float
    min_ess: float

    def meets(self, mean_bar: float = 0.1, sd_bar: float = 0.1) -> bool:
        """Return whether means are within ``mean_bar`` sd and sds within ``sd_bar``."""
        return self.mean_error < mean_bar and self.sd_error < sd_bar


def accuracy(posterior, means: dict, sds: dict) -> Accuracy:
    """Compare draws with reference means and sds.

    Parameters
    ----------
    posterior : xarray Dataset or DataTree node
        The ``posterior`` group of a ``pm.sample`` result.
    means, sds : dict of str to array
        Reference posterior mean and sd of each variable to check.

    Returns
    -------
    Accuracy
    """
    mean_errors, ratios, ess = [], [], []
    for name, reference_mean in means.items():
        by_chain = np.asarray(posterior[name])
        by_chain = by_chain.reshape(*by_chain.shape[:2], -1)
        flat = by_chain.reshape(-1, by_chain.shape[-1])
        reference_sd = np.ravel(sds[name])
        mean_errors.extend(np.abs(flat.mean(axis=0) - np.ravel(reference_mean)) / reference_sd)
        ratios.extend(flat.std(axis=0) / reference_sd)
        ess.extend(float(az.ess(by_chain[..., j])) for j in range(by_chain.shape[-1]))
    ratios = np.asarray(ratios)
    worst = ratios[np.argmax(np.abs(ratios - 1.0))]
    return Accuracy(
        float(np.max(mean_errors)), float(np.abs(worst - 1.0)), float(worst), float(np.min(ess))
    )
