"""Data sources: their contract, each source, opening one by name, TFRecord shards."""
