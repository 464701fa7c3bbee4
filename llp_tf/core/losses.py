"""The LLP objective: aggregation loss, categorisation loss, their weighted
total (paper eq. 2-4 and 9) and the weight-decay penalty (as the release
trained it: lambda/2 * sum ||w||^2, see `l2_penalty`); and the baselines'
masked cross-entropy with hard pseudo labels (`pseudo_label_cross_entropy`,
`pseudo_label_terms`).

Per-example losses are float32 [B]; the reductions divide by the *global*
batch size so that, under `tf.distribute`, summing the replicas' losses gives
the mean over the global batch.
"""

from collections.abc import Iterable

import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding
from llp_tf.tensor_types import FloatTensor, IntTensor


#: Bank rows per block of `aggregation_loss`. Its forward pass keeps the
#: [B, N] float32 logits for the backward pass (recomputing them would cost a
#: third matmul). A bank of at least two blocks is taken a block of rows at a
#: time, and the backward pass goes through the blocks one after the other,
#: freeing each block's logits once used; so its peak is the logits plus one
#: block of logit gradients, not twice the logits, at the same speed
#: (`benchmarks/bench_core.py`, B = 128, N = 1.28M: 1.41x the logits, of which
#: ~80 MiB does not grow with N; 2.28x unblocked).
DEFAULT_LOSS_BLOCK_ROWS = 262_144


def aggregation_loss(embeddings: FloatTensor, bank: FloatTensor, bank_labels: IntTensor,
                     labels: IntTensor, temperature: float = hyperparameters.TEMPERATURE,
                     block_rows: int = DEFAULT_LOSS_BLOCK_ROWS) -> FloatTensor:
    """Aggregation loss of eq. 2-4 over the whole memory bank.

    ``L_A(v) = -log( sum_{i: bank_labels_i = y} exp(bank_i . v / tau)
                     / sum_i exp(bank_i . v / tau) )``

    computed as the difference of two log-sum-exps, so it is exact in float32
    at tau = 0.07 with millions of rows. The bank is a constant: gradients
    reach ``embeddings`` only. Memory: see `DEFAULT_LOSS_BLOCK_ROWS`.

    Every label must occur in ``bank_labels`` (it does when labels are read
    from the bank's own label state, since an example's row carries its own
    label); a label with no matching row gives an infinite loss.

    Args:
      embeddings: float32 [B, D], L2-normalised.
      bank: float32 [N, D].
      bank_labels: int64 [N], label of every bank row (class or instance id).
      labels: int64 [B], the batch's current labels.
      temperature: float.
      block_rows: int, bank rows per block.

    Returns:
      float32 [B].
    """
    embeddings = tf.convert_to_tensor(embeddings, tf.float32)
    bank = tf.stop_gradient(tf.convert_to_tensor(bank, tf.float32))
    bank_labels = tf.cast(bank_labels, tf.int64)
    labels = tf.cast(labels, tf.int64)
    inverse_temperature = 1.0 / float(temperature)
    blocks = _row_blocks(bank.shape[0], block_rows)

    # A hand-written backward pass: the forward keeps only the [B, N] logits
    # (needed anyway by the matmul) and three [B] sums; the backward rebuilds
    # the softmaxes from them inside one fused kernel per block.
    @tf.custom_gradient
    def loss_and_gradient(embeddings):
        # Scaling the [B, D] embeddings is cheaper than scaling [B, N] logits.
        scaled = embeddings * inverse_temperature
        logits = [tf.matmul(scaled, bank[rows], transpose_b=True) for rows in blocks]
        row_max, total, same_total = _combined_sums(
            [_partition_sums(block, labels, bank_labels[rows])
             for block, rows in zip(logits, blocks)])

        def gradient(upstream):
            result = None
            for block, rows in zip(logits, blocks):
                # Each block waits for the previous one's matmul, so a single
                # block of logit gradients is alive at a time.
                with tf.control_dependencies([] if result is None else [result]):
                    part = tf.matmul(_logits_gradient(block, labels, bank_labels[rows], row_max,
                                                      total, same_total, upstream), bank[rows])
                result = part if result is None else result + part
            return result * inverse_temperature

        return tf.math.log(total) - tf.math.log(same_total), gradient

    return loss_and_gradient(embeddings)


def _row_blocks(num_rows, block_rows):
    """Slices cutting ``num_rows`` bank rows into blocks of ``block_rows``; a
    single block when that is under two blocks or unknown (None)."""
    if block_rows <= 0:
        raise ValueError(f"block_rows must be positive, got {block_rows}.")
    if num_rows is None or num_rows < 2 * block_rows:
        return [slice(None)]
    return [slice(start, min(start + block_rows, num_rows))
            for start in range(0, num_rows, block_rows)]


def _combined_sums(block_sums):
    """The (row_max, total, same_total) of `_partition_sums` over all blocks,
    from each block's own; shifted sums rescale by exp(block max - row max) <= 1."""
    if len(block_sums) == 1:
        return block_sums[0]
    row_max = tf.reduce_max(tf.concat([m for m, _, _ in block_sums], axis=1), axis=1,
                            keepdims=True)
    total = tf.add_n([t * tf.exp(m - row_max)[:, 0] for m, t, _ in block_sums])
    same_total = tf.add_n([s * tf.exp(m - row_max)[:, 0] for m, _, s in block_sums])
    return row_max, total, same_total


