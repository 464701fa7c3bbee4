"""Tiny models and hand-made two-stream batches for the steps of the
pseudo-label and FixMatch methods, before they run from a config."""

import keras
import numpy as np
import tensorflow as tf

from llp_tf.models import precision
from llp_tf.models.factory import build_model

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
    sizes = {"labelled": method.labelled_batch_size,
             "unlabelled": method.unlabelled_batch_size}
    return {stream: {key: value[:sizes[stream]] for key, value in elements.items()}
            for stream, elements in data.items()}


def iterator(method, data):
    """A distributed iterator of nested batches: each stream in its own passes,
    with the method's labelled and unlabelled global batch sizes."""
    strategy = method.strategy
    replicas = strategy.num_replicas_in_sync
    sizes = {"labelled": method.labelled_batch_size,
             "unlabelled": method.unlabelled_batch_size}

    def dataset(context):
        del context
        # Consecutive per-replica batches make up one global batch, as in the pipeline.
        return tf.data.Dataset.zip({
            stream: tf.data.Dataset.from_tensor_slices(data[stream]).repeat().batch(
                sizes[stream] // replicas, drop_remainder=True)
            for stream in data})

    return iter(strategy.distribute_datasets_from_function(
        dataset, tf.distribute.InputOptions(experimental_fetch_to_device=False)))


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
    """Two runs' metrics and final weights are equal: bit for bit (``exact``), or
    to the tolerances of one replica against two (their sums' order differs)."""
    for name in want:
        if exact:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-5,
                                       err_msg=name)
    for a, b in zip(weights(want_method), weights(got_method)):
        if exact:
            np.testing.assert_array_equal(b, a)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=3e-4)


def assert_first_step_agrees(want, got, before, want_method, got_method):
    """One step of two runs from the same weights ``before`` (`weights`) gives
    the same metrics and weights to float32 rounding: one replica against two
    sums in another order (the loss over halves, the gradients and
    synchronised batch-norm moments all-reduced), which changes results by a
    few ulps (measured: metrics <= 3e-7 relative, weights <= 2 ulps).

    Tolerances: metrics 1e-5 relative (~100 float32 ulps). A weight moves by
    its step (first SGD step: -lr * gradient; moving statistics: (1 - m) *
    (moments - old)), so each variable may differ by 1e-4 of its largest step
    (gradients agreeing to 1e-4 of their largest entry, ~1,000 ulps of
    reduction error) plus 2 ulps of its largest value (rounding w + step)."""
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
    for old, a, b in zip(before, weights(want_method), weights(got_method), strict=True):
        step, largest = np.abs(a - old).max(), np.abs(a).max()
        assert step > 0 or np.array_equal(a, b)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * step + 2 * np.spacing(largest))


def assert_mixed_precision_trains(metrics, plain, before, method):
    """A mixed-precision run's ``metrics`` are float32 and finite, its first
    labelled term near the float32 run's (``plain``), and it moved weights
    from ``before``."""
    for name in metrics:
        assert metrics[name].dtype == np.float32 and np.all(np.isfinite(metrics[name]))
    np.testing.assert_allclose(metrics["labelled"][0], plain["labelled"][0], rtol=0.05)
    assert any(not np.array_equal(a, b) for a, b in zip(before, weights(method)))
