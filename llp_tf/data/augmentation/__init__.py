"""Augmentation: weak and strong, on the host and the device, evaluation, views."""
