"""LLP with ``--shard_bank`` against the replicated bank, on 2 and 4 logical CPU replicas:
each step from the same state, compared per term (metrics, weight moves, bank writes,
densities) to `tests.numerics`' bounds, labels equal; a merge without rescaling exceeds
them; checkpoints resume at another replica count, sharded or not."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf import MemoryBank
from llp_tf.core import sharded_bank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from llp_tf.models.factory import build_model
from llp_tf.training.methods import LLPMethod, StepRunner
from llp_tf.training.methods.llp import LLPSettings
from tests.same_state import FreshMethods, Path, StateCopier
from tests.training.llp_steps import LLPComparison, bank_state
from tests.training.test_methods import B, C, D, LABELLED, LABELLED_CLASSES, N, SIZE, SUMS, \
    _data, _global_batch, _iterator


def _setup(strategy, shard_bank):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_model("resnet10", C, embedding_dim=D, width=0.125, small_inputs=True,
                            sync_batch_norm=True).create_weights(SIZE)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        if not shard_bank:
            bank = MemoryBank(N, D, C, LABELLED, LABELLED_CLASSES, seed=3)
    if shard_bank:
        bank = ShardedMemoryBank(strategy, N, D, C, LABELLED, LABELLED_CLASSES, seed=3)
    return LLPMethod(strategy, model, optimizer, bank, num_classes=C, global_batch_size=B,
                     weight_decay=1e-4,
                     settings=LLPSettings(temperature=0.07, k=3, t=4, density_chunk_size=3,
                                          warmup_epochs=1, shard_bank=shard_bank))


def _assert_equal_state(want, got, when):
    """Two methods hold the same weights and bank, bit for bit."""
    for a, b in zip(want.model.weights, got.model.weights, strict=True):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=f"{a.path}, {when}")
    for name, value in bank_state(want).items():
        np.testing.assert_array_equal(bank_state(got)[name], value, err_msg=f"{name}, {when}")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """``fresh(strategy, shard_bank)``: that method in its initial state, with its runner,
    built and traced once per module (`tests.same_state.FreshMethods`)."""
    methods = FreshMethods(tmp_path_factory.mktemp("initial"))
    return lambda strategy, shard_bank: methods(
        (strategy.num_replicas_in_sync, shard_bank), lambda: _setup(strategy, shard_bank))


def _comparison(want, got, data, tmp_path):
    """An `LLPComparison` of two (method, runner) pairs, their iterators from ``data``'s start."""
    return LLPComparison(*(Path(m, _iterator(m.strategy, data), runner=r) for m, r in (want, got)),
                         StateCopier(tmp_path), SUMS)


def _steps_from_the_same_state(compare, data):
    """A warm-up step, the density refresh and an LLP step (it reads the refreshed densities
    and writes pseudo labels), each from the reference's state (`LLPComparison`)."""
    compare.step("warmup", _global_batch(data, 0))
    compare.refresh()
    compare.step("llp", _global_batch(data, 1))


