"""Float64 numpy versions of the paper's equations, written independently of
`llp_tf` so tests compare the library against the maths, not against itself.
"""

import numpy as np


def unit_rows(rng, n, d, dtype=np.float32):
    """n random unit vectors in R^d."""
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def logsumexp(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


def local_density(queries, bank, t, temperature, normalisation="release"):
    """rho(q) = sum of exp(q.b / tau) over the t rows b with the largest q.b (the release's
    eq. 7); "paper": the sum of P(b|q) = exp(q.b / tau) / Z(q) over those rows, Z(q) the sum
    of exp(q.b / tau) over every row of the bank."""
    sims = queries.astype(np.float64) @ bank.astype(np.float64).T
    t = min(t, bank.shape[0])
    top = -np.sort(-sims, axis=1)[:, :t]
    log_rho = logsumexp(top / temperature, axis=1)
    if normalisation == "paper":
        log_rho -= logsumexp(sims / temperature, axis=1)
    return np.exp(log_rho)


def propagate(embeddings, labelled_bank, labelled_classes, num_classes, k, temperature,
              density=None):
    """Eq. 5-8. Returns (classes [B], confidence [B], class_weights [B, C])."""
    scores = embeddings.astype(np.float64) @ labelled_bank.astype(np.float64).T / temperature
    if density is not None:
        scores = scores - np.log(density.astype(np.float64))[None, :]
    k = min(k, labelled_bank.shape[0])
    class_weights = np.zeros((embeddings.shape[0], num_classes))
    for b in range(embeddings.shape[0]):
        voters = np.argsort(-scores[b], kind="stable")[:k]
        w = np.exp(scores[b, voters] - scores[b, voters].max())
        np.add.at(class_weights[b], labelled_classes[voters], w / w.sum())
    return class_weights.argmax(axis=1), class_weights.max(axis=1), class_weights


def aggregation_loss(embeddings, bank, bank_labels, labels, temperature):
    """-log P(A|v), eq. 2-4, over the whole bank."""
    logits = embeddings.astype(np.float64) @ bank.astype(np.float64).T / temperature
    same = bank_labels[None, :] == labels[:, None]
    return logsumexp(logits, axis=1) - logsumexp(np.where(same, logits, -np.inf), axis=1)


def aggregation_loss_gradient(embeddings, bank, bank_labels, labels, temperature):
    """dL_A(v_b)/dv_b = (sum_i p_i bank_i - sum_{i same} q_i bank_i) / tau, [B, D]."""
    bank = bank.astype(np.float64)
    logits = embeddings.astype(np.float64) @ bank.T / temperature
    same = bank_labels[None, :] == labels[:, None]
    p = np.exp(logits - logsumexp(logits, axis=1)[:, None])
    masked = np.where(same, logits, -np.inf)
    q = np.exp(masked - logsumexp(masked, axis=1)[:, None])
    return (p - q) @ bank / temperature


def cross_entropy(logits, labels):
    """-log softmax(logits)[label] per row, float64."""
    logits = logits.astype(np.float64)
    return logsumexp(logits, axis=1) - logits[np.arange(len(labels)), labels]
