"""LLP with ``--shard_bank`` against the replicated bank, on 2 and 4 logical CPU replicas:
each step, every weight, bank row, confidence and log density within `BOUND`, labels equal;
checkpoints resume at another replica count, sharded or not.

BOUND: the runs differ only in the order of float32 sums (the loss's shards combined after
their blocks, the merged top-K candidates); over a few steps of a tiny model with
lr 0.05 that moves weights by about 1e-6, far below 1e-4, while a wrong merge moves the
loss, its gradient and so every weight by a share of the step (1e-2 or more here)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf import MemoryBank
from llp_tf.core import sharded_bank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from llp_tf.errors import ConfigError
from llp_tf.models.factory import build_model
from llp_tf.training.methods import LLPMethod, StepRunner
from llp_tf.training.methods.llp import LLPSettings, refuse_sharding_across_workers
from tests.training.test_methods import B, C, D, LABELLED, LABELLED_CLASSES, N, SIZE, _data, \
    _iterator, _values

BOUND = 1e-4
STATE = ("embeddings", "labels", "confidence", "density")


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


def _state(method):
    """Weights and bank state as numpy arrays, by name."""
    state = {f"weight {w.path}": _values(w)[0] for w in method.model.weights}
    state.update({name: _values(getattr(method.bank, name))[0] for name in STATE})
    # rho is about exp(T / tau) ~ 1e6 here: compared in log space, as computed.
    state["density"] = np.log(state["density"])
    return state


def _assert_equal_state(want, got, when):
    for name in want:
        if name == "labels":
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}, {when}")
        else:
            np.testing.assert_allclose(got[name], want[name], atol=BOUND, rtol=0,
                                       err_msg=f"{name}, {when}")


def _lockstep(want, got, data, llp_steps=3):
    """A warm-up step, the density refresh and ``llp_steps`` LLP steps of both methods on the
    same global batches, their states compared after each."""
    runners = [(StepRunner(m), _iterator(m.strategy, data)) for m in (want, got)]
    for runner, iterator in runners:
        runner.run(iterator, 1, "warmup")
    _assert_equal_state(_state(want), _state(got), "after the warm-up step")
    for method in (want, got):
        method.before_epoch(1, "llp")
    _assert_equal_state(_state(want), _state(got), "after the density refresh")
    for step in range(llp_steps):
        for runner, iterator in runners:
            runner.run(iterator, 1, "llp")
        _assert_equal_state(_state(want), _state(got), f"after LLP step {step + 1}")


# Four replicas on two cores take minutes: make test-all (CI) runs them.
@pytest.mark.parametrize("replicas", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_sharded_llp_steps_equal_the_replicated_ones(replicas, two_replica_strategy,
                                                     four_replica_strategy):
    strategy = two_replica_strategy if replicas == 2 else four_replica_strategy
    replicated, sharded = _setup(strategy, False), _setup(strategy, True)
    assert [s.stop - s.start for s in sharded.bank.shards] == [N // replicas] * replicas
    before = _state(sharded)
    _lockstep(replicated, sharded, _data())
    after = _state(sharded)
    # The steps changed the state the comparison covers, pseudo labels included.
    assert not np.allclose(after["embeddings"], before["embeddings"], atol=1e-2)
    assert np.any(after["labels"] != before["labels"])
    assert not np.allclose(after["density"], before["density"])


def _without_rescaling(shard_sums):
    row_max = tf.reduce_max(tf.stack([s.row_max for s in shard_sums]), axis=0)
    return type(shard_sums[0])(row_max, tf.add_n([s.total for s in shard_sums]),
                               tf.add_n([s.weighted for s in shard_sums]))


def test_a_merge_without_rescaling_breaks_the_equality(two_replica_strategy, monkeypatch):
    """The comparison above can fail: the shards' loss sums added without rescaling."""
    monkeypatch.setattr(sharded_bank, "combine_shards", _without_rescaling)
    replicated, sharded = _setup(two_replica_strategy, False), _setup(two_replica_strategy, True)
    with pytest.raises(AssertionError, match="after the warm-up step"):
        _lockstep(replicated, sharded, _data())


