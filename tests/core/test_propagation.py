import numpy as np
import pytest
import tensorflow as tf

from llp_tf import local_density, propagate
from llp_tf.core import propagation
from tests import numerics, reference

TAU = 0.07


@pytest.mark.parametrize("seed,num_queries,num_rows,t,chunk_size", [
    (0, 50, 300, 25, 16),     # several chunks, last one partial
    (1, 33, 500, 50, 1024),   # one chunk larger than Q
    (2, 7, 10, 25, 3),        # t > N: every row counts
    (3, 64, 2000, 1, 64),     # t = 1: the nearest row only
])
def test_local_density_matches_equation(seed, num_queries, num_rows, t, chunk_size):
    rng = np.random.default_rng(seed)
    queries = reference.unit_rows(rng, num_queries, 16)
    bank = reference.unit_rows(rng, num_rows, 16)
    got = local_density(queries, bank, t=t, temperature=TAU,
                                    chunk_size=chunk_size).numpy()
    want = reference.local_density(queries, bank, t, TAU)
    assert got.shape == (num_queries,) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_local_density_of_bank_rows_counts_the_row_itself():
    rng = np.random.default_rng(4)
    bank = reference.unit_rows(rng, 100, 8)
    got = propagation.log_local_density(bank, bank, t=1, temperature=TAU).numpy()
    # The nearest row of a unit row is itself: rho = exp(1 / tau).
    np.testing.assert_allclose(got, np.full(100, 1.0 / TAU), rtol=1e-5)


def test_local_density_is_exact_at_temperature_0_07_with_100k_rows():
    rng = np.random.default_rng(5)
    bank = reference.unit_rows(rng, 100_000, 128)
    queries = np.concatenate([bank[:20], reference.unit_rows(rng, 20, 128)])
    got = local_density(queries, bank, t=25, temperature=TAU,
                                    chunk_size=8).numpy()
    want = reference.local_density(queries, bank, 25, TAU)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_local_density_chunk_size_does_not_change_the_result():
    rng = np.random.default_rng(6)
    queries = reference.unit_rows(rng, 37, 32)
    bank = reference.unit_rows(rng, 400, 32)
    results = [local_density(queries, bank, t=10, chunk_size=c).numpy()
               for c in (1, 5, 37, 100)]
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-5)


def test_local_density_inside_tf_function():
    rng = np.random.default_rng(7)
    queries = reference.unit_rows(rng, 10, 8)
    bank = reference.unit_rows(rng, 50, 8)
    fn = tf.function(lambda q, b: local_density(q, b, t=5, chunk_size=4))
    np.testing.assert_allclose(fn(queries, bank).numpy(),
                               reference.local_density(queries, bank, 5, TAU), rtol=1e-4)


def _log_density_bound(dim, rows):
    """How far a float32 log rho may lie from the float64 one: a logit q.b / tau of unit
    vectors in R^dim is off by at most (dim + 1) u / tau (dim products and sums of terms whose
    absolute values sum to at most 1, and the division), a sum of at most ``rows`` shifted
    exponentials by (rows - 1) u relative, so its log by that much; exp and log of numbers of
    size up to 1 / tau add a few u / tau. The paper's form subtracts two such logsumexps."""
    return 2.0 * ((dim + 1) / TAU + rows + 4 / TAU) * numerics.U


