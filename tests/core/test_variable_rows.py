"""Row ranges of tensors and variables: the values, and no whole read of a variable."""

import numpy as np
import tensorflow as tf

from llp_tf.core import losses, propagation, variable_rows

VALUES = np.arange(24, dtype=np.float32).reshape(8, 3)


def _op_types(function):
    """The op types of ``function``'s graph and of the functions it calls (loop bodies)."""
    graph = tf.function(function).get_concrete_function().graph.as_graph_def()
    return {node.op for node in graph.node} | {
        node.op for called in graph.library.function for node in called.node_def}


def test_rows_of_a_tensor_and_of_a_scattered_variable():
    variable = tf.Variable(VALUES)
    variable.scatter_update(tf.IndexedSlices(-VALUES[:1], [4]))  # copy-on-read from here
    want = VALUES.copy()
    want[4] = -VALUES[0]
    np.testing.assert_array_equal(variable_rows.rows(variable, 2, 4).numpy(), want[2:6])
    np.testing.assert_array_equal(variable_rows.rows(tf.constant(VALUES), 2, 4).numpy(),
                                  VALUES[2:6])


def test_a_variable_is_gathered_not_read_whole():
    variable = tf.Variable(VALUES)
    types = _op_types(lambda: variable_rows.rows(variable, 2, 4))
    assert "ResourceGather" in types and "ReadVariableOp" not in types


def test_the_loss_reads_a_variable_bank_by_blocks_and_equals_its_tensors():
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(50, 4)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    bank_labels = rng.integers(0, 3, 50)
    embeddings = tf.constant(bank[:5])
    labels = tf.constant(bank_labels[:5])
    rows, row_labels = tf.Variable(bank), tf.Variable(bank_labels)

    def loss(bank, bank_labels):
        return losses.aggregation_loss(embeddings, bank, bank_labels, labels, block_rows=16)

    types = _op_types(lambda: loss(rows, row_labels))
    assert "ResourceGather" in types and "ReadVariableOp" not in types
    np.testing.assert_array_equal(loss(rows, row_labels).numpy(),
                                  loss(tf.constant(bank), tf.constant(bank_labels)).numpy())


def test_gathered_rows_are_read_a_block_at_a_time_and_propagate_as_their_tensor():
    """The nearest labelled rows of `propagation.nearest_rows` over blocks of 16 gathered rows
    equal those of the gathered tensor; the graph gathers, never reads the bank whole."""
    rng = np.random.default_rng(1)
    bank = rng.normal(size=(200, 4)).astype(np.float32)
    index = np.sort(rng.choice(200, 70, replace=False))
    queries = tf.constant(rng.normal(size=(6, 4)), tf.float32)
    gathered = variable_rows.GatheredRows(tf.Variable(bank), tf.Variable(index))
    assert gathered.shape == (70, 4)
    np.testing.assert_array_equal(variable_rows.rows(gathered, 16, 16).numpy(), bank[index[16:32]])

    def nearest(rows):
        return propagation.nearest_rows(queries, rows, 5, block_rows=16)

    types = _op_types(lambda: nearest(gathered))
    assert "ResourceGather" in types and "ReadVariableOp" not in types
    for got, want in zip(nearest(gathered), nearest(tf.constant(bank[index]))):
        np.testing.assert_array_equal(np.sort(got.numpy()), np.sort(want.numpy()))


def test_an_xla_compiled_loss_over_a_variable_bank_equals_the_uncompiled_one():
    """Blocks of a static size: XLA compiles the gathers of the loss's loop."""
    rng = np.random.default_rng(2)
    bank = rng.normal(size=(50, 4)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    bank_labels = rng.integers(0, 3, 50)
    rows, row_labels = tf.Variable(bank), tf.Variable(bank_labels)
    embeddings, labels = tf.constant(bank[:5]), tf.constant(bank_labels[:5])

    def loss():
        return losses.aggregation_loss(embeddings, rows, row_labels, labels, block_rows=16)

    # The same float32 ops, fused by XLA: rounding apart, the same values.
    np.testing.assert_allclose(tf.function(loss, jit_compile=True)().numpy(), loss().numpy(),
                               rtol=1e-5)