def _checkpoint(method):
    return tf.train.Checkpoint(model=method.model, optimizer=method.optimizer,
                               **method.checkpoint_items())


@pytest.mark.parametrize("resume", [pytest.param((4, True), marks=pytest.mark.slow),
                                    (1, True), pytest.param((1, False), marks=pytest.mark.slow)],
                         ids=["4 sharded", "1 sharded", "1 replicated"])
def test_a_sharded_checkpoint_of_two_replicas_resumes_at_another_count(
        resume, two_replica_strategy, four_replica_strategy, tmp_path):
    """Two replicas sharded: a warm-up step, the refresh, two LLP steps, a checkpoint; resumed
    with ``resume`` (replicas, sharded) for a third LLP step, against three replicated steps."""
    data = _data()
    replicated = _setup(two_replica_strategy, False)
    written = _setup(two_replica_strategy, True)
    _lockstep(replicated, written, data, llp_steps=2)
    path = _checkpoint(written).save(str(tmp_path / "ckpt"))

    replicas, shard_bank = resume
    strategy = {1: tf.distribute.get_strategy(), 4: four_replica_strategy}[replicas]
    resumed = _setup(strategy, shard_bank)
    _checkpoint(resumed).restore(path).assert_existing_objects_matched()
    _assert_equal_state(_state(written), _state(resumed), "restored")
    assert int(resumed.density_epoch.numpy()) == 1
    # The third LLP step: the fourth global batch, the second of the data (two per pass).
    rest = {name: np.roll(value, -B, axis=0) for name, value in data.items()}
    StepRunner(replicated).run(_iterator(two_replica_strategy, rest), 1, "llp")
    StepRunner(resumed).run(_iterator(strategy, rest), 1, "llp")
    _assert_equal_state(_state(replicated), _state(resumed), "after the resumed step")


def test_a_replicated_checkpoint_restores_into_a_sharded_bank(two_replica_strategy, tmp_path):
    replicated = _setup(tf.distribute.get_strategy(), False)
    replicated.bank.embeddings.assign(-replicated.bank.embeddings)
    replicated.bank.labels.assign(tf.range(N, dtype=tf.int64) % C)
    path = _checkpoint(replicated).save(str(tmp_path / "ckpt"))
    sharded = _setup(two_replica_strategy, True)
    _checkpoint(sharded).restore(path).assert_existing_objects_matched()
    _assert_equal_state(_state(replicated), _state(sharded), "restored")


def test_a_bank_of_another_size_is_refused(tmp_path):
    small = ShardedMemoryBank(tf.distribute.get_strategy(), N - 1, D, C, LABELLED,
                              LABELLED_CLASSES)
    path = tf.train.Checkpoint(bank=_setup(tf.distribute.get_strategy(), True).bank).save(
        str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="31"):
        tf.train.Checkpoint(bank=small).restore(path)


def test_sharding_is_refused_across_workers():
    # isinstance is all the refusal reads; a real cluster needs processes of its own.
    strategy = object.__new__(tf.distribute.MultiWorkerMirroredStrategy)
    with pytest.raises(ConfigError, match="--shard_bank.*one machine"):
        refuse_sharding_across_workers(strategy)
    refuse_sharding_across_workers(tf.distribute.get_strategy())


def test_a_sharded_run_trains_evaluates_and_loads_as_a_replicated_one(
        tmp_path, stripes, two_replica_strategy):
    """`run_training` end to end with --shard_bank on two replicas; the run's checkpoint is
    read by `run_loader` into a replicated `MemoryBank`."""
    import io

    from llp_tf.after_training import run_loader
    from llp_tf.training import run_training
    from tests.runs import tiny_config
    config = tiny_config(tmp_path, stripes, cpu_replicas=2, sync_batch_norm=True,
                         shard_bank=True)
    final = run_training(config, io.StringIO())
    assert np.isfinite(final["loss"]) and 0 <= final["val_nn_top1"] <= 1
    run = run_loader.load_run(config.run_dir)
    rows = run.bank.embeddings.numpy()
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert np.all(run.bank.density.numpy() > 1)
