import numpy as np
import pytest
import tensorflow as tf

from llp_tf import aggregation_loss, categorisation_loss, l2_penalty, llp_loss
from llp_tf.core import losses
from tests import reference

TAU = 0.07
#: float32's unit roundoff.
U = 2.0 ** -24


def _tolerances(dim, rows, temperature=TAU):
    """(loss, gradient) absolute tolerances of the float32 aggregation loss of
    unit vectors against the float64 reference, from its rounding errors:

    - a logit v.b / tau sums D products: off by about sqrt(D) u / tau;
    - a sum of N terms (exponentials, or exponential-weighted rows) is off by
      about sqrt(N) u of itself (errors of either sign add up as a random
      walk; the blocks' rescaling adds one rounding per block, fewer than N);
    - so a log-sum-exp is off by e = sqrt(D) u / tau + sqrt(N) u, and the
      loss, a difference of two, by 2 e;
    - the gradient is the difference of two softmax-weighted means of unit
      rows, over tau: each mean's weights are off by e of themselves and its
      sum by sqrt(N) u more, so 2 (e + sqrt(N) u) / tau.

    A wrong rescaling or a lost block changes the values by a share of
    themselves (losses ~1, gradients ~1-10 here), far above these.
    """
    logsumexp_error = (np.sqrt(dim) / temperature + np.sqrt(rows)) * U
    return 2 * logsumexp_error, 2 * (logsumexp_error + np.sqrt(rows) * U) / temperature


def _problem(seed, batch, rows, dim, num_labels):
    """A batch whose labels each occur in the bank (as with labels read from the bank)."""
    rng = np.random.default_rng(seed)
    embeddings = reference.unit_rows(rng, batch, dim)
    bank = reference.unit_rows(rng, rows, dim)
    bank_labels = rng.integers(0, num_labels, rows)
    labels = bank_labels[rng.choice(rows, batch, replace=False)]
    return embeddings, bank, bank_labels, labels


@pytest.mark.parametrize("seed,batch,rows,dim,num_labels", [
    (0, 16, 100, 8, 5),
    (1, 32, 1000, 32, 1000),   # mostly singleton labels: instance discrimination
    (2, 8, 50, 16, 1),         # a single label everywhere: the loss is 0
    (3, 5, 3000, 64, 40),
])
def test_aggregation_loss_matches_equation(seed, batch, rows, dim, num_labels):
    embeddings, bank, bank_labels, labels = _problem(seed, batch, rows, dim, num_labels)
    got = aggregation_loss(embeddings, bank, bank_labels, labels, TAU).numpy()
    want = reference.aggregation_loss(embeddings, bank, bank_labels, labels, TAU)
    assert got.shape == (batch,) and got.dtype == np.float32
    loss_atol, _ = _tolerances(dim, rows)
    np.testing.assert_allclose(got, want, atol=loss_atol, rtol=0)
    if num_labels == 1:
        np.testing.assert_allclose(got, 0.0, atol=loss_atol)


def test_aggregation_loss_is_exact_at_temperature_0_07_with_100k_rows():
    embeddings, bank, bank_labels, labels = _problem(4, 16, 100_000, 128, 1000)
    # Make the batch's own rows the nearest ones, as after training: large logits.
    embeddings = bank[:16].copy()
    labels = bank_labels[:16]
    got = aggregation_loss(embeddings, bank, bank_labels, labels, TAU).numpy()
    want = reference.aggregation_loss(embeddings, bank, bank_labels, labels, TAU)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=_tolerances(128, 100_000)[0], rtol=0)


def test_aggregation_loss_with_instance_labels_is_instance_discrimination():
    rng = np.random.default_rng(5)
    bank = reference.unit_rows(rng, 200, 16)
    embeddings = reference.unit_rows(rng, 10, 16)
    bank_labels = 1000 + np.arange(200)  # every row its own instance id
    idx = rng.choice(200, 10, replace=False)
    got = aggregation_loss(embeddings, bank, bank_labels, bank_labels[idx], TAU).numpy()
    logits = embeddings.astype(np.float64) @ bank.astype(np.float64).T / TAU
    want = -(logits[np.arange(10), idx] - reference.logsumexp(logits, axis=1))
    np.testing.assert_allclose(got, want, atol=_tolerances(16, 200)[0], rtol=0)


