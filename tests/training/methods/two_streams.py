"""Tiny models and hand-made two-stream batches for the steps of the
pseudo-label and FixMatch methods, before they run from a config."""

import keras
import numpy as np
import tensorflow as tf

from llp_tf.models import precision
from llp_tf.models.factory import build_model
from tests import numerics
from tests.replica_batches import replica_iterator

C, SIZE = 4, 8
LABELLED_EXAMPLES, USED_EXAMPLES = 8, 64


def tiny_model(strategy, mixed_precision="float32"):
    """(model, optimizer) of a tiny ResNet, the same weights on every call."""
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_model("resnet10", C, embedding_dim=16, width=0.125, small_inputs=True,
                            sync_batch_norm=True,
                            precision=mixed_precision).create_weights(SIZE)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        optimizer = precision.wrap_optimizer(optimizer, mixed_precision,
                                             model.trainable_variables)
    return model, optimizer


def streams(unlabelled_views=("image",), seed=0):
    """{"labelled": ..., "unlabelled": ...}: numpy arrays of every example of
    each stream, with a view key per element of ``unlabelled_views``. The
    unlabelled stream carries every example's true label (what a careless
    input would pass), so a test can permute them."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(USED_EXAMPLES) % C).astype(np.int64)
    labelled = {"image": rng.normal(size=(LABELLED_EXAMPLES, SIZE, SIZE, 3)).astype(np.float32),
                "label": labels[:LABELLED_EXAMPLES],
                "index": np.arange(LABELLED_EXAMPLES, dtype=np.int64)}
    unlabelled = {view: rng.normal(size=(USED_EXAMPLES, SIZE, SIZE, 3)).astype(np.float32)
                  for view in unlabelled_views}
    unlabelled.update(label=labels, index=rng.permutation(USED_EXAMPLES).astype(np.int64))
    return {"labelled": labelled, "unlabelled": unlabelled}


def permute_unlabelled_labels(data):
    """``data`` with the labels of the unlabelled stream's unlabelled examples shuffled."""
    unlabelled = dict(data["unlabelled"])
    labels = unlabelled["label"].copy()
    rest = np.arange(LABELLED_EXAMPLES, USED_EXAMPLES)
    labels[rest] = np.random.default_rng(5).permutation(labels[rest])
    assert np.any(labels != unlabelled["label"])
    unlabelled["label"] = labels
    return {"labelled": data["labelled"], "unlabelled": unlabelled}


def first_batch(data, method):
    """The first global batch the iterator of ``data`` gives ``method``."""
    return global_batch(data, method, 0)


def global_batch(data, method, step):
    """The global batch of 0-based ``step`` that the iterator of ``data`` gives
    ``method`` (each stream in its own passes)."""
    sizes = {"labelled": method.labelled_batch_size,
             "unlabelled": method.unlabelled_batch_size}
    batch = {}
    for stream, elements in data.items():
        rows = (np.arange(sizes[stream]) + step * sizes[stream]) % len(elements["index"])
        batch[stream] = {key: value[rows] for key, value in elements.items()}
    return batch


def iterator(method, data):
    """A distributed iterator of nested batches: each stream in its own passes,
    with the method's labelled and unlabelled global batch sizes."""
    strategy = method.strategy
    replicas = strategy.num_replicas_in_sync
    sizes = {"labelled": method.labelled_batch_size,
             "unlabelled": method.unlabelled_batch_size}

    # Consecutive per-replica batches make up one global batch, as in the pipeline.
    return replica_iterator(strategy, tf.data.Dataset.zip({
        stream: tf.data.Dataset.from_tensor_slices(data[stream]).repeat().batch(
            sizes[stream] // replicas, drop_remainder=True)
        for stream in data}))


def weights(method):
    """Every weight of the method's model, replica 0's copy, as numpy."""
    result = []
    for variable in method.model.weights:
        values = getattr(variable, "values", None)
        result.append((values[0] if values else variable).numpy())
    return result


def log_softmax(logits):
    """float64 log-softmax of numpy logits [B, C]."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def assert_runs_agree(want, got, want_method, got_method, exact=False):
    """Two runs' metrics and final weights are equal: bit for bit (``exact``), or,
    for one replica against two (their sums' order differs), to `tests.numerics`'
    former multi-step bounds, from `tiny_model`'s weights: kept for
    test_pseudo_label.py until its rewrite; compare one step at a time from the
    same state instead (`tests.same_state`)."""
    if exact:
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        for a, b in zip(weights(want_method), weights(got_method)):
            np.testing.assert_array_equal(b, a)
        return
    steps = len(next(iter(want.values())))
    numerics.assert_close_metrics(want, got, steps)
    start = [w.numpy() for w in tiny_model(tf.distribute.get_strategy())[0].weights]
    numerics.assert_same_moves(start, weights(want_method), weights(got_method), steps)


def assert_mixed_precision_trains(metrics, plain, before, method):
    """A mixed-precision run's ``metrics`` are float32 and finite, its first
    labelled term near the float32 run's (``plain``), and it moved weights
    from ``before``."""
    for name in metrics:
        assert metrics[name].dtype == np.float32 and np.all(np.isfinite(metrics[name]))
    np.testing.assert_allclose(metrics["labelled"][0], plain["labelled"][0], rtol=0.05)
    assert any(not np.array_equal(a, b) for a, b in zip(before, weights(method)))