@pytest.mark.parametrize("seed,num_queries,num_rows,t,chunk_size", [
    (0, 50, 300, 25, 16),     # several chunks, last one partial
    (2, 7, 10, 25, 3),        # t > N: every row counts, rho = 1
    (3, 64, 2000, 1, 64),     # t = 1: the nearest row only
])
def test_paper_normalised_density_matches_equation_7(seed, num_queries, num_rows, t,
                                                     chunk_size):
    """rho_i = sum over the t nearest rows j of P(j|q_i) = exp(q_i.b_j / tau) / Z(q_i)."""
    rng = np.random.default_rng(seed)
    queries = reference.unit_rows(rng, num_queries, 16)
    bank = reference.unit_rows(rng, num_rows, 16)
    got = propagation.log_local_density(queries, bank, t=t, temperature=TAU,
                                        chunk_size=chunk_size, normalisation="paper").numpy()
    want = np.log(reference.local_density(queries, bank, t, TAU, normalisation="paper"))
    assert got.dtype == np.float32 and got.shape == (num_queries,)
    assert np.all(want <= 0) and not np.allclose(want, 0) or t >= num_rows
    np.testing.assert_allclose(got, want, atol=_log_density_bound(16, num_rows), rtol=0)
    # Not the release's raw sum: the two differ by log Z, at least log(rows) - 1/tau away.
    release = np.log(reference.local_density(queries, bank, t, TAU))
    assert np.all(np.abs(release - got) > 1.0)


@pytest.mark.parametrize("block_rows", [7, 25, 1000])
def test_log_partition_in_blocks_is_the_logsumexp_over_every_row(block_rows):
    """Blocks of 7 over 50 rows: 7 whole blocks and a tail of 1; 25: two blocks, no tail."""
    rng = np.random.default_rng(11)
    queries, bank = reference.unit_rows(rng, 9, 8), reference.unit_rows(rng, 50, 8)
    got = propagation.log_partition(queries / TAU, bank, block_rows=block_rows).numpy()
    want = reference.logsumexp(queries.astype(np.float64) @ bank.astype(np.float64).T / TAU,
                               axis=1)
    np.testing.assert_allclose(got, want, atol=_log_density_bound(8, 50), rtol=0)


def test_the_default_density_is_the_releases_raw_sum_bit_for_bit():
    """The default is what every earlier run computed: per chunk, the logsumexp of the t
    nearest scores, nothing subtracted."""
    rng = np.random.default_rng(12)
    queries, bank = reference.unit_rows(rng, 40, 16), reference.unit_rows(rng, 300, 16)
    got = propagation.log_local_density(queries, bank, t=25, temperature=TAU,
                                        chunk_size=64).numpy()

    @tf.function
    def before(queries, bank):
        return tf.reduce_logsumexp(propagation.nearest_rows(queries / TAU, bank, 25)[0],
                                   axis=1)

    np.testing.assert_array_equal(got, before(queries, bank).numpy())
    assert propagation.DENSITY_NORMALISATIONS[0] == "release"


def test_an_unknown_normalisation_is_refused():
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="normalisation must be one of release, paper"):
        local_density(x, x, normalisation="global")


@pytest.mark.parametrize("bad", [dict(t=0), dict(temperature=0.0), dict(chunk_size=0)])
def test_local_density_rejects_non_positive_settings(bad):
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="must be positive"):
        local_density(x, x, **bad)


def _check_propagation(got_classes, got_confidence, want_classes, want_confidence,
                       class_weights):
    got_classes = got_classes.numpy()
    got_confidence = got_confidence.numpy()
    assert got_classes.dtype == np.int64 and got_confidence.dtype == np.float32
    np.testing.assert_allclose(got_confidence, want_confidence, atol=1e-4)
    # Classes must agree except where the two best classes tie (to 1e-4).
    top2 = -np.sort(-class_weights, axis=1)[:, :2]
    tied = (top2[:, 0] - top2[:, 1]) < 1e-4 if class_weights.shape[1] > 1 else np.zeros(
        len(got_classes), bool)
    assert np.array_equal(got_classes[~tied], want_classes[~tied])
    # At a tie the chosen class must still be one of the best.
    chosen = class_weights[np.arange(len(got_classes)), got_classes]
    np.testing.assert_allclose(chosen, want_confidence, atol=1e-4)


