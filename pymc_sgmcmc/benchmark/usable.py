"""Time to a usable posterior: wall time until every coefficient has 1,000 ESS.

A user feels the time from calling the sampler until a posterior good enough
to use is in hand, fixed costs included (graph building, compilation, mode
finding, tuning). This module measures it for every sampler on the
benchmark's logistic regression:

1. A pilot run of the sampler's default length gives its bulk ESS per draw.
2. A run whose length is chosen from the pilot to reach the target ESS on
   every coefficient (with a 15% margin) is timed; if it falls short, the
   length is chosen again from that run and it is repeated.
3. The time of the first run that reaches the target is the measure, with
   that run's accuracy against the reference posterior. Optionally the same
   run is repeated with every compilation cache empty.

Only the run that reaches the target is timed: the pilot stands for what a
user learns once per model. ADVI has no ESS; its rows give accuracy against
wall time for a few optimisation lengths. Every run is a fresh process
(:func:`~pymc_sgmcmc.benchmark.run_in_fresh_process`).

Run it as ``python -m pymc_sgmcmc.benchmark.usable --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from pymc_sgmcmc.benchmark import (
    DEFAULT_MAX_ROWS,
    SAMPLERS,
    choose_samplers,
    reference,
    run_in_fresh_process,
)
from pymc_sgmcmc.benchmark.runners import NUTS_SAMPLERS

__all__ = [
    "ADVI_LENGTHS",
    "TARGET_ESS",
    "advi_rows",
    "format_table",
    "run_usable_benchmark",
    "time_to_usable",
]

#: Bulk ESS every coefficient must reach.
TARGET_ESS = 1000

#: Run length over the pilot's prediction, so that most first tries reach it.
MARGIN = 1.15

#: Draws per chain of the pilot runs.
PILOT_DRAWS = 1000

#: Optimisation steps of the ADVI rows (``pm.fit``'s default first).
ADVI_LENGTHS = (10_000, 30_000, 100_000)


def draws_to_reach(run: dict, target: int = TARGET_ESS, margin: float = MARGIN) -> int:
    """Return the draws per chain that reach ``target`` bulk ESS at ``run``'s rate.

    Parameters
    ----------
    run : dict
        A measured run: its ``draws`` per chain and ``min_bulk_ess``.
    target : int, default :data:`TARGET_ESS`
        Bulk ESS to reach on every coefficient.
    margin : float, default :data:`MARGIN`
        Factor on the predicted length.

    Returns
    -------
    int
    """
    ess_per_draw = max(run["min_bulk_ess"], 1.0) / run["draws"]
    return max(100, math.ceil(margin * target / ess_per_draw))


def time_to_usable(
    sampler: str,
    n_rows: int,
    *,
    chains: int = 2,
    target: int = TARGET_ESS,
    attempts: int = 4,
    empty_caches: bool = False,
    runner=run_in_fresh_process,
) -> dict:
    """Measure ``sampler``'s wall time to ``target`` bulk ESS at ``n_rows``.

    Parameters
    ----------
    sampler : str
        Key of :data:`~pymc_sgmcmc.benchmark.SAMPLERS`, not ``"advi"``.
    n_rows : int
        Data size N.
    chains : int, default 2
        Chains per run.
    target : int, default :data:`TARGET_ESS`
        Bulk ESS every coefficient must reach.
    attempts : int, default 4
        Timed runs to try after the pilot before giving up.
    empty_caches : bool, default False
        Also time the run that reached the target again with every
        compilation cache empty.
    runner : callable, default :func:`~pymc_sgmcmc.benchmark.run_in_fresh_process`
        Called as ``runner(sampler, n_rows, chains, draws=..., empty_caches=...)``
        and returning a run's fields.

    Returns
    -------
    dict
        ``reached`` (whether a run reached the target), ``seconds`` (that
        run's wall time), ``run`` (its fields), ``tries`` (draws per chain of
        every timed run), ``pilot_draws``, and with ``empty_caches``,
        ``empty_caches_seconds`` and ``empty_caches_run``.
    """
    if sampler == "advi":
        raise ValueError("ADVI has no ESS; time it with advi_rows() instead.")
    pilot = runner(sampler, n_rows, chains, draws=PILOT_DRAWS)
    draws = draws_to_reach(pilot, target)
    tries = []
    final = pilot
    for _ in range(attempts):
        tries.append(draws)
        final = runner(sampler, n_rows, chains, draws=draws)
        if final["min_bulk_ess"] >= target:
            break
        draws = max(draws + 1, draws_to_reach(final, target))
    reached = final["min_bulk_ess"] >= target
    result = {
        "sampler": sampler,
        "n_rows": n_rows,
        "reached": reached,
        "seconds": final["total_seconds"] if reached else math.nan,
        "pilot_draws": PILOT_DRAWS,
        "tries": tries,
        "run": final,
    }
    if empty_caches and reached:
        cold = runner(sampler, n_rows, chains, draws=final["draws"], empty_caches=True)
        result["empty_caches_seconds"] = cold["total_seconds"]
        result["empty_caches_run"] = cold
    return result


def advi_rows(n_rows: int, *, chains: int = 2, runner=run_in_fresh_process) -> list[dict]:
    """Time minibatch ADVI at each of :data:`ADVI_LENGTHS` optimisation steps.

    Returns
    -------
    list of dict
        One row per length: ``seconds``, ``iterations`` and the ``run``.
    """
    rows = []
    for iterations in ADVI_LENGTHS:
        run = runner("advi", n_rows, chains, tune=iterations)
        rows.append(
            {
                "sampler": "advi",
                "n_rows": n_rows,
                "iterations": iterations,
                "seconds": run["total_seconds"],
                "run": run,
            }
        )
    return rows


def run_usable_benchmark(
    grid=(5_000, 50_000, 500_000),
    samplers=tuple(SAMPLERS),
    empty_caches_at=(50_000,),
    chains: int = 2,
    output=None,
) -> dict:
    """Measure the time to a usable posterior for every sampler and N.

    Parameters
    ----------
    grid : sequence of int
        Data sizes N.
    samplers : sequence of str
        Keys of :data:`~pymc_sgmcmc.benchmark.SAMPLERS`; NUTS samplers run up
        to :data:`~pymc_sgmcmc.benchmark.DEFAULT_MAX_ROWS`.
    empty_caches_at : sequence of int
        Data sizes at which each run that reached the target is repeated
        with every compilation cache empty.
    chains : int, default 2
        Chains per run.
    output : path, optional
        Folder to write ``usable.json`` and ``time_to_usable.png`` to.

    Returns
    -------
    dict
        ``{"target_ess": ..., "rows": [...]}``.
    """
    chosen = choose_samplers(samplers)
    results = {"target_ess": TARGET_ESS, "margin": MARGIN, "rows": []}
    for n_rows in sorted(grid):
        reference(n_rows)
        for sampler in chosen:
            limit = DEFAULT_MAX_ROWS.get(sampler)
            if limit is not None and n_rows > limit:
                continue
            start = time.perf_counter()
            if sampler == "advi":
                rows = advi_rows(n_rows, chains=chains)
            else:
                cold = n_rows in empty_caches_at
                rows = [time_to_usable(sampler, n_rows, chains=chains, empty_caches=cold)]
            results["rows"].extend(rows)
            for row in rows:
                print(_describe(row) + f"  [{time.perf_counter() - start:.0f} s measuring]")
    if output is not None:
        folder = Path(output)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "usable.json").write_text(json.dumps(results, indent=1))
        save_figure(results, folder / "time_to_usable.png")
        (folder / "usable.md").write_text(format_table(results))
    return results


def _describe(row: dict) -> str:
    run = row["run"]
    accuracy = f"mean error {run['mean_error']:.3f} sd, sd ratio {run['worst_sd_ratio']:.3f}"
    label = f"N = {row['n_rows']:>9,} {row['sampler']:>12}"
    if row["sampler"] == "advi":
        return f"{label}: {row['iterations']:,} steps in {row['seconds']:.1f} s, {accuracy}"
    if not row["reached"]:
        return f"{label}: did not reach {TARGET_ESS} ESS in {row['tries']} draws per chain"
    text = f"{label}: {row['seconds']:6.1f} s ({run['draws']} draws per chain), {accuracy}"
    if "empty_caches_seconds" in row:
        text += f"; empty caches {row['empty_caches_seconds']:.1f} s"
    return text


def _best_nuts(rows: list[dict], n_rows: int, key: str) -> tuple[str, float] | None:
    timed = [
        (row[key], row["sampler"])
        for row in rows
        if row["n_rows"] == n_rows
        and row["sampler"] in NUTS_SAMPLERS
        and row.get("reached")
        and row["run"]["meets_bar"]
        and key in row
    ]
    if not timed:
        return None
    seconds, sampler = min(timed)
    return sampler, seconds


def format_table(results: dict) -> str:
    """Return the results as a Markdown table: seconds, speed-up over the best NUTS, accuracy.

    A speed-up is printed only where the run meets the accuracy bar.
    """
    rows = results["rows"]
    lines = [
        "| N | sampler | draws per chain | seconds (warm) | vs best NUTS | "
        "seconds (empty caches) | vs best NUTS | mean error / sd | sd ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda row: (row["n_rows"], _order(row))):
        run = row["run"]
        warm = _best_nuts(rows, row["n_rows"], "seconds")
        cold = _best_nuts(rows, row["n_rows"], "empty_caches_seconds")
        if row["sampler"] == "advi":
            draws = f"{row['iterations']:,} steps"
        else:
            draws = f"{run['draws']:,}" if row["reached"] else "not reached"
        cells = [f"{row['n_rows']:,}", row["sampler"], draws]
        for seconds, best in ((row.get("seconds"), warm), (row.get("empty_caches_seconds"), cold)):
            if seconds is None or math.isnan(seconds):
                cells += ["", ""]
                continue
            cells.append(f"{seconds:.1f}")
            usable = row["sampler"] != "advi" and run["meets_bar"]
            if best is None or not usable:
                cells.append("misses the bar" if not run["meets_bar"] else "")
            else:
                cells.append(f"{best[1] / seconds:.2g}x")
        cells += [f"{run['mean_error']:.3f}", f"{run['worst_sd_ratio']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _order(row: dict) -> tuple:
    names = list(SAMPLERS)
    return (names.index(row["sampler"]), row.get("iterations", 0))


def save_figure(results: dict, path) -> None:
    """Plot the time to a usable posterior against N, one line per sampler.

    Runs that miss the accuracy bar are drawn hollow; ADVI is left out (it
    has no ESS).
    """
    from matplotlib.figure import Figure

    from pymc_sgmcmc.benchmark.figures import LABELS, STYLE

    figure = Figure(figsize=(6.5, 4.5))
    ax = figure.add_subplot()
    grouped = {}
    for row in results["rows"]:
        if row["sampler"] != "advi" and row["reached"]:
            grouped.setdefault(row["sampler"], []).append(row)
    for sampler, group in grouped.items():
        group.sort(key=lambda row: row["n_rows"])
        color, marker, line = STYLE[sampler]
        n_rows = [row["n_rows"] for row in group]
        seconds = [row["seconds"] for row in group]
        ax.plot(n_rows, seconds, line, color=color, marker=marker, label=LABELS[sampler])
        for row in group:
            if not row["run"]["meets_bar"]:
                ax.plot(row["n_rows"], row["seconds"], marker, color="white", markeredgecolor=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (rows)")
    ax.set_ylabel(f"seconds to bulk ESS {results['target_ess']:,} (warm caches)")
    ax.set_title("Time to a usable posterior (hollow: misses the accuracy bar)")
    ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv=None) -> None:
    """Parse the arguments and run the measurement."""
    parser = argparse.ArgumentParser(
        prog="python -m pymc_sgmcmc.benchmark.usable",
        description="Wall time until every coefficient has bulk ESS 1,000, accuracy bar "
        "met, all fixed costs included, for every sampler and N.",
    )
    parser.add_argument("--grid", type=int, nargs="+", default=[5_000, 50_000, 500_000])
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument(
        "--empty-caches-at",
        type=int,
        nargs="*",
        default=[50_000],
        help="data sizes at which each run is repeated with every compilation cache empty",
    )
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--output", default="benchmark-results", help="output folder")
    arguments = parser.parse_args(argv)
    results = run_usable_benchmark(
        grid=arguments.grid,
        samplers=arguments.samplers,
        empty_caches_at=arguments.empty_caches_at,
        chains=arguments.chains,
        output=arguments.output,
    )
    print(format_table(results))


if __name__ == "__main__":
    main()
