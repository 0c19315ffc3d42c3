"""Comparisons of draws with a reference whose tolerances come from Monte Carlo error.

Every coordinate's error is measured in reference posterior sds, with its
Monte Carlo standard error (ArviZ's, see ``diagnostics.monte_carlo_errors``) combined
with the reference's own Monte Carlo error (zero for an exact posterior).
The critical value is Bonferroni-corrected for the number of coordinates
and quantities compared, at a family-wise false-alarm rate of 1%.
"""

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from pymc_sgmcmc.diagnostics import monte_carlo_errors

FAMILY_ALPHA = 0.01


def critical_value(n_comparisons: int, alpha: float = FAMILY_ALPHA) -> float:
    """Two-sided normal critical value for ``n_comparisons`` tests at family-wise ``alpha``."""
    return NormalDist().inv_cdf(1 - alpha / (2 * n_comparisons))


@dataclass
class Comparison:
    """Per-coordinate errors of draws against a reference, with their standard errors."""

    mean_error: np.ndarray  # (mean - reference mean) / reference sd
    mean_se: np.ndarray
    sd_ratio: np.ndarray  # sd / reference sd
    sd_se: np.ndarray
    ess: np.ndarray

    @property
    def size(self) -> int:
        return self.mean_error.size

    def report(self, label: str) -> str:
        return (
            f"{label}: |mean error| {np.abs(self.mean_error).max():.3f} sd "
            f"(se {self.mean_se.max():.3f}), sd ratios {np.round(self.sd_ratio, 3)} "
            f"(se {self.sd_se.max():.3f}), min ESS {self.ess.min():.0f}"
        )


def compare(posterior, means, sds, reference_mean_se=None, reference_sd_se=None) -> Comparison:
    """Compare the draws of ``posterior`` with reference means and sds, coordinate by coordinate.

    ``reference_mean_se`` and ``reference_sd_se`` are the reference's Monte
    Carlo standard errors (same layout as ``means``); zero when omitted.
    """
    errors, mean_ses, ratios, sd_ses, ess = [], [], [], [], []
    for name, reference_mean in means.items():
        draws = np.asarray(posterior[name])
        draws = draws.reshape(*draws.shape[:2], -1)
        reference_sd = np.ravel(sds[name])
        reference_mean = np.ravel(reference_mean)
        ref_mean_se = np.ravel((reference_mean_se or {}).get(name, np.zeros_like(reference_sd)))
        ref_sd_se = np.ravel((reference_sd_se or {}).get(name, np.zeros_like(reference_sd)))
        for j in range(draws.shape[-1]):
            coordinate = draws[..., j]
            flat = coordinate.ravel()
            mean_se, sd_se, coordinate_ess = monte_carlo_errors(coordinate)
            errors.append((flat.mean() - reference_mean[j]) / reference_sd[j])
            mean_ses.append(np.hypot(mean_se, ref_mean_se[j]) / reference_sd[j])
            ratios.append(flat.std() / reference_sd[j])
            sd_ses.append(np.hypot(sd_se, ref_sd_se[j]) / reference_sd[j])
            ess.append(coordinate_ess)
    return Comparison(*(np.asarray(v) for v in (errors, mean_ses, ratios, sd_ses, ess)))


def assert_meets_bar(comparison: Comparison, label: str, mean_bar=0.1, sd_bar=0.1):
    """Assert the accuracy bar, after checking the run is precise enough to judge it.

    With the corrected critical value times the standard error below the
    bar, an exact sampler passes and a sampler off by twice the bar fails,
    each with probability at least 99% over all coordinates; a run too short
    for that fails on its own.
    """
    print(comparison.report(label))
    z = critical_value(2 * comparison.size)
    assert np.all(z * comparison.mean_se < mean_bar), "too few effective draws to judge the bar"
    assert np.all(z * comparison.sd_se < sd_bar), "too few effective draws to judge the bar"
    assert np.all(np.abs(comparison.mean_error) < mean_bar)
    assert np.all(np.abs(comparison.sd_ratio - 1) < sd_bar)


def assert_matches(comparison: Comparison, label: str, expected_sd_ratio=1.0, expected_se=0.0):
    """Assert means equal the reference and sds equal ``expected_sd_ratio`` times it.

    The tolerance is Monte Carlo error alone: for a sampler whose stationary
    law is known exactly (a linear recursion on a Gaussian target), plus
    ``expected_se``, the standard error of an expected ratio that is itself
    estimated (from a measured gradient noise).
    """
    print(comparison.report(label) + f", expected sd ratio {np.round(expected_sd_ratio, 3)}")
    z = critical_value(2 * comparison.size)
    assert np.all(np.abs(comparison.mean_error) < z * comparison.mean_se)
    sd_tolerance = z * np.sqrt(comparison.sd_se**2 + expected_se**2)
    assert np.all(np.abs(comparison.sd_ratio - expected_sd_ratio) < sd_tolerance)
