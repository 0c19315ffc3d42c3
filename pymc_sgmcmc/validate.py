"""Validation panel: accuracy and cost of the samplers' defaults.

Run ``python -m pymc_sgmcmc.validate`` to sample every panel model with
every sampler of the registry, given ``batch_size`` and nothing else, and
print, per run, the largest ``|mean error| / sd`` and the sd ratio farthest
from 1 against the reference posterior (exact, or a long NUTS run computed
once and cached), the ESS per 1,000 inner steps and the wall time. A run meets
the accuracy bar when its means lie within 0.1 posterior sd and its sds within
10%. With ``--nuts`` each model is first sampled with PyMC's NUTS and
its defaults, with the same draws, tune and chains, and each sampler's wall
time is printed as a ratio to NUTS's in the same run. Each chain tunes for
PyMC's default 1,000 draws, as a user's would;
the default 3,000 draws per chain keep the Monte Carlo error of the largest
of some fifty mean errors near 0.06 sd, below the bar.

Besides near-Gaussian regressions, the panel holds posteriors that look
like real analyses (:mod:`pymc_sgmcmc.real_posteriors`): a cubic polynomial
regression of collinear covariates (posterior correlation condition number
above 10^4, exact posterior), a Student-t regression (heavy tails), a
Poisson regression with rare categories (skew) and a radon-like hierarchical
model with unbalanced groups, written centred and non-centred (also at the
radon data's size, 919 rows in 85 groups, where the centred form's joint
density has no mode, and non-centred with varying slopes; and at the size of
the radon data of all states, 12,573 rows in 386 groups), a hierarchical
regression with 1,000 groups on a million rows, a Poisson GLMM whose
hierarchical scale sits behind a log link (non-centred, 60 unbalanced groups,
and 8 groups of 81 to 246 rows, whose scale rests on eight groups),
and a median regression whose Laplace likelihood has a kink at every row
(exact posterior). Six more rows carry likelihoods beyond the normal and the
logit (:mod:`pymc_sgmcmc.likelihood_shapes`): negative binomial, Beta, ordered
logistic, censored normal, a Dirichlet's categorical, and a normal whose sd
depends on a covariate.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pymc as pm

from pymc_sgmcmc.diagnostics import accuracy
from pymc_sgmcmc.likelihood_shapes import (
    beta_regression,
    censored_regression,
    dirichlet_groups,
    heteroscedastic_regression,
    negative_binomial_regression,
    ordered_logistic_regression,
)
from pymc_sgmcmc.panel import (
    PanelModel,
    hierarchical_regression,
    logistic_regression,
    normal_inverse_gamma_regression,
    nuts_reference,
)
from pymc_sgmcmc.real_posteriors import (
    eight_schools,
    many_groups_reference,
    many_groups_regression,
    median_regression,
    poisson_glmm,
    poisson_regression,
    polynomial_regression,
    radon_like,
    student_t_regression,
)
from pymc_sgmcmc.registry import SAMPLERS
from pymc_sgmcmc.samplers.cyclical import posterior_draws

__all__ = ["NUTS", "PANEL", "main", "nuts_ratios", "run_panel"]

PANEL: dict[str, Callable[[], PanelModel]] = {
    "nig": lambda: normal_inverse_gamma_regression(n_rows=10_000),
    "logistic-5k": lambda: nuts_reference(logistic_regression(n_rows=5_000)),
    "logistic-50k": lambda: nuts_reference(logistic_regression(n_rows=50_000)),
    "logistic-500k": lambda: nuts_reference(logistic_regression(n_rows=500_000)),
    "badly-scaled-50k": lambda: nuts_reference(
        logistic_regression(n_rows=50_000, badly_scaled=True)
    ),
    "hierarchical": lambda: nuts_reference(hierarchical_regression()),
    "polynomial-5k": lambda: polynomial_regression(n_rows=5_000),
    "polynomial-500k": lambda: polynomial_regression(n_rows=500_000),
    "student-t": lambda: nuts_reference(student_t_regression()),
    "poisson": lambda: nuts_reference(poisson_regression()),
    "radon-centred": lambda: nuts_reference(radon_like(centred=True)),
    "radon-non-centred": lambda: nuts_reference(radon_like(centred=False)),
    # The radon data's size: 919 rows in 85 groups, whose joint posterior has no mode.
    "radon-919-centred": lambda: nuts_reference(radon_like(n_rows=919, n_groups=85, centred=True)),
    "radon-919-non-centred": lambda: nuts_reference(
        radon_like(n_rows=919, n_groups=85, centred=False)
    ),
    # With varying slopes too; NUTS's reference on the centred form does not converge.
    "radon-919-slopes-non-centred": lambda: nuts_reference(
        radon_like(n_rows=919, n_groups=85, centred=False, varying_slopes=True)
    ),
    # The size of the radon data of all states: 12,573 rows in 386 groups.
    "radon-386-centred": lambda: nuts_reference(
        radon_like(n_rows=12_573, n_groups=386, centred=True)
    ),
    "radon-386-non-centred": lambda: nuts_reference(
        radon_like(n_rows=12_573, n_groups=386, centred=False)
    ),
    "many-groups": lambda: many_groups_reference(many_groups_regression()),
    "median-regression": median_regression,
    "eight-schools": lambda: nuts_reference(eight_schools()),
    # NUTS mixes tau slowly on this ridge: 4 x 2,000 draws end at R-hat 1.013.
    "poisson-glmm": lambda: nuts_reference(poisson_glmm(), draws=10_000),
    # Eight groups of 50 to 300 rows: tau rests on eight groups, and the chains run on all N rows.
    "poisson-glmm-8": lambda: nuts_reference(
        poisson_glmm(n_groups=8, group_sizes=(50, 301)), draws=5_000
    ),
    # Likelihoods beyond the normal and the logit (pymc_sgmcmc.likelihood_shapes).
    "negative-binomial": lambda: nuts_reference(negative_binomial_regression()),
    "beta": lambda: nuts_reference(beta_regression()),
    "ordered-logistic": lambda: nuts_reference(ordered_logistic_regression()),
    "censored": lambda: nuts_reference(censored_regression()),
    "dirichlet-groups": lambda: nuts_reference(dirichlet_groups()),
    "heteroscedastic": lambda: nuts_reference(heteroscedastic_regression()),
}
#: The sampler name of PyMC's NUTS rows (``--nuts``).
NUTS = "NUTS (PyMC)"

HEADER = (
    "| model | N | sampler | max abs mean error / sd | worst sd ratio | "
    "ESS per 1,000 inner steps | wall time (s) | bar met |"
)


def run_panel(
    models, samplers, batch_size=100, draws=3000, tune=1000, chains=2, seed=1, nuts=False
):
    """Sample each panel model with each sampler's defaults and yield one result row each.

    Parameters
    ----------
    models : sequence of str
        Keys of :data:`PANEL`.
    samplers : sequence of str
        Names in :data:`pymc_sgmcmc.registry.SAMPLERS`.
    batch_size : int, default 100
        The one argument given to the samplers.
    draws, tune, chains, seed : int
        Passed to :func:`pymc.sample` (sequential chains).
    nuts : bool, default False
        Also sample each model with PyMC's NUTS and its defaults, first, with
        the same draws, tune, chains and seed, so that the samplers' wall
        times compare with NUTS's in the same run. Its "inner steps" are its
        leapfrog steps, each a gradient on all rows.

    Yields
    ------
    dict
        ``model``, ``n_rows``, ``sampler``, ``mean_error``, ``sd_ratio``,
        ``ess_per_1000_steps``, ``seconds`` and ``meets_bar``.
    """
    for key in models:
        panel = PANEL[key]()
        for sampler in ([NUTS] if nuts else []) + list(samplers):
            start = time.perf_counter()
            with panel.model:
                step = None if sampler == NUTS else SAMPLERS[sampler](batch_size=batch_size)
                result = pm.sample(
                    step=step,
                    draws=draws,
                    tune=tune,
                    chains=chains,
                    cores=1,
                    random_seed=seed,
                    progressbar=False,
                    compute_convergence_checks=False,
                )
            seconds = time.perf_counter() - start
            agreement = accuracy(posterior_draws(result), panel.means, panel.sds)
            statistic = "n_steps" if sampler == NUTS else "steps_per_draw"
            inner_steps = float(result.sample_stats[statistic].sum())
            yield {
                "model": panel.name.split(" N=")[0],
                "n_rows": panel.n_rows,
                "sampler": sampler,
                "mean_error": agreement.mean_error,
                "sd_ratio": agreement.worst_sd_ratio,
                "ess_per_1000_steps": 1000 * agreement.min_ess / inner_steps,
                "seconds": seconds,
                "meets_bar": agreement.meets(),
            }


def nuts_ratios(rows) -> list[str]:
    """Return a line per sampler row of a model that has a NUTS row: its wall time over NUTS's."""
    nuts_seconds = {
        (row["model"], row["n_rows"]): row["seconds"] for row in rows if row["sampler"] == NUTS
    }
    lines = []
    for row in rows:
        nuts = nuts_seconds.get((row["model"], row["n_rows"]))
        if row["sampler"] != NUTS and nuts is not None:
            lines.append(
                f"{row['model']}, N={row['n_rows']:,}: {row['sampler']} took "
                f"{row['seconds']:.1f} s, {row['seconds'] / nuts:.3f}x NUTS's {nuts:.1f} s"
            )
    return lines


