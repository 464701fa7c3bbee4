"""Data sources: the contract every source meets (`base`), the sources (`embedded`,
`tfds`, `tfrecord`, `folder`, `list_files`, `places205`), opening one by its
``--dataset`` name (`registry`), and TFRecord shards scanned (`shards`) and
written (`tfrecord_builder`)."""