@pytest.mark.parametrize("seed,rows,num_labels", [(6, 300, 10), (7, 5000, 4000)])
def test_aggregation_loss_gradient_matches_analytic_gradient(seed, rows, num_labels):
    embeddings, bank, bank_labels, labels = _problem(seed, 12, rows, 16, num_labels)
    upstream = np.random.default_rng(seed).uniform(0.5, 2.0, 12).astype(np.float32)
    v = tf.Variable(embeddings)
    bank_var = tf.Variable(bank)
    with tf.GradientTape() as tape:
        loss = aggregation_loss(v, bank_var, bank_labels, labels, TAU)
        weighted = tf.reduce_sum(loss * upstream)
    grad_v, grad_bank = tape.gradient(weighted, [v, bank_var])
    assert grad_bank is None, "the bank must not receive gradients"
    want = upstream[:, None] * reference.aggregation_loss_gradient(
        embeddings, bank, bank_labels, labels, TAU)
    # The upstream weights (< 2) scale the error with the gradient.
    np.testing.assert_allclose(grad_v.numpy(), want, atol=2 * _tolerances(16, rows)[1], rtol=0)


def test_aggregation_loss_gradient_matches_finite_differences():
    # Central differences of the float64 reference loss, independent of the
    # analytic formula used above; their own error (eps^2 / tau^3 of the
    # third derivative, 1e-16 / eps of rounding) is far below float32's.
    embeddings, bank, bank_labels, labels = _problem(8, 3, 60, 6, 4)
    v = tf.Variable(embeddings)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(aggregation_loss(v, bank, bank_labels, labels, TAU))
    got = tape.gradient(total, v).numpy()
    eps = 1e-6
    want = np.zeros_like(embeddings, dtype=np.float64)
    base = embeddings.astype(np.float64)
    for b in range(3):
        for d in range(6):
            plus, minus = base.copy(), base.copy()
            plus[b, d] += eps
            minus[b, d] -= eps
            want[b, d] = (reference.aggregation_loss(plus, bank, bank_labels, labels, TAU).sum()
                          - reference.aggregation_loss(minus, bank, bank_labels, labels,
                                                       TAU).sum()) / (2 * eps)
    np.testing.assert_allclose(got, want, atol=_tolerances(6, 60)[1], rtol=0)


def test_aggregation_loss_in_tf_function_gradient():
    embeddings, bank, bank_labels, labels = _problem(9, 4, 64, 8, 6)
    v = tf.Variable(embeddings)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(aggregation_loss(v, bank, bank_labels, labels, TAU))
        return total, tape.gradient(total, v)

    total, grad = step()
    loss_atol, gradient_atol = _tolerances(8, 64)
    np.testing.assert_allclose(  # a sum of 4 losses: 4 losses' errors
        total.numpy(), reference.aggregation_loss(embeddings, bank, bank_labels, labels,
                                                  TAU).sum(), atol=4 * loss_atol, rtol=0)
    np.testing.assert_allclose(
        grad.numpy(), reference.aggregation_loss_gradient(embeddings, bank, bank_labels,
                                                          labels, TAU), atol=gradient_atol,
        rtol=0)


def test_categorisation_loss_counts_classes_only():
    rng = np.random.default_rng(10)
    logits = rng.normal(0, 3, (6, 4)).astype(np.float32)
    labels = np.array([0, 3, 4, 2, 1000, 1])  # 4 and 1000 are instance ids (C = 4)
    got = categorisation_loss(logits, labels).numpy()
    is_class = labels < 4
    want = np.zeros(6)
    want[is_class] = reference.cross_entropy(logits[is_class], labels[is_class])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.all(got[~is_class] == 0)


