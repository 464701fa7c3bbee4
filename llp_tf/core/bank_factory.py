"""The one place a run's `Bank` is made: replicated (`MemoryBank`, a copy on each replica,
made in the strategy's scope) or sharded (`ShardedMemoryBank`, N / R rows on each replica of
every worker, made outside it)."""

import tensorflow as tf

from llp_tf.core import hyperparameters
from llp_tf.core.bank import Bank
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank
from llp_tf.tensor_types import Array, IntTensor


def build_bank(strategy: tf.distribute.Strategy, num_examples: int, dim: int, num_classes: int,
               labelled_index: Array | IntTensor, labelled_classes: Array | IntTensor, *,
               sharded: bool, momentum: float = hyperparameters.BANK_MOMENTUM, seed: int = 0,
               embedding_dtype: str | tf.DType = "float32") -> Bank:
    """The bank of N = ``num_examples`` rows of D = ``dim`` over ``strategy``'s replicas,
    sharded or replicated; call it outside ``strategy.scope()``.

    Args:
      labelled_index: int [M], distinct rows in [0, N); labelled_classes: int [M] in [0, C).
      momentum: m of the row update; seed: of the initial rows (the same rows either way);
      embedding_dtype: the embeddings' storage dtype (`bank_dtype.BANK_DTYPES`)."""
    arguments = (num_examples, dim, num_classes, labelled_index, labelled_classes)
    options = {"momentum": momentum, "seed": seed, "embedding_dtype": embedding_dtype}
    if sharded:
        return ShardedMemoryBank(strategy, *arguments, **options)
    with strategy.scope():
        return MemoryBank(*arguments, **options)
