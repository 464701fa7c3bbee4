"""Batch normalisation as the network uses it.

Settings: TF official / the LLP release use a decay of 0.997 and epsilon 1e-5
(Keras defaults to 0.99 and 1e-3); Keras's `momentum` is that decay.

Replica consistency: Keras 3 creates the moving mean and variance with
aggregation "none", so under `tf.distribute.MirroredStrategy` each replica's
training-mode update writes only its own copy, the copies drift apart (unless
the batch norm is synchronised), and a checkpoint keeps replica 0's. Here the
moving statistics are created with aggregation "mean": every update is
averaged over replicas, so the copies stay identical, and with equal
per-replica batches the moving mean follows the global batch mean, as in a
single-device run.

Deferred updates: an XLA-compiled replica step cannot hold that averaging
(a cross-replica `merge_call`). Inside `DeferredMovingStatistics`, a
training-mode call normalises with the batch moments as usual but records
them instead of updating the moving statistics; the step returns them from
the compiled part and applies them after it, with Keras's arithmetic.

Kept statistics: inside `moving_statistics_kept`, a training-mode call
normalises with the batch moments but neither updates nor records the moving
statistics, so a step can pass a second batch through the network without
its moments reaching them (pseudo-label's unlabelled pass).
"""

import contextlib
import threading
from typing import Any, Iterator, Optional, Sequence

import keras
from keras import ops

from llp_tf.models.config import BATCH_NORM_EPSILON, BATCH_NORM_MOMENTUM
from llp_tf.tensor_types import FloatTensor

# The recorder of the forward pass running in this thread, and whether its
# moving statistics are kept: MirroredStrategy runs each replica's step in its
# own thread, each with its own recorder.
_active = threading.local()


class BatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` with replica-averaged moving stats.

    Same arguments, inputs and outputs as the Keras layer (float [..., C] in,
    same shape and dtype out); only the moving statistics' aggregation
    differs.
    """

    def add_weight(self, *args: Any, trainable: bool = True, aggregation: str = "none",
                   **kwargs: Any) -> keras.Variable:
        if not trainable:
            aggregation = "mean"
        return super().add_weight(*args, trainable=trainable,
                                  aggregation=aggregation, **kwargs)

    def call(self, inputs: FloatTensor, training: Optional[bool] = None,
             mask: Optional[FloatTensor] = None) -> FloatTensor:
        recorder = getattr(_active, "recorder", None)
        kept = getattr(_active, "kept", False)
        if (recorder is None and not kept) or not (training and self.trainable) \
                or mask is not None or self.renorm:
            return super().call(inputs, training=training, mask=mask)
        # Keras's training-mode arithmetic, without the moving-statistic update.
        inputs = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        mean, variance = self._moments(inputs, None)
        if not kept:
            recorder.record(self, mean, variance)
        outputs = ops.batch_normalization(
            x=inputs, mean=mean, variance=variance, axis=self.axis,
            offset=ops.cast(self.beta, inputs.dtype) if self.center else None,
            scale=ops.cast(self.gamma, inputs.dtype) if self.scale else None,
            epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)

    def update_moving_statistics(self, mean: FloatTensor, variance: FloatTensor) -> None:
        """The moving-average update a training-mode call makes, from its
        batch moments (float32 [channels] each)."""
        for moving, value in ((self.moving_mean, mean), (self.moving_variance, variance)):
            moving.assign(ops.cast(moving, value.dtype) * self.momentum
                          + value * (1.0 - self.momentum))


def batch_norm(name: str, synchronized: bool = False, momentum: float = BATCH_NORM_MOMENTUM,
               epsilon: float = BATCH_NORM_EPSILON) -> BatchNormalization:
    """A channels-last `BatchNormalization` with the release's settings.

    `synchronized=True` computes training-mode statistics over the global
    batch of all replicas instead of each replica's share.
    """
    return BatchNormalization(momentum=momentum, epsilon=epsilon,
                              synchronized=synchronized, name=name)


@contextlib.contextmanager
def moving_statistics_kept() -> Iterator[None]:
    """Within it, training-mode calls (in this thread) of `BatchNormalization`
    layers without renorm or mask, as `batch_norm` makes them, normalise with
    their batch moments (over all replicas if synchronised) and leave the
    moving statistics as they are: no update, nothing recorded by an enclosing
    `DeferredMovingStatistics`."""
    outer = getattr(_active, "kept", False)
    _active.kept = True
    try:
        yield
    finally:
        _active.kept = outer


class DeferredMovingStatistics:
    """Within it, training-mode calls of ``layers`` record their batch moments
    (in this thread) instead of updating their moving statistics.

    ``moments()``, after the forward pass inside the block, returns them as a
    list of (mean, variance) float32 [channels] pairs in the order of
    ``layers``: a nest a compiled function can return, for
    `update_moving_statistics` to apply outside it.
    """

    def __init__(self, layers: Sequence[BatchNormalization]) -> None:
        self.layers = list(layers)
        self._moments = {}

    def __enter__(self) -> "DeferredMovingStatistics":
        self._moments = {}
        _active.recorder = self
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _active.recorder = None

    def record(self, layer: BatchNormalization, mean: FloatTensor,
               variance: FloatTensor) -> None:
        """Called by a layer's training-mode call."""
        if id(layer) in self._moments:
            raise RuntimeError(f"Batch norm {layer.name} ran twice in one deferred forward "
                               "pass; its moving statistics would be updated once.")
        self._moments[id(layer)] = (mean, variance)

    def moments(self) -> list[tuple[FloatTensor, FloatTensor]]:
        """(mean, variance) of every layer, in layer order."""
        missing = [layer.name for layer in self.layers if id(layer) not in self._moments]
        if missing:
            raise RuntimeError(f"Batch norm(s) {', '.join(missing)} did not run in training "
                               "mode, their moving statistics not kept, in the deferred "
                               "forward pass.")
        return [self._moments[id(layer)] for layer in self.layers]


def update_moving_statistics(layers: Sequence[BatchNormalization],
                             moments: Sequence[tuple[FloatTensor, FloatTensor]]) -> None:
    """Applies `DeferredMovingStatistics.moments()`'s values to ``layers``
    (the same layers, in the same order)."""
    for layer, (mean, variance) in zip(layers, moments, strict=True):
        layer.update_moving_statistics(mean, variance)
