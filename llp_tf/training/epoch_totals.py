"""Running sums of an epoch's training metrics, kept in the checkpoint, so that an epoch
resumed in its middle reports the mean of all its steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from llp_tf.tensor_types import Array


class EpochTotals(tf.Module):
    """Per metric name (``names``: every one any phase reports), the sum of this epoch's per-step
    values and their count."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(name="epoch_totals")
        names = sorted(set(names))
        # float64: a sum over 100k steps keeps float32 metrics' precision.
        self.sums = {name: tf.Variable(0.0, dtype=tf.float64, trainable=False, name=f"sum_{name}")
                     for name in names}
        self.counts = {name: tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name=f"count_{name}") for name in names}

    def reset(self) -> None:
        """Starts a new epoch."""
        for name in self.sums:
            self.sums[name].assign(0.0)
            self.counts[name].assign(0)

    def add(self, metrics: Mapping[str, Array]) -> None:
        """Adds one loop's metrics: name -> float32 [steps], one value per step."""
        for name, values in metrics.items():
            self.sums[name].assign_add(float(np.sum(np.asarray(values, np.float64))))
            self.counts[name].assign_add(int(np.size(values)))

    def means(self, names: Sequence[str]) -> dict[str, float]:
        """``{name: mean}`` of ``names`` (in that order) that have values."""
        return {name: float(self.sums[name].numpy()) / int(self.counts[name].numpy())
                for name in names if int(self.counts[name].numpy()) > 0}
