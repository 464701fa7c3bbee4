"""The LLP objective (paper eq. 2-4 and 9), the release's weight decay, and the baselines'
masked cross-entropy with hard pseudo labels. Per-example losses are float32 [B]; `llp_loss`
is the mean over the batch it is given (a replica's: the training step takes 1/R of each
replica's loss, `llp_tf.training.methods.base`)."""

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding, variable_rows
from llp_tf.tensor_types import FloatTensor, IntTensor


#: Bank rows per block of `aggregation_loss`: it holds one block's [rows, B] float32 logits and
#: weights whatever N is (docs/performance.md).
DEFAULT_LOSS_BLOCK_ROWS = 16_384


def aggregation_loss(embeddings: FloatTensor, bank: FloatTensor, bank_labels: IntTensor,
                     labels: IntTensor, temperature: float = hyperparameters.TEMPERATURE,
                     block_rows: int = DEFAULT_LOSS_BLOCK_ROWS) -> FloatTensor:
    """Aggregation loss of eq. 2-4 over the whole bank, float32 [B]:
    ``-log(sum_{i: bank_labels_i = y} exp(bank_i . v / tau) / sum_i exp(bank_i . v / tau))``.

    One pass over the bank, ``block_rows`` rows at a time, into running float32 softmax sums
    shifted by their max (log space, `SoftmaxSums`); no [B, N] tensor. A bank of one block
    keeps its [B, N] logits for the backward pass instead (`_one_block_loss`). The gradient reaches
    ``embeddings`` only: ``(sum_i p_i bank_i - sum_{same label} q_i bank_i) / tau``. A label
    absent from ``bank_labels`` gives an infinite loss and the all-rows term's gradient alone.

    Args:
      embeddings: float32 [B, D], L2-normalised.
      bank: float32 [N, D]; bank_labels: int64 [N], class or instance id of every row; either
        may be a variable, read a block at a time (`variable_rows`); a bfloat16 or float16
        bank is cast up to float32 a block at a time (a bank of one block, whole).
      labels: int64 [B], the batch's current labels.
      temperature: float, tau; block_rows: int, bank rows per block."""
    if block_rows <= 0:
        raise ValueError(f"block_rows must be positive, got {block_rows}.")
    embeddings = tf.convert_to_tensor(embeddings, tf.float32)
    bank = variable_rows.as_rows(bank, tf.float32)
    bank_labels = variable_rows.as_rows(bank_labels, tf.int64)
    labels = tf.cast(labels, tf.int64)
    inverse_temperature = 1.0 / float(temperature)
    if bank.shape[0] is not None and bank.shape[0] <= block_rows:
        return _one_block_loss(embeddings,
                               tf.stop_gradient(tf.convert_to_tensor(variable_rows.whole(bank))),
                               tf.convert_to_tensor(bank_labels), labels, inverse_temperature)

    loss, gradient = loss_from_sums(*bank_sums(
        tf.stop_gradient(embeddings) * inverse_temperature, bank, bank_labels, labels,
        block_rows), temperature)
    return with_gradient(embeddings, loss, gradient)


def with_gradient(embeddings: FloatTensor, loss: FloatTensor,
                  gradient: FloatTensor) -> FloatTensor:
    """``loss`` float32 [B], its gradient with respect to ``embeddings`` float32 [B, D] the
    upstream times ``gradient`` [B, D]: plus ``s - stop_gradient(s)``, an exact 0 of that
    gradient. Not `tf.custom_gradient`, which reads every variable its function reads whole."""
    linear = tf.reduce_sum(embeddings * tf.stop_gradient(gradient), axis=1)
    return tf.stop_gradient(loss) + (linear - tf.stop_gradient(linear))


def _one_block_loss(embeddings, bank, bank_labels, labels, inverse_temperature):
    """The loss of a bank of at most one block: the forward keeps its [B, N] logits, and the
    backward pass does one matmul of the gradient's two softmax terms, subtracted first."""

    @tf.custom_gradient
    def loss_and_gradient(embeddings):
        logits = tf.matmul(embeddings * inverse_temperature, bank, transpose_b=True)
        row_max, total, same_total = _partition_sums(logits, labels, bank_labels)

        def gradient(upstream):
            return tf.matmul(_logits_gradient(logits, labels, bank_labels, row_max, total,
                                              same_total, upstream), bank) * inverse_temperature

        return tf.math.log(total) - tf.math.log(same_total), gradient

    return loss_and_gradient(embeddings)


