"""The input pipeline: epoch order, ``input_fn``s, streams, tf.data service input."""
