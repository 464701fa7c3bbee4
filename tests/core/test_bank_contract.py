"""The `Bank` contract, run against every bank: the replicated `MemoryBank` on one device and
mirrored over 2 logical CPU replicas, and the `ShardedMemoryBank` over the same 2 replicas.
Each batch method is called as training calls it (one `strategy.run` in a `tf.function`, each
replica its consecutive part of the batch) and its results are compared with float64 numpy
versions of the equations (`tests.reference`) on the bank's own state.

Tolerances come from float32 similarities over tau = 0.07: a dot product of unit vectors in
D = 8 is off by up to about D * 6e-8, so a logit (at most 1 / tau ~ 14) by about 1e-6 to 1e-5;
log-sum-exps and the loss inherit that (2e-5), the gradient takes a further 1 / tau (2e-4),
vote weights a softmax of such scores (1e-4), and an updated row is one normalisation of
numbers at most 1 (1e-6).

A bank of each kind and options is built once per module, its batch methods traced once
(`Case.traced`), and restored to its initial state for each test (tracing is most of these
tests' time)."""

import dataclasses
import os
from typing import Any, Optional

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core import propagation
from llp_tf.core.bank import Bank, BankWrite
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from tests import reference

N, D, C = 13, 8, 3
TAU = 0.07
# Unsorted on purpose; labelled rows in both shards of two ([0, 7) and [7, 13)).
LABELLED = np.array([9, 1, 4, 12, 6])
LABELLED_CLASSES = np.array([2, 0, 1, 1, 0])
KINDS = ("replicated", "mirrored", "sharded")


@dataclasses.dataclass
class Case:
    """A bank and the strategy its batch methods run under (None: no strategy), with its
    traced functions by key (`traced`)."""
    bank: Any
    strategy: Optional[tf.distribute.Strategy]
    functions: dict = dataclasses.field(default_factory=dict)

    def traced(self, key, function):
        """``function`` as a `tf.function` (under ``strategy.run`` when there is a strategy),
        the one made for ``key`` on its first call (None: a new one)."""
        if key is None or key not in self.functions:
            if self.strategy is None:
                traced = tf.function(function)
            else:
                traced = tf.function(lambda *args: self.strategy.run(function, args=args))
            if key is None:
                return traced
            self.functions[key] = traced
        return self.functions[key]


