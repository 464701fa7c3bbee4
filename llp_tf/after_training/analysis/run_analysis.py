"""Analysis of a trained LLP run's embedding (the paper's "Analysis of the embedding").

- Aggregation score of a class: the L2 norm of the mean of the bank rows
  (unit vectors) of the class's examples. 1 means every row of the class is
  the same point; rows spread evenly over the sphere give about 0. The mean
  over classes is what `llp_tf.training.evaluation.Evaluator` logs as
  ``aggregation_score`` (both from `llp_tf.core.bank_statistics`). Computed
  on the examples' true classes, and on the bank's own labels (true classes
  of labelled rows, pseudo classes of propagated ones).
- Its trajectory: the scores at each kept checkpoint of the run, and the
  mean score per evaluated epoch from the run's ``metrics.jsonl``.
- A 2-D metric MDS of a sample of the bank rows of a few classes (the
  paper's Figure 2; `mds`).

`analyze_run` does all of it for a run directory; `report` draws and
writes the results.
"""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from llp_tf.after_training import run_loader
from llp_tf.after_training.analysis.mds import MDSProjection, mds_classes, project_classes
from llp_tf.core.bank_statistics import (AggregationScores, PseudoLabelStats,
                                         aggregation_scores, pseudo_label_stats)
from llp_tf.counted_nouns import counted
from llp_tf.data.pipeline import input_fns
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.training.methods import method_class
from llp_tf.training.run_directory import RunDirectory
from llp_tf.tensor_types import Array


@dataclasses.dataclass(frozen=True)
class BankState:
    """Scores of the bank at one checkpoint.

    Attributes:
      checkpoint: str, its path.
      step: int, its global step.
      epoch: float, ``step / steps per epoch`` (fractional mid-epoch).
      true: `AggregationScores` on the examples' true classes.
      pseudo: `AggregationScores` on the bank's own labels.
      pseudo_labels: `PseudoLabelStats`.
      all_rows_score: float, the score of all rows pooled as one class: a
        baseline, high when the whole bank has collapsed towards one
        direction (then every class scores high without being separated).
    """

    checkpoint: str
    step: int
    epoch: float
    true: AggregationScores
    pseudo: AggregationScores
    pseudo_labels: PseudoLabelStats
    all_rows_score: float


def bank_state(run: run_loader.TrainedRun, true_classes: Array,
               steps_per_epoch: int) -> BankState:
    """`BankState` of the checkpoint currently restored in ``run`` (a `TrainedRun`).

    Args:
      run: `TrainedRun` of an LLP run.
      true_classes: int64 [N], the true class of each bank row.
      steps_per_epoch: int, training steps of one epoch.
    """
    bank = run.bank
    labels = bank.labels.numpy()
    embeddings = bank.embeddings.numpy()
    return BankState(
        checkpoint=run.checkpoint, step=run.step, epoch=run.step / steps_per_epoch,
        true=aggregation_scores(embeddings, true_classes, run.num_classes),
        pseudo=aggregation_scores(embeddings, labels, run.num_classes),
        pseudo_labels=pseudo_label_stats(labels, bank.confidence.numpy(),
                                         bank.is_labelled.numpy(), true_classes,
                                         run.num_classes),
        all_rows_score=float(aggregation_scores(
            embeddings, np.zeros(len(embeddings), np.int64), 1).per_class[0]))


def checkpoint_trajectory(run: run_loader.TrainedRun, true_classes: Array,
                          steps_per_epoch: int,
                          report: Callable[[str], None] | None = None) -> list[BankState]:
    """`BankState` at every kept checkpoint of the run, oldest first.

    Restores each checkpoint into ``run`` in turn and the originally restored
    one at the end, so ``run`` is left as it was.

    Args:
      run: `TrainedRun` of an LLP run.
      true_classes: int64 [N], the true class of each bank row.
      steps_per_epoch: int.
      report: optional callable taking a progress line (str).
    """
    original = run.checkpoint
    paths = run_loader.checkpoint_paths(run.run_dir)
    states = []
    try:
        for number, path in enumerate(paths, 1):
            run.restore(path)
            states.append(bank_state(run, true_classes, steps_per_epoch))
            if report:
                report(f"checkpoint {number}/{len(paths)} (step {run.step}): mean aggregation "
                       f"score {states[-1].true.mean:.4f}")
    finally:
        if run.checkpoint != original:
            run.restore(original)
    return states


@dataclasses.dataclass(frozen=True)
class EvaluatedEpoch:
    """One line of ``metrics.jsonl``: epoch (1-based, at its end), step, phase, score."""

    epoch: int
    step: int
    phase: str
    aggregation_score: float


def read_metrics_history(run_dir: str) -> list[EvaluatedEpoch]:
    """The aggregation score of every evaluated epoch in the run's metrics file.

    A resumed run may have evaluated an epoch twice; the last line wins.

    Returns:
      list of `EvaluatedEpoch` sorted by epoch; empty when the file is absent
      or holds no aggregation score (e.g. a supervised run).

    Raises:
      DataError: a line that is not JSON.
    """
    by_epoch = {}
    for entry in RunDirectory(run_dir).read_metrics():
        if "aggregation_score" in entry and "epoch" in entry:
            by_epoch[int(entry["epoch"])] = EvaluatedEpoch(
                epoch=int(entry["epoch"]), step=int(entry.get("step", -1)),
                phase=str(entry.get("phase", "")),
                aggregation_score=float(entry["aggregation_score"]))
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


