"""Ctrl-C during sampling returns the draws so far, as pm.sample does for NUTS."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pymc as pm
import pytest

from pymc_sgmcmc import SGHMC

pytestmark = pytest.mark.integration

DRAWS = 100_000

SCRIPT = textwrap.dedent(
    f"""
    import signal
    import sys
    import numpy as np
    import pymc as pm
    from pymc_sgmcmc import SGHMC

    # Python's Ctrl-C handler, as in a terminal, even where the launcher
    # started the tests with SIGINT ignored (a background job of a shell).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    cores = int(sys.argv[1])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2_000, 2))
    y = x @ np.array([1.0, -1.0]) + rng.normal(size=2_000)

    past = set()

    def report(trace, draw):
        if draw.draw_idx == 50:
            past.add(draw.chain)
            if len(past) == cores:
                print("SAMPLING", flush=True)

    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y)
        step = SGHMC(batch_size=50, steps_per_draw=500)
        idata = pm.sample(
            draws={DRAWS}, tune=20, chains=cores, cores=cores, step=step, random_seed=1,
            progressbar=False, callback=report, compute_convergence_checks=False,
        )
    print("DRAWS", idata.posterior.sizes["draw"], flush=True)
    """
)


@pytest.mark.parametrize("cores", [1, 2])
def test_ctrl_c_returns_the_draws_so_far(tmp_path, cores):
    """SIGINT goes to the whole process group, as Ctrl-C in a terminal does.

    One chain per core: the sequential sampler goes on to the next chain
    after an interrupt, as it does for NUTS. Most of the run is spent
    inside the compiled kernel, so the signal
    usually arrives there (in the workers too, with ``cores=2``).
    """
    script = tmp_path / "interrupted.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), str(cores)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in process.stdout:
            if line.startswith("SAMPLING"):
                break
        os.killpg(process.pid, signal.SIGINT)
        output, errors = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, errors[-2000:]
    assert "SystemError" not in errors
    draws = int(output.split("DRAWS")[-1])
    assert 30 <= draws < DRAWS  # every chain took 20 tune draws and 30 or more kept


def test_an_interrupt_inside_compiled_code_reaches_pymc_as_keyboard_interrupt(monkeypatch):
    """Numba surfaces a SIGINT caught in a call back into Python as a SystemError."""
    rng = np.random.default_rng(0)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1)
        pm.Normal("y", beta, 1.0, observed=rng.normal(size=200))
        step = SGHMC(batch_size=20, steps_per_draw=5, step_size=0.01)
    step.set_rng(np.random.default_rng(1))

    def interrupted_call(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise SystemError("returned a result with an exception set") from interrupt

    monkeypatch.setattr(step, "_draw", interrupted_call)
    with pytest.raises(KeyboardInterrupt):
        step.step({"beta": np.array(0.0)})
    monkeypatch.setattr(step, "_draw", lambda q0: (_ for _ in ()).throw(SystemError("other")))
    with pytest.raises(SystemError, match="other"):
        step.step({"beta": np.array(0.0)})


def test_an_interrupt_inside_compiled_code_is_held_until_it_returns():
    from pymc_sgmcmc.interrupts import interrupts_held

    finished = False
    # Python's own handler, whatever the launcher left installed.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held:
                signal.raise_signal(signal.SIGINT)
                finished = True
    finally:
        signal.signal(signal.SIGINT, previous)
    assert finished


def test_an_ignored_interrupt_stays_ignored():
    from pymc_sgmcmc.interrupts import interrupts_held

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held:
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
