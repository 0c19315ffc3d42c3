import numpy as np
import pytest
from scipy.stats import chi2

from pymc_sgmcmc import ConstantStepSize, PolynomialDecay, batches
from pymc_sgmcmc.batches import AllRows, IndexStream, shuffled_rows
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


def _stream_of(n_rows, batch_size, seed, counts):
    stream = IndexStream(n_rows=n_rows, batch_size=batch_size)
    rng = np.random.default_rng(seed)
    return np.concatenate([stream.draw(rng, count).ravel() for count in counts])


def test_the_stream_is_a_sequence_of_the_generators_permutations():
    """Batches of any sizes read one shuffle of the N rows after another."""
    counts = [1, 3, 2, 7, 1, 5]
    drawn = _stream_of(11, 3, 2, counts)
    rng = np.random.default_rng(2)
    epochs = np.concatenate([shuffled_rows(rng, 11) for _ in range(len(drawn) // 11 + 1)])
    np.testing.assert_array_equal(drawn, epochs[: len(drawn)])
    assert drawn.dtype == np.int64


def test_every_order_of_the_rows_is_equally_likely():
    """All 24 orders of 4 rows come up equally often (chi-square, 23 degrees of freedom)."""
    rng = np.random.default_rng(5)
    draws = 24_000
    orders = np.array([shuffled_rows(rng, 4) for _ in range(draws)])
    assert np.all(np.sort(orders, axis=1) == np.arange(4))
    _, counts = np.unique(orders, axis=0, return_counts=True)
    expected = draws / 24
    statistic = np.sum((counts - expected) ** 2 / expected) + (24 - len(counts)) * expected
    assert statistic < chi2.isf(1e-4, 23)


def test_a_shuffle_in_pieces_is_the_shuffle_in_one(monkeypatch):
    whole = shuffled_rows(np.random.default_rng(3), 50)
    monkeypatch.setattr(batches, "_SHUFFLE_PIECE", 7)
    np.testing.assert_array_equal(shuffled_rows(np.random.default_rng(3), 50), whole)


def test_compact_epochs_of_many_rows_give_the_same_batches(monkeypatch):
    counts = [1, 3, 2, 7, 1, 5]
    expected = _stream_of(11, 3, 2, counts)
    monkeypatch.setattr(batches, "COMPACT_ROWS", 5)
    stream = IndexStream(n_rows=11, batch_size=3)
    rng = np.random.default_rng(2)
    assert stream._permutation(np.random.default_rng(0)).dtype == np.int32
    drawn = np.concatenate([stream.draw(rng, count).ravel() for count in counts])
    np.testing.assert_array_equal(drawn, expected)
    assert drawn.dtype == np.int64


def test_batches_of_all_rows_hold_every_row_and_draw_no_random_numbers():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    drawn = AllRows(7).draw(rng, 3)
    np.testing.assert_array_equal(drawn, np.tile(np.arange(7), (3, 1)))
    assert drawn.dtype == np.int64
    assert rng.bit_generator.state == state


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


def test_a_draw_that_would_favour_low_rows_is_rejected():
    """Lemire's rejection: at row 2 (3 places) the value 0 is rejected, the next one is used.

    Without the rejection, the values below ``2**32 mod 3`` would place the row
    at 0 once more often than elsewhere.
    """
    rows = np.array([0, 1, 0], dtype=np.int64)
    # Row 2 draws 0 (rejected), then 2**32 - 1: j = floor((2**32 - 1) 3 / 2**32) = 2.
    words = np.array([(2**32 - 1) << 32], dtype=np.uint64)
    assert batches._place_rows(rows, words, 2) == 3
    np.testing.assert_array_equal(rows, [0, 1, 2])
    # Accepted at once: the value 2**31 places row 2 at j = 1.
    rows = np.array([0, 1, 0], dtype=np.int64)
    words = np.array([2**31], dtype=np.uint64)
    assert batches._place_rows(rows, words, 2) == 3
    np.testing.assert_array_equal(rows, [0, 2, 1])
