import dataclasses

import numpy as np

from llp_tf.after_training.analysis import summary
from llp_tf.core.bank_statistics import PseudoLabelStats
from tests.after_training.analysis.analysis_results import bank_state, run_analysis


def test_summary_of_a_hand_made_analysis():
    assert summary.summary_text(run_analysis()) == "\n".join([
        "Embedding analysis of /runs/x (tiny; 12 bank rows, 6 labelled, 4 classes)",
        "Checkpoint ckpt-20: step 20, epoch 2 of 4 (warm-up: the first 2, then LLP)",
        "",
        "Aggregation score (norm of a class's mean bank row; 1 = all its rows at one point):",
        "  mean over 3 classes: 0.5333 on true classes, 0.5833 on the bank's labels "
        "(true + pseudo)",
        "  all rows pooled as one class: 0.1250 (baseline; close to the class scores means a "
        "collapsed bank, not tight classes)",
        "  tightest: cat (1) 0.9000, 0 0.5000, dog (3) 0.2000",
        "  loosest:  dog (3) 0.2000, 0 0.5000, cat (1) 0.9000",
        "  kept checkpoints: step 10 (epoch 1) 0.4500 -> step 20 (epoch 2) 0.5333 (+0.0833)",
        "  largest class changes: 0 +0.2000, cat (1) -0.0500",
        "  per epoch (metrics.jsonl): epoch 1 0.3000, epoch 2 (end of warm-up) 0.3500, "
        "epoch 4 0.4500; highest 0.5000 at epoch 3",
        "Pseudo labels of the 6 unlabelled rows: accuracy 0.7500, coverage 0.5000, mean "
        "confidence 0.6250",
        "MDS: 4 bank rows (1 labelled) of classes cat (1), dog (3); euclidean (chord) "
        "distances of the unit rows; Stress-1 0.123",
    ]) + "\n"


def test_summary_without_trajectory_history_or_unlabelled_rows():
    lines = summary.summary_text(run_analysis(
        trajectory=False, history=False,
        latest=bank_state(20, [0.5, 0.9, float("nan"), 0.2]))).splitlines()
    assert lines[8:11] == [
        "  kept checkpoints: not scored (trajectory skipped)",
        "  per epoch: metrics.jsonl holds no aggregation score",
        "Pseudo labels: every bank row is labelled; nothing to check.",
    ]


def test_before_the_first_propagation_pseudo_labels_are_not_applicable():
    warm_up = PseudoLabelStats(unlabelled=6, coverage=0.0, accuracy=float("nan"),
                               confidence=float("nan"))
    lines = summary.summary_text(run_analysis(
        latest=bank_state(20, [0.5, 0.9, float("nan"), 0.2], warm_up))).splitlines()
    assert lines[-2] == ("Pseudo labels: not yet propagated to the 6 unlabelled rows (the "
                         "warm-up); nothing to check.")


def test_one_kept_checkpoint_has_no_change():
    analysis = run_analysis()
    single = dataclasses.replace(analysis, trajectory=[analysis.latest])
    assert ("  kept checkpoints: only one, no change to report"
            in summary.summary_text(single).splitlines())


def test_names_of_classes_and_checkpoints():
    assert summary.class_label(("0", "cat"), 0) == "0"
    assert summary.class_label(("0", "cat"), 1) == "cat (1)"
    assert summary.checkpoint_name(bank_state(25, [0.5])) == "step 25 (epoch 2.50)"
    assert summary.checkpoint_name(bank_state(40, [0.5])) == "step 40 (epoch 4)"


def test_counts_of_one_take_the_singular():
    analysis = run_analysis(latest=bank_state(
        20, [float("nan"), 0.9, float("nan"), float("nan")],
        PseudoLabelStats(unlabelled=1, coverage=1.0, accuracy=1.0, confidence=0.5)))
    mds = dataclasses.replace(analysis.mds, class_ids=np.array([1]), rows=np.array([0]),
                              classes=np.array([1]), labelled=np.array([True]),
                              coordinates=np.zeros((1, 2)))
    text = summary.summary_text(dataclasses.replace(analysis, mds=mds, num_rows=1))
    assert "(tiny; 1 bank row, 6 labelled, 4 classes)" in text
    assert "  mean over 1 class: 0.9000 on true classes" in text
    assert "Pseudo labels of the 1 unlabelled row: accuracy 1.0000" in text
    assert "MDS: 1 bank row (1 labelled) of class cat (1); " in text
