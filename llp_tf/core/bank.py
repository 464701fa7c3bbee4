"""The memory bank's interface, `Bank`: what LLP's steps, its evaluation and its warm start
ask of a bank, whether each replica holds all of it (`memory_bank.MemoryBank`) or a shard
(`sharded_bank.ShardedMemoryBank`). The equations are `losses`' and `propagation`'s; a bank
applies them to its rows."""

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import tensorflow as tf

from llp_tf.core import hyperparameters, propagation
from llp_tf.core.bank_slices import SlicedState
from llp_tf.tensor_types import Array, FloatTensor, IntTensor

#: Rows a reader of the held state (`Bank.held_blocks`) takes at a time: 65,536 rows of
#: D = 128 float32 are 32 MiB.
READ_BLOCK_ROWS = 65_536


class BankWrite(NamedTuple):
    """What a step writes into the bank (`Bank.update`), this replica's rows of the global
    batch: ``indices`` int64 [b], distinct over the global batch; ``embeddings`` float32
    [b, D], the new embeddings (no gradient); ``classes`` int64 [b] and ``confidence`` float32
    [b], pseudo labels, both or neither (labelled rows keep their class and confidence 1)."""

    indices: IntTensor
    embeddings: FloatTensor
    classes: Optional[IntTensor] = None
    confidence: Optional[FloatTensor] = None


class BankRows(abc.ABC):
    """The rows of a bank's state that a reader can take a block at a time: a live `Bank`'s,
    or a checkpoint's (`llp_tf.after_training.stored_bank`). ``num_examples`` N and ``dim``
    D are the bank's sizes."""

    num_examples: int
    dim: int

    @property
    @abc.abstractmethod
    def held_rows(self) -> tuple[int, int]:
        """The rows ``[start, stop)`` this process holds: every row, or across workers its
        replicas' shards."""

    @abc.abstractmethod
    def read_rows(self, names: Sequence[str], start: int, stop: int) -> dict[str, Array]:
        """name -> numpy rows ``[start, stop)`` (within `held_rows`) of the state arrays
        ``names`` of N rows ("embeddings", "labels", "confidence", "is_labelled"), read
        without a copy of the whole state; embeddings float32 whatever their stored dtype."""

    def held_blocks(self, names: Sequence[str], block_rows: int = READ_BLOCK_ROWS
                    ) -> Iterator[tuple[int, dict[str, Array]]]:
        """(first row, `read_rows` of ``names``) over `held_rows`, ``block_rows`` rows at a
        time, blocks counted from the first held row: one block in memory at a time."""
        start, stop = self.held_rows
        for first in range(start, stop, block_rows):
            yield first, self.read_rows(names, first, min(first + block_rows, stop))


@dataclasses.dataclass(frozen=True)
class BankState:
    """A bank's state arrays, each a `SlicedState` view of this process's rows (every row of a
    replicated bank), whatever the bank: ``numpy()``, ``read_value()``, ``shape`` and
    ``dtype`` of the whole array, and the checkpoint's saveable under the field's name.

    Attributes:
      embeddings: [N, D] of the bank's ``embedding_dtype``.
      labels: int64 [N], a class or an instance id (`label_encoding`).
      confidence: float32 [N].
      is_labelled: bool [N].
      density: float32 [M], rho of the labelled rows in ``labelled_index`` order.
    """

    embeddings: SlicedState
    labels: SlicedState
    confidence: SlicedState
    is_labelled: SlicedState
    density: SlicedState

    def by_name(self) -> dict[str, SlicedState]:
        """Field name -> state, in field order."""
        return {name: getattr(self, name) for name in STATE_FIELDS}


#: `BankState`'s field names: the state checkpoints save in blocks.
STATE_FIELDS = tuple(field.name for field in dataclasses.fields(BankState))


class Bank(BankRows):
    """State of N examples kept across steps.

    State: `state`, a `BankState`, saved in checkpoints under its fields' names so that either
    bank restores the other's at any replica count (the embeddings of ``embedding_dtype``,
    `bank_dtype.BANK_DTYPES`: float32, or bfloat16 / float16 stored at half the bytes, read
    cast up to float32), and ``labelled_index`` int64 [M], sorted. Sizes ``num_examples``,
    ``dim``, ``num_classes``, ``num_labelled`` (N, D, C, M), the row update's ``momentum``.
    Code outside `llp_tf.core` reads the state through `state`, `read_rows` and
    `held_blocks` only; a concrete bank's own attributes are its implementation.

    Batch methods take this replica's rows ``[b, ...]`` in replica context, where every
    replica must call them (a bank may exchange shares between replicas), or the batch
    outside any strategy; `refresh_density` runs in cross-replica context. Each result equals
    the one bank's on one device up to the order of float32 sums."""

    num_classes: int
    num_labelled: int
    momentum: float
    embedding_dtype: tf.DType

    @property
    @abc.abstractmethod
    def state(self) -> BankState:
        """The bank's `BankState`."""

    def checkpoint_states(self) -> dict[str, SlicedState]:
        """What checkpoints save in blocks, by name: `state`'s fields, the bank's checkpoint
        children under those names."""
        return self.state.by_name()

    @abc.abstractmethod
    def read(self, indices: IntTensor) -> tuple[IntTensor, FloatTensor]:
        """(labels int64 [b], confidence float32 [b]) of the rows ``indices`` int [b]."""

    @abc.abstractmethod
    def update(self, write: BankWrite) -> None:
        """Writes the global batch's `BankWrite`s (this replica's ``write``):
        ``bank_i <- normalise(m * bank_i + (1 - m) * v_i)`` at each row ``i`` of its
        ``indices``, and its pseudo labels if given."""

    @abc.abstractmethod
    def nearest_rows(self, embeddings: FloatTensor) -> IntTensor:
        """int64 [b]: the row of largest dot product with each of ``embeddings`` float32
        [b, D] (the lowest of equal ones)."""

    @abc.abstractmethod
    def aggregation_loss(self, embeddings: FloatTensor, labels: IntTensor,
                         temperature: float = hyperparameters.TEMPERATURE,
                         instance_labels: bool = False) -> FloatTensor:
        """`losses.aggregation_loss` of ``embeddings`` float32 [b, D] with ``labels`` int64 [b]
        against every row, float32 [b]; the gradient reaches ``embeddings`` only. Rows have
        their ``labels``, or with ``instance_labels`` their instance ids (the warm start)."""

    @abc.abstractmethod
    def propagate(self, embeddings: FloatTensor, k: int = hyperparameters.K,
                  temperature: float = hyperparameters.TEMPERATURE,
                  local_weights: bool = True) -> tuple[IntTensor, FloatTensor]:
        """`propagation.propagate` of ``embeddings`` float32 [b, D] from the labelled rows,
        with their ``density`` if ``local_weights`` (eq. 7-8) else without (eq. 5-6):
        (classes int64 [b], confidence float32 [b])."""

    @abc.abstractmethod
    def refresh_density(self, t: int = hyperparameters.T,
                        temperature: float = hyperparameters.TEMPERATURE,
                        chunk_size: int = hyperparameters.DENSITY_CHUNK_SIZE,
                        normalisation: str = propagation.DENSITY_NORMALISATIONS[0]) -> None:
        """Sets ``density`` to `propagation.local_density` (eq. 7) of the labelled rows against
        every row, about ``chunk_size`` queries at a time, normalised as ``normalisation``
        names (`propagation.DENSITY_NORMALISATIONS`), in float32."""
