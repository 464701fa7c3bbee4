"""The memory bank: per-example state that LLP keeps across steps, as non-trainable
checkpointed variables over the N used training examples (dense indices ``[0, N)``):

- ``embeddings`` [N, D] of ``embedding_dtype`` (`bank_dtype`: float32, or bfloat16 / float16
  at half the bytes, computed on in float32): each example's running-average embedding,
  initialised uniform in ``[-s, s]``, ``s = 1 / sqrt(D / 3)``;
- ``labels`` int64 [N]: a class or an instance id (`label_encoding`); labelled examples keep
  their class, the others start with their instance id;
- ``confidence`` float32 [N]: the propagation confidence, 1 for labelled and not yet
  propagated-to examples;
- ``density`` float32 [M]: rho of each labelled example (eq. 7), in ``labelled_index``
  order, 1 until refreshed;
- ``labelled_index`` int64 [M] (sorted) and ``is_labelled`` bool [N]: the split.

Create it inside ``strategy.scope()``; `update` keeps every replica's copy identical. The
interface is `bank.Bank`'s."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from llp_tf.core import bank_dtype, bank_slices, hyperparameters, label_encoding, losses, \
    propagation, variable_rows
from llp_tf.core.bank import STATE_FIELDS, Bank, BankState, BankWrite
from llp_tf.tensor_types import Array, FloatTensor, IntTensor


def validated_split(num_examples: int, num_classes: int, labelled_index: Array | IntTensor,
                    labelled_classes: Array | IntTensor) -> tuple[Array, Array]:
    """(labelled_index int64 [M] sorted, labelled_classes int64 [M] in its order); ValueError
    for a split that does not fit N and C."""
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


#: Rows of initial embeddings drawn and scaled at a time (float64 temporaries of this size).
DRAW_BLOCK_ROWS = 65_536


def initial_rows(dim: int, seed: int, start: int, stop: int) -> Array:
    """float32 [stop - start, D]: rows ``[start, stop)`` of the initial embeddings, equal to
    those rows of the whole bank's: one PCG64 stream from ``seed``, advanced to ``start``."""
    generator = np.random.PCG64(seed)
    # A float32 draw takes 32 of the stream's 64-bit words' bits.
    generator.advance(start * dim // 2)
    draws = np.random.Generator(generator)
    if start * dim % 2:
        draws.random(1, dtype=np.float32)
    scale = 1.0 / np.sqrt(dim / 3.0)
    rows = np.empty((stop - start, dim), np.float32)
    for first in range(0, stop - start, DRAW_BLOCK_ROWS):
        block = draws.random((min(DRAW_BLOCK_ROWS, stop - start - first), dim), np.float32)
        rows[first:first + len(block)] = (2.0 * scale) * block - scale
    return rows


def initial_embeddings(dim: int, seed: int, start: int, stop: int,
                       dtype: tf.DType = tf.float32) -> tf.Variable:
    """A ``dtype`` [stop - start, D] variable of rows ``[start, stop)`` of the initial
    embeddings (`initial_rows`, rounded to nearest at half precision), written
    `DRAW_BLOCK_ROWS` rows at a time into a variable of zeros: building it holds one block
    beside the variable. Made in the current scope and device (a mirrored variable in a
    strategy's scope, every copy written)."""
    variable = tf.Variable(tf.zeros([stop - start, dim], dtype), trainable=False,
                           name="embeddings", aggregation=tf.VariableAggregation.NONE)
    for first in range(start, stop, DRAW_BLOCK_ROWS):
        last = min(first + DRAW_BLOCK_ROWS, stop)
        rows = tf.convert_to_tensor(initial_rows(dim, seed, first, last))
        variable.scatter_update(tf.IndexedSlices(bank_dtype.stored(rows, dtype),
                                                 tf.range(first - start, last - start)))
    return variable


def initial_state(num_examples: int, dim: int, num_classes: int,
                  labelled_index: Array | IntTensor, labelled_classes: Array | IntTensor,
                  rows: tuple[int, int] | None = None) -> dict[str, Array]:
    """The bank's initial state but its embeddings (module docstring; `initial_embeddings`),
    numpy arrays by name: of the rows ``[start, stop)`` if ``rows`` is given, ``density`` and
    ``labelled_index`` (global indices) then of the labelled rows among them."""
    if num_examples <= 0 or dim <= 0 or num_classes <= 0:
        raise ValueError(
            f"num_examples, dim and num_classes must be positive; got {num_examples}, "
            f"{dim}, {num_classes}.")
    labelled_index, labelled_classes = validated_split(
        num_examples, num_classes, labelled_index, labelled_classes)
    start, stop = rows or (0, num_examples)
    first, last = np.searchsorted(labelled_index, [start, stop])
    labelled_index, labelled_classes = labelled_index[first:last], labelled_classes[first:last]
    labels = np.array(label_encoding.instance_labels(
        np.arange(start, stop, dtype=np.int64), num_classes))
    labels[labelled_index - start] = labelled_classes
    is_labelled = np.zeros(stop - start, dtype=bool)
    is_labelled[labelled_index - start] = True
    return {"labels": labels, "confidence": np.ones(stop - start, np.float32),
            "density": np.ones(labelled_index.size, np.float32),
            "labelled_index": labelled_index, "is_labelled": is_labelled}


class Untracked:
    """Holds a value out of sight of `tf.Module`'s dependency tracking."""

    def __init__(self, value: object) -> None:
        self.value = value


def gather_global_batch(tensors: Any) -> Any:
    """A replica's tensors all-gathered along axis 0 (as given in cross-replica context)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors
    # all_gather refuses a tensor without a device (possible under MultiWorkerMirroredStrategy).
    tensors = tf.nest.map_structure(tf.identity, tensors)
    return context.all_gather(tensors, axis=0)


class MemoryBank(tf.Module, Bank):
    """State of all N examples, a copy on each replica; see the module docstring."""

    def __init__(self, num_examples: int, dim: int, num_classes: int,
                 labelled_index: Array | IntTensor, labelled_classes: Array | IntTensor,
                 momentum: float = hyperparameters.BANK_MOMENTUM, seed: int = 0,
                 embedding_dtype: str | tf.DType = "float32",
                 name: str = "memory_bank") -> None:
        """Creates the variables in the current strategy's scope.

        Args:
          num_examples, dim, num_classes: int, N, D, C.
          labelled_index: int [M], distinct indices in [0, N); labelled_classes: int [M] in [0, C).
          momentum: float m in [0, 1) of the row update; seed: int, of the initial rows.
          embedding_dtype: the embeddings' storage dtype, one of `bank_dtype.BANK_DTYPES`."""
        super().__init__(name=name)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must lie in [0, 1); got {momentum}.")
        self.embedding_dtype = bank_dtype.storage_dtype(embedding_dtype)
        state = initial_state(num_examples, dim, num_classes, labelled_index, labelled_classes)
        self.num_examples = int(num_examples)
        self.dim = int(dim)
        self.num_classes = int(num_classes)
        self.num_labelled = int(state["labelled_index"].size)
        self.momentum = float(momentum)
        self.embeddings = initial_embeddings(dim, seed, 0, num_examples, self.embedding_dtype)
        for name, value in state.items():
            setattr(self, name, tf.Variable(value, trainable=False, name=name,
                                            aggregation=tf.VariableAggregation.NONE))
        self._views = Untracked(BankState(**{
            name: bank_slices.SlicedState([getattr(self, name)],
                                          [(0, int(getattr(self, name).shape[0]))])
            for name in STATE_FIELDS}))

    @property
    def state(self) -> BankState:
        """`Bank.state`: each a view of its variable as one part."""
        return self._views.value

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        """The checkpoint's children: the variables but in the `BankState` fields' place
        their views, under the same names (``labelled_index`` is saved whole)."""
        children = super()._trackable_children(save_type, **kwargs)
        if save_type == "checkpoint":
            children.update(self.checkpoint_states())
        return children

    @property
    def held_rows(self) -> tuple[int, int]:
        """`Bank.held_rows`: all of them."""
        return 0, self.num_examples

    def read_rows(self, names: Sequence[str], start: int, stop: int) -> dict[str, Array]:
        return {name: variable_rows.rows(getattr(self, name), start, stop - start).numpy()
                for name in names}

    def read(self, indices: IntTensor) -> tuple[IntTensor, FloatTensor]:
        return tf.gather(self.labels, indices), tf.gather(self.confidence, indices)

    def nearest_rows(self, embeddings: FloatTensor) -> IntTensor:
        _, nearest = propagation.nearest_rows(tf.cast(embeddings, tf.float32),
                                              self.embeddings, 1)
        return tf.cast(nearest[:, 0], tf.int64)

    def update(self, write: BankWrite) -> None:
        """`Bank.update`; also in cross-replica context (``write`` then the global batch's)."""
        # aggregation=NONE: each replica applies the same scatter of the whole global batch.
        write_rows(self, global_update(write), self.momentum)

    def aggregation_loss(self, embeddings: FloatTensor, labels: IntTensor,
                         temperature: float = hyperparameters.TEMPERATURE,
                         instance_labels: bool = False) -> FloatTensor:
        row_labels = self.labels
        if instance_labels:
            row_labels = label_encoding.instance_labels(
                tf.range(self.num_examples, dtype=tf.int64), self.num_classes)
        return losses.aggregation_loss(embeddings, self.embeddings, row_labels, labels,
                                       temperature)

    def propagate(self, embeddings: FloatTensor, k: int = hyperparameters.K,
                  temperature: float = hyperparameters.TEMPERATURE,
                  local_weights: bool = True) -> tuple[IntTensor, FloatTensor]:
        labelled = variable_rows.GatheredRows(self.embeddings, self.labelled_index)
        return propagation.propagate(
            embeddings, labelled, tf.gather(self.labels, self.labelled_index), self.num_classes,
            k=k, temperature=temperature, density=self.density if local_weights else None)

    def refresh_density(self, t: int = hyperparameters.T,
                        temperature: float = hyperparameters.TEMPERATURE,
                        chunk_size: int = hyperparameters.DENSITY_CHUNK_SIZE,
                        normalisation: str = propagation.DENSITY_NORMALISATIONS[0]) -> None:
        # The labelled rows' float32 copy [M, D] is the queries.
        self.density.assign(propagation.local_density(
            bank_dtype.computed(tf.gather(self.embeddings, self.labelled_index)),
            self.embeddings, t, temperature, chunk_size, normalisation))


def global_update(write: BankWrite) -> dict[str, tf.Tensor]:
    """A `BankWrite` as a dict ("indices", "embeddings", and "classes" and "confidence" if
    given), all-gathered over the replicas into the global batch's."""
    if (write.classes is None) != (write.confidence is None):
        raise ValueError("Give both classes and confidence, or neither.")
    batch = {"indices": tf.cast(write.indices, tf.int64),
             "embeddings": tf.cast(write.embeddings, tf.float32)}
    if write.classes is not None:
        batch["classes"] = tf.cast(write.classes, tf.int64)
        batch["confidence"] = tf.cast(write.confidence, tf.float32)
    return gather_global_batch(batch)


def write_rows(state: Any, batch: dict, momentum: float) -> None:
    """Writes ``batch`` into the variables ``embeddings``, ``labels``, ``confidence`` and
    ``is_labelled`` of ``state`` (a bank, or a shard of one) at its rows ``batch["indices"]``
    int64 [B]: the update of `MemoryBank.update` (with "classes" and "confidence" if given),
    computed in float32 from the old rows cast up, the new ones rounded to the embeddings'
    dtype."""
    indices = batch["indices"]
    old_rows = bank_dtype.computed(tf.gather(state.embeddings, indices))
    new_rows = tf.math.l2_normalize(
        momentum * old_rows + (1.0 - momentum) * batch["embeddings"], axis=1)
    state.embeddings.scatter_update(tf.IndexedSlices(
        bank_dtype.stored(new_rows, state.embeddings.dtype), indices))
    if "classes" in batch:
        labelled = tf.gather(state.is_labelled, indices)
        new_labels = tf.where(labelled, tf.gather(state.labels, indices), batch["classes"])
        new_confidence = tf.where(labelled, tf.ones_like(batch["confidence"]),
                                  batch["confidence"])
        state.labels.scatter_update(tf.IndexedSlices(new_labels, indices))
        state.confidence.scatter_update(tf.IndexedSlices(new_confidence, indices))
