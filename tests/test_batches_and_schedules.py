import numpy as np
import pytest

from pymc_sgmcmc import ConstantStepSize, PolynomialDecay
from pymc_sgmcmc.batches import IndexStream
from pymc_sgmcmc.schedules import as_schedule


def test_epochs_visit_every_row_once():
    stream = IndexStream(n_rows=10, batch_size=5)
    rng = np.random.default_rng(0)
    batches = stream.draw(rng, 6)
    assert batches.shape == (6, 5)
    for epoch in batches.reshape(3, 10):
        np.testing.assert_array_equal(np.sort(epoch), np.arange(10))


def test_batches_straddle_epochs_and_continue_the_stream():
    stream = IndexStream(n_rows=10, batch_size=4)
    rng = np.random.default_rng(1)
    first = np.concatenate([stream.draw(rng, 1).ravel() for _ in range(5)])
    np.testing.assert_array_equal(np.sort(first[:10]), np.arange(10))
    np.testing.assert_array_equal(np.sort(first[10:20]), np.arange(10))


def test_reset_starts_a_new_epoch_and_streams_follow_the_generator():
    stream = IndexStream(n_rows=7, batch_size=3)
    a = stream.draw(np.random.default_rng(5), 4)
    stream.reset()
    b = stream.draw(np.random.default_rng(5), 4)
    np.testing.assert_array_equal(a, b)
    stream.reset()
    c = stream.draw(np.random.default_rng(6), 4)
    assert not np.array_equal(a, c)


def test_with_replacement_draws_independent_batches():
    stream = IndexStream(n_rows=3, batch_size=3, replace=True)
    batches = stream.draw(np.random.default_rng(0), 200)
    assert batches.min() == 0 and batches.max() == 2
    assert any(len(set(batch)) < 3 for batch in batches)


@pytest.mark.parametrize("batch_size", [0, 11])
def test_batch_size_out_of_range(batch_size):
    with pytest.raises(ValueError, match="between 1 and the number of rows"):
        IndexStream(10, batch_size)


def test_polynomial_decay_values():
    schedule = PolynomialDecay(a=0.5, b=10.0, gamma=0.55)
    np.testing.assert_allclose(schedule(np.array([0, 90])), [0.5 / 10**0.55, 0.5 / 100**0.55])


def test_constant_schedule_and_conversion():
    np.testing.assert_array_equal(as_schedule(0.1)(np.arange(3)), [0.1, 0.1, 0.1])
    assert isinstance(as_schedule(ConstantStepSize(0.2)), ConstantStepSize)
    with pytest.raises(ValueError, match="positive"):
        as_schedule(-1.0)
    with pytest.raises(TypeError, match="PolynomialDecay"):
        as_schedule("big")