# Slow (minutes on two cores: two methods traced over two or four replicas). make test keeps
# its parts: every `Bank` operation of the sharded bank against the replicated one's equations
# over two replicas (tests/core/test_bank_contract.py), the shards' merges
# (tests/core/test_sharded_bank.py), LLP's step, the same for either bank, from the same state
# over one and two replicas (tests/training/test_methods.py), and a sharded method's checkpoint
# read by a replicated one (test_a_sharded_methods_checkpoint_restores_into_one_replica below).
@pytest.mark.slow
@pytest.mark.parametrize("replicas", [2, 4])
def test_sharded_llp_steps_equal_the_replicated_ones(replicas, two_replica_strategy,
                                                     four_replica_strategy, fresh, tmp_path):
    strategy = two_replica_strategy if replicas == 2 else four_replica_strategy
    replicated, sharded = fresh(strategy, False), fresh(strategy, True)
    assert [s.stop - s.start for s in sharded[0].bank.shards] == [N // replicas] * replicas
    before = bank_state(replicated[0])
    _steps_from_the_same_state(_comparison(replicated, sharded, _data(), tmp_path), _data())
    after = bank_state(replicated[0])
    # The steps changed the state the comparison covers, pseudo labels included.
    assert not np.allclose(after["embeddings"], before["embeddings"], atol=1e-2)
    assert np.any(after["labels"] != before["labels"])
    assert not np.allclose(after["density"], before["density"])


def _without_rescaling(shard_sums):
    row_max = tf.reduce_max(tf.stack([s.row_max for s in shard_sums]), axis=0)
    return type(shard_sums[0])(row_max, tf.add_n([s.total for s in shard_sums]),
                               tf.add_n([s.weighted for s in shard_sums]))


# Slow with the comparison it checks; make test keeps the merge's own failing variant
# (tests/core/test_sharded_bank.py's test_a_merge_without_rescaling_is_wrong).
@pytest.mark.slow
def test_a_merge_without_rescaling_breaks_the_equality(two_replica_strategy, monkeypatch,
                                                       fresh, tmp_path):
    """The comparison above can fail: the shards' loss sums added without rescaling move
    the warm-up step's loss past its bound."""
    monkeypatch.setattr(sharded_bank, "combine_shards", _without_rescaling)
    # A new sharded method: the merge is read when its steps are traced.
    sharded = _setup(two_replica_strategy, True)
    compare = _comparison(fresh(two_replica_strategy, False), (sharded, StepRunner(sharded)),
                          _data(), tmp_path)
    with pytest.raises(AssertionError, match="loss: .* more than the bound"):
        compare.step("warmup", _global_batch(_data(), 0))


def _checkpoint(method):
    return tf.train.Checkpoint(model=method.model, optimizer=method.optimizer,
                               **method.checkpoint_items())


# Slow: two replicas' steps traced (minutes on two cores). make test keeps a sharded method's
# checkpoint restored bit for bit into one replica's replicated method (below) and into every
# kind of bank (tests/core/test_bank_contract.py).
@pytest.mark.slow
@pytest.mark.parametrize("resume", [(4, True), (1, True), (1, False)],
                         ids=["4 sharded", "1 sharded", "1 replicated"])
def test_a_sharded_checkpoint_of_two_replicas_resumes_at_another_count(
        resume, two_replica_strategy, four_replica_strategy, fresh, tmp_path):
    """Two replicas sharded: a warm-up step, the refresh, two LLP steps, a checkpoint;
    restored bit for bit with ``resume`` (replicas, sharded), whose next LLP step equals
    the replicated two replicas' from the same state."""
    data = _data()
    written, runner = fresh(two_replica_strategy, True)
    iterator = _iterator(two_replica_strategy, data)
    runner.run(iterator, 1, "warmup")
    written.before_epoch(1, "llp")
    runner.run(iterator, 2, "llp")
    path = _checkpoint(written).save(str(tmp_path / "ckpt"))

    replicas, shard_bank = resume
    strategy = {1: tf.distribute.get_strategy(), 4: four_replica_strategy}[replicas]
    resumed, resumed_runner = fresh(strategy, shard_bank)
    _checkpoint(resumed).restore(path).assert_existing_objects_matched()
    _assert_equal_state(written, resumed, "restored")
    assert int(resumed.density_epoch.numpy()) == 1
    replicated, replicated_runner = fresh(two_replica_strategy, False)
    _checkpoint(replicated).restore(path).assert_existing_objects_matched()
    _assert_equal_state(replicated, resumed, "restored")
    # The third LLP step: the fourth global batch, the second of the data (two per pass).
    rest = {name: np.roll(value, -B, axis=0) for name, value in data.items()}
    compare = _comparison((replicated, replicated_runner), (resumed, resumed_runner), rest,
                          tmp_path)
    compare.step("llp", _global_batch(rest, 0), copy=False)


def test_a_sharded_methods_checkpoint_restores_into_one_replica(two_replica_strategy, tmp_path):
    """A sharded method's whole state over two replicas (model, optimizer, every shard's rows,
    the density epoch), set apart from a new method's, restores bit for bit into one replica's
    replicated method (what run_loader and a resume on one replica read); no step traced."""
    sharded = _setup(two_replica_strategy, True)
    rng = np.random.default_rng(7)
    floats = [v for v in sharded.model.weights + sharded.optimizer.variables
              if "float" in str(v.dtype)]
    for variable in floats:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    sharded.optimizer.iterations.assign(5)
    for shard in sharded.bank.shards:
        rows = shard.stop - shard.start
        shard.embeddings.assign(tf.math.l2_normalize(rng.normal(size=(rows, D)).astype(np.float32),
                                                     axis=1))
        shard.labels.assign(rng.integers(0, C, rows))
        shard.confidence.assign(rng.uniform(0.1, 1.0, rows).astype(np.float32))
        shard.density.assign(rng.uniform(1.5, 9.0, shard.density.shape).astype(np.float32))
    sharded.density_epoch.assign(1)
    path = _checkpoint(sharded).save(str(tmp_path / "ckpt"))
    replicated = _setup(tf.distribute.get_strategy(), False)
    assert not np.array_equal(bank_state(replicated)["density"], bank_state(sharded)["density"])
    _checkpoint(replicated).restore(path).assert_existing_objects_matched()
    _assert_equal_state(sharded, replicated, "restored")
    for want, got in zip(sharded.optimizer.variables, replicated.optimizer.variables,
                         strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=want.path)
    assert int(replicated.optimizer.iterations.numpy()) == 5
    assert int(replicated.density_epoch.numpy()) == 1


def test_a_replicated_checkpoint_restores_into_a_sharded_bank(two_replica_strategy, tmp_path):
    replicated = _setup(tf.distribute.get_strategy(), False)
    replicated.bank.embeddings.assign(-replicated.bank.embeddings)
    replicated.bank.labels.assign(tf.range(N, dtype=tf.int64) % C)
    path = _checkpoint(replicated).save(str(tmp_path / "ckpt"))
    sharded = _setup(two_replica_strategy, True)
    _checkpoint(sharded).restore(path).assert_existing_objects_matched()
    _assert_equal_state(replicated, sharded, "restored")


def test_a_bank_of_another_size_is_refused(tmp_path):
    small = ShardedMemoryBank(tf.distribute.get_strategy(), N - 1, D, C, LABELLED,
                              LABELLED_CLASSES)
    path = tf.train.Checkpoint(bank=_setup(tf.distribute.get_strategy(), True).bank).save(
        str(tmp_path / "ckpt"))
    # TensorFlow's reader refuses the slice of 31 rows of a 32-row key (a run's restore turns it
    # into a ConfigError: llp_tf/training/checkpoints.py).
    with pytest.raises(tf.errors.InvalidArgumentError, match="31"):
        tf.train.Checkpoint(bank=small).restore(path)


# Slow: a whole run on two replicas. make test keeps its parts: the sharded steps
# (test_sharded_llp_steps_equal_the_replicated_ones) and a sharded checkpoint restored into
# one replica's replicated bank (test_a_sharded_checkpoint_of_two_replicas_resumes_...).
@pytest.mark.slow
def test_a_sharded_run_trains_evaluates_and_loads_as_a_replicated_one(
        tmp_path, stripes, two_replica_strategy):
    """`run_training` end to end with --shard_bank on two replicas; the run's checkpoint is
    read back by `run_loader` (its `StoredBank`, whose blocks any layout reads)."""
    import io

    from llp_tf.after_training import run_loader
    from llp_tf.training import run_training
    from tests.runs import tiny_config
    config = tiny_config(tmp_path, stripes, cpu_replicas=2, sync_batch_norm=True,
                         shard_bank=True, epochs=2)
    final = run_training(config, io.StringIO())
    assert np.isfinite(final["loss"]) and 0 <= final["val_nn_top1"] <= 1
    run = run_loader.load_run(config.run_dir)
    rows = run.bank["embeddings"]
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    density = tf.train.load_checkpoint(run.checkpoint).get_tensor(
        "bank/density/.ATTRIBUTES/VARIABLE_VALUE")
    assert np.all(density > 1)
