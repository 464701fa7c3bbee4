"""The memory bank: per-example state that LLP keeps across steps, as non-trainable
checkpointed variables over the N used training examples (dense indices ``[0, N)``):

- ``embeddings`` float32 [N, D]: each example's running-average embedding, initialised
  uniform in ``[-s, s]``, ``s = 1 / sqrt(D / 3)``;
- ``labels`` int64 [N]: a class or an instance id (`label_encoding`); labelled examples keep
  their class, the others start with their instance id;
- ``confidence`` float32 [N]: the propagation confidence, 1 for labelled and not yet
  propagated-to examples;
- ``density`` float32 [M]: rho of each labelled example (eq. 7), in ``labelled_index``
  order, 1 until refreshed;
- ``labelled_index`` int64 [M] (sorted) and ``is_labelled`` bool [N]: the split.

Create it inside ``strategy.scope()``; `update` keeps every replica's copy identical."""

from typing import Any

import numpy as np
import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding
from llp_tf.tensor_types import Array, FloatTensor, IntTensor


def _validate_split(num_examples, num_classes, labelled_index, labelled_classes):
    labelled_index = np.asarray(labelled_index, dtype=np.int64).reshape(-1)
    labelled_classes = np.asarray(labelled_classes, dtype=np.int64).reshape(-1)
    if labelled_index.shape != labelled_classes.shape:
        raise ValueError(
            f"labelled_index has {labelled_index.size} entries but labelled_classes has "
            f"{labelled_classes.size}; give one class per labelled example.")
    if labelled_index.size and (labelled_index.min() < 0 or labelled_index.max() >= num_examples):
        raise ValueError(
            f"labelled_index must lie in [0, {num_examples}); found values from "
            f"{labelled_index.min()} to {labelled_index.max()}.")
    if np.unique(labelled_index).size != labelled_index.size:
        raise ValueError("labelled_index contains duplicate example indices.")
    if labelled_classes.size and (labelled_classes.min() < 0
                                 or labelled_classes.max() >= num_classes):
        raise ValueError(
            f"labelled_classes must lie in [0, {num_classes}); found values from "
            f"{labelled_classes.min()} to {labelled_classes.max()}.")
    order = np.argsort(labelled_index)
    return labelled_index[order], labelled_classes[order]


#: The bank's state, in checkpoint order: `initial_state`'s keys.
STATE = ("embeddings", "labels", "confidence", "density", "labelled_index", "is_labelled")


def initial_state(num_examples: int, dim: int, num_classes: int,
                  labelled_index: Array | IntTensor, labelled_classes: Array | IntTensor,
                  seed: int) -> dict[str, Array]:
    """The bank's initial state (module docstring), numpy arrays by name (`STATE`)."""
    if num_examples <= 0 or dim <= 0 or num_classes <= 0:
        raise ValueError(
            f"num_examples, dim and num_classes must be positive; got {num_examples}, "
            f"{dim}, {num_classes}.")
    labelled_index, labelled_classes = _validate_split(
        num_examples, num_classes, labelled_index, labelled_classes)
    scale = 1.0 / np.sqrt(dim / 3.0)
    rng = np.random.default_rng(seed)
    rows = rng.random((num_examples, dim), dtype=np.float32)
    labels = np.array(label_encoding.instance_labels(
        np.arange(num_examples, dtype=np.int64), num_classes))
    labels[labelled_index] = labelled_classes
    is_labelled = np.zeros(num_examples, dtype=bool)
    is_labelled[labelled_index] = True
    return {"embeddings": ((2.0 * scale) * rows - scale).astype(np.float32),
            "labels": labels, "confidence": np.ones(num_examples, np.float32),
            "density": np.ones(labelled_index.size, np.float32),
            "labelled_index": labelled_index, "is_labelled": is_labelled}