def loss_from_sums(all_rows: "SoftmaxSums", same_rows: "SoftmaxSums",
                   temperature: float) -> tuple[FloatTensor, FloatTensor]:
    """(aggregation loss float32 [B], its gradient float32 [B, D] with respect to the
    embeddings) from the all-rows and same-label `SoftmaxSums` of the whole bank."""
    # The maxima first: equal maxima (the nearest row has the label) cancel exactly.
    loss = ((all_rows.row_max - same_rows.row_max)
            + tf.math.log(all_rows.total) - tf.math.log(same_rows.total))
    gradient = (1.0 / float(temperature)) * (
        all_rows.weighted / all_rows.total[:, tf.newaxis]
        - tf.math.divide_no_nan(same_rows.weighted, same_rows.total[:, tf.newaxis]))
    return loss, gradient


class SoftmaxSums(NamedTuple):
    """Per example, over some bank rows: row_max float32 [B] (-inf over no rows); total
    float32 [B], sum of exp(logit - row_max); weighted float32 [B, D], those times the rows."""
    row_max: FloatTensor
    total: FloatTensor
    weighted: FloatTensor


def combine(first: "SoftmaxSums", second: "SoftmaxSums") -> "SoftmaxSums":
    """The sums over both's rows, each rescaled by exp(its max - the larger max) <= 1;
    commutative and associative up to rounding."""
    row_max = tf.maximum(first.row_max, second.row_max)

    def rescaled(sums):
        # exp(-inf - -inf) would be NaN: sums over no rows count 0.
        scale = tf.where(sums.row_max == -np.inf, 0.0, tf.exp(sums.row_max - row_max))
        return sums.total * scale, sums.weighted * scale[:, tf.newaxis]

    (first_total, first_weighted), (second_total, second_weighted) = (
        rescaled(first), rescaled(second))
    return SoftmaxSums(row_max, first_total + second_total, first_weighted + second_weighted)


def bank_sums(scaled: FloatTensor, bank: FloatTensor, bank_labels: IntTensor, labels: IntTensor,
              block_rows: int = DEFAULT_LOSS_BLOCK_ROWS) -> tuple["SoftmaxSums", "SoftmaxSums"]:
    """(all rows, same-label rows) `SoftmaxSums` of ``scaled`` float32 [B, D] (embeddings / tau)
    against ``bank`` float32 [N, D] with ``bank_labels`` int64 [N], for ``labels`` int64 [B]:
    whole blocks one at a time (a single block's logits alive), then the rows left over.
    Variables are read a block at a time: a whole read of a variable that has been scattered
    into copies all of it. A bfloat16 or float16 bank's blocks are cast up to float32."""
    num_rows = bank.shape[0] if bank.shape[0] is not None else tf.shape(bank)[0]
    num_blocks, tail_start = num_rows // block_rows, num_rows // block_rows * block_rows
    batch, dim = tf.shape(scaled)[0], tf.shape(scaled)[1]
    no_rows = SoftmaxSums(tf.fill([batch], -np.inf), tf.zeros([batch]), tf.zeros([batch, dim]))
    sums = (no_rows, no_rows)

    def add(sums, rows, row_labels):
        block = _block_sums(scaled, rows, row_labels, labels)
        return tuple(combine(a, b) for a, b in zip(sums, block))

    def add_block(index, sums):
        start = index * block_rows
        return index + 1, add(sums, variable_rows.rows(bank, start, block_rows),
                              variable_rows.rows(bank_labels, start, block_rows))

    if not isinstance(num_blocks, int) or num_blocks > 0:
        _, sums = tf.while_loop(lambda index, _: index < num_blocks, add_block,
                                (tf.constant(0), sums), parallel_iterations=1)
    if not isinstance(num_rows, int) or tail_start < num_rows:
        sums = add(sums, variable_rows.rows(bank, tail_start, num_rows - tail_start),
                   variable_rows.rows(bank_labels, tail_start, num_rows - tail_start))
    return sums


