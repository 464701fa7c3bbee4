"""The data layer: sources with stable example indices, regime splits, augmentation and
input pipelines (subpackages and their layers: docs/architecture.md)."""
