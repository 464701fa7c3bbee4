"""The data layer: sources with stable example indices, regime splits, augmentation,
input pipelines.

Subpackages, each importing only those listed before it, `splits` and
`augmentation` not each other (`tests/test_layers.py`):
- `decoding`: encoded images to pixels, whole or only a crop's window, naming
  the file or record that fails;
- `sources`: the contract of a data source (`sources.base.Source`), each
  source, `sources.registry.load_source` opening one by name, and TFRecord
  shards scanned and written;
- `splits`: which examples a run labels, uses and leaves out (the regime
  split, label subsets, exclude lists, the images that do not decode);
- `augmentation`: the weak and strong augmentations, each on the host and on
  the device, the evaluation transform, and the views of one example;
- `pipeline`: an epoch's order and the ``input_fn``s of training and
  evaluation, as named streams, locally or from tf.data service workers.
`config` (the data section of the config) and `service_address` sit below
them all and import no TensorFlow.
"""
