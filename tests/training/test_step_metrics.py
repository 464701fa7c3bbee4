"""A step's metrics: each reducer's (sum, weight) reduced over replicas by the `StepRunner`
and over steps by `StepRecords`, against float64 numpy; `StepMetrics` declarations checked."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.training.methods.base import StepRunner
from llp_tf.training.step_metrics import (
    LOSS, Mean, StepMetrics, StepRecords, SubsetMean, batch_mean, replica_value, subset_mean)
from tests.replica_batches import replica_iterator

ROWS = 4  # a replica's rows, unless said


class _Method:
    """What `StepRunner` asks of a method: a step reporting the batch's values as a batch
    mean, over its mask as a subset mean, and its replica's id + 1 as a replica value."""

    name, PHASES = "fake", ("phase",)

    def __init__(self, strategy):
        self.strategy = strategy

    def metric_kinds(self, phase):
        return {LOSS: Mean, "mean": Mean, "subset": SubsetMean}

    def replica_step(self, phase):
        def step(batch):
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return {LOSS: replica_value(tf.cast(replica + 1, tf.float32)),
                    "mean": batch_mean(batch["value"]),
                    "subset": subset_mean(batch["value"], batch["mask"])}
        return step


def _records(strategy, values, masks):
    """The `StepRecords` of a step per row of ``values`` and ``masks`` [steps, R, rows], each
    replica reading its rows (consecutive per-replica batches, as the pipeline's)."""
    dataset = tf.data.Dataset.from_tensor_slices(
        {"value": values.astype(np.float32).reshape(-1),
         "mask": masks.astype(np.float32).reshape(-1)}).batch(values.shape[2])
    return StepRunner(_Method(strategy)).run(replica_iterator(strategy, dataset), len(values),
                                             "phase")


def test_two_replicas_with_unequal_subsets_give_the_means_over_all_rows(two_replica_strategy):
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, (3, 2, ROWS))
    masks = np.array([[[1, 1, 1, 0], [0, 0, 0, 0]],   # replica 1 holds no row of the subset
                      [[1, 0, 0, 0], [1, 1, 0, 1]],
                      [[0, 0, 0, 0], [0, 0, 0, 0]]])  # no row of the subset at all
    records = _records(two_replica_strategy, values, masks)
    assert list(records.values) == [LOSS, "mean", "subset"] and list(records.weights) == ["subset"]
    np.testing.assert_array_equal(records.values[LOSS], [1.5, 1.5, 1.5])  # (1 + 2) / 2
    np.testing.assert_allclose(records.values["mean"], values.mean(axis=(1, 2)), rtol=1e-6)
    # Per step, the numerator's and the weight's share of the global batch.
    np.testing.assert_allclose(records.values["subset"],
                               (values * masks).sum(axis=(1, 2)) / (2 * ROWS), rtol=1e-6)
    np.testing.assert_allclose(records.weights["subset"], masks.mean(axis=(1, 2)), rtol=1e-6)
    means = records.means()
    # Over the steps: the mean over every row of the subset, whichever replica held it.
    assert means["subset"] == pytest.approx((values * masks).sum() / masks.sum(), rel=1e-6)
    assert means["mean"] == pytest.approx(values.mean(), rel=1e-6)
    # The mean of the steps' subset means would differ.
    assert abs(means["subset"] - np.mean([values[s][masks[s] == 1].mean() for s in (0, 1)])) > 1e-3
    last = StepRecords({name: value[2:] for name, value in records.values.items()},
                       {"subset": records.weights["subset"][2:]})
    assert "subset" not in last.means() and "mean" in last.means()  # absent, not 0


def test_a_batch_mean_is_the_share_each_replica_would_have_taken_of_the_global_batch(
        two_replica_strategy):
    """Bit for bit: a replica's sum / its rows / R is its sum / the global batch, and the step
    adds those shares (not the sums, which rounds otherwise here)."""
    values = np.random.default_rng(4).integers(1, 40, (1, 2, 7)).astype(np.float32) / 4
    records = _records(two_replica_strategy, values, np.ones_like(values))
    sums = values[0].sum(axis=1, dtype=np.float32)  # exact: quarters below 2^24
    want = np.float32(sums[0] / np.float32(14)) + np.float32(sums[1] / np.float32(14))
    assert want != np.float32(sums.sum() / np.float32(14))
    assert records.values["mean"][0] == want


def test_a_batch_mean_may_count_rows_its_values_leave_out():
    mean = batch_mean(tf.constant([1.0, 2.0]), rows=8)
    assert float(mean.value) == 3.0 / 8 and float(mean.shares(2)[0]) == 3.0 / 16


@dataclasses.dataclass(frozen=True)
class _Metrics(StepMetrics):
    first: Mean
    second: SubsetMean


def test_step_metrics_declare_names_and_kinds_and_refuse_others():
    assert _Metrics.kinds() == {"first": Mean, "second": SubsetMean}
    one, ones = replica_value(1.0), tf.ones(2)
    assert list(_Metrics(first=one, second=subset_mean(ones, ones)).by_name()) == [
        "first", "second"]
    with pytest.raises(TypeError, match="second"):
        _Metrics(first=one)
    with pytest.raises(TypeError, match="third"):
        _Metrics(first=one, second=subset_mean(ones, ones), third=one)
    with pytest.raises(TypeError, match=r"_Metrics.second is declared a SubsetMean but was "
                                        r"given Mean"):
        _Metrics(first=one, second=batch_mean(ones)).by_name()

    @dataclasses.dataclass(frozen=True)
    class WithLoss(StepMetrics):
        loss: Mean

    with pytest.raises(TypeError, match="not named 'loss'"):
        WithLoss.kinds()
