"""Label propagation from labelled memory-bank rows to a batch (paper eq. 5-8). Similarities
are dot products of unit vectors over a temperature; at 0.07, exp(1 / 0.07) is about 1.6e6,
so sums of exponentials are log-sum-exps and ratios differences of logs."""

import functools
import math

import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding, variable_rows
from llp_tf.tensor_types import FloatTensor, IntTensor

DEFAULT_BLOCK_ROWS = 262_144
#: Bytes of float32 scores a density refresh's search holds at a time per replica: its
#: blocks of rows are `score_block_rows` of its queries.
DENSITY_SCORE_BYTES = 256 * 2 ** 20

#: How rho of eq. 7 is normalised. "release": rho_i = sum of exp(bank_j . bank_i / tau) over
#: the T nearest rows j (the authors' release, Z treated as a constant). "paper": rho_i = sum
#: of P(j|bank_i) over those rows, P(j|bank_i) = exp(bank_j . bank_i / tau) / Z(bank_i), with
#: Z(bank_i) = sum of exp(bank_k . bank_i / tau) over the whole bank.
DENSITY_NORMALISATIONS = ("release", "paper")


def _num_rows(tensor):
    """The static size of axis 0, or None (`tf.get_static_value` is None in loop bodies)."""
    size = tensor.shape[0]
    return int(size) if size is not None else None


def _static_or_dynamic_min(k, tensor):
    """min(k, rows of ``tensor``): a Python int when that is static, else a tensor."""
    size = _num_rows(tensor)
    if size is not None:
        return min(int(k), size)
    return tf.minimum(tf.constant(k, tf.int32), tf.shape(tensor)[0])


def _validate_positive(name, value):
    if isinstance(value, (int, float)) and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}.")


def _group_size(num_rows, k):
    """Rows per group for `nearest_rows` (a power of two near sqrt(rows / k)); 0: plain top-k."""
    if not isinstance(num_rows, int) or not isinstance(k, int):
        return 0
    group = 2 ** int(round(math.log2(max(math.sqrt(num_rows / k), 1.0))))
    group = min(max(group, 16), 512)
    return group if num_rows >= 8 * k * group else 0


