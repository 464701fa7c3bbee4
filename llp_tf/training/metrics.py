"""A run's metrics: the rule of their names, and the per-batch evaluation counts.

Names follow Keras's History: a metric of the validation split starts with ``val_``
(``val_top1``; a second evaluated model after the prefix, ``val_student_top1``), every other
(training terms, bank statistics, ``learning_rate``) has no prefix. Fractions are in [0, 1],
counts are integers, a metric that does not apply is absent. docs/training.md, "Evaluation"."""

import tensorflow as tf

from llp_tf.tensor_types import BoolTensor, FloatTensor, IntTensor

#: The prefix of a metric measured on the validation split.
VALIDATION_PREFIX = "val_"


def validation_name(name: str, model: str = "") -> str:
    """``top1`` -> ``val_top1``, or ``val_student_top1`` for the evaluated ``model`` "student"."""
    return f"{VALIDATION_PREFIX}{model}_{name}" if model else VALIDATION_PREFIX + name


def _masked_sum(hits, mask):
    return tf.reduce_sum(tf.cast(mask, tf.float32) * tf.cast(hits, tf.float32))


def top_k_count(logits: FloatTensor, labels: IntTensor, mask: BoolTensor | FloatTensor,
                k: int) -> FloatTensor:
    """float32 []: real examples whose label is among the ``k`` largest logits.

    Args:
      logits: float32 [B, C]; labels: int [B] in [0, C).
      mask: bool or float [B], 1 for a real example, 0 for padding.
      k: int; more than C counts every example. Top-1 takes the first largest logit, for
        k > 1 a tie at the k-th value is a hit."""
    labels = tf.cast(labels, tf.int64)
    if k == 1:
        hits = tf.equal(tf.argmax(logits, axis=1), labels)
    else:
        hits = tf.math.in_top_k(labels, logits, int(k))
    return _masked_sum(hits, mask)


def cross_entropy_sum(logits: FloatTensor, labels: IntTensor,
                      mask: BoolTensor | FloatTensor) -> FloatTensor:
    """float32 []: the sum over real examples of -log softmax(logits)[label] (as `top_k_count`)."""
    mask = tf.cast(mask, tf.bool)
    # A padding row's label is read as class 0, then masked.
    labels = tf.where(mask, tf.cast(labels, tf.int64), tf.zeros_like(labels, tf.int64))
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))
    return _masked_sum(losses, mask)


def nearest_neighbour_count(nearest: IntTensor, bank_true_labels: IntTensor, labels: IntTensor,
                            mask: BoolTensor | FloatTensor) -> FloatTensor:
    """float32 []: real examples whose nearest bank row has their true class.

    Args:
      nearest: int [B], each example's nearest bank row (`Bank.nearest_rows`).
      bank_true_labels: int64 [N], -1 where unknown; labels: int [B]; mask: as `top_k_count`'s."""
    neighbour_labels = tf.gather(bank_true_labels, nearest)
    return _masked_sum(tf.equal(neighbour_labels, tf.cast(labels, tf.int64)), mask)
