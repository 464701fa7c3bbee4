"""Label propagation from labelled memory-bank rows to a batch (paper eq. 5-8).

All similarities are dot products of unit vectors divided by a temperature;
at the paper's temperature of 0.07, ``exp(1 / 0.07)`` is about 1.6e6, so every
sum of exponentials here is computed as a log-sum-exp and every ratio as a
difference of logs.
"""

import tensorflow as tf

DEFAULT_TEMPERATURE = 0.07
DEFAULT_K = 10
DEFAULT_T = 25
DEFAULT_DENSITY_CHUNK = 1024


def _static_or_dynamic_min(k, size):
    """min(k, size) as a Python int when ``size`` is static, else as a tensor."""
    static = tf.get_static_value(size)
    if static is not None:
        return min(int(k), int(static))
    return tf.minimum(tf.constant(k, tf.int32), tf.cast(size, tf.int32))


def _validate_positive(name, value):
    if isinstance(value, (int, float)) and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}.")


def log_local_density(queries, bank, t=DEFAULT_T, temperature=DEFAULT_TEMPERATURE,
                      chunk_size=DEFAULT_DENSITY_CHUNK):
    """Logarithm of the local density rho of eq. 7 for each query row.

    ``log rho(q) = logsumexp over the t bank rows j with the largest q . bank_j
    of (q . bank_j / temperature)``. The whole bank takes part, the query's
    own row included when the query is a bank row.

    Queries are processed ``chunk_size`` rows at a time, one chunk after the
    other, so the peak memory is ``chunk_size x N`` similarities whatever Q is.

    Args:
      queries: float32 [Q, D].
      bank: float32 [N, D].
      t: int, neighbours in the estimate; more than N uses all N rows.
      temperature: float.
      chunk_size: int, query rows per chunk.

    Returns:
      float32 [Q].
    """
    _validate_positive("t", t)
    _validate_positive("temperature", temperature)
    _validate_positive("chunk_size", chunk_size)
    queries = tf.convert_to_tensor(queries, tf.float32)
    bank = tf.convert_to_tensor(bank, tf.float32)
    return _log_local_density(queries, bank, _static_or_dynamic_min(t, tf.shape(bank)[0]),
                              float(temperature), int(chunk_size))


@tf.function(reduce_retracing=True)
def _log_local_density(queries, bank, t, temperature, chunk_size):
    num_queries = tf.shape(queries)[0]
    num_chunks = (num_queries + chunk_size - 1) // chunk_size
    results = tf.TensorArray(tf.float32, size=num_chunks, infer_shape=False,
                             element_shape=tf.TensorShape([None]))

    def body(i, results):
        chunk = queries[i * chunk_size:(i + 1) * chunk_size]
        similarities = tf.matmul(chunk, bank, transpose_b=True)
        nearest = tf.math.top_k(similarities, k=t, sorted=False).values
        return i + 1, results.write(i, tf.reduce_logsumexp(nearest / temperature, axis=1))

    # parallel_iterations=1 keeps a single chunk of similarities alive at a time.
    _, results = tf.while_loop(lambda i, _: i < num_chunks, body, (0, results),
                               parallel_iterations=1)
    return tf.reshape(results.concat(), [num_queries])


def local_density(queries, bank, t=DEFAULT_T, temperature=DEFAULT_TEMPERATURE,
                  chunk_size=DEFAULT_DENSITY_CHUNK):
    """Local density rho of eq. 7 for each query row.

    ``rho(q) = sum over the t bank rows j with the largest q . bank_j of
    exp(q . bank_j / temperature)``, computed in log space and exponentiated
    at the end (rho <= t * exp(1 / temperature), about 4e7 at the defaults,
    well inside float32). See `log_local_density` for the arguments.

    Returns:
      float32 [Q].
    """
    return tf.exp(log_local_density(queries, bank, t, temperature, chunk_size))


def propagate(embeddings, labeled_bank, labeled_classes, num_classes, k=DEFAULT_K,
              temperature=DEFAULT_TEMPERATURE, density=None):
    """Pseudo labels and confidences for a batch from its labelled neighbours.

    With ``density=None`` this is the weighted kNN of eq. 5-6: the voters are
    the k labelled rows with the largest ``P(i|v) ~ exp(bank_i . v / tau)``
    and each votes with that weight. With densities it is LLP's locally
    weighted vote of eq. 7-8: ``P^L(i|v) = P(i|v) / rho_i`` both chooses the
    k voters and weighs them. The normaliser Z of P cancels in both.

    The class with the largest summed weight wins (the lowest class index at
    an exact tie) and its share of the total weight is the confidence.

    Args:
      embeddings: float32 [B, D], the batch's embeddings.
      labeled_bank: float32 [M, D], bank rows of the labelled examples.
      labeled_classes: int [M], their classes in [0, num_classes).
      num_classes: int, C.
      k: int, voters; more than M uses all M.
      temperature: float.
      density: optional float32 [M], rho of each labelled row.

    Returns:
      (classes int64 [B], confidence float32 [B]).
    """
    _validate_positive("k", k)
    _validate_positive("temperature", temperature)
    embeddings = tf.convert_to_tensor(embeddings, tf.float32)
    labeled_bank = tf.convert_to_tensor(labeled_bank, tf.float32)
    labeled_classes = tf.cast(labeled_classes, tf.int64)

    # log P(i|v) + log Z: the scores whose softmax over the voters is the vote.
    scores = tf.matmul(embeddings, labeled_bank, transpose_b=True) / temperature
    if density is not None:
        scores -= tf.math.log(tf.convert_to_tensor(density, tf.float32))[tf.newaxis, :]
    k = _static_or_dynamic_min(k, tf.shape(labeled_bank)[0])
    top_scores, voters = tf.math.top_k(scores, k=k, sorted=False)
    vote_weights = tf.nn.softmax(top_scores, axis=1)

    # Sum the weights per (example, class) without a [B, k, C] one-hot.
    batch_size = tf.shape(embeddings, out_type=tf.int64)[0]
    rows = tf.range(batch_size)[:, tf.newaxis]
    segment = rows * num_classes + tf.gather(labeled_classes, voters)
    class_weights = tf.math.unsorted_segment_sum(
        vote_weights, segment, num_segments=batch_size * num_classes)
    class_weights = tf.reshape(class_weights, [-1, num_classes])
    return tf.argmax(class_weights, axis=1), tf.reduce_max(class_weights, axis=1)
