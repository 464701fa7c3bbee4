"""The bank's storage dtype (`bank_dtype`, ``--bank_dtype``): a bfloat16 or float16 bank
computes in float32 on its stored rows and rounds what it writes; from the same state, its
loss, gradient, votes and densities stay within the bound its rounding allows of a float32
bank's; sharded it equals the replicated one; and the default float32 bank's graphs hold no
op of a half dtype.

The bound. A unit row r stored at unit roundoff u (2^-8 for bfloat16, 2^-11 for float16) is
r~ with |r~_j - r_j| <= u |r_j|, so for a unit query v, |r~ . v - r . v| <= u ||r|| ||v|| = u
(Cauchy-Schwarz): every logit r . v / tau moves by at most delta = u / tau (0.056 for bfloat16
at tau = 0.07). Then:

- the aggregation loss, lse(all logits) - lse(same-label logits), each lse 1-Lipschitz in the
  largest logit change: |dL| <= 2 delta;
- a softmax weight p_i = e^(l_i) / Z moves by a factor within e^(+-2 delta), so the weights
  move by at most e^(2 delta) - 1 in l1; the gradient (sum p_i r_i - sum q_i r_i) / tau moves
  by at most 2 ((e^(2 delta) - 1)(1 + u) + u) / tau in norm;
- a vote over the same voters (k >= M: every labelled row) gives each class a weight within
  e^(+-2 delta) of its own: the confidence moves by at most e^(2 delta) - 1, and the class is
  kept wherever the winner's weight exceeds the runner-up's by e^(4 delta);
- log rho (eq. 7), the lse of the T largest of a labelled row's similarities over tau, both
  sides rounded: |r~_a . r~_b - r_a . r_b| <= 2u + u^2, and the lse of the T largest is
  1-Lipschitz too: |d log rho| <= (2u + u^2) / tau.

Each comparison adds the float32 slack of the computation itself (`FLOAT32_SLACK`)."""

import math

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from llp_tf.core import bank_dtype
from llp_tf.core.bank import BankWrite
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from tests import reference
from tests.core.test_bank_contract import Case, _run

TAU = 0.07
#: Unit roundoff of each half dtype (8 and 11 significant bits), and its numpy type.
ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
NUMPY = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
#: The float32 computation's own error in a loss or log density over 20,000 rows of 16
#: (test_bank_contract's 2e-5 at 13 rows, with room for the longer sums), and in a gradient
#: (a further 1 / tau) or a vote weight.
FLOAT32_SLACK = {"loss": 1e-4, "gradient": 2e-3, "weight": 1e-4}
N, D, C = 20_000, 16, 10
LABELLED = np.arange(0, N, 10)


def _clustered_state(seed=0):
    """(unit rows float32 [N, D] around C centres, labels int64 [N]: the labelled rows' class,
    half the others a pseudo class, the rest their instance id)."""
    rng = np.random.default_rng(seed)
    centres = reference.unit_rows(rng, C, D, np.float64)
    classes = rng.integers(0, C, N)
    rows = centres[classes] + 0.6 * rng.standard_normal((N, D)) / math.sqrt(D)
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    labels = np.where(rng.uniform(size=N) < 0.5, classes, C + np.arange(N))
    labels[LABELLED] = classes[LABELLED]
    return rows, labels.astype(np.int64)


def _bank(dtype, rows, labels):
    """A `MemoryBank` of ``dtype`` holding ``rows`` (rounded to nearest) and ``labels``."""
    bank = MemoryBank(N, D, C, LABELLED, labels[LABELLED], embedding_dtype=dtype)
    bank.embeddings.assign(tf.cast(rows, bank.embedding_dtype))
    bank.labels.assign(labels)
    bank.density.assign(np.random.default_rng(1).uniform(1.0, 3.0, LABELLED.size))
    return bank


