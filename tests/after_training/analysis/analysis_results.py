"""A hand-made `run_analysis.RunAnalysis` with round numbers, for the tests of its rendering."""

import math

import numpy as np

from llp_tf.after_training.analysis.mds import MDSProjection
from llp_tf.after_training.analysis.run_analysis import BankState, EvaluatedEpoch, RunAnalysis
from llp_tf.core.bank_statistics import AggregationScores, PseudoLabelStats

CLASS_NAMES = ("0", "cat", "2", "dog")  # class 2 has no bank row


def _scores(per_class):
    counts = np.array([0 if math.isnan(v) else 3 for v in per_class], np.int64)
    return AggregationScores(per_class=np.array(per_class, np.float64), counts=counts)


def bank_state(step, per_class, pseudo_labels=None):
    """`BankState` at ``step`` (10 steps an epoch) with these class scores."""
    scores = _scores(per_class)
    return BankState(
        checkpoint=f"/runs/x/ckpt-{step}", step=step, epoch=step / 10.0, true=scores,
        pseudo=_scores([v + 0.05 for v in per_class]),
        pseudo_labels=pseudo_labels or PseudoLabelStats(0, math.nan, math.nan, math.nan),
        all_rows_score=0.125)


def run_analysis(trajectory=True, history=True, class_names=CLASS_NAMES, latest=None):
    """A 4-class run: the latest checkpoint at step 20 scores (0.5, 0.9, -, 0.2), the
    first kept one at step 10 (0.3, 0.95, -, 0.1); epochs 1-4 logged, 2 of warm-up."""
    stats = PseudoLabelStats(unlabelled=6, coverage=0.5, accuracy=0.75, confidence=0.625)
    latest = latest or bank_state(20, [0.5, 0.9, math.nan, 0.2], stats)
    first = bank_state(10, [0.3, 0.95, math.nan, 0.1])
    epochs = [EvaluatedEpoch(epoch=e, step=10 * e, phase="llp" if e > 2 else "warmup",
                             aggregation_score=s)
              for e, s in zip((1, 2, 3, 4), (0.3, 0.35, 0.5, 0.45))]
    projection = MDSProjection(
        class_ids=np.array([1, 3]), rows=np.array([0, 1, 2, 3]), classes=np.array([1, 1, 3, 3]),
        labelled=np.array([True, False, False, False]),
        coordinates=np.array([[0.0, 0.0], [0.1, 0.0], [1.0, 1.0], [1.1, 0.9]]), stress=0.1234)
    return RunAnalysis(
        run_dir="/runs/x", dataset="tiny", class_names=tuple(class_names), num_rows=12,
        num_labelled=6, warmup_epochs=2, epochs=4, steps_per_epoch=10, latest=latest,
        trajectory=[first, latest] if trajectory else [], history=epochs if history else [],
        mds=projection, mds_seed=0)