def format_row(row: dict) -> str:
    """Return one result as a Markdown table row."""
    return (
        f"| {row['model']} | {row['n_rows']:,} | {row['sampler']} | {row['mean_error']:.3f} | "
        f"{row['sd_ratio']:.3f} | {row['ess_per_1000_steps']:.1f} | {row['seconds']:.1f} | "
        f"{'yes' if row['meets_bar'] else 'NO'} |"
    )


def main(argv=None) -> int:
    """Run the panel from the command line; return 1 if any run misses the bar."""
    parser = argparse.ArgumentParser(prog="python -m pymc_sgmcmc.validate", description=__doc__)
    parser.add_argument("--models", nargs="+", default=list(PANEL), choices=list(PANEL))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--draws", type=int, default=3000)
    parser.add_argument(
        "--tune",
        type=int,
        default=1000,
        help="tune draws per chain (PyMC's default, 1,000; chains that travel from a mode "
        "far from the posterior's mass need more than 100)",
    )
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument(
        "--nuts",
        action="store_true",
        help="also sample each model with PyMC's NUTS (same draws, tune, chains) and print "
        "each sampler's wall time as a ratio to NUTS's in this run",
    )
    parser.add_argument("--output", help="also write the table to this Markdown file")
    arguments = parser.parse_args(argv)

    lines = [HEADER, "|" + "---|" * 8]
    print("\n".join(lines), flush=True)
    rows = []
    for row in run_panel(
        arguments.models,
        arguments.samplers,
        batch_size=arguments.batch_size,
        draws=arguments.draws,
        tune=arguments.tune,
        chains=arguments.chains,
        nuts=arguments.nuts,
    ):
        rows.append(row)
        lines.append(format_row(row))
        print(lines[-1], flush=True)
    logistic = {(r["n_rows"], r["sampler"]): r for r in rows if r["model"] == "logistic"}
    for sampler in arguments.samplers:
        small, large = logistic.get((5_000, sampler)), logistic.get((500_000, sampler))
        if small and large:
            ratio = large["ess_per_1000_steps"] / small["ess_per_1000_steps"]
            line = f"{sampler}: ESS per 1,000 inner steps at N=500,000 / at N=5,000 = {ratio:.2f}"
            lines.append("\n" + line)
            print(line)
    for line in nuts_ratios(rows):
        lines.append(line)
        print(line)
    if arguments.output:
        with open(arguments.output, "w") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0 if all(row["meets_bar"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
