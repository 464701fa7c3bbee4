"""The LLP objective (paper eq. 2-4 and 9), the release's weight decay, and the baselines'
masked cross-entropy with hard pseudo labels. Per-example losses are float32 [B]; reductions
divide by the *global* batch size, so replica losses summed under `tf.distribute` give the mean."""

from collections.abc import Iterable

import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding
from llp_tf.tensor_types import FloatTensor, IntTensor


#: Bank rows per block of `aggregation_loss`: its backward pass holds the [B, N] logits
#: plus one block of their gradients (docs/performance.md).
DEFAULT_LOSS_BLOCK_ROWS = 262_144


def aggregation_loss(embeddings: FloatTensor, bank: FloatTensor, bank_labels: IntTensor,
                     labels: IntTensor, temperature: float = hyperparameters.TEMPERATURE,
                     block_rows: int = DEFAULT_LOSS_BLOCK_ROWS) -> FloatTensor:
    """Aggregation loss of eq. 2-4 over the whole bank, float32 [B]:
    ``-log(sum_{i: bank_labels_i = y} exp(bank_i . v / tau) / sum_i exp(bank_i . v / tau))``.

    Exact in float32 (a difference of log-sum-exps); gradients reach ``embeddings`` only. A
    label absent from ``bank_labels`` gives an infinite loss.

    Args:
      embeddings: float32 [B, D], L2-normalised.
      bank: float32 [N, D]; bank_labels: int64 [N], class or instance id of every row.
      labels: int64 [B], the batch's current labels.
      temperature: float, tau; block_rows: int, bank rows per block."""
    embeddings = tf.convert_to_tensor(embeddings, tf.float32)
    bank = tf.stop_gradient(tf.convert_to_tensor(bank, tf.float32))
    bank_labels = tf.cast(bank_labels, tf.int64)
    labels = tf.cast(labels, tf.int64)
    inverse_temperature = 1.0 / float(temperature)
    blocks = _row_blocks(bank.shape[0], block_rows)

    # Hand-written backward pass: the forward keeps the [B, N] logits and three [B] sums.
    @tf.custom_gradient
    def loss_and_gradient(embeddings):
        scaled = embeddings * inverse_temperature
        logits = [tf.matmul(scaled, bank[rows], transpose_b=True) for rows in blocks]
        row_max, total, same_total = _combined_sums(
            [_partition_sums(block, labels, bank_labels[rows])
             for block, rows in zip(logits, blocks)])

        def gradient(upstream):
            result = None
            for block, rows in zip(logits, blocks):
                # One block of logit gradients alive at a time.
                with tf.control_dependencies([] if result is None else [result]):
                    part = tf.matmul(_logits_gradient(block, labels, bank_labels[rows], row_max,
                                                      total, same_total, upstream), bank[rows])
                result = part if result is None else result + part
            return result * inverse_temperature

        return tf.math.log(total) - tf.math.log(same_total), gradient

    return loss_and_gradient(embeddings)


def _row_blocks(num_rows, block_rows):
    if block_rows <= 0:
        raise ValueError(f"block_rows must be positive, got {block_rows}.")
    if num_rows is None or num_rows < 2 * block_rows:
        return [slice(None)]
    return [slice(start, min(start + block_rows, num_rows))
            for start in range(0, num_rows, block_rows)]


def _combined_sums(block_sums):
    """(row_max, total, same_total) of `_partition_sums` over all blocks."""
    if len(block_sums) == 1:
        return block_sums[0]
    row_max = tf.reduce_max(tf.concat([m for m, _, _ in block_sums], axis=1), axis=1,
                            keepdims=True)
    total = tf.add_n([t * tf.exp(m - row_max)[:, 0] for m, t, _ in block_sums])
    same_total = tf.add_n([s * tf.exp(m - row_max)[:, 0] for m, _, s in block_sums])
    return row_max, total, same_total


# XLA fuses each kernel below into one pass; the matmuls stay outside (faster on CPU).
@tf.function(jit_compile=True)
def _partition_sums(logits, labels, bank_labels):
    """row_max [B, 1]; shifted sums of exp(logits) over all and same-label rows, [B] each."""
    row_max = tf.reduce_max(logits, axis=1, keepdims=True)
    shifted = tf.exp(logits - row_max)
    same = tf.equal(labels[:, tf.newaxis], bank_labels[tf.newaxis, :])
    return (row_max, tf.reduce_sum(shifted, axis=1),
            tf.reduce_sum(tf.where(same, shifted, tf.zeros_like(shifted)), axis=1))


