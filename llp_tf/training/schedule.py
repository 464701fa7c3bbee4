"""Learning-rate schedule: step drops at given epochs, optionally on a plateau.

The learning rate is constant within an epoch. It is the initial rate times
``drop_factor`` for every drop epoch reached, times ``drop_factor`` again for
every plateau drop taken so far. The plateau state lives in variables so that
it is saved in checkpoints with everything else.
"""

from typing import Iterable

import tensorflow as tf


def learning_rate_at(epoch: int, initial_rate: float, drop_epochs: Iterable[int],
                     drop_factor: float, plateau_drops: int = 0) -> float:
    """The learning rate of an epoch (a Python float).

    Args:
      epoch: int, 0-based epoch counting the warm-start epochs.
      initial_rate: float.
      drop_epochs: iterable of int; the rate drops when ``epoch`` reaches each.
      drop_factor: float, e.g. 0.1.
      plateau_drops: int, drops taken on validation plateaus so far.
    """
    drops = sum(1 for e in drop_epochs if epoch >= e) + int(plateau_drops)
    return initial_rate * drop_factor ** drops


class PlateauTracker(tf.Module):
    """Counts evaluations without improvement and decides plateau drops.

    `patience` evaluations in a row without a new best metric trigger a drop;
    the count then restarts. ``patience = 0`` never drops.
    """

    def __init__(self, patience: int, min_delta: float = 1e-4, name: str = "plateau") -> None:
        super().__init__(name=name)
        self.patience = int(patience)
        self.min_delta = float(min_delta)
        self.best = tf.Variable(-float("inf"), trainable=False, name="best")
        self.bad_evaluations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="bad_evaluations")
        self.drops = tf.Variable(0, dtype=tf.int64, trainable=False, name="drops")

    def update(self, metric: float) -> bool:
        """Records one evaluation's metric (higher is better); returns True on a drop."""
        if self.patience <= 0:
            return False
        if metric > float(self.best.numpy()) + self.min_delta:
            self.best.assign(metric)
            self.bad_evaluations.assign(0)
            return False
        self.bad_evaluations.assign_add(1)
        if int(self.bad_evaluations.numpy()) >= self.patience:
            self.bad_evaluations.assign(0)
            self.drops.assign_add(1)
            return True
        return False
