"""A training step's metrics: each made in the replica step by a reducer that keeps this
replica's (sum, weight), declared per phase by a `StepMetrics` dataclass, and reduced over
replicas and steps the same way for every method.

- `batch_mean(values)`: the mean over the batch's rows (every replica has as many);
- `subset_mean(values, mask)`: the mean over the rows of a subset (a replica may hold none);
- `replica_value(value)`: a value of each replica (weight decay, a ramp weight, the loss),
  averaged over the replicas.

A step records, summed over the R replicas: a `Mean`'s total / weight / R; a `SubsetMean`'s
total / rows / R and weight / rows / R (its numerator and the share of the batch in the
subset). A mean over steps is the mean of a `Mean`'s records, and mean(numerators) /
mean(weights) of a `SubsetMean`'s (`subset_value`).
"""

import dataclasses
import typing
from typing import NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf

from llp_tf.tensor_types import FloatTensor

#: The name of every step's loss among its metrics (a `replica_value`).
LOSS = "loss"


class Mean(NamedTuple):
    """A mean over this replica's rows, or a value of this replica: ``total`` float32 [], what
    it sums, and ``weight`` float32 [], what it is divided by (the rows, or 1)."""

    total: FloatTensor
    weight: FloatTensor

    @property
    def value(self) -> FloatTensor:
        """float32 []: this replica's mean, total / weight."""
        return self.total / self.weight

    def shares(self, replicas: int) -> tuple[FloatTensor]:
        """(total / weight / R,): what a step records of this replica, summed over replicas."""
        return (self.total / self.weight / replicas,)


class SubsetMean(NamedTuple):
    """A mean over the rows of a subset of this replica's batch: ``total`` float32 [], the
    sum over the subset's rows; ``weight`` float32 [], its rows; ``rows`` float32 [], the
    batch's rows."""

    total: FloatTensor
    weight: FloatTensor
    rows: FloatTensor

    def shares(self, replicas: int) -> tuple[FloatTensor, FloatTensor]:
        """(total / rows / R, weight / rows / R): this replica's numerator and weight shares."""
        return self.total / self.rows / replicas, self.weight / self.rows / replicas


#: A metric of a replica's step.
Metric = Union[Mean, SubsetMean]


def batch_mean(values: FloatTensor, rows: Optional[FloatTensor] = None) -> Mean:
    """The mean of ``values`` float [b] over this replica's batch of ``rows`` rows (default b;
    more when ``values`` cover some of them and the others count 0)."""
    values = tf.cast(values, tf.float32)
    rows = tf.cast(tf.size(values) if rows is None else rows, tf.float32)
    return Mean(tf.reduce_sum(values), rows)


def subset_mean(values: FloatTensor, mask: FloatTensor) -> SubsetMean:
    """The mean of ``values`` float [b] over the rows where ``mask`` (float or bool [b], 1 or
    0) is 1."""
    values = tf.cast(values, tf.float32)
    mask = tf.cast(mask, tf.float32)
    return SubsetMean(tf.reduce_sum(values * mask), tf.reduce_sum(mask),
                      tf.cast(tf.size(mask), tf.float32))


def replica_value(value: FloatTensor) -> Mean:
    """A value of this replica, float []: the same on every replica (weight decay, a ramp
    weight), or a mean over its rows (its loss: every replica has as many rows)."""
    return Mean(tf.cast(value, tf.float32), tf.constant(1.0))


@dataclasses.dataclass(frozen=True)
class StepMetrics:
    """The metrics of one phase's step: a subclass is a frozen dataclass whose fields are the
    metric names, each annotated `Mean` or `SubsetMean`, defined beside the forward that
    builds it by keyword (a name left out or added is a TypeError there). The loss is not
    among them: every step reports its `StepOutput` loss as ``loss``."""

    @classmethod
    def kinds(cls) -> dict[str, type]:
        """name -> `Mean` or `SubsetMean`, in declaration order."""
        hints = typing.get_type_hints(cls)
        kinds = {field.name: hints[field.name] for field in dataclasses.fields(cls)}
        wrong = [name for name, kind in kinds.items() if kind not in (Mean, SubsetMean)]
        if wrong or LOSS in kinds:
            raise TypeError(f"{cls.__name__} declares {', '.join(wrong) or LOSS}: a step "
                            f"metric is a Mean or a SubsetMean, and not named {LOSS!r} "
                            "(the StepOutput's loss is).")
        return kinds

    def by_name(self) -> dict[str, Metric]:
        """The metrics by name, in declaration order; TypeError for one not of its kind."""
        kinds = self.kinds()
        metrics = {name: getattr(self, name) for name in kinds}
        for name, kind in kinds.items():
            if type(metrics[name]) is not kind:
                raise TypeError(f"{type(self).__name__}.{name} is declared a {kind.__name__} "
                                f"but was given {type(metrics[name]).__name__}; build it with "
                                "batch_mean, replica_value or subset_mean as declared.")
        return metrics


def subset_value(numerator_mean: float, weight_mean: float) -> Optional[float]:
    """A `SubsetMean` over some steps from the means of its numerator and weight records, or
    None when no step had a row in the subset (it does not apply)."""
    return numerator_mean / weight_mean if weight_mean > 0 else None


@dataclasses.dataclass(frozen=True)
class StepRecords:
    """What some steps recorded, float32 [steps] each: ``values`` by name in declaration order
    (a `Mean`'s value, a `SubsetMean`'s numerator share) and ``weights`` of the
    `SubsetMean`s (the share of each step's batch in the subset)."""

    values: dict[str, np.ndarray]
    weights: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def means(self) -> dict[str, float]:
        """Each metric over these steps, by name; a `SubsetMean` left out when it does not
        apply (`subset_value`)."""
        means = {}
        for name, values in self.values.items():
            mean = float(np.mean(values))
            if name in self.weights:
                mean = subset_value(mean, float(np.mean(self.weights[name])))
            if mean is not None:
                means[name] = mean
        return means
