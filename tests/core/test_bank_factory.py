"""build_bank: the replicated or the sharded bank of one initial state, behind `Bank.state`."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core.bank import STATE_FIELDS, Bank, BankState
from llp_tf.core.bank_factory import build_bank
from llp_tf.core.memory_bank import MemoryBank
from llp_tf.core.sharded_bank import ShardedMemoryBank

N, D, C = 10, 4, 3
LABELLED, CLASSES = np.array([1, 4, 8]), np.array([2, 0, 1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_both_banks_hold_one_initial_state_of_the_stated_types(two_replica_strategy, dtype):
    banks = {sharded: build_bank(two_replica_strategy, N, D, C, LABELLED, CLASSES,
                                 sharded=sharded, momentum=0.3, seed=5, embedding_dtype=dtype)
             for sharded in (False, True)}
    assert type(banks[False]) is MemoryBank and type(banks[True]) is ShardedMemoryBank
    assert [s.stop - s.start for s in banks[True].shards] == [N // 2, N // 2]
    for bank in banks.values():
        assert isinstance(bank, Bank) and isinstance(bank.state, BankState)
        assert bank.momentum == 0.3 and bank.embedding_dtype == tf.as_dtype(dtype)
        assert list(bank.checkpoint_states()) == list(STATE_FIELDS)
        state = bank.state
        assert state.embeddings.shape == (N, D) and state.embeddings.dtype == tf.as_dtype(dtype)
        assert (state.labels.dtype, state.confidence.dtype, state.is_labelled.dtype,
                state.density.dtype) == (tf.int64, tf.float32, tf.bool, tf.float32)
        assert state.density.shape == (len(LABELLED),)
    replicated, sharded = (banks[False].state.by_name(), banks[True].state.by_name())
    for name in STATE_FIELDS:
        np.testing.assert_array_equal(replicated[name].numpy(), sharded[name].numpy())
    labels = replicated["labels"].numpy()
    np.testing.assert_array_equal(labels[LABELLED], CLASSES)
    unlabelled = np.setdiff1d(np.arange(N), LABELLED)
    # Rows without a label hold their instance id, beyond the classes.
    assert np.all(labels[unlabelled] >= C)
    assert not np.array_equal(
        replicated["embeddings"].numpy(),
        build_bank(two_replica_strategy, N, D, C, LABELLED, CLASSES, sharded=False,
                   seed=6).state.embeddings.numpy())