@pytest.mark.parametrize("use_density", [False, True])
@pytest.mark.parametrize("seed,batch,labelled,classes,k,dim", [
    (0, 32, 200, 10, 10, 16),
    (1, 17, 50, 7, 3, 8),
    (2, 8, 6, 4, 10, 8),       # k > M: every labelled row votes
    (3, 16, 40, 1, 10, 8),     # a single class: confidence 1
    (4, 64, 1000, 100, 10, 32),
])
def test_propagate_matches_equation(use_density, seed, batch, labelled, classes, k, dim):
    rng = np.random.default_rng(seed)
    embeddings = reference.unit_rows(rng, batch, dim)
    labelled_bank = reference.unit_rows(rng, labelled, dim)
    labelled_classes = rng.integers(0, classes, labelled)
    density = None
    if use_density:
        density = reference.local_density(labelled_bank, labelled_bank, 5, TAU).astype(np.float32)
    got = propagate(embeddings, labelled_bank, labelled_classes, classes, k=k,
                                temperature=TAU, density=density)
    want = reference.propagate(embeddings, labelled_bank, labelled_classes, classes, k, TAU,
                               density)
    _check_propagation(*got, *want)
    if classes == 1:
        np.testing.assert_allclose(got[1].numpy(), 1.0, atol=1e-6)
        assert np.all(got[0].numpy() == 0)


@pytest.mark.parametrize("use_density", [False, True])
def test_propagate_is_exact_at_temperature_0_07_with_100k_labelled_rows(use_density):
    rng = np.random.default_rng(8)
    labelled_bank = reference.unit_rows(rng, 100_000, 128)
    labelled_classes = rng.integers(0, 1000, 100_000)
    # Queries near some labelled rows, so the votes are far from uniform.
    embeddings = labelled_bank[:64] + 0.05 * reference.unit_rows(rng, 64, 128)
    embeddings = (embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)).astype(
        np.float32)
    density = None
    if use_density:
        density = rng.uniform(1e6, 4e7, 100_000).astype(np.float32)
    got = propagate(embeddings, labelled_bank, labelled_classes, 1000, k=10,
                                temperature=TAU, density=density)
    want = reference.propagate(embeddings, labelled_bank, labelled_classes, 1000, 10, TAU,
                               density)
    _check_propagation(*got, *want)


def test_propagate_exact_tie_gives_half_confidence():
    # Two labelled rows at the same similarity, one of each class.
    labelled_bank = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    query = np.array([[np.sqrt(0.5), np.sqrt(0.5)]], np.float32)
    classes, confidence = propagate(query, labelled_bank, [0, 1], 2, k=2)
    assert classes.numpy()[0] in (0, 1)
    np.testing.assert_allclose(confidence.numpy(), [0.5], atol=1e-6)


def test_local_weighting_can_change_the_vote():
    # Class 0 has three rows packed in a clump (rho ~ 3 exp(1/tau)), class 1 one
    # isolated row (rho ~ exp(1/tau)). The query is a little closer to the
    # isolated row: the naive vote sums three clump weights and picks class 0;
    # dividing by the clump's density hands the vote to class 1.
    angles = np.array([0.0, 0.01, 0.02, 1.0])
    labelled_bank = np.stack([np.cos(angles), np.sin(angles)], 1).astype(np.float32)
    labelled_classes = np.array([0, 0, 0, 1])
    query = np.array([[np.cos(0.52), np.sin(0.52)]], np.float32)
    density = local_density(labelled_bank, labelled_bank, t=3).numpy()
    naive = propagate(query, labelled_bank, labelled_classes, 2, k=4)
    local = propagate(query, labelled_bank, labelled_classes, 2, k=4,
                                  density=density)
    assert naive[0].numpy()[0] == 0
    assert local[0].numpy()[0] == 1
    want = reference.propagate(query, labelled_bank, labelled_classes, 2, 4, TAU, density)
    np.testing.assert_allclose(local[1].numpy(), want[1], atol=1e-5)


