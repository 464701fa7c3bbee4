"""The replicated bank's own behaviour: its construction, initial rows and mirrored copies. The
`Bank` contract it shares with the sharded bank is tests/core/test_bank_contract.py."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf import MemoryBank
from llp_tf.core import label_encoding, memory_bank
from llp_tf.core.bank import BankWrite
from tests import reference

N, D, C = 40, 8, 5
LABELLED_INDEX = np.array([30, 2, 11, 7, 25])  # unsorted on purpose
LABELLED_CLASSES = np.array([4, 0, 1, 3, 0])


def _bank(**kwargs):
    return MemoryBank(N, D, C, LABELLED_INDEX, LABELLED_CLASSES, **kwargs)


def _numpy_update(rows, indices, embeddings, momentum=0.5):
    rows = rows.astype(np.float64).copy()
    new = momentum * rows[indices] + (1 - momentum) * embeddings
    rows[indices] = new / np.linalg.norm(new, axis=1, keepdims=True)
    return rows


def test_initial_rows_fill_their_range_with_unit_norm_in_expectation():
    """The rest of the initial state: tests/core/test_bank_contract.py."""
    bank = _bank(seed=3)
    rows = bank.embeddings.numpy()
    scale = 1.0 / np.sqrt(D / 3.0)
    assert rows.min() >= -scale and rows.max() <= scale
    assert rows.min() < -0.8 * scale and rows.max() > 0.8 * scale  # fills the range
    big = MemoryBank(5000, 128, 3, [0], [0], seed=0).embeddings.numpy()
    assert abs(np.mean(np.sum(big.astype(np.float64) ** 2, axis=1)) - 1.0) < 0.01
    assert all(not v.trainable for v in bank.variables)


@pytest.mark.parametrize("dim", [4, 3])
def test_the_initial_state_of_a_row_range_is_those_rows_of_the_whole(dim, monkeypatch):
    """Drawn in blocks of 4 rows from a stream advanced to the range's first row; odd D starts
    some ranges inside a 64-bit word of the stream."""
    monkeypatch.setattr(memory_bank, "DRAW_BLOCK_ROWS", 4)
    scale = 1.0 / np.sqrt(dim / 3.0)
    draws = np.random.default_rng(7).random((N, dim), dtype=np.float32).astype(np.float64)
    whole = memory_bank.initial_state(N, dim, C, LABELLED_INDEX, LABELLED_CLASSES)
    np.testing.assert_array_equal(memory_bank.initial_embeddings(dim, 7, 0, N).numpy(),
                                  (2.0 * scale * draws - scale).astype(np.float32))
    ranges = [(0, 5), (5, 6), (6, 17), (17, N)]
    parts = [memory_bank.initial_state(N, dim, C, LABELLED_INDEX, LABELLED_CLASSES, rows=rows)
             for rows in ranges]
    for name, value in whole.items():
        np.testing.assert_array_equal(np.concatenate([part[name] for part in parts]), value,
                                      err_msg=name)
    np.testing.assert_array_equal(
        np.concatenate([memory_bank.initial_embeddings(dim, 7, *rows).numpy()
                        for rows in ranges]), (2.0 * scale * draws - scale).astype(np.float32))


def test_label_encoding_round_trip():
    labels = label_encoding.instance_labels(np.array([0, 3, 9]), C).numpy()
    np.testing.assert_array_equal(labels, [5, 8, 14])
    np.testing.assert_array_equal(label_encoding.is_class([0, 4, 5, 14], C).numpy(),
                                  [True, True, False, False])


@pytest.mark.parametrize("kwargs,match", [
    (dict(labelled_index=[0, 0], labelled_classes=[1, 1]), "duplicate"),
    (dict(labelled_index=[0, N], labelled_classes=[1, 1]), r"\[0, 40\)"),
    (dict(labelled_index=[0, -1], labelled_classes=[1, 1]), r"\[0, 40\)"),
    (dict(labelled_index=[0, 1], labelled_classes=[1, C]), r"\[0, 5\)"),
    (dict(labelled_index=[0, 1], labelled_classes=[1]), "one class per"),
])
def test_bad_split_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MemoryBank(N, D, C, **kwargs)


def test_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="positive"):
        MemoryBank(0, D, C, [], [])
    with pytest.raises(ValueError, match="momentum"):
        MemoryBank(N, D, C, [0], [0], momentum=1.0)


def _replica_copies(variable):
    return [v.numpy() for v in variable.values]


def test_two_replica_update_is_identical_everywhere_and_equals_one_device(two_replica_strategy):
    strategy = two_replica_strategy
    rng = np.random.default_rng(3)
    indices = np.array([3, 30, 17, 0, 2, 9, 11, 39])  # 30, 2, 11 are labelled
    embeddings = reference.unit_rows(rng, 8, D)
    classes = rng.integers(0, C, 8)
    confidence = rng.uniform(0.1, 1.0, 8).astype(np.float32)

    single = _bank(seed=5)
    single.update(BankWrite(indices, embeddings, classes, confidence))

    with strategy.scope():
        mirrored = _bank(seed=5)

    def halves(array):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(np.split(array, 2)[ctx.replica_id_in_sync_group]))

    @tf.function
    def step(i, e, c, p):
        strategy.run(lambda *args: mirrored.update(BankWrite(*args)), args=(i, e, c, p))

    step(halves(indices), halves(embeddings), halves(classes), halves(confidence))

    for name in ("embeddings", "labels", "confidence"):
        first, second = _replica_copies(getattr(mirrored, name))
        np.testing.assert_array_equal(first, second, err_msg=name)
        np.testing.assert_allclose(first, getattr(single, name).numpy(), atol=1e-6,
                                   err_msg=name)
    # And the result is the equation's, not just self-consistent.
    want = _numpy_update(_bank(seed=5).embeddings.numpy(), indices, embeddings)
    np.testing.assert_allclose(_replica_copies(mirrored.embeddings)[0], want, atol=1e-6)


def test_cross_replica_update_and_density_reach_every_copy(two_replica_strategy):
    strategy = two_replica_strategy
    with strategy.scope():
        bank = _bank(seed=6)
    embeddings = reference.unit_rows(np.random.default_rng(4), 3, D)
    bank.update(BankWrite([4, 5, 6], embeddings, [1, 2, 3], [0.5, 0.6, 0.7]))
    bank.refresh_density(t=3, temperature=0.07)
    for name in ("embeddings", "labels", "confidence", "density"):
        first, second = _replica_copies(getattr(bank, name))
        np.testing.assert_array_equal(first, second, err_msg=name)
    np.testing.assert_array_equal(_replica_copies(bank.labels)[1][4:7], [1, 2, 3])
    rows = _replica_copies(bank.embeddings)[1]
    # Rows of 8 floats over tau = 0.07: log rho within 1e-5 (tests/core/test_bank_contract.py).
    np.testing.assert_allclose(
        np.log(_replica_copies(bank.density)[1]),
        np.log(reference.local_density(rows[np.sort(LABELLED_INDEX)], rows, 3, 0.07)),
        atol=2e-5, rtol=0)

