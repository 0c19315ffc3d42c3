"""Time to a usable posterior: the run-length search, its table, and the peers."""

import math

import pytest

from pymc_sgmcmc.benchmark import usable


class FakeRunner:
    """Stands for a run in a fresh process: ESS grows linearly with the draws.

    ``rates`` gives the bulk ESS per draw of each successive call, so a run
    can fall short of what the pilot predicted.
    """

    def __init__(self, rates, seconds_per_draw=0.01, fixed_seconds=2.0, meets_bar=True):
        self.rates = list(rates)
        self.seconds_per_draw = seconds_per_draw
        self.fixed_seconds = fixed_seconds
        self.meets_bar = meets_bar
        self.calls = []

    def __call__(self, sampler, n_rows, chains, draws=None, tune=None, empty_caches=False):
        self.calls.append({"draws": draws, "empty_caches": empty_caches})
        rate = self.rates[min(len(self.calls), len(self.rates)) - 1]
        fixed = self.fixed_seconds * (10 if empty_caches else 1)
        return {
            "sampler": sampler,
            "n_rows": n_rows,
            "draws": draws,
            "min_bulk_ess": rate * draws,
            "total_seconds": fixed + self.seconds_per_draw * draws,
            "meets_bar": self.meets_bar,
            "mean_error": 0.03,
            "worst_sd_ratio": 1.02,
        }


def test_run_length_is_chosen_from_the_pilot_and_only_the_run_that_reaches_it_is_timed():
    runner = FakeRunner(rates=[0.5, 0.5])
    row = usable.time_to_usable("sghmc", 5_000, runner=runner)
    expected = math.ceil(usable.MARGIN * usable.TARGET_ESS / 0.5)
    assert [call["draws"] for call in runner.calls] == [usable.PILOT_DRAWS, expected]
    assert row["reached"] and row["tries"] == [expected]
    assert row["seconds"] == pytest.approx(2.0 + 0.01 * expected)
    assert "empty_caches_seconds" not in row


def test_a_run_that_falls_short_is_lengthened_and_the_longer_run_is_timed():
    # The pilot predicts 0.5 ESS per draw; the chosen run only gets 0.3.
    runner = FakeRunner(rates=[0.5, 0.3, 0.3])
    row = usable.time_to_usable("sghmc", 5_000, runner=runner)
    first = math.ceil(usable.MARGIN * usable.TARGET_ESS / 0.5)
    second = math.ceil(usable.MARGIN * usable.TARGET_ESS / 0.3)
    assert row["tries"] == [first, second]
    assert row["run"]["min_bulk_ess"] >= usable.TARGET_ESS
    assert row["seconds"] == pytest.approx(2.0 + 0.01 * second)


def test_a_sampler_that_never_reaches_the_target_has_no_time():
    runner = FakeRunner(rates=[0.5, 0.1, 0.05, 0.02, 0.01])
    row = usable.time_to_usable("sghmc", 5_000, runner=runner, attempts=4)
    assert not row["reached"] and math.isnan(row["seconds"])
    assert len(runner.calls) == 5


def test_the_empty_cache_run_repeats_the_run_that_reached_the_target():
    runner = FakeRunner(rates=[0.5])
    row = usable.time_to_usable("numpyro", 50_000, runner=runner, empty_caches=True)
    cold = runner.calls[-1]
    assert cold == {"draws": row["run"]["draws"], "empty_caches": True}
    assert row["empty_caches_seconds"] > row["seconds"]


def test_advi_is_refused_a_length_search():
    with pytest.raises(ValueError, match="ADVI has no ESS"):
        usable.time_to_usable("advi", 5_000, runner=FakeRunner([1.0]))


def _row(sampler, seconds, meets_bar=True, n_rows=50_000):
    runner = FakeRunner([1.0], fixed_seconds=seconds, seconds_per_draw=0.0, meets_bar=meets_bar)
    return usable.time_to_usable(sampler, n_rows, runner=runner, empty_caches=True)


def test_table_gives_speed_ups_over_the_best_nuts_only_for_runs_that_meet_the_bar():
    results = {
        "target_ess": 1000,
        "rows": [
            _row("pymc_nuts", 40.0),
            _row("numpyro", 10.0),
            _row("sghmc", 2.0),
            _row("sgld", 1.0, meets_bar=False),
        ],
    }
    table = usable.format_table(results)
    lines = {line.split("|")[2].strip(): line for line in table.splitlines()[2:]}
    assert "| 5x |" in lines["sghmc"]  # 10 s of NumPyro against 2 s
    assert "| 1x |" in lines["numpyro"]
    assert "misses the bar" in lines["sgld"] and "10x" not in lines["sgld"]