def test_propagate_local_weights_choose_the_voters():
    # With k = 1 the single voter is the row with the largest P/rho, not the nearest.
    labelled_bank = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    query = np.array([[0.8, 0.6]], np.float32)
    density = np.array([1e6, 1.0], np.float32)  # row 0 sits in a very dense region
    classes, _ = propagate(query, labelled_bank, [0, 1], 2, k=1, density=density)
    assert classes.numpy()[0] == 1
    classes, _ = propagate(query, labelled_bank, [0, 1], 2, k=1)
    assert classes.numpy()[0] == 0


def test_propagate_inside_tf_function_with_unknown_sizes():
    rng = np.random.default_rng(9)
    embeddings = reference.unit_rows(rng, 12, 8)
    labelled_bank = reference.unit_rows(rng, 5, 8)
    labelled_classes = np.array([0, 1, 2, 1, 0])
    spec = tf.TensorSpec([None, 8], tf.float32)

    @tf.function(input_signature=[spec, spec, tf.TensorSpec([None], tf.int64)])
    def run(e, b, c):
        return propagate(e, b, c, 3, k=10)

    got = run(embeddings, labelled_bank, labelled_classes)
    want = reference.propagate(embeddings, labelled_bank, labelled_classes, 3, 10, TAU)
    _check_propagation(*got, *want)


@pytest.mark.parametrize("seed,batch,rows,k,offsets", [
    (0, 16, 4096, 10, False),    # grouped, rows a multiple of the group
    (1, 16, 5000, 10, True),     # grouped with a tail and offsets
    (2, 8, 20000, 25, True),
    (3, 8, 100, 10, False),      # too few rows: plain top-k
])
def test_nearest_rows_is_an_exact_top_k(seed, batch, rows, k, offsets):
    rng = np.random.default_rng(seed)
    queries = reference.unit_rows(rng, batch, 16)
    bank = reference.unit_rows(rng, rows, 16)
    row_offsets = rng.uniform(0, 0.5, rows).astype(np.float32) if offsets else None
    if rows >= 5000:
        assert propagation._group_size(rows, k) > 0, "the grouped path must be exercised"
    scores, index = propagation.nearest_rows(queries, bank, k, row_offsets)
    want = queries.astype(np.float64) @ bank.astype(np.float64).T
    if offsets:
        want -= row_offsets
    want_index = np.argsort(-want, axis=1)[:, :k]
    got_index = np.sort(index.numpy(), axis=1)
    np.testing.assert_array_equal(got_index, np.sort(want_index, axis=1))
    np.testing.assert_allclose(scores.numpy(), np.take_along_axis(want, index.numpy(), 1),
                               atol=1e-5)


@pytest.mark.parametrize("rows,block_rows,offsets", [
    (10_000, 2_000, False),   # five blocks, no tail
    (10_700, 2_000, True),    # five blocks and a tail of 700 rows
    (4_010, 2_000, True),     # a tail smaller than the group size
])
def test_nearest_rows_in_blocks_is_an_exact_top_k(rows, block_rows, offsets):
    rng = np.random.default_rng(rows)
    queries = reference.unit_rows(rng, 9, 16)
    bank = reference.unit_rows(rng, rows, 16)
    row_offsets = rng.uniform(0, 0.5, rows).astype(np.float32) if offsets else None
    scores, index = propagation.nearest_rows(queries, bank, 10, row_offsets,
                                             block_rows=block_rows)
    want = queries.astype(np.float64) @ bank.astype(np.float64).T
    if offsets:
        want -= row_offsets
    np.testing.assert_array_equal(np.sort(index.numpy(), axis=1),
                                  np.sort(np.argsort(-want, axis=1)[:, :10], axis=1))
    np.testing.assert_allclose(scores.numpy(), np.take_along_axis(want, index.numpy(), 1),
                               atol=1e-5)