@tf.function(jit_compile=True)
def _logits_gradient(logits, labels, bank_labels, row_max, total, same_total, upstream):
    """d(sum upstream * L_A)/dlogits = upstream * (softmax_all - softmax_same), [B, N]."""
    shifted = tf.exp(logits - row_max)
    same = tf.equal(labels[:, tf.newaxis], bank_labels[tf.newaxis, :])
    all_weight = (upstream / total)[:, tf.newaxis]
    same_weight = (upstream / same_total)[:, tf.newaxis]
    return shifted * tf.where(same, all_weight - same_weight, all_weight)


def categorisation_loss(logits: FloatTensor, labels: IntTensor) -> FloatTensor:
    """Cross-entropy of the category head, float32 [B], zero where the label is an instance id.

    Args:
      logits: float [B, C].
      labels: int64 [B], classes in [0, C) or instance ids (>= C)."""
    logits = tf.cast(logits, tf.float32)
    num_classes = tf.shape(logits, out_type=tf.int64)[1]
    labels = tf.cast(labels, tf.int64)
    has_class = label_encoding.is_class(labels, num_classes)
    safe_labels = tf.where(has_class, labels, tf.zeros_like(labels))
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(safe_labels, logits)
    return tf.where(has_class, cross_entropy, tf.zeros_like(cross_entropy))


def pseudo_label_cross_entropy(target_logits: FloatTensor, logits: FloatTensor,
                               threshold: float = 0.0) -> tuple[FloatTensor, FloatTensor]:
    """Cross-entropy of ``logits`` with the hard pseudo labels (argmax) of ``target_logits``.

    Returns (mask * cross-entropy, mask), float32 [B] each; the mask keeps the examples whose
    max probability is at least ``threshold`` (0: all, Lee 2013; FixMatch's tau, Sohn et al.
    2020). No gradient reaches ``target_logits``. Both logits are float [B, C]."""
    probabilities = tf.nn.softmax(tf.stop_gradient(tf.cast(target_logits, tf.float32)))
    pseudo_labels = tf.argmax(probabilities, axis=1)
    mask = tf.cast(tf.reduce_max(probabilities, axis=1) >= threshold, tf.float32)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
        pseudo_labels, tf.cast(logits, tf.float32))
    return mask * cross_entropy, mask


def pseudo_label_terms(labelled_logits: FloatTensor, labels: IntTensor,
                       target_logits: FloatTensor, logits: FloatTensor, threshold: float,
                       labelled_batch_size: int, unlabelled_batch_size: int
                       ) -> tuple[FloatTensor, FloatTensor, FloatTensor]:
    """(labelled cross-entropy sum / B, `pseudo_label_cross_entropy` sum / U, mask sum / U),
    float32 [] each, of a labelled batch (``labelled_logits`` [b, C], ``labels`` int64 [b]) and
    an unlabelled one; B and U are the global batch sizes under `tf.distribute`."""
    labelled = categorisation_loss(labelled_logits, labels)
    unlabelled, mask = pseudo_label_cross_entropy(target_logits, logits, threshold)
    return (tf.reduce_sum(labelled) / labelled_batch_size,
            tf.reduce_sum(unlabelled) / unlabelled_batch_size,
            tf.reduce_sum(mask) / unlabelled_batch_size)


def llp_loss(aggregation: FloatTensor, categorisation: FloatTensor | None,
             confidence: FloatTensor, global_batch_size: int | IntTensor | None = None,
             weight_by_confidence: bool = True, use_categorisation: bool = True) -> FloatTensor:
    """The data term of eq. 9, float32 []: sum of c * (L_C + L_A) / ``global_batch_size``.

    Args:
      aggregation, categorisation, confidence: float32 [B] (``categorisation`` may be None
        when ``use_categorisation`` is False).
      global_batch_size: the divisor, B by default.
      weight_by_confidence: False for the "woc" ablation (c = 1).
      use_categorisation: False to drop L_C (the warm start, or an ablation)."""
    per_example = tf.convert_to_tensor(aggregation, tf.float32)
    if use_categorisation:
        per_example += tf.convert_to_tensor(categorisation, tf.float32)
    if weight_by_confidence:
        per_example *= tf.convert_to_tensor(confidence, tf.float32)
    if global_batch_size is None:
        global_batch_size = tf.shape(per_example)[0]
    return tf.reduce_sum(per_example) / tf.cast(global_batch_size, tf.float32)


def l2_penalty(weights: Iterable[FloatTensor], weight_decay: float) -> FloatTensor:
    """``weight_decay * sum(tf.nn.l2_loss(w))`` = lambda/2 * sum ||w||^2, float32 [].

    As the authors' release does; the paper's eq. 9 writes lambda * ||theta||^2 (twice as
    strong), but its numbers were trained with this one (docs/training.md, "Weight decay")."""
    weights = list(weights)
    if not weights or weight_decay == 0:
        return tf.constant(0.0)
    return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(w, tf.float32)) for w in weights])
