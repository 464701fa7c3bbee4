"""The input pipeline: an epoch's order (`epoch_order`), the ``input_fn``s of
training and evaluation (`input_fns`), a method's input as named streams
(`streams`), and training input from tf.data service workers (`data_service`)."""