@pytest.mark.parametrize("weight_by_confidence", [True, False])
@pytest.mark.parametrize("use_categorisation", [True, False])
def test_llp_loss_combines_terms(weight_by_confidence, use_categorisation):
    rng = np.random.default_rng(11)
    aggregation = rng.uniform(0, 5, 8).astype(np.float32)
    categorisation = rng.uniform(0, 3, 8).astype(np.float32)
    confidence = rng.uniform(0, 1, 8).astype(np.float32)
    got = llp_loss(aggregation, categorisation, confidence,
                   weight_by_confidence=weight_by_confidence,
                   use_categorisation=use_categorisation).numpy()
    terms = aggregation.astype(np.float64) + (categorisation if use_categorisation else 0)
    if weight_by_confidence:
        terms = terms * confidence
    np.testing.assert_allclose(got, terms.mean(), rtol=1e-6)


def test_l2_penalty():
    rng = np.random.default_rng(12)
    weights = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=7).astype(np.float32)]
    got = l2_penalty([tf.Variable(w) for w in weights], 1e-4).numpy()
    # The release's convention: lambda * sum(l2_loss(w)) = lambda / 2 * sum w^2.
    want = 1e-4 / 2 * sum((w.astype(np.float64) ** 2).sum() for w in weights)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert l2_penalty([], 1e-4).numpy() == 0.0