def gather_global_batch(tensors: Any) -> Any:
    """A replica's tensors all-gathered along axis 0 (as given in cross-replica context)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors
    # all_gather refuses a tensor without a device (possible under MultiWorkerMirroredStrategy).
    tensors = tf.nest.map_structure(tf.identity, tensors)
    return context.all_gather(tensors, axis=0)


class MemoryBank(tf.Module):
    """State of all N examples; see the module docstring."""

    def __init__(self, num_examples: int, dim: int, num_classes: int,
                 labelled_index: Array | IntTensor, labelled_classes: Array | IntTensor,
                 momentum: float = hyperparameters.BANK_MOMENTUM, seed: int = 0,
                 name: str = "memory_bank") -> None:
        """Creates the variables in the current strategy's scope.

        Args:
          num_examples, dim, num_classes: int, N, D, C.
          labelled_index: int [M], distinct indices in [0, N); labelled_classes: int [M] in [0, C).
          momentum: float m in [0, 1) of the row update; seed: int, of the initial rows."""
        super().__init__(name=name)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1); got {momentum}.")
        state = initial_state(num_examples, dim, num_classes, labelled_index, labelled_classes,
                              seed)
        self.num_examples = int(num_examples)
        self.dim = int(dim)
        self.num_classes = int(num_classes)
        self.num_labelled = int(state["labelled_index"].size)
        self.momentum = float(momentum)
        for name, value in state.items():
            setattr(self, name, tf.Variable(value, trainable=False, name=name,
                                            aggregation=tf.VariableAggregation.NONE))

    def read(self, indices: IntTensor) -> tuple[IntTensor, FloatTensor]:
        """(labels int64 [B], confidence float32 [B]) of the rows ``indices`` int [B]."""
        return tf.gather(self.labels, indices), tf.gather(self.confidence, indices)

    def labelled_embeddings(self) -> FloatTensor:
        """float32 [M, D]: bank rows of the labelled examples, in `labelled_index` order."""
        return tf.gather(self.embeddings, self.labelled_index)

    def labelled_classes(self) -> IntTensor:
        """int64 [M]: classes of the labelled examples, in `labelled_index` order."""
        return tf.gather(self.labels, self.labelled_index)

    def update(self, indices: IntTensor, embeddings: FloatTensor,
               classes: IntTensor | None = None, confidence: FloatTensor | None = None) -> None:
        """Writes a batch on every replica: ``bank_i <- normalise(m * bank_i + (1 - m) * v_i)``.

        Args:
          indices: int [B], distinct across the global batch: this replica's (the global batch's in
            cross-replica context).
          embeddings: float32 [B, D].
          classes, confidence: optional int64 / float32 [B], pseudo labels; labelled examples keep
            their class and confidence 1."""
        # aggregation=NONE: each replica applies the same scatter of the whole global batch.
        write_rows(self, global_update(indices, embeddings, classes, confidence), self.momentum)

    def assign_density(self, density: FloatTensor) -> None:
        """Stores rho (float32 [M], `labelled_index` order); call in cross-replica context."""
        self.density.assign(tf.cast(density, tf.float32))


def global_update(indices: IntTensor, embeddings: FloatTensor, classes: IntTensor | None,
                  confidence: FloatTensor | None) -> dict[str, tf.Tensor]:
    """`MemoryBank.update`'s arguments as a dict ("indices", "embeddings", and "classes" and
    "confidence" if given), all-gathered over the replicas into the global batch's."""
    if (classes is None) != (confidence is None):
        raise ValueError("Give both classes and confidence, or neither.")
    batch = {"indices": tf.cast(indices, tf.int64),
             "embeddings": tf.cast(embeddings, tf.float32)}
    if classes is not None:
        batch["classes"] = tf.cast(classes, tf.int64)
        batch["confidence"] = tf.cast(confidence, tf.float32)
    return gather_global_batch(batch)


def write_rows(state: Any, batch: dict, momentum: float) -> None:
    """Writes ``batch`` into the variables ``embeddings``, ``labels``, ``confidence`` and
    ``is_labelled`` of ``state`` (a bank, or a shard of one) at its rows ``batch["indices"]``
    int64 [B]: the update of `MemoryBank.update` (with "classes" and "confidence" if given)."""
    indices = batch["indices"]
    old_rows = tf.gather(state.embeddings, indices)
    new_rows = tf.math.l2_normalize(
        momentum * old_rows + (1.0 - momentum) * batch["embeddings"], axis=1)
    state.embeddings.scatter_update(tf.IndexedSlices(new_rows, indices))
    if "classes" in batch:
        labelled = tf.gather(state.is_labelled, indices)
        new_labels = tf.where(labelled, tf.gather(state.labels, indices), batch["classes"])
        new_confidence = tf.where(labelled, tf.ones_like(batch["confidence"]),
                                  batch["confidence"])
        state.labels.scatter_update(tf.IndexedSlices(new_labels, indices))
        state.confidence.scatter_update(tf.IndexedSlices(new_confidence, indices))