@dataclasses.dataclass(frozen=True)
class RunAnalysis:
    """Everything `analyze_run` found; see `report` for its rendering.

    Attributes:
      run_dir: str.
      dataset: str, the run's dataset name.
      class_names: tuple of C str.
      num_rows: int, N bank rows.
      num_labelled: int, M.
      warmup_epochs: int, epochs of instance recognition before LLP.
      epochs: int, the run's planned epochs.
      steps_per_epoch: int.
      latest: `BankState` of the analysed (latest) checkpoint.
      trajectory: list of `BankState`, one per kept checkpoint (empty when
        skipped).
      history: list of `EvaluatedEpoch` from ``metrics.jsonl``.
      mds: `MDSProjection` of the latest checkpoint's bank.
      mds_seed: int.
    """

    run_dir: str
    dataset: str
    class_names: tuple[str, ...]
    num_rows: int
    num_labelled: int
    warmup_epochs: int
    epochs: int
    steps_per_epoch: int
    latest: BankState
    trajectory: list[BankState]
    history: list[EvaluatedEpoch]
    mds: MDSProjection
    mds_seed: int


def _run_data(run_dir, report):
    """(config, dataset info, used_index, true class of each bank row) of an LLP run,
    checking that the dataset still is the one the run trained on."""
    config = run_loader.read_config(run_dir)
    if not method_class(config.method.name).keeps_bank:
        raise ConfigError(
            f"{run_dir} is a {config.method.name} run, which keeps no memory bank: the embedding "
            "analysis reads the bank of a run that keeps one (LLP). Give the --run_dir of such a "
            "run.")
    report(f"Opening the dataset {config.data.dataset}.")
    source = run_loader.open_dataset(config)
    train_labels = source.train_labels()
    _, used_index = regime.load_splits(RunDirectory(run_dir).split_path, train_labels,
                                       source.info.name)
    return config, source.info, used_index, train_labels[used_index]


def _mds_class_ids(counts, num_mds_classes, class_ids, seed, mds_classes_for):
    """`mds_classes`, with ``num_mds_classes`` from ``mds_classes_for`` when given."""
    if mds_classes_for is not None and class_ids is None:
        num_mds_classes = mds_classes_for(int(np.count_nonzero(counts)))
    return mds_classes(counts, num_mds_classes, class_ids, seed)


def analyze_run(run_dir: str, num_mds_classes: int | None = 5, points_per_class: int = 100,
                seed: int = 0, trajectory: bool = True, class_ids: Sequence[int] | None = None,
                report: Callable[[str], None] | None = None,
                mds_classes_for: Callable[[int], int] | None = None) -> RunAnalysis:
    """Scores, trajectory and MDS of an LLP run's memory bank.

    Args:
      run_dir: str, a run directory written by `llp_tf.training.run_training`.
      num_mds_classes: int > 0, classes in the MDS (a seeded draw), unless
        ``class_ids`` is given.
      points_per_class: int > 0, rows drawn per MDS class.
      seed: int, seeds the class draw, the row draw and the MDS.
      trajectory: bool, restore every kept checkpoint for the per-checkpoint
        scores (False: the latest only).
      class_ids: optional sequence of int, the MDS classes.
      report: optional callable taking a progress line (str).
      mds_classes_for: optional callable given the number of classes with
        bank rows, returning the number of MDS classes to draw instead of
        ``num_mds_classes`` (e.g. a default lowered to what the run has).

    Returns:
      `RunAnalysis`.

    Raises:
      ConfigError: not a run directory, a supervised run (no memory bank),
        no checkpoint, or MDS settings the run cannot satisfy.
      DataError: the run's dataset cannot be opened or no longer matches
        its split.
    """
    report = report or (lambda line: None)
    if num_mds_classes is not None and num_mds_classes <= 0:
        raise ConfigError(f"The number of MDS classes must be positive; got {num_mds_classes}.")
    if points_per_class <= 0:
        raise ConfigError(f"The points per class must be positive; got {points_per_class}.")
    config, info, used_index, true_classes = _run_data(run_dir, report)
    counts = np.bincount(true_classes, minlength=info.num_classes)
    # Bad MDS settings fail here, before the slow restores.
    class_ids = _mds_class_ids(counts, num_mds_classes, class_ids, seed, mds_classes_for)
    report(f"Restoring the latest checkpoint of {run_dir}.")
    run = run_loader.load_run(run_dir, num_classes=info.num_classes)
    steps_per_epoch = max(input_fns.steps_per_epoch(len(used_index),
                                                    config.optimization.global_batch_size), 1)
    latest = bank_state(run, true_classes, steps_per_epoch)
    states = []
    if trajectory:
        report("Scoring the kept checkpoints.")
        states = checkpoint_trajectory(run, true_classes, steps_per_epoch, report)

    is_labelled = run.bank.is_labelled.numpy()
    rows_drawn = sum(min(int(counts[c]), points_per_class) for c in class_ids)
    report(f"MDS of {counted(rows_drawn, 'bank row')} of {counted(len(class_ids), 'class')}.")
    projection = project_classes(run.bank.embeddings.numpy(), true_classes, is_labelled,
                                 class_ids, points_per_class, seed)
    return RunAnalysis(
        run_dir=run_dir, dataset=info.name, class_names=tuple(info.class_names),
        num_rows=int(len(used_index)), num_labelled=int(is_labelled.sum()),
        warmup_epochs=int(config.method_settings.warmup_epochs),
        epochs=int(config.optimization.epochs),
        steps_per_epoch=steps_per_epoch, latest=latest, trajectory=states,
        history=read_metrics_history(run_dir), mds=projection, mds_seed=int(seed))