@pytest.mark.parametrize("rows,block_rows,num_labels", [
    (2500, 1000, 30),     # blocks of 1000, 1000 and a 500-row tail
    (2000, 1000, 3000),   # two whole blocks; mostly singleton labels
])
def test_aggregation_loss_in_row_blocks_matches_equation(rows, block_rows, num_labels):
    embeddings, bank, bank_labels, labels = _problem(10, 12, rows, 16, num_labels)
    # The batch's own rows are the nearest, in different blocks: the blocks'
    # maxima differ widely, which the combination of their sums must handle.
    embeddings = bank[::rows // 12][:12].copy()
    labels = bank_labels[::rows // 12][:12]
    upstream = np.random.default_rng(10).uniform(0.5, 2.0, 12).astype(np.float32)
    v = tf.Variable(embeddings)
    with tf.GradientTape() as tape:
        loss = aggregation_loss(v, bank, bank_labels, labels, TAU, block_rows=block_rows)
        weighted = tf.reduce_sum(loss * upstream)
    grad = tape.gradient(weighted, v).numpy()
    loss_atol, gradient_atol = _tolerances(16, rows)
    np.testing.assert_allclose(loss.numpy(), reference.aggregation_loss(
        embeddings, bank, bank_labels, labels, TAU), atol=loss_atol, rtol=0)
    # The upstream weights (< 2) scale the error with the gradient.
    np.testing.assert_allclose(grad, upstream[:, None] * reference.aggregation_loss_gradient(
        embeddings, bank, bank_labels, labels, TAU), atol=2 * gradient_atol, rtol=0)


def _loss_and_gradient(embeddings, bank, bank_labels, labels, temperature, block_rows,
                       in_function):
    """The loss and the gradient of its sum, eagerly or in a `tf.function`."""
    v = tf.Variable(embeddings)

    def run():
        with tf.GradientTape() as tape:
            loss = aggregation_loss(v, bank, bank_labels, labels, temperature,
                                    block_rows=block_rows)
            total = tf.reduce_sum(loss)
        return loss, tape.gradient(total, v)

    loss, gradient = tf.function(run)() if in_function else run()
    return loss.numpy(), gradient.numpy()


LONE_LABEL, TAIL_LABEL = 10**6, 10**6 + 1


def _blocked_problem(num_labels, rows=700, dim=16):
    """A 700-row bank (in blocks of 64: 10 and a 60-row tail) whose batch has
    labels of every kind: common ones, one held by rows 200-209 only (one
    block's), one by rows 650-699 only (the tail's). Half the batch sits
    on bank rows (logits of 1 / tau, the largest), one of them on a row of
    another label than its own, so its same-label max is far below its max."""
    rng = np.random.default_rng(num_labels)
    bank = reference.unit_rows(rng, rows, dim)
    bank_labels = rng.integers(0, num_labels, rows)
    bank_labels[200:210] = LONE_LABEL
    bank_labels[650:] = TAIL_LABEL
    on_rows = [3, 203, 680, 400, 64, 127]
    embeddings = np.concatenate([bank[on_rows], bank[[10]], reference.unit_rows(rng, 5, dim)])
    labels = np.concatenate([bank_labels[on_rows], [LONE_LABEL],
                             bank_labels[rng.choice(rows, 5, replace=False)]])
    return embeddings, bank, bank_labels, labels


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("num_labels,block_rows", [
    (2, 64),      # a block's same-label rows are most of it: the whole block
    (1000, 64),   # a few per block: the rows of the batch's labels, gathered
    (1000, 70),   # 10 whole blocks, no tail
    (1000, 16),   # small blocks: most hold no row of an example's label
    (2, 1024),    # one block: its logits kept for the backward pass
    (2, 700),     # one block exactly
])
def test_aggregation_loss_over_blocks_matches_equation(num_labels, block_rows, in_function):
    embeddings, bank, bank_labels, labels = _blocked_problem(num_labels)
    got_loss, got_gradient = _loss_and_gradient(embeddings, bank, bank_labels, labels, TAU,
                                                block_rows, in_function)
    loss_atol, gradient_atol = _tolerances(16, 700)
    lone_logits = bank[200:210].astype(np.float64) @ embeddings[6] / TAU
    assert 1 / TAU - lone_logits.max() > 5, "the lone label's rows should be far from its example"
    np.testing.assert_allclose(got_loss, reference.aggregation_loss(
        embeddings, bank, bank_labels, labels, TAU), atol=loss_atol, rtol=0)
    np.testing.assert_allclose(got_gradient, reference.aggregation_loss_gradient(
        embeddings, bank, bank_labels, labels, TAU), atol=gradient_atol, rtol=0)


@pytest.mark.parametrize("temperature", [TAU, 0.005])
def test_aggregation_loss_over_blocks_does_not_overflow_at_large_logits(temperature):
    # Every example on its own bank row: its largest logit is 1 / tau, and at
    # tau = 0.005 exp(200) is far above float32's largest (exp(88.7)), so
    # only sums shifted by the running max stay finite.
    rng = np.random.default_rng(12)
    bank = reference.unit_rows(rng, 500, 16)
    bank_labels = rng.integers(0, 5, 500)
    on_rows = rng.choice(500, 12, replace=False)
    embeddings, labels = bank[on_rows], bank_labels[on_rows]
    got_loss, got_gradient = _loss_and_gradient(embeddings, bank, bank_labels, labels,
                                                temperature, 64, in_function=True)
    loss_atol, gradient_atol = _tolerances(16, 500, temperature)
    np.testing.assert_allclose(got_loss, reference.aggregation_loss(
        embeddings, bank, bank_labels, labels, temperature), atol=loss_atol, rtol=0)
    np.testing.assert_allclose(got_gradient, reference.aggregation_loss_gradient(
        embeddings, bank, bank_labels, labels, temperature), atol=gradient_atol, rtol=0)


@pytest.mark.parametrize("block_rows", [64, 1024])
def test_aggregation_loss_of_a_label_missing_from_the_bank_is_infinite(block_rows):
    embeddings, bank, bank_labels, labels = _blocked_problem(1000)
    labels = labels.copy()
    labels[2] = -5  # no row has it
    got_loss, got_gradient = _loss_and_gradient(embeddings, bank, bank_labels, labels, TAU,
                                                block_rows, in_function=True)
    assert got_loss[2] == np.inf
    # The others, and the missing label's all-rows term, are untouched.
    others = np.arange(len(labels)) != 2
    loss_atol, gradient_atol = _tolerances(16, 700)
    np.testing.assert_allclose(got_loss[others], reference.aggregation_loss(
        embeddings[others], bank, bank_labels, labels[others], TAU), atol=loss_atol, rtol=0)
    logits = embeddings[2].astype(np.float64) @ bank.astype(np.float64).T / TAU
    softmax = np.exp(logits - reference.logsumexp(logits, axis=0))
    want = np.concatenate([reference.aggregation_loss_gradient(
        embeddings[others], bank, bank_labels, labels[others], TAU)[:2],
        [softmax @ bank / TAU]])
    np.testing.assert_allclose(got_gradient[:3], want, atol=gradient_atol, rtol=0)


def test_aggregation_loss_of_a_bank_of_unknown_size():
    embeddings, bank, bank_labels, labels = _blocked_problem(1000)

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32),
                                  tf.TensorSpec([None], tf.int64)])
    def loss(bank, bank_labels):
        return aggregation_loss(embeddings, bank, bank_labels, labels, TAU, block_rows=64)

    np.testing.assert_allclose(loss(bank, bank_labels).numpy(), reference.aggregation_loss(
        embeddings, bank, bank_labels, labels, TAU), atol=_tolerances(16, 700)[0], rtol=0)


