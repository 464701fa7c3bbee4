"""Batch normalisation as the network uses it: the release's decay 0.997 and epsilon 1e-5,
moving statistics averaged over replicas (aggregation "mean", so every replica's copy stays
identical, as in a single-device run), updates deferred past an XLA-compiled step
(`DeferredMovingStatistics`) or left out (`moving_statistics_kept`)."""

import contextlib
import threading
from typing import Any, Iterator, Optional, Sequence

import keras
from keras import ops

from llp_tf.models.config import BATCH_NORM_EPSILON, BATCH_NORM_MOMENTUM
from llp_tf.tensor_types import FloatTensor

# This thread's recorder and whether moving statistics are kept (one thread per replica).
_active = threading.local()


@keras.saving.register_keras_serializable(package="llp_tf")
class BatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` whose moving statistics are averaged over replicas;
    serialisable as "llp_tf>BatchNormalization" with Keras's config."""

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
        """The moving-average update of a training call from its moments, float32 [channels]."""
        for moving, value in ((self.moving_mean, mean), (self.moving_variance, variance)):
            moving.assign(ops.cast(moving, value.dtype) * self.momentum
                          + value * (1.0 - self.momentum))


def batch_norm(name: str, synchronized: bool = False, momentum: float = BATCH_NORM_MOMENTUM,
               epsilon: float = BATCH_NORM_EPSILON) -> BatchNormalization:
    """A channels-last `BatchNormalization` with the release's settings; ``synchronized``: batch
    statistics over all replicas."""
    return BatchNormalization(momentum=momentum, epsilon=epsilon,
                              synchronized=synchronized, name=name)


@contextlib.contextmanager
def moving_statistics_kept() -> Iterator[None]:
    """Within it, training-mode calls (in this thread) of `batch_norm` layers normalise with their
    batch moments but neither update nor record the moving statistics."""
    outer = getattr(_active, "kept", False)
    _active.kept = True
    try:
        yield
    finally:
        _active.kept = outer


class DeferredMovingStatistics:
    """Within it, training-mode calls of ``layers`` (in this thread) record their batch moments
    instead of updating their moving statistics; ``moments()`` returns them for
    `update_moving_statistics` to apply outside a compiled function."""

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
    """Applies `DeferredMovingStatistics.moments()` to the same ``layers``, in the same order."""
    for layer, (mean, variance) in zip(layers, moments, strict=True):
        layer.update_moving_statistics(mean, variance)
