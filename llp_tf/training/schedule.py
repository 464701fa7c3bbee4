"""Learning-rate schedule: constant within an epoch, times ``drop_factor`` for every drop epoch
reached and every plateau drop taken; the plateau state is checkpointed."""

from typing import Iterable

import tensorflow as tf


def learning_rate_at(epoch: int, initial_rate: float, drop_epochs: Iterable[int],
                     drop_factor: float, plateau_drops: int = 0) -> float:
    """The learning rate (float) of the 0-based ``epoch``, warm-start epochs counted, after
    ``plateau_drops`` plateau drops."""
    drops = sum(1 for e in drop_epochs if epoch >= e) + int(plateau_drops)
    return initial_rate * drop_factor ** drops


class PlateauTracker(tf.Module):
    """Drops after ``patience`` evaluations in a row without a new best metric, then counts
    again; ``patience = 0`` never drops."""

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