@pytest.mark.parametrize("k", [1, 3])
def test_nearest_rows_finds_winners_in_the_tail_after_the_last_group(k):
    # 4,010 rows do not fill whole groups; the queries are copies of the last
    # rows, so each one's best row lies in the tail.
    rng = np.random.default_rng(11)
    bank = reference.unit_rows(rng, 4010, 32)
    assert 4010 % propagation._group_size(4010, k) != 0
    queries = bank[-5:]
    scores, index = propagation.nearest_rows(queries, bank, k)
    want = np.argsort(-(queries.astype(np.float64) @ bank.astype(np.float64).T), axis=1)[:, :k]
    np.testing.assert_array_equal(np.sort(index.numpy(), axis=1), np.sort(want, axis=1))
    assert all(4005 + i in index.numpy()[i] for i in range(5))


def _reference_vote(scores, labels, num_classes):
    """Eq. 6 in float64 numpy, with the neighbours whose label is not a class left
    out: [B, C] shares of each class's summed exp(score), zero where none votes."""
    shares = np.zeros((len(scores), num_classes))
    for row, (row_scores, row_labels) in enumerate(zip(scores.astype(np.float64), labels)):
        votes = (row_labels >= 0) & (row_labels < num_classes)
        if votes.any():
            weights = np.exp(row_scores[votes] - row_scores[votes].max())
            np.add.at(shares[row], row_labels[votes], weights / weights.sum())
    return shares


def test_class_vote_leaves_out_neighbours_without_a_class():
    rng = np.random.default_rng(9)
    c, k = 5, 6
    # Similarities / tau as the knn signature passes them: up to 1 / 0.07.
    scores = (rng.uniform(-1, 1, (40, k)) / TAU).astype(np.float32)
    labels = rng.integers(0, c, (40, k))
    no_class = rng.uniform(size=(40, k)) < 0.4
    # -1 (an exported row without a class) and instance ids (>= C) do not vote.
    labels[no_class] = rng.choice([-1, c, c + 17], no_class.sum())
    labels[0] = -1  # no voter at all
    labels[1] = [c + 1, 2, 2, -1, 4, 2]
    scores[1] = [30.0, 1.0, 2.0, 29.0, 3.0, 0.5]  # the best two do not vote
    got = propagation.class_vote(scores, labels, c).numpy()
    want = _reference_vote(scores, labels, c)
    assert got.dtype == np.float32 and got.shape == (40, c)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_array_equal(got[0], np.zeros(c))
    # Row 1 by hand: class 4 has exp(3), class 2 exp(1) + exp(2) + exp(0.5).
    total = np.exp(3.0) + np.exp(1.0) + np.exp(2.0) + np.exp(0.5)
    np.testing.assert_allclose(got[1], [0, 0, 1 - np.exp(3.0) / total, 0, np.exp(3.0) / total],
                               atol=1e-6)
    voted = ((labels >= 0) & (labels < c)).any(axis=1)
    np.testing.assert_allclose(got[voted].sum(axis=1), 1.0, atol=1e-6)


def test_class_vote_inside_tf_function_with_unknown_sizes():
    rng = np.random.default_rng(10)
    scores = rng.normal(size=(7, 4)).astype(np.float32) * 10
    labels = rng.integers(-1, 3, (7, 4))
    vote = tf.function(lambda s, l: propagation.class_vote(s, l, 3), input_signature=[
        tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.int64)])
    np.testing.assert_allclose(vote(scores, labels).numpy(), _reference_vote(scores, labels, 3),
                               atol=1e-6)


def test_a_search_block_holds_the_budgets_scores_and_at_least_k_rows():
    """256 MiB of float32 scores: 65,536 rows for 1,024 queries, the default 262,144 for 256
    (and no more for fewer); never fewer rows than k; a power of two below the budget."""
    assert propagation.score_block_rows(1024, 10) == 65_536
    assert propagation.score_block_rows(256, 10) == propagation.DEFAULT_BLOCK_ROWS
    assert propagation.score_block_rows(8, 10) == propagation.DEFAULT_BLOCK_ROWS
    assert propagation.score_block_rows(3, 1000, budget=100) == 1000
    assert propagation.score_block_rows(3, 2, budget=100) == 8  # 100 // 12 = 8 rows
    assert propagation.score_block_rows(3, 2, budget=95) == 4  # 7 rows: down to 4