def _block_sums(scaled, rows, row_labels, labels):
    """(all rows, same-label rows) `SoftmaxSums` of one block of bank ``rows`` [n, D]; the
    same-label ones over the rows holding a batch label, gathered unless over half the block."""
    # [n, B], not [B, n]: the rows of a subset are then contiguous to gather.
    logits = tf.matmul(rows, scaled, transpose_b=True)
    all_max, all_total, all_weights, has_batch_label = _all_rows_weights(
        logits, labels, row_labels)
    index = tf.where(has_batch_label)[:, 0]

    def same_label_sums(same_label_weights, logits, row_labels, rows):
        same_max, same_total, weights = same_label_weights(logits, labels, row_labels)
        return same_max, same_total, tf.matmul(weights, rows, transpose_a=True)

    same_rows = tf.cond(
        2 * tf.size(index) > tf.shape(rows)[0],
        lambda: same_label_sums(_fused_same_label_weights, logits, row_labels, rows),
        lambda: same_label_sums(_same_label_weights, tf.gather(logits, index),
                                tf.gather(row_labels, index), tf.gather(rows, index)))
    return (SoftmaxSums(all_max, all_total, tf.matmul(all_weights, rows, transpose_a=True)),
            SoftmaxSums(*same_rows))


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


# XLA fuses each element-wise pass into one kernel; the matmuls stay outside (faster on CPU).
@tf.function(jit_compile=True)
def _all_rows_weights(logits, labels, row_labels):
    """Of ``logits`` float32 [n, B] (``row_labels`` int64 [n], ``labels`` int64 [B]): row_max
    [B] (-inf when n = 0), total [B], weights = exp(logits - row_max) [n, B], all float32, and
    has_batch_label bool [n], whether a row's label is one of ``labels``."""
    row_max = tf.reduce_max(logits, axis=0)
    weights = tf.exp(logits - row_max)
    has_batch_label = tf.reduce_any(
        tf.equal(row_labels[:, tf.newaxis], labels[tf.newaxis, :]), axis=1)
    return row_max, tf.reduce_sum(weights, axis=0), weights, has_batch_label


def _same_label_weights(logits, labels, row_labels):
    """`_all_rows_weights`'s first three over each example's same-label rows: row_max -inf and
    total 0 where there are none, weights 0 off the set."""
    same = tf.equal(row_labels[:, tf.newaxis], labels[tf.newaxis, :])
    row_max = tf.reduce_max(tf.where(same, logits, -np.inf), axis=0)
    # exp(-inf) = 0 off the set (where the set is empty, everywhere).
    weights = tf.exp(tf.where(same, logits - row_max, -np.inf))
    return row_max, tf.reduce_sum(weights, axis=0), weights


# On whole blocks only: gathered subsets vary in size, and XLA would compile each.
_fused_same_label_weights = tf.function(_same_label_weights, jit_compile=True)


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
                       target_logits: FloatTensor, logits: FloatTensor, threshold: float
                       ) -> tuple[FloatTensor, FloatTensor, FloatTensor]:
    """(labelled cross-entropy float32 [b], `pseudo_label_cross_entropy`'s masked
    cross-entropy and mask float32 [u] each) of a labelled batch (``labelled_logits`` [b, C],
    ``labels`` int64 [b]) and an unlabelled one (``target_logits``, ``logits`` [u, C])."""
    labelled = categorisation_loss(labelled_logits, labels)
    unlabelled, mask = pseudo_label_cross_entropy(target_logits, logits, threshold)
    return labelled, unlabelled, mask


def llp_loss(aggregation: FloatTensor, categorisation: FloatTensor | None,
             confidence: FloatTensor, *, weight_by_confidence: bool = True,
             use_categorisation: bool = True) -> FloatTensor:
    """The data term of eq. 9, float32 []: the mean of c * (L_C + L_A) over the B examples.

    Args:
      aggregation, categorisation, confidence: float32 [B] (``categorisation`` may be None
        when ``use_categorisation`` is False).
      weight_by_confidence: False for the "woc" ablation (c = 1).
      use_categorisation: False to drop L_C (the warm start, or an ablation)."""
    per_example = tf.convert_to_tensor(aggregation, tf.float32)
    if use_categorisation:
        per_example += tf.convert_to_tensor(categorisation, tf.float32)
    if weight_by_confidence:
        per_example *= tf.convert_to_tensor(confidence, tf.float32)
    return tf.reduce_sum(per_example) / tf.cast(tf.shape(per_example)[0], tf.float32)


def l2_penalty(weights: Iterable[FloatTensor], weight_decay: float) -> FloatTensor:
    """``weight_decay * sum(tf.nn.l2_loss(w))`` = lambda/2 * sum ||w||^2, float32 [].

    As the authors' release does; the paper's eq. 9 writes lambda * ||theta||^2 (twice as
    strong), but its numbers were trained with this one (docs/training.md, "Weight decay")."""
    weights = list(weights)
    if not weights or weight_decay == 0:
        return tf.constant(0.0)
    return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(w, tf.float32)) for w in weights])
