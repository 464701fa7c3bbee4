"""Two code paths of a training method's step taken from the same state, one
step at a time: before each compared step the reference path's whole state
(model, optimizer, the method's checkpoint items) is copied into the other
through a checkpoint, so that each comparison covers one step's rounding only
(`tests.numerics`)."""

import inspect
import os

import numpy as np
import tensorflow as tf

from llp_tf.models import batch_norm
from llp_tf.training.methods import StepRunner


def replica_copies(variable):
    """Every replica's value of ``variable`` as numpy arrays (one for a plain variable)."""
    values = getattr(variable, "values", None)
    return [v.numpy() for v in values] if values else [variable.numpy()]


def first_copy(variable):
    """Replica 0's value of ``variable`` (or a sharded bank's whole state view) as numpy."""
    return replica_copies(variable)[0]


def model_weights(model):
    """Every weight of ``model`` (moving statistics too), replica 0's copy, float64."""
    return [first_copy(w).astype(np.float64) for w in model.weights]


def state_checkpoint(method):
    """A checkpoint of the method's whole training state, as a run's holds it."""
    return tf.train.Checkpoint(model=method.model, optimizer=method.optimizer,
                               **method.checkpoint_items())


class Path:
    """One code path: a method, its `StepRunner` (``runner``, or a new one with
    ``prepare``: a runner keeps its traced loops, so tests that share a method
    share its runner) and its own iterator of the shared global batches (paths
    advance in lockstep, so their k-th steps read the same batch)."""

    def __init__(self, method, iterator, prepare=None, runner=None):
        self.method, self.iterator = method, iterator
        self.runner = runner or StepRunner(method, prepare)

    def step(self, phase):
        """One step of ``phase``: metric name -> float (`StepRecords.means`)."""
        return self.runner.run(self.iterator, 1, phase).means()


class StateCopier:
    """Copies a method's state into another's, through checkpoints in ``folder``."""

    def __init__(self, folder):
        self.folder, self.count = str(folder), 0

    def copy(self, source, target):
        self.count += 1
        path = state_checkpoint(source).write(os.path.join(self.folder, f"state-{self.count}"))
        state_checkpoint(target).read(path).assert_existing_objects_matched()


def logit_scale(model, images, replicas=1):
    """max |logit| of a training-mode forward pass of ``images`` (the global
    batch, its replica shares consecutive; each share normalised alone when
    ``replicas`` > 1, as batch norms that are not synchronised do), the state
    left as it was."""
    with batch_norm.moving_statistics_kept():
        logits = [model(share, training=True)["logits"].numpy()
                  for share in np.split(np.asarray(images), replicas)]
    return float(np.max(np.abs(np.concatenate(logits))))


class FreshMethods:
    """Methods built, and their loops traced, once per test module (tracing is
    most of these tests' time): ``fresh(key, build)`` is the method ``build()``
    made for ``key`` on the first call, with its `StepRunner`, restored to its
    initial state (a checkpoint in ``folder``) on every call."""

    def __init__(self, folder):
        self.folder, self.built = folder, {}

    def __call__(self, key, build):
        if key not in self.built:
            method = build()
            path = state_checkpoint(method).write(
                os.path.join(str(self.folder), f"initial-{len(self.built)}"))
            self.built[key] = (method, StepRunner(method), path)
        method, runner, path = self.built[key]
        state_checkpoint(method).read(path).assert_existing_objects_matched()
        return method, runner

    def per_setup(self, build):
        """``fresh(strategy, **settings)``: the method ``build(strategy, **settings)`` of
        that replica count and those settings (a setting given its default value is the
        default's method), as `__call__` gives it."""
        defaults = {name: parameter.default
                    for name, parameter in inspect.signature(build).parameters.items()
                    if parameter.default is not inspect.Parameter.empty}
        return lambda strategy, **settings: self(
            (strategy.num_replicas_in_sync, tuple(sorted(dict(defaults, **settings).items()))),
            lambda: build(strategy, **settings))
