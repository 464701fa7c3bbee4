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
"""

from typing import Any

import keras

BATCH_NORM_MOMENTUM = 0.997
BATCH_NORM_EPSILON = 1e-5


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


def batch_norm(name: str, synchronized: bool = False, momentum: float = BATCH_NORM_MOMENTUM,
               epsilon: float = BATCH_NORM_EPSILON) -> BatchNormalization:
    """A channels-last `BatchNormalization` with the release's settings.

    `synchronized=True` computes training-mode statistics over the global
    batch of all replicas instead of each replica's share.
    """
    return BatchNormalization(momentum=momentum, epsilon=epsilon,
                              synchronized=synchronized, name=name)
