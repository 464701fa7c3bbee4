"""Analysis of a trained LLP run's embedding (the paper's "Analysis of the embedding"):
aggregation scores (`llp_tf.core.bank_statistics`) on true and on the bank's own labels, at
the latest and every kept checkpoint and per evaluated epoch, and a 2-D MDS of a few classes
(the paper's Figure 2). `analyze_run` does it for a run directory; `report` writes it."""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from llp_tf.after_training import run_loader
from llp_tf.after_training.analysis.mds import MDSProjection, mds_classes, project_classes
from llp_tf.after_training.analysis.projector import DEFAULT_ROWS, ProjectorSample, sample_bank
from llp_tf.after_training.stored_bank import ROW_STATES
from llp_tf.core import bank_statistics
from llp_tf.core.bank_statistics import AggregationScores, PseudoLabelStats
from llp_tf.counted_nouns import counted
from llp_tf.data.pipeline import input_fns
from llp_tf.data.splits import regime
from llp_tf.errors import ConfigError
from llp_tf.training.methods import method_class
from llp_tf.training.run_directory import RunDirectory
from llp_tf.tensor_types import Array


@dataclasses.dataclass(frozen=True)
class BankState:
    """Scores of the bank at one checkpoint (``epoch``: fractional); ``all_rows_score``, of
    all rows pooled as one class, is high when the whole bank has collapsed."""

    checkpoint: str
    step: int
    epoch: float
    true: AggregationScores
    pseudo: AggregationScores
    pseudo_labels: PseudoLabelStats
    all_rows_score: float


def bank_state(run: run_loader.TrainedRun, true_classes: Array,
               steps_per_epoch: int) -> BankState:
    """`BankState` of the checkpoint restored in ``run``; ``true_classes`` int64 [N]. The
    bank is read a block of rows at a time (`bank_statistics.held_sums`)."""
    held = bank_statistics.held_sums(run.bank, true_classes, run.num_classes,
                                     bank_statistics.GROUPINGS)
    return BankState(
        checkpoint=run.checkpoint, step=run.step, epoch=run.step / steps_per_epoch,
        true=bank_statistics.scores_of_sums(*held.groups["true"]),
        pseudo=bank_statistics.scores_of_sums(*held.groups["own"]),
        pseudo_labels=bank_statistics.stats_of_counts(held.label_counts),
        all_rows_score=float(bank_statistics.scores_of_sums(*held.groups["every_row"]).per_class[0]))


def checkpoint_trajectory(run: run_loader.TrainedRun, true_classes: Array,
                          steps_per_epoch: int,
                          report: Callable[[str], None] | None = None) -> list[BankState]:
    """`BankState` at every kept checkpoint, oldest first; ``run`` is left as it was."""
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
    """`EvaluatedEpoch`s of the run's metrics file by epoch (an epoch's last line wins);
    DataError: a line that is not JSON."""
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
    """Everything `analyze_run` found (``trajectory`` empty when skipped, ``projector`` None
    when no row was asked for)."""

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
    projector: ProjectorSample | None = None


def _run_data(run_dir, report):
    """(config, dataset info, used_index, true class of each bank row) of an LLP run."""
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
                mds_classes_for: Callable[[int], int] | None = None,
                projector_rows: int = DEFAULT_ROWS) -> RunAnalysis:
    """`RunAnalysis` of an LLP run's memory bank: ``num_mds_classes`` (or
    ``mds_classes_for(classes with rows)``, or ``class_ids``) x ``points_per_class`` rows in
    the MDS, and at most ``projector_rows`` rows for the projector (0: none), seeded by
    ``seed``; ``report`` takes progress lines.

    Raises:
      ConfigError: not a run directory, a run without a bank, no checkpoint, or MDS
        settings the run cannot satisfy.
      DataError: the run's dataset cannot be opened or no longer matches its split.
    """
    report = report or (lambda line: None)
    if num_mds_classes is not None and num_mds_classes <= 0:
        raise ConfigError(f"The number of MDS classes must be positive; got {num_mds_classes}.")
    if points_per_class <= 0:
        raise ConfigError(f"The points per class must be positive; got {points_per_class}.")
    if projector_rows < 0:
        raise ConfigError(f"The projector's rows must be 0 or more; got {projector_rows}.")
    config, info, used_index, true_classes = _run_data(run_dir, report)
    counts = np.bincount(true_classes, minlength=info.num_classes)
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

    bank = run.bank
    is_labelled = bank["is_labelled"]
    rows_drawn = sum(min(int(counts[c]), points_per_class) for c in class_ids)
    report(f"MDS of {counted(rows_drawn, 'bank row')} of {counted(len(class_ids), 'class')}.")
    projection = project_classes(lambda rows: bank.rows_at(["embeddings"], rows)["embeddings"],
                                 true_classes, is_labelled, class_ids, points_per_class, seed)
    sample = None
    if projector_rows:
        sample = sample_bank(lambda rows: bank.rows_at(ROW_STATES, rows), len(used_index),
                             true_classes, used_index, info.class_names, projector_rows, seed)
    return RunAnalysis(
        run_dir=run_dir, dataset=info.name, class_names=tuple(info.class_names),
        num_rows=int(len(used_index)), num_labelled=int(is_labelled.sum()),
        warmup_epochs=int(config.method_settings.warmup_epochs),
        epochs=int(config.optimization.epochs),
        steps_per_epoch=steps_per_epoch, latest=latest, trajectory=states,
        history=read_metrics_history(run_dir), mds=projection, mds_seed=int(seed),
        projector=sample)