def _batch(rows, labels, seed=2):
    """16 unit queries near bank rows, with those rows' labels."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(N, 16, replace=False)
    queries = rows[chosen] + 0.2 * rng.standard_normal((16, D)) / math.sqrt(D)
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    return queries, labels[chosen]


def _loss_and_gradient(bank, queries, labels):
    queries = tf.constant(queries)
    with tf.GradientTape() as tape:
        tape.watch(queries)
        loss = bank.aggregation_loss(queries, labels, TAU)
    return loss.numpy(), tape.gradient(loss, queries).numpy()


def _stored_rows(bank):
    return bank.read_rows(["embeddings"], 0, bank.num_examples)["embeddings"]


def test_a_dtype_outside_the_choices_is_a_clear_error():
    assert bank_dtype.storage_dtype("bfloat16") == tf.bfloat16
    assert bank_dtype.storage_dtype(tf.float16) == tf.float16
    with pytest.raises(ValueError, match="one of float32, bfloat16, float16; got 'float64'"):
        MemoryBank(4, 2, 2, [0], [1], embedding_dtype="float64")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_bank_stores_half_and_reads_float32(dtype):
    rows, labels = _clustered_state()
    bank = _bank(dtype, rows, labels)
    assert bank.embeddings.dtype == bank.embedding_dtype == getattr(tf, dtype)
    stored = _stored_rows(bank)
    assert stored.dtype == np.float32
    np.testing.assert_array_equal(stored, rows.astype(NUMPY[dtype]).astype(np.float32))


@pytest.mark.parametrize("kind", ["replicated", "sharded"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_update_is_the_float64_update_rounded_to_nearest(dtype, kind, two_replica_strategy):
    """Each written element is the float64 normalise(m old + (1 - m) v) rounded to the
    dtype: within u of it relatively (plus float32's 1e-6), and equal to its rounding but
    where the float32 result and the float64 one straddle a rounding boundary (rare)."""
    split = (13, 8, 3, [1, 4, 9], [0, 1, 2])
    if kind == "replicated":
        case = Case(MemoryBank(*split, seed=3, embedding_dtype=dtype), None)
    else:
        case = Case(ShardedMemoryBank(two_replica_strategy, *split, seed=3,
                                      embedding_dtype=dtype), two_replica_strategy)
    before = _stored_rows(case.bank)
    indices = np.array([0, 1, 5, 9, 3, 12, 8, 11], np.int64)
    embeddings = reference.unit_rows(np.random.default_rng(0), 8, 8)
    _run(case, lambda i, e: case.bank.update(BankWrite(i, e)), indices, embeddings)
    after = _stored_rows(case.bank)
    moved = 0.5 * before[indices].astype(np.float64) + 0.5 * embeddings
    exact = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    got = after[indices]
    assert np.all(np.abs(got - exact) <= ROUNDOFF[dtype] * np.abs(exact) + 1e-6)
    assert np.mean(got == exact.astype(NUMPY[dtype]).astype(np.float32)) >= 0.95
    untouched = np.setdiff1d(np.arange(13), indices)
    np.testing.assert_array_equal(after[untouched], before[untouched])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_loss_is_float32_on_the_stored_rows_and_within_the_rounding_bound(dtype):
    rows, labels = _clustered_state()
    half, full = _bank(dtype, rows, labels), _bank("float32", rows, labels)
    queries, batch_labels = _batch(rows, labels)
    loss, gradient = _loss_and_gradient(half, queries, batch_labels)
    full_loss, full_gradient = _loss_and_gradient(full, queries, batch_labels)
    stored = _stored_rows(half)
    # The computation: float32 on the stored rows (over 20,000 rows: several blocks).
    np.testing.assert_allclose(
        loss, reference.aggregation_loss(queries, stored, labels, batch_labels, TAU),
        atol=FLOAT32_SLACK["loss"], rtol=0)
    np.testing.assert_allclose(
        gradient, reference.aggregation_loss_gradient(queries, stored, labels, batch_labels,
                                                      TAU),
        atol=FLOAT32_SLACK["gradient"], rtol=0)
    # The storage: within the bound of the module docstring of the float32 bank's.
    u = ROUNDOFF[dtype]
    delta = u / TAU
    assert np.max(np.abs(loss - full_loss)) <= 2 * delta + FLOAT32_SLACK["loss"]
    gradient_bound = 2 * ((math.exp(2 * delta) - 1) * (1 + u) + u) / TAU
    assert np.max(np.linalg.norm(gradient - full_gradient, axis=1)) <= (
        gradient_bound + FLOAT32_SLACK["gradient"])
    assert np.max(np.abs(loss - full_loss)) > 0  # the storage does change something


@pytest.mark.parametrize("local_weights", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_vote_of_every_labelled_row_is_within_the_rounding_bound(dtype, local_weights):
    rows, labels = _clustered_state()
    half, full = _bank(dtype, rows, labels), _bank("float32", rows, labels)
    queries, _ = _batch(rows, labels, seed=3)
    k = LABELLED.size
    got = [tuple(t.numpy() for t in bank.propagate(queries, k=k, temperature=TAU,
                                                   local_weights=local_weights))
           for bank in (half, full)]
    (classes, confidence), (full_classes, full_confidence) = got
    density = full.density.numpy() if local_weights else None
    _, want_confidence, weights = reference.propagate(
        queries, _stored_rows(half)[LABELLED], labels[LABELLED], C, k, TAU, density)
    np.testing.assert_allclose(confidence, want_confidence, atol=FLOAT32_SLACK["weight"],
                               rtol=0)
    delta = ROUNDOFF[dtype] / TAU
    assert np.max(np.abs(confidence - full_confidence)) <= (
        math.exp(2 * delta) - 1 + FLOAT32_SLACK["weight"])
    _, full_weights = reference.propagate(queries, rows[LABELLED], labels[LABELLED], C, k,
                                          TAU, density)[1:]
    ordered = np.sort(full_weights, axis=1)
    clear = ordered[:, -1] > math.exp(4 * delta) * ordered[:, -2] + FLOAT32_SLACK["weight"]
    assert clear.sum() >= 8  # the bound says something about most of the batch
    np.testing.assert_array_equal(classes[clear], full_classes[clear])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_density_refresh_is_within_the_rounding_bound(dtype):
    rows, labels = _clustered_state()
    half, full = _bank(dtype, rows, labels), _bank("float32", rows, labels)
    for bank in (half, full):
        tf.function(lambda bank=bank: bank.refresh_density(t=25, temperature=TAU))()
    stored = _stored_rows(half)
    log_density = np.log(half.density.numpy())
    np.testing.assert_allclose(
        log_density, np.log(reference.local_density(stored[LABELLED], stored, 25, TAU)),
        atol=FLOAT32_SLACK["loss"], rtol=0)
    u = ROUNDOFF[dtype]
    assert np.max(np.abs(log_density - np.log(full.density.numpy()))) <= (
        (2 * u + u * u) / TAU + FLOAT32_SLACK["loss"])


def test_a_sharded_bfloat16_bank_takes_the_replicated_ones_step(two_replica_strategy):
    """From the same initial state, one step (loss and gradient, propagation, update) of the
    bank sharded over 2 replicas and of the replicated one on one device: the same float32
    results up to the order of sums, and the same stored rows but where those straddle a
    rounding boundary (one bfloat16 step apart at most)."""
    split = (13, 8, 3, [1, 4, 9, 12], [0, 1, 2, 0])
    sharded = Case(ShardedMemoryBank(two_replica_strategy, *split, seed=3,
                                     embedding_dtype="bfloat16"), two_replica_strategy)
    replicated = Case(MemoryBank(*split, seed=3, embedding_dtype="bfloat16"), None)
    assert all(shard.embeddings.dtype == tf.bfloat16 for shard in sharded.bank.shards)
    rng = np.random.default_rng(5)
    indices = np.array([0, 1, 5, 9, 3, 12, 8, 11], np.int64)
    embeddings = reference.unit_rows(rng, 8, 8)
    labels = rng.integers(0, 3, 8).astype(np.int64)
    results = []
    for case in (sharded, replicated):
        bank = case.bank

        def step(indices, embeddings, labels, bank=bank):
            with tf.GradientTape() as tape:
                tape.watch(embeddings)
                loss = bank.aggregation_loss(embeddings, labels, TAU)
            classes, confidence = bank.propagate(embeddings, k=3, temperature=TAU)
            bank.update(BankWrite(indices, embeddings, classes, confidence))
            return loss, tape.gradient(loss, embeddings), classes, confidence

        results.append(_run(case, step, indices, embeddings, labels))
    (loss, gradient, classes, confidence), want = results
    np.testing.assert_allclose(loss, want[0], atol=2e-5, rtol=0)
    np.testing.assert_allclose(gradient, want[1], atol=2e-4, rtol=0)
    np.testing.assert_array_equal(classes, want[2])
    np.testing.assert_allclose(confidence, want[3], atol=1e-4, rtol=0)
    got, expected = _stored_rows(sharded.bank), _stored_rows(replicated.bank)
    np.testing.assert_allclose(got, expected, rtol=ROUNDOFF["bfloat16"], atol=0)
    assert np.mean(got == expected) >= 0.95


def _half_dtypes_in_graph(function, *specs):
    """The half dtypes (bfloat16, float16) any op of ``function``'s graph (its loops' bodies
    included) takes or makes."""
    graph = tf.function(function).get_concrete_function(*specs).graph.as_graph_def()
    nodes = list(graph.node) + [node for f in graph.library.function for node in f.node_def]
    half = {types_pb2.DT_BFLOAT16, types_pb2.DT_HALF}
    found = set()
    for node in nodes:
        for value in node.attr.values():
            found |= half & ({value.type} | set(value.list.type))
    return found


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_default_float32_banks_graphs_hold_no_half_op(dtype):
    """At float32 the bank's graphs are those of before the choice (no cast is added, and
    float32 -> float32 casts are none); at bfloat16 the same check finds the casts."""
    bank = MemoryBank(40_000, D, C, LABELLED, np.zeros(LABELLED.size, np.int64),
                      embedding_dtype=dtype)
    assert MemoryBank(4, 2, 2, [0], [1]).embedding_dtype == tf.float32
    queries = tf.TensorSpec([16, D], tf.float32)
    indices, labels = tf.TensorSpec([16], tf.int64), tf.TensorSpec([16], tf.int64)

    def loss_and_gradient(embeddings, labels):
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            loss = bank.aggregation_loss(embeddings, labels, TAU)
        return tape.gradient(loss, embeddings)

    found = [_half_dtypes_in_graph(lambda i, e: bank.update(BankWrite(i, e)), indices, queries),
             _half_dtypes_in_graph(loss_and_gradient, queries, labels),
             _half_dtypes_in_graph(bank.propagate, queries),
             _half_dtypes_in_graph(bank.nearest_rows, queries),
             _half_dtypes_in_graph(bank.refresh_density)]
    if dtype == "float32":
        assert found == [set()] * 5
    else:
        assert all(types_pb2.DT_BFLOAT16 in f for f in found)
