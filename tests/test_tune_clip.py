"""The tune phase's gradient clip: on from a chain's first diverging tune step, off after tune."""

from dataclasses import replace

import numpy as np
import pymc as pm
import pytest
from test_adaptation import run

from pymc_sgmcmc import SGHMC
from pymc_sgmcmc.panel import correlated_regression
from pymc_sgmcmc.tuning import TuningConfig


def clips_of_a_run_whose_tenth_draw_diverges(clip_gradient=None):
    """Return the clip each draw's steps ran with, and the run, on a Gaussian posterior.

    The tenth tune draw is made to end as a diverging one does (a step short).
    The chain stays in the interpreted loop, whose inputs are named.
    """
    model = correlated_regression(n_rows=2000, correlation=0.5).model
    tuning = TuningConfig(interpreted_steps=10**9)
    step = SGHMC(batch_size=50, model=model, clip_gradient=clip_gradient, tuning=tuning)
    run_kernel, clips = step.runner.run, []

    def tenth_draw_diverges(chain, position, n_steps, step_values, rng, tune):
        clips.append((tune, float(chain.kernel_inputs["gradient_clip"]), chain.settings.tune_clip))
        result = run_kernel(chain, position, n_steps, step_values, rng, tune)
        if len(clips) == 10:
            return replace(result, steps_taken=n_steps - 1)
        return result

    step.runner.run = tenth_draw_diverges
    result = run(step, model, draws=50, tune=200, seed=2, discard_tuned_samples=False)
    return clips, result


def test_tune_steps_are_clipped_from_the_first_divergence_until_tune_ends():
    """Before the divergence and after tune the steps run unclipped; in between, at the
    settings' clip: ten times the root mean square of the gradient estimate at stationarity,
    so that a chain at its stationary law (a Gaussian posterior, from its mode) is never
    clipped."""
    clips, result = clips_of_a_run_whose_tenth_draw_diverges()
    tune = [clip for tuning, clip, _ in clips if tuning]
    assert len(tune) == 200
    assert all(clip == np.inf for clip in tune[:10])
    clipped = [(clip, tune_clip) for tuning, clip, tune_clip in clips[10:] if tuning]
    assert all(np.isfinite(clip) and clip == tune_clip for clip, tune_clip in clipped)
    assert all(clip == np.inf for tuning, clip, _ in clips if not tuning)
    warmup = np.asarray(result.warmup_sample_stats["gradient_clipped"])
    assert np.all(warmup == 0.0)
    assert not np.any(np.asarray(result.sample_stats["diverging"]))


def test_a_given_clip_below_the_tune_clip_holds_throughout():
    clips, _ = clips_of_a_run_whose_tenth_draw_diverges(clip_gradient=1e-3)
    assert all(clip == 1e-3 for _, clip, _ in clips)
    assert all(tune_clip > 1e-3 for _, _, tune_clip in clips)


def wide_started_funnel():
    """A centred hierarchical model whose scale starts 65 times its posterior mean.

    ``a_j ~ N(mu, tau)`` for 100 groups of 5 rows, ``y ~ N(a_g, 1)``: the data
    leave ``tau`` near 0 (posterior mean 0.123, sd 0.078, NUTS on the
    non-centred form, 2 x 2,000 draws), and the joint density has no mode. A
    chain measured at ``tau`` near 8 meets curvatures far beyond the measured
    on its way in, where the spread intercepts' pull on ``tau`` grows as
    ``1 / tau^3`` within a few steps.
    """
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(100), 5)
    intercepts = rng.normal(0.0, 0.2, 100)
    observed = intercepts[groups] + rng.normal(0.0, 1.0, groups.size)
    with pm.Model() as model:
        group = pm.Data("group", groups)
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0, initval=8.0)
        intercept = pm.Normal("a", mu, tau, shape=100)
        pm.Normal("y", intercept[group], 1.0, observed=observed)
    return model


@pytest.mark.statistical
@pytest.mark.once
@pytest.mark.parametrize("clipped", [True, False], ids=["clipped", "negative-control"])
def test_a_chain_started_at_a_funnels_wide_end_reaches_its_mass(clipped):
    """With the tune clip both chains reach the mass: no draw diverges and each chain's mean
    ``tau`` lies within the reference's central 95% (0.005 to 0.28). Without it, a gradient
    on the way in throws one chain's ``tau`` out to overflow and the chain stops."""
    tuning = TuningConfig() if clipped else TuningConfig(tune_clip=np.inf)
    model = wide_started_funnel()
    step = SGHMC(batch_size=50, tuning=tuning, model=model)
    result = run(step, model, draws=300, tune=1000, seed=3, chains=2)
    diverging = np.asarray(result.sample_stats["diverging"])
    tau = np.asarray(result.posterior["tau"]).mean(axis=1)
    if clipped:
        assert not diverging.any()
        assert np.all((tau > 0.005) & (tau < 0.28)), tau
    else:
        assert diverging.any()