def _make(kind, strategy, momentum=0.5, seed=3):
    split = (N, D, C, LABELLED, LABELLED_CLASSES)
    if kind == "replicated":
        return Case(MemoryBank(*split, momentum=momentum, seed=seed), None)
    if kind == "mirrored":
        with strategy.scope():
            return Case(MemoryBank(*split, momentum=momentum, seed=seed), strategy)
    return Case(ShardedMemoryBank(strategy, *split, momentum=momentum, seed=seed), strategy)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(kind, options) -> (`Case`, its initial state's checkpoint), for the whole module."""
    return {"folder": tmp_path_factory.mktemp("initial_banks")}


@pytest.fixture
def make(kind, two_replica_strategy, built):
    """make(**options) -> a `Case` of this test's kind of bank in its initial state: built
    once per module for each kind and options, its traced functions kept."""
    def fresh(**options):
        key = (kind, tuple(sorted(options.items())))
        if key not in built:
            case = _make(kind, two_replica_strategy, **options)
            path = tf.train.Checkpoint(bank=case.bank).write(
                os.path.join(str(built["folder"]), f"initial-{len(built)}"))
            built[key] = case, path
        case, path = built[key]
        tf.train.Checkpoint(bank=case.bank).read(path).assert_existing_objects_matched()
        return case
    return fresh


def _run(case, function, *arrays, key=None):
    """``function``'s results (numpy) on the batch ``arrays`` (axis 0 the batch): called once
    outside a strategy, or by each replica on its consecutive part, the parts concatenated;
    traced once for ``key`` (`Case.traced`)."""
    traced = case.traced(key, function)
    if case.strategy is None:
        results = traced(*(tf.constant(a) for a in arrays))
        return None if results is None else tf.nest.map_structure(lambda t: t.numpy(), results)
    strategy = case.strategy
    replicas = strategy.num_replicas_in_sync
    parts = [np.array_split(a, replicas) for a in arrays]
    per_replica = [strategy.experimental_distribute_values_from_function(
        lambda context, p=p: tf.constant(p[context.replica_id_in_sync_group])) for p in parts]
    results = traced(*per_replica)
    return None if results is None else tf.nest.map_structure(
        lambda t: np.concatenate([r.numpy() for r in strategy.experimental_local_results(t)]),
        results)


def _write(case, *arrays):
    """``case.bank.update`` of the `BankWrite` of (indices, embeddings[, classes,
    confidence])."""
    _run(case, lambda *args: case.bank.update(BankWrite(*args)), *arrays, key="update")


def _state(bank):
    """The bank's state views as numpy arrays, by name."""
    return {name: np.asarray(getattr(bank, name).numpy())
            for name in ("embeddings", "labels", "confidence", "density", "is_labelled",
                         "labelled_index")}


def _pseudo_labelled(case, seed=0):
    """``case`` after an update of 8 rows (3 labelled) with pseudo labels: (indices,
    embeddings, classes, confidence) of that batch, the state before it."""
    rng = np.random.default_rng(seed)
    indices = np.array([0, 1, 5, 9, 3, 12, 8, 11], np.int64)
    batch = (indices, reference.unit_rows(rng, 8, D), rng.integers(0, C, 8).astype(np.int64),
             rng.uniform(0.1, 0.9, 8).astype(np.float32))
    before = _state(case.bank)
    _write(case, *batch)
    return batch, before


def test_initial_state(make):
    case = make(seed=7)
    assert isinstance(case.bank, Bank)
    assert (case.bank.num_examples, case.bank.dim, case.bank.num_classes,
            case.bank.num_labelled, case.bank.momentum) == (N, D, C, 5, 0.5)
    state = _state(case.bank)
    scale = 1.0 / np.sqrt(D / 3.0)
    draws = np.random.default_rng(7).random((N, D), dtype=np.float32).astype(np.float64)
    np.testing.assert_array_equal(state["embeddings"],
                                  (2.0 * scale * draws - scale).astype(np.float32))
    labels = C + np.arange(N)
    labels[LABELLED] = LABELLED_CLASSES
    np.testing.assert_array_equal(state["labels"], labels)
    np.testing.assert_array_equal(state["labelled_index"], np.sort(LABELLED))
    np.testing.assert_array_equal(state["is_labelled"], np.isin(np.arange(N), LABELLED))
    np.testing.assert_array_equal(state["confidence"], np.ones(N))
    np.testing.assert_array_equal(state["density"], np.ones(5))
    assert state["embeddings"].dtype == np.float32 and state["labels"].dtype == np.int64


# make test keeps a replacing write (0) and a moving one (0.5); 0.9 runs the same code.
@pytest.mark.parametrize("momentum", [0.5, 0.0, pytest.param(0.9, marks=pytest.mark.slow)])
def test_update_against_float64(make, momentum):
    case = make(momentum=momentum)
    (indices, embeddings, classes, confidence), before = _pseudo_labelled(case)
    after = _state(case.bank)
    rows = before["embeddings"].astype(np.float64)
    moved = momentum * rows[indices] + (1 - momentum) * embeddings
    rows[indices] = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    np.testing.assert_allclose(after["embeddings"], rows, atol=1e-6, rtol=0)
    labelled = np.isin(indices, LABELLED)
    want_labels, want_confidence = before["labels"].copy(), before["confidence"].copy()
    want_labels[indices] = np.where(labelled, before["labels"][indices], classes)
    want_confidence[indices] = np.where(labelled, 1.0, confidence)
    np.testing.assert_array_equal(after["labels"], want_labels)
    np.testing.assert_array_equal(after["confidence"], want_confidence)
    untouched = np.setdiff1d(np.arange(N), indices)
    np.testing.assert_array_equal(after["embeddings"][untouched],
                                  before["embeddings"][untouched])
    for name in ("density", "is_labelled", "labelled_index"):
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def test_an_update_without_classes_keeps_labels(make):
    case = make()
    before = _state(case.bank)
    indices = np.array([2, 7, 10, 4], np.int64)
    _write(case, indices, reference.unit_rows(np.random.default_rng(1), 4, D))
    after = _state(case.bank)
    assert not np.allclose(after["embeddings"][indices], before["embeddings"][indices])
    np.testing.assert_array_equal(after["labels"], before["labels"])
    np.testing.assert_array_equal(after["confidence"], before["confidence"])


def test_update_requires_classes_and_confidence_together(make):
    case = make()
    with pytest.raises(ValueError, match="both"):
        _run(case, lambda i, e, c: case.bank.update(BankWrite(i, e, classes=c)), np.arange(2),
             np.zeros((2, D), np.float32), np.zeros(2, np.int64))


def test_read_gives_the_rows_labels_and_confidences(make):
    case = make()
    _pseudo_labelled(case)
    state = _state(case.bank)
    indices = np.array([12, 0, 9, 5, 6, 3], np.int64)
    labels, confidence = _run(case, case.bank.read, indices, key="read")
    assert labels.dtype == np.int64 and confidence.dtype == np.float32
    np.testing.assert_array_equal(labels, state["labels"][indices])
    np.testing.assert_array_equal(confidence, state["confidence"][indices])


@pytest.mark.parametrize("block_rows", [N, 4])
def test_held_blocks_read_the_written_state_block_by_block(make, block_rows):
    """After a write, blocks of 4 rows (across the shards' edge at row 7) and one block of N
    give each state array's rows."""
    case = make()
    _pseudo_labelled(case)
    state = _state(case.bank)
    names = ("embeddings", "labels", "confidence", "is_labelled")
    blocks = list(case.bank.held_blocks(names, block_rows))
    assert [first for first, _ in blocks] == list(range(0, N, block_rows))
    for name in names:
        joined = np.concatenate([rows[name] for _, rows in blocks])
        assert joined.dtype == state[name].dtype
        np.testing.assert_array_equal(joined, state[name], err_msg=name)
    np.testing.assert_array_equal(case.bank.read_rows(["labels"], 5, 9)["labels"],
                                  state["labels"][5:9])


def test_nearest_rows_against_float64_with_ties_to_the_lowest_row(make):
    # momentum 0: rows 2 and 11 (one in each shard of two) become the same unit vector.
    case = make(momentum=0.0)
    rng = np.random.default_rng(4)
    twin = reference.unit_rows(rng, 1, D)
    _write(case, np.array([2, 11]), np.concatenate([twin, twin]))
    rows = _state(case.bank)["embeddings"]
    np.testing.assert_array_equal(rows[2], rows[11])
    queries = np.concatenate([twin, twin, rng.normal(size=(6, D))]).astype(np.float32)
    got = _run(case, case.bank.nearest_rows, queries, key="nearest_rows")
    want = np.argmax(queries.astype(np.float64) @ rows.astype(np.float64).T, axis=1)
    assert want[0] == want[1] == 2 and got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def _loss_and_gradient(bank, instance_labels):
    def function(embeddings, labels):
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            loss = bank.aggregation_loss(embeddings, labels, TAU,
                                         instance_labels=instance_labels)
            total = tf.reduce_sum(loss)
        return loss, tape.gradient(total, embeddings)
    return function


@pytest.mark.parametrize("instance_labels", [False, True])
def test_aggregation_loss_and_gradient_against_float64(make, instance_labels):
    case = make()
    (indices, embeddings, _, _), _ = _pseudo_labelled(case)
    state = _state(case.bank)
    row_labels = C + np.arange(N) if instance_labels else state["labels"]
    # The batch's own rows' labels, as a step reads them.
    labels = row_labels[indices]
    loss, gradient = _run(case, _loss_and_gradient(case.bank, instance_labels), embeddings,
                          labels, key=("aggregation_loss", instance_labels))
    assert loss.dtype == np.float32 and loss.shape == (8,)
    np.testing.assert_allclose(
        loss, reference.aggregation_loss(embeddings, state["embeddings"], row_labels, labels,
                                         TAU), atol=2e-5, rtol=0)
    np.testing.assert_allclose(
        gradient, reference.aggregation_loss_gradient(embeddings, state["embeddings"],
                                                      row_labels, labels, TAU),
        atol=2e-4, rtol=0)


def _refreshed(case, t=4, chunk_size=2, temperature=TAU, **normalisation):
    """``case`` after `Bank.refresh_density` in cross-replica context, as LLP calls it (traced
    once per case, settings and score budget)."""
    key = ("refresh_density", t, chunk_size, temperature, tuple(normalisation.items()),
           propagation.DENSITY_SCORE_BYTES)
    if key not in case.functions:
        case.functions[key] = tf.function(lambda: case.bank.refresh_density(
            t=t, temperature=temperature, chunk_size=chunk_size, **normalisation))
    case.functions[key]()
    return case


# make test keeps each t, normalisation and temperature once (t < N at tau = 0.5: rho < 1).
@pytest.mark.parametrize("t,normalisation,temperature", [
    (4, "release", TAU), pytest.param(50, "release", TAU, marks=pytest.mark.slow),
    pytest.param(4, "paper", TAU, marks=pytest.mark.slow), (50, "paper", TAU),
    (4, "paper", 0.5), pytest.param(50, "paper", 0.5, marks=pytest.mark.slow)])
def test_refresh_density_against_float64(make, t, normalisation, temperature):
    """Chunks of 2 queries (one per replica when sharded); t = 50 > N takes every row. The
    paper's Z sums every row: over two shards, each shard's logsumexp combined. Its log rho
    subtracts two log-sum-exps, each within 2e-5: 4e-5. At tau = 0.07 the 4 nearest of 13
    rows hold nearly all of Z (rho within 1e-5 of 1 for most rows); at tau = 0.5 they do not."""
    case = make()
    _pseudo_labelled(case)
    state = _state(_refreshed(case, t=t, temperature=temperature,
                              normalisation=normalisation).bank)
    rows = state["embeddings"]
    want = reference.local_density(rows[state["labelled_index"]], rows, t, temperature,
                                   normalisation)
    assert state["density"].dtype == np.float32
    atol = 4e-5 if normalisation == "paper" else 2e-5
    np.testing.assert_allclose(np.log(state["density"]), np.log(want), atol=atol, rtol=0)
    if temperature == 0.5 and t < N:  # rho well below 1: Z is not a constant
        assert np.all(np.log(want) < -0.1)


@pytest.mark.parametrize("normalisation", ["release", "paper"])
def test_a_refresh_whose_scores_fit_32_bytes_searches_4_rows_at_a_time(make, normalisation,
                                                                     monkeypatch):
    """A budget of 32 bytes of scores for chunks of 2 queries: blocks of 4 rows (t = 4), so
    the 13 rows of one bank are searched in 3 blocks and a tail of 1 (the shards, of 7 and
    6 rows, whole); the same float64 reference and tolerances as above."""
    monkeypatch.setattr(propagation, "DENSITY_SCORE_BYTES", 32)
    assert propagation.score_block_rows(2, 4) == 4
    case = make()
    _pseudo_labelled(case)
    state = _state(_refreshed(case, t=4, temperature=TAU, normalisation=normalisation).bank)
    rows = state["embeddings"]
    want = reference.local_density(rows[state["labelled_index"]], rows, 4, TAU, normalisation)
    atol = 4e-5 if normalisation == "paper" else 2e-5
    np.testing.assert_allclose(np.log(state["density"]), np.log(want), atol=atol, rtol=0)


def test_the_default_refresh_is_the_releases_bit_for_bit(make):
    """No normalisation given: the raw sum every earlier run computed (eq. 7 as released)."""
    default = make()
    _pseudo_labelled(default)
    density = _state(_refreshed(default).bank)["density"]
    release = make()  # the same bank, back in its initial state
    _pseudo_labelled(release)
    _refreshed(release, normalisation="release")
    np.testing.assert_array_equal(density, _state(release.bank)["density"])


# make test keeps each k and each weighting once.
@pytest.mark.parametrize("k,local_weights", [
    (3, True), pytest.param(3, False, marks=pytest.mark.slow),
    pytest.param(10, True, marks=pytest.mark.slow), (10, False)])
def test_propagate_against_float64(make, local_weights, k):
    """Eq. 7-8 with the refreshed densities, or eq. 5-6; k = 10 > M: every labelled row."""
    case = _refreshed(make())
    _pseudo_labelled(case)
    state = _state(case.bank)
    labelled = state["labelled_index"]
    assert not np.allclose(state["density"], 1.0)
    embeddings = reference.unit_rows(np.random.default_rng(6), 10, D)
    classes, confidence = _run(
        case, lambda e: case.bank.propagate(e, k=k, temperature=TAU,
                                            local_weights=local_weights), embeddings,
        key=("propagate", k, local_weights))
    want_classes, want_confidence, _ = reference.propagate(
        embeddings, state["embeddings"][labelled], state["labels"][labelled], C, k, TAU,
        state["density"] if local_weights else None)
    assert classes.dtype == np.int64 and confidence.dtype == np.float32
    np.testing.assert_array_equal(classes, want_classes)
    np.testing.assert_allclose(confidence, want_confidence, atol=1e-4, rtol=0)


def test_the_local_weights_change_the_vote():
    """The densities above matter: on this state a vote with them differs from one without
    (else the local_weights cases could not tell the two apart)."""
    case = _refreshed(_make("replicated", None))
    _pseudo_labelled(case)
    state = _state(case.bank)
    labelled = state["labelled_index"]
    embeddings = reference.unit_rows(np.random.default_rng(6), 10, D)
    weighted, plain = (reference.propagate(embeddings, state["embeddings"][labelled],
                                           state["labels"][labelled], C, 3, TAU, density)[1]
                       for density in (state["density"], None))
    assert not np.allclose(weighted, plain, atol=1e-3)


@pytest.mark.parametrize("target", KINDS)
def test_a_checkpoint_restores_into_every_kind_of_bank(make, target, two_replica_strategy,
                                                       tmp_path):
    """The state is saved under the same names: a bank restores another kind's, and the warm
    start's partial checkpoint (the embeddings alone) reads it too."""
    written = _refreshed(make())
    _pseudo_labelled(written)
    path = tf.train.Checkpoint(bank=written.bank).save(str(tmp_path / "ckpt"))
    want = _state(written.bank)

    restored = _make(target, two_replica_strategy, seed=9)
    assert not np.array_equal(_state(restored.bank)["embeddings"], want["embeddings"])
    tf.train.Checkpoint(bank=restored.bank).restore(path).assert_existing_objects_matched()
    for name, value in _state(restored.bank).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)

    warm = _make(target, two_replica_strategy, seed=9)
    embeddings = warm.bank.checkpoint_states()["embeddings"]
    tf.train.Checkpoint(bank=tf.train.Checkpoint(embeddings=embeddings)).restore(
        path).expect_partial().assert_existing_objects_matched()
    np.testing.assert_array_equal(_state(warm.bank)["embeddings"], want["embeddings"])
    np.testing.assert_array_equal(_state(warm.bank)["labels"],
                                  _state(_make(target, two_replica_strategy).bank)["labels"])