def test_aggregation_loss_rejects_a_bad_block_size():
    embeddings, bank, bank_labels, labels = _problem(11, 2, 10, 4, 2)
    with pytest.raises(ValueError, match="block_rows must be positive"):
        aggregation_loss(embeddings, bank, bank_labels, labels, TAU, block_rows=0)


def test_pseudo_label_cross_entropy_masks_at_the_threshold_and_stops_the_target_gradient():
    # Confidences: 0.5 (a tie, argmax the first class), e/(e+1) ~ 0.731, ~1.
    target = tf.constant([[0.0, 0.0], [1.0, 0.0], [0.0, 30.0]])
    logits = tf.constant([[2.0, -1.0], [0.5, 0.25], [-3.0, 1.0]])
    want_ce = np.log(np.exp(logits.numpy().astype(np.float64)).sum(1)) - np.array(
        [2.0, 0.5, 1.0])
    for threshold, want_mask in ((0.0, [1, 1, 1]), (0.5, [1, 1, 1]), (0.5000001, [0, 1, 1]),
                                 (np.e / (np.e + 1) + 1e-6, [0, 0, 1]), (1.0, [0, 0, 1])):
        loss, mask = losses.pseudo_label_cross_entropy(target, logits, threshold)
        np.testing.assert_array_equal(mask.numpy(), want_mask, err_msg=str(threshold))
        np.testing.assert_allclose(loss.numpy(), np.array(want_mask) * want_ce, rtol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        total = tf.reduce_sum(losses.pseudo_label_cross_entropy(logits, logits)[0])
    gradient = tape.gradient(total, logits).numpy()
    # d CE / d logits = softmax - onehot(argmax): the target side adds nothing.
    probabilities = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose(gradient, probabilities - np.eye(2)[[0, 0, 1]], rtol=1e-6)


def test_pseudo_label_terms_are_per_example():
    """The labelled cross-entropy [b] and the unlabelled masked one and mask [u], no mean."""
    labelled_logits = np.array([[2.0, -1.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    labels = np.array([0, 0, 1], np.int64)
    target = np.array([[0.0, 3.0], [0.0, 0.1]], np.float32)  # confidences 0.95, 0.52
    logits = np.array([[1.0, 0.5], [-1.0, 2.0]], np.float32)
    labelled, unlabelled, mask = (t.numpy() for t in losses.pseudo_label_terms(
        labelled_logits, labels, target, logits, threshold=0.9))
    np.testing.assert_allclose(labelled, reference.cross_entropy(labelled_logits, labels),
                               rtol=1e-6)
    np.testing.assert_array_equal(mask, [1.0, 0.0])
    np.testing.assert_allclose(unlabelled, [reference.cross_entropy(logits[:1], [1])[0], 0.0],
                               rtol=1e-6)