# The two element-wise kernels below run over a block's [B, n] logits (all
# B x N of them, block by block). XLA fuses each into a single pass (max,
# exp, masked sums) and never materialises the label mask; the matmuls stay
# outside, where TensorFlow's own kernels are faster than XLA's on CPU.
@tf.function(jit_compile=True)
def _partition_sums(logits, labels, bank_labels):
    """Shifted sums of exp(logits): over all rows and over same-label rows.

    Args:
      logits: float32 [B, n], one block of bank rows.
      labels: int64 [B]; bank_labels: int64 [n], the block's.

    Returns:
      row_max float32 [B, 1]; total, same_total float32 [B], both of
      exp(logits - row_max), so -log P(A|v) = log total - log same_total.
    """
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
    """Cross-entropy of the category head, zero where the label is an instance id.

    Args:
      logits: float [B, C].
      labels: int64 [B], classes in [0, C) or instance ids (>= C).

    Returns:
      float32 [B].
    """
    logits = tf.cast(logits, tf.float32)
    num_classes = tf.shape(logits, out_type=tf.int64)[1]
    labels = tf.cast(labels, tf.int64)
    has_class = label_encoding.is_class(labels, num_classes)
    safe_labels = tf.where(has_class, labels, tf.zeros_like(labels))
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(safe_labels, logits)
    return tf.where(has_class, cross_entropy, tf.zeros_like(cross_entropy))


def pseudo_label_cross_entropy(target_logits: FloatTensor, logits: FloatTensor,
                               threshold: float = 0.0) -> tuple[FloatTensor, FloatTensor]:
    """Cross-entropy of ``logits`` with the hard pseudo labels of ``target_logits``.

    The pseudo label of an example is the argmax of ``softmax(target_logits)``
    (a constant: no gradient reaches ``target_logits`` through it); the mask
    keeps the examples whose max probability is at least ``threshold`` (0:
    every example, Lee 2013; FixMatch's tau, Sohn et al. 2020). The two may be
    the same tensor (pseudo-label) or two views' logits (FixMatch: the weak
    view's targets for the strong view).

    Args:
      target_logits: float [B, C], the logits the pseudo labels come from.
      logits: float [B, C], the logits trained on them.
      threshold: float, the confidence a pseudo label needs.

    Returns:
      (mask * cross-entropy float32 [B], mask float32 [B] of 0/1).
    """
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
    """The terms of a step on a labelled and an unlabelled batch (pseudo-label,
    FixMatch): labelled cross-entropy sum / B, the `pseudo_label_cross_entropy`
    sum / U and the mask's sum / U (the share of pseudo labels that count).

    Args:
      labelled_logits: float [b, C]; labels: int64 [b], their classes.
      target_logits, logits, threshold: as `pseudo_label_cross_entropy`, [u, C].
      labelled_batch_size, unlabelled_batch_size: B and U, the divisors (the
        global batch sizes under `tf.distribute`, so replica terms sum to means).

    Returns:
      (labelled term, unlabelled term, mask share), float32 [] each.
    """
    labelled = categorisation_loss(labelled_logits, labels)
    unlabelled, mask = pseudo_label_cross_entropy(target_logits, logits, threshold)
    return (tf.reduce_sum(labelled) / labelled_batch_size,
            tf.reduce_sum(unlabelled) / unlabelled_batch_size,
            tf.reduce_sum(mask) / unlabelled_batch_size)


def llp_loss(aggregation: FloatTensor, categorisation: FloatTensor | None,
             confidence: FloatTensor, global_batch_size: int | IntTensor | None = None,
             weight_by_confidence: bool = True, use_categorisation: bool = True) -> FloatTensor:
    """The data term of eq. 9: mean over the batch of c * (L_C + L_A).

    Args:
      aggregation: float32 [B], `aggregation_loss`.
      categorisation: float32 [B], `categorisation_loss` (ignored when
        ``use_categorisation`` is False; may then be None).
      confidence: float32 [B], the batch's confidences.
      global_batch_size: the divisor; defaults to B (set it to the global
        batch under `tf.distribute` so that replica losses sum to the mean).
      weight_by_confidence: False for the "woc" ablation (c = 1).
      use_categorisation: False to drop L_C (the warm start, or an ablation).

    Returns:
      float32 scalar.
    """
    per_example = tf.convert_to_tensor(aggregation, tf.float32)
    if use_categorisation:
        per_example += tf.convert_to_tensor(categorisation, tf.float32)
    if weight_by_confidence:
        per_example *= tf.convert_to_tensor(confidence, tf.float32)
    if global_batch_size is None:
        global_batch_size = tf.shape(per_example)[0]
    return tf.reduce_sum(per_example) / tf.cast(global_batch_size, tf.float32)


def l2_penalty(weights: Iterable[FloatTensor], weight_decay: float) -> FloatTensor:
    """``weight_decay * sum(tf.nn.l2_loss(w))`` = lambda/2 * sum ||w||^2 (eq. 9's last term).

    This is the authors' release's convention, and the usual meaning of
    "weight decay 1e-4": the penalty's gradient is ``lambda * w``, so one SGD
    step moves a weight by ``-lr * (grad_data + lambda * w)``. The paper's
    eq. 9 writes ``lambda * ||theta||^2`` (twice as strong at the same
    lambda), but its numbers were trained with this one. The caller passes
    the weights that decay (not batch-norm parameters).

    Args:
      weights: iterable of float tensors or variables.
      weight_decay: float, lambda.

    Returns:
      float32 scalar.
    """
    weights = list(weights)
    if not weights or weight_decay == 0:
        return tf.constant(0.0)
    return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(w, tf.float32)) for w in weights])
