"""A run's metrics: the one rule of their names and units, and the per-batch
evaluation counts.

Names follow Keras's History (``loss``, ``val_loss``), in the progress and
evaluation lines, ``metrics.jsonl``, TensorBoard, and the probe's and the
comparisons' output alike:

- a metric measured on the validation split starts with ``val_``
  (`VALIDATION_PREFIX`): ``val_top1``, ``val_top5``, ``val_categorisation``
  (the category head's cross-entropy), ``val_nn_top1``, ``val_examples``; a
  second evaluated model puts its name after the prefix (Mean Teacher's
  student: ``val_student_top1``; `validation_name`);
- every other metric has no prefix: the terms of a training step (``loss``,
  ``categorisation``, ``confidence``, ...; a loop's mean in the progress line
  and TensorBoard, the epoch's mean in ``metrics.jsonl``), the statistics of
  the memory bank of training examples (``aggregation_score``,
  ``pseudo_label_accuracy``, ...) and ``learning_rate``;
- TensorBoard shows a metric under its name without ``val_``, in the
  ``validation`` run when it has the prefix and in the ``train`` run when not,
  as Keras's TensorBoard callback does, so a training term and its
  validation counterpart (``categorisation``, ``val_categorisation``) share
  one chart (`llp_tf.training.summaries`).

Units: accuracies, coverages, shares of examples and confidences are
fractions in [0, 1] wherever they are written or printed, tables included;
no tool prints percent. Counts are integers. A metric that does not apply
(the pseudo-label statistics before the first propagation; ``confidence``
over steps whose rows have no class) is absent, never 0. Values are printed
by `llp_tf.training.progress.format_value`: integers as integers,
``learning_rate`` to 6 significant digits, other floats to 4. Rows written
under earlier names are read back under these
(`llp_tf.training.run_directory.RENAMED`).

The per-batch counts: the number of real (unmasked) examples whose label is
the softmax top-1 or among the top-k classes (`top_k_count`), or the true
class of the nearest bank row (`nearest_neighbour_count`), and the sum of
their cross-entropies (`cross_entropy_sum`); evaluation sums them over the
split and divides by the number of real examples. The statistics of the
bank's state are `llp_tf.core.bank_statistics`.
"""

import tensorflow as tf

from llp_tf.core import propagation
from llp_tf.tensor_types import BoolTensor, FloatTensor, IntTensor

#: The prefix of a metric measured on the validation split.
VALIDATION_PREFIX = "val_"


def validation_name(name: str, model: str = "") -> str:
    """The name of the validation metric ``name`` (``top1`` -> ``val_top1``), of
    the evaluated ``model`` when one is named (``val_student_top1``)."""
    return f"{VALIDATION_PREFIX}{model}_{name}" if model else VALIDATION_PREFIX + name


def _masked_sum(hits, mask):
    """float32 []: the sum of ``hits`` over the rows where ``mask`` is set."""
    return tf.reduce_sum(tf.cast(mask, tf.float32) * tf.cast(hits, tf.float32))


def top_k_count(logits: FloatTensor, labels: IntTensor, mask: BoolTensor | FloatTensor,
                k: int) -> FloatTensor:
    """float32 []: real examples whose label is among the ``k`` largest logits.

    Args:
      logits: float32 [B, C].
      labels: int [B] in [0, C).
      mask: bool or float [B]: 1 (True) for a real example, 0 for padding
        (the evaluation input repeats an example to fill its last batch).
      k: int; more than C counts every example (top-5 of fewer classes).

    Ties: top-1 takes the first largest logit (`tf.argmax`), as the
    logged ``val_top1`` always has; for k > 1 a tie at the k-th value counts as
    a hit (`tf.math.in_top_k`).
    """
    labels = tf.cast(labels, tf.int64)
    if k == 1:
        hits = tf.equal(tf.argmax(logits, axis=1), labels)
    else:
        # in_top_k counts the logits larger than the label's, so k >= C
        # needs no cap: every example is a hit.
        hits = tf.math.in_top_k(labels, logits, int(k))
    return _masked_sum(hits, mask)


def cross_entropy_sum(logits: FloatTensor, labels: IntTensor,
                      mask: BoolTensor | FloatTensor) -> FloatTensor:
    """float32 []: the sum over real examples of -log softmax(logits)[label].

    Args: as `top_k_count`'s (logits of any float dtype, taken in float32).
    """
    mask = tf.cast(mask, tf.bool)
    # A padding row's label may be anything: it is read as class 0, then masked.
    labels = tf.where(mask, tf.cast(labels, tf.int64), tf.zeros_like(labels, tf.int64))
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))
    return _masked_sum(losses, mask)


def nearest_neighbour_count(embeddings: FloatTensor, bank: FloatTensor,
                            bank_true_labels: IntTensor, labels: IntTensor,
                            mask: BoolTensor | FloatTensor) -> FloatTensor:
    """float32 []: real examples whose nearest bank row has their true class.

    Args:
      embeddings: float32 [B, D], unit rows.
      bank: float32 [N, D], the bank rows.
      bank_true_labels: int64 [N], the true class of each row (-1 where
        unknown, which matches no label).
      labels: int [B], the examples' classes.
      mask: bool or float [B], as in `top_k_count`.
    """
    _, nearest = propagation.nearest_rows(embeddings, bank, 1)
    neighbour_labels = tf.gather(bank_true_labels, nearest[:, 0])
    return _masked_sum(tf.equal(neighbour_labels, tf.cast(labels, tf.int64)), mask)
