"""Running sums of an epoch's training metrics, kept in the checkpoint, so that an epoch
resumed in its middle reports the mean of all its steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from llp_tf.training.step_metrics import StepRecords, SubsetMean, subset_value


class EpochTotals(tf.Module):
    """Per metric of any phase (``phases``: each phase's name -> `Mean` or `SubsetMean`,
    `Method.metric_kinds`), the sum of this epoch's step records (``sums``), their count
    (``counts``) and for a `SubsetMean` the sum of its weight records (``weights``)."""

    def __init__(self, phases: Iterable[Mapping[str, type]]) -> None:
        super().__init__(name="epoch_totals")
        kinds = {}
        for phase in phases:
            for name, kind in phase.items():
                if kinds.setdefault(name, kind) is not kind:
                    raise ValueError(f"The metric {name} is a {kinds[name].__name__} in one "
                                     f"phase and a {kind.__name__} in another.")
        names = sorted(kinds)
        # float64: a sum over 100k steps keeps float32 metrics' precision.
        self.sums = {name: _total(f"sum_{name}") for name in names}
        self.counts = {name: tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name=f"count_{name}") for name in names}
        self.weights = {name: _total(f"weight_{name}") for name in names
                        if kinds[name] is SubsetMean}

    def reset(self) -> None:
        """Starts a new epoch."""
        for name in self.sums:
            self.sums[name].assign(0.0)
            self.counts[name].assign(0)
        for weight in self.weights.values():
            weight.assign(0.0)

    def add(self, records: StepRecords) -> None:
        """Adds one loop's `StepRecords`."""
        for name, values in records.values.items():
            self.sums[name].assign_add(_sum(values))
            self.counts[name].assign_add(int(np.size(values)))
        for name, weights in records.weights.items():
            self.weights[name].assign_add(_sum(weights))

    def means(self, names: Sequence[str]) -> dict[str, float]:
        """``{name: mean}`` of ``names`` (in that order) that have values over the epoch's
        steps: a `Mean`'s mean, a `SubsetMean`'s `subset_value` (left out if it is None)."""
        means = {}
        for name in names:
            count = int(self.counts[name].numpy())
            if not count:
                continue
            mean = float(self.sums[name].numpy()) / count
            if name in self.weights:
                mean = subset_value(mean, float(self.weights[name].numpy()) / count)
            if mean is not None:
                means[name] = mean
        return means


def _total(name: str) -> tf.Variable:
    return tf.Variable(0.0, dtype=tf.float64, trainable=False, name=name)


def _sum(values: np.ndarray) -> float:
    return float(np.sum(np.asarray(values, np.float64)))