def _nearest_in_block(queries, rows, k, row_offsets):
    """`nearest_rows` for one block of rows: plain or grouped top-k."""
    num_rows = _num_rows(rows)
    group = _group_size(num_rows, k)
    if not group:
        scores = tf.matmul(queries, rows, transpose_b=True)
        if row_offsets is not None:
            scores -= row_offsets[tf.newaxis, :]
        return tf.math.top_k(scores, k=k, sorted=False)

    num_groups = int(num_rows) // group
    grouped_rows = num_groups * group
    batch = tf.shape(queries)[0]
    has_tail = grouped_rows < num_rows
    grouped_part = rows[:grouped_rows] if has_tail else rows
    grouped = tf.reshape(tf.matmul(queries, grouped_part, transpose_b=True),
                         [batch, num_groups, group])
    if row_offsets is not None:
        offsets = row_offsets[:grouped_rows] if has_tail else row_offsets
        grouped -= tf.reshape(offsets, [1, num_groups, group])
    _, best_groups = tf.math.top_k(tf.reduce_max(grouped, axis=2), k=k, sorted=False)
    candidates = tf.reshape(tf.gather(grouped, best_groups, batch_dims=1), [batch, k * group])
    if has_tail:
        tail = tf.matmul(queries, rows[grouped_rows:], transpose_b=True)
        if row_offsets is not None:
            tail -= row_offsets[tf.newaxis, grouped_rows:]
        candidates = tf.concat([candidates, tail], axis=1)
    scores, position = tf.math.top_k(candidates, k=k, sorted=False)
    in_group = position < k * group
    group_slot = tf.minimum(position // group, k - 1)
    grouped_index = (tf.gather(best_groups, group_slot, batch_dims=1) * group
                     + position % group)
    tail_index = grouped_rows + position - k * group
    return scores, tf.where(in_group, grouped_index, tail_index)


def _merge_nearest(best, candidate, k):
    """Top-k of two (scores [B, *], indices [B, *]) sets, as (scores, indices) [B, k]."""
    scores = tf.concat([best[0], candidate[0]], axis=1)
    indices = tf.concat([best[1], candidate[1]], axis=1)
    scores, position = tf.math.top_k(scores, k=k, sorted=False)
    return scores, tf.gather(indices, position, batch_dims=1)


def nearest_rows(queries: FloatTensor, rows: FloatTensor, k: int | IntTensor,
                 row_offsets: FloatTensor | None = None,
                 block_rows: int = DEFAULT_BLOCK_ROWS) -> tuple[FloatTensor, IntTensor]:
    """Exact top-k of ``queries @ rows^T - row_offsets`` per query, faster than one top-k.

    Rows are searched ``block_rows`` at a time with a running top-k (memory B x block); in a
    block, a top-k over group maxima picks the k groups that can hold the k largest scores.
    bfloat16 or float16 rows are cast up to float32 a block at a time; fewer than two blocks
    of them, all at once (a transient float32 copy of those rows, as a float32 variable's
    whole read copies it).

    Args:
      queries: float32 [B, D]; rows: float32 [M, D], or a variable or
        `variable_rows.GatheredRows` read by blocks; k: int or int32 scalar, at most M.
      row_offsets: optional float32 [M], subtracted from every query's scores.

    Returns:
      (scores float32 [B, k], row indices int32 [B, k]), in no set order."""
    num_rows = _num_rows(rows)
    if num_rows is None or not isinstance(k, int) or num_rows < 2 * block_rows:
        return _nearest_in_block(queries, variable_rows.whole(rows), k, row_offsets)

    num_blocks = int(num_rows) // block_rows
    blocked_rows = num_blocks * block_rows

    def block(start):
        # Static shapes for the grouped search.
        rows_j = tf.reshape(variable_rows.rows(rows, start, block_rows),
                            [block_rows, -1])
        offsets = None
        if row_offsets is not None:
            offsets = tf.reshape(row_offsets[start:start + block_rows], [block_rows])
        scores, index = _nearest_in_block(queries, rows_j, k, offsets)
        return scores, index + start

    def body(j, best_scores, best_index):
        return (j + 1,) + _merge_nearest((best_scores, best_index), block(j * block_rows), k)

    best = block(0)
    # parallel_iterations=1: one block of scores alive at a time.
    _, *best = tf.while_loop(lambda j, *_: j < num_blocks, body, (1,) + best,
                             parallel_iterations=1)
    if blocked_rows < num_rows:
        tail_size = int(num_rows) - blocked_rows
        tail_k = min(k, tail_size)
        offsets = None if row_offsets is None else row_offsets[blocked_rows:]
        tail_scores, tail_index = _nearest_in_block(
            queries, variable_rows.rows(rows, blocked_rows, tail_size), tail_k, offsets)
        best = _merge_nearest(best, (tail_scores, tail_index + blocked_rows), k)
    return tuple(best)


def score_block_rows(num_queries: int, least: int, budget: int | None = None) -> int:
    """Rows a search of ``num_queries`` queries takes at a time so that its float32 scores
    [queries, rows] fit ``budget`` bytes (None: `DENSITY_SCORE_BYTES`): a power of two, at
    most `DEFAULT_BLOCK_ROWS`, and at least ``least`` (the k of a top-k)."""
    budget = DENSITY_SCORE_BYTES if budget is None else budget
    rows = max(1, budget // (4 * max(1, int(num_queries))))
    return max(int(least), min(DEFAULT_BLOCK_ROWS, 2 ** (rows.bit_length() - 1)))


def check_normalisation(normalisation: str) -> None:
    """ValueError unless ``normalisation`` is one of `DENSITY_NORMALISATIONS`."""
    if normalisation not in DENSITY_NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {', '.join(DENSITY_NORMALISATIONS)}; "
                         f"got {normalisation!r}.")


def log_local_density(queries: FloatTensor, bank: FloatTensor,
                      t: int = hyperparameters.T, temperature: float = hyperparameters.TEMPERATURE,
                      chunk_size: int = hyperparameters.DENSITY_CHUNK_SIZE,
                      normalisation: str = DENSITY_NORMALISATIONS[0]) -> FloatTensor:
    """log rho of eq. 7 for each query row, float32 [Q]: the logsumexp of q . bank_j / temperature
    over the t bank rows nearest q (the whole bank, the query's own row included); with
    ``normalisation="paper"`` minus log Z(q), the logsumexp over every bank row
    (`DENSITY_NORMALISATIONS`).

    Args:
      queries: float32 [Q, D]; bank: float32 [N, D], or a variable; a bfloat16 or float16
        bank is cast up to float32 a block at a time.
      t: int, neighbours (more than N: all N); chunk_size: query rows per chunk, searched
        `score_block_rows` bank rows at a time (`DENSITY_SCORE_BYTES` of similarities)."""
    _validate_positive("t", t)
    _validate_positive("temperature", temperature)
    _validate_positive("chunk_size", chunk_size)
    check_normalisation(normalisation)
    queries = tf.convert_to_tensor(queries, tf.float32)
    # In a graph a variable bank is read a block at a time; eagerly, as a traced input of its
    # own dtype.
    if tf.executing_eagerly():
        bank = tf.convert_to_tensor(bank)
    bank = variable_rows.as_rows(bank, tf.float32)
    t = _static_or_dynamic_min(t, bank)
    # A dynamic t comes with a bank of dynamic rows, searched whole.
    block_rows = score_block_rows(chunk_size, t if isinstance(t, int) else 1)
    if not tf.executing_eagerly():
        return _log_local_density(queries, bank, t, float(temperature), int(chunk_size),
                                  normalisation, block_rows)
    function = _traced_log_local_density(tuple(bank.shape.as_list()), bank.dtype, t,
                                         float(temperature), int(chunk_size), normalisation,
                                         block_rows)
    return function(queries, bank)


@functools.lru_cache(maxsize=32)
def _traced_log_local_density(bank_shape, bank_dtype, t, temperature, chunk_size,
                              normalisation, block_rows):
    """One graph per bank shape and dtype: the blocked search needs a static N."""

    @tf.function(input_signature=[tf.TensorSpec([None, bank_shape[1]], tf.float32),
                                  tf.TensorSpec(bank_shape, bank_dtype)])
    def function(queries, bank):
        return _log_local_density(queries, bank, t, temperature, chunk_size, normalisation,
                                  block_rows)

    return function


def _log_local_density(queries, bank, t, temperature, chunk_size, normalisation, block_rows):
    num_queries = tf.shape(queries)[0]
    num_chunks = (num_queries + chunk_size - 1) // chunk_size
    results = tf.TensorArray(tf.float32, size=num_chunks, infer_shape=False,
                             element_shape=tf.TensorShape([None]))

    def body(i, results):
        chunk = queries[i * chunk_size:(i + 1) * chunk_size] / temperature
        nearest, _ = nearest_rows(chunk, bank, t, block_rows=block_rows)
        log_density = log_density_of_nearest(nearest)
        if normalisation == "paper":
            log_density -= log_partition(chunk, bank, block_rows)
        return i + 1, results.write(i, log_density)

    # parallel_iterations=1: one chunk of similarities alive at a time.
    _, results = tf.while_loop(lambda i, _: i < num_chunks, body, (0, results),
                               parallel_iterations=1)
    return tf.reshape(results.concat(), [num_queries])


def log_density_of_nearest(nearest: FloatTensor) -> FloatTensor:
    """log rho of eq. 7, float32 [Q], from each query's t largest similarities over the
    temperature, float32 [Q, t]."""
    return tf.reduce_logsumexp(nearest, axis=1)


def log_partition(scaled_queries: FloatTensor, rows: FloatTensor,
                  block_rows: int = DEFAULT_BLOCK_ROWS) -> FloatTensor:
    """log Z, float32 [Q]: the logsumexp of ``scaled_queries @ rows^T`` over every row, a
    running one over ``block_rows`` rows at a time (memory Q x block).

    Args:
      scaled_queries: float32 [Q, D] (queries / tau); rows: float32 [N, D], N >= 1 static, or
        a variable or `variable_rows.GatheredRows` read by blocks, bfloat16 or float16 ones
        cast up to float32 as `nearest_rows` casts them."""
    num_rows = _num_rows(rows)
    if num_rows is None or num_rows < 2 * block_rows:
        return tf.reduce_logsumexp(
            tf.matmul(scaled_queries, variable_rows.whole(rows), transpose_b=True), axis=1)

    def block_lse(start, size):
        scores = tf.matmul(scaled_queries, variable_rows.rows(rows, start, size),
                           transpose_b=True)
        return tf.reduce_logsumexp(scores, axis=1)

    def body(j, running):
        both = tf.stack([running, block_lse(j * block_rows, block_rows)], axis=1)
        return j + 1, tf.reduce_logsumexp(both, axis=1)

    num_blocks = num_rows // block_rows
    # parallel_iterations=1: one block of scores alive at a time.
    _, running = tf.while_loop(lambda j, _: j < num_blocks, body,
                               (1, block_lse(0, block_rows)), parallel_iterations=1)
    if num_blocks * block_rows < num_rows:
        tail = block_lse(num_blocks * block_rows, num_rows - num_blocks * block_rows)
        running = tf.reduce_logsumexp(tf.stack([running, tail], axis=1), axis=1)
    return running


def local_density(queries: FloatTensor, bank: FloatTensor, t: int = hyperparameters.T,
                  temperature: float = hyperparameters.TEMPERATURE,
                  chunk_size: int = hyperparameters.DENSITY_CHUNK_SIZE,
                  normalisation: str = DENSITY_NORMALISATIONS[0]) -> FloatTensor:
    """Local density rho of eq. 7, float32 [Q]: `log_local_density` exponentiated."""
    return tf.exp(log_local_density(queries, bank, t, temperature, chunk_size, normalisation))


def propagate(embeddings: FloatTensor, labelled_bank: FloatTensor,
              labelled_classes: IntTensor, num_classes: int, k: int = hyperparameters.K,
              temperature: float = hyperparameters.TEMPERATURE,
              density: FloatTensor | None = None) -> tuple[IntTensor, FloatTensor]:
    """Pseudo labels and confidences for a batch from its labelled neighbours.

    ``density=None``: the weighted kNN of eq. 5-6, k voters with the largest
    ``P(i|v) ~ exp(bank_i . v / tau)``. With densities, LLP's vote of eq. 7-8:
    ``P(i|v) / rho_i`` chooses and weighs the k voters. The class of largest summed weight wins
    (lowest index at a tie); its share of the weight is the confidence.

    Args:
      embeddings: float32 [B, D]; labelled_bank: float32 [M, D] (read as `nearest_rows` reads).
      labelled_classes: int [M] in [0, C); num_classes: int, C; k: int (more than M: all M).
      density: optional float32 [M], rho of each labelled row.

    Returns:
      (classes int64 [B], confidence float32 [B])."""
    _validate_positive("k", k)
    _validate_positive("temperature", temperature)
    embeddings = tf.convert_to_tensor(embeddings, tf.float32)
    labelled_bank = variable_rows.as_rows(labelled_bank, tf.float32)
    labelled_classes = tf.cast(labelled_classes, tf.int64)

    # Scores are log P(i|v) + log Z (minus log rho_i); their softmax is the vote.
    log_density = None if density is None else density_offsets(density)
    k = _static_or_dynamic_min(k, labelled_bank)
    top_scores, voters = nearest_rows(embeddings / temperature, labelled_bank, k, log_density)
    class_weights = class_vote(top_scores, tf.gather(labelled_classes, voters), num_classes)
    return tf.argmax(class_weights, axis=1), tf.reduce_max(class_weights, axis=1)


def density_offsets(density: FloatTensor) -> FloatTensor:
    """log rho float32 [M] of ``density`` float32 [M]: subtracted from the scores log P(i|v) +
    log Z, it makes them log P^L(i|v) + log Z (eq. 7-8)."""
    return tf.math.log(tf.convert_to_tensor(density, tf.float32))


def class_vote(scores: FloatTensor, neighbour_labels: IntTensor,
               num_classes: int) -> FloatTensor:
    """The vote of eq. 6, float32 [B, C]: each neighbour with a class votes for it with weight
    ``exp(score)``; each row's weights normalised to sum to 1 (all 0 where none has a class).

    Args:
      scores: float32 [B, K], log-weights up to a constant per row.
      neighbour_labels: int [B, K] (an instance id or -1 does not vote); num_classes: int, C."""
    scores = tf.convert_to_tensor(scores, tf.float32)
    neighbour_labels = tf.cast(neighbour_labels, tf.int64)
    votes = label_encoding.is_class(neighbour_labels, num_classes)
    # -inf leaves non-voters out; a row without voters keeps finite scores (zeroed below).
    any_vote = tf.reduce_any(votes, axis=1, keepdims=True)
    masked = tf.where(votes, scores, tf.where(any_vote, -math.inf, 0.0))
    weights = tf.nn.softmax(masked, axis=1) * tf.cast(votes, tf.float32)

    # Per (row, class) sums without a [B, K, C] one-hot.
    batch_size = tf.shape(scores, out_type=tf.int64)[0]
    rows = tf.range(batch_size)[:, tf.newaxis]
    segment = rows * num_classes + tf.where(votes, neighbour_labels, tf.zeros_like(
        neighbour_labels))
    class_weights = tf.math.unsorted_segment_sum(weights, segment,
                                                 num_segments=batch_size * num_classes)
    return tf.reshape(class_weights, [-1, num_classes])
