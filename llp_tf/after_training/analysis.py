"""Analysis of a trained LLP run's embedding (the paper's "Analysis of the embedding").

- Aggregation score of a class: the L2 norm of the mean of the bank rows
  (unit vectors) of the class's examples. 1 means every row of the class is
  the same point; rows spread evenly over the sphere give about 0. The mean
  over classes is what `evaluation.Evaluator` logs as ``aggregation_score``.
  Computed on the examples' true classes, and optionally on the bank's own
  labels (true classes of labelled rows, pseudo classes of propagated ones).
- Its trajectory: the scores at each kept checkpoint of the run, and the
  mean score per evaluated epoch from the run's ``metrics.jsonl``.
- A 2-D metric MDS of a sample of the bank rows of a few classes (the
  paper's Figure 2), on the euclidean (chord) distances between the unit
  rows, ``sqrt(2 - 2 cos)``: a true metric, unlike ``1 - cos``, and the same
  neighbour order as the cosine similarity that LLP uses.

`analyze_run` does all of it for a run directory; `analysis_report` draws
and writes the results.
"""

import dataclasses

import numpy as np

from llp_tf.after_training import trained_run
from llp_tf.data import pipeline, splits
from llp_tf.errors import ConfigError, DataError
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.metrics import (AggregationScores, PseudoLabelStats, aggregation_scores,
                                     pseudo_label_stats)

# Rows summed at once in float64: bounds the temporary copy (64 MB at D = 128).
# SMACOF iterations of the MDS (scikit-learn's default); the classical-MDS
# start makes it converge in far fewer on the small samples drawn here.
MDS_MAX_ITERATIONS = 300


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


def bank_state(run, true_classes, steps_per_epoch):
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
                                         bank.is_labeled.numpy(), true_classes,
                                         run.num_classes),
        all_rows_score=float(aggregation_scores(
            embeddings, np.zeros(len(embeddings), np.int64), 1).per_class[0]))


def checkpoint_trajectory(run, true_classes, steps_per_epoch, report=None):
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
    paths = trained_run.checkpoint_paths(run.run_dir)
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


def read_metrics_history(run_dir):
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


def choose_classes(counts, num_chosen, seed):
    """int64 [num_chosen]: a seeded draw of classes that have rows, sorted.

    Args:
      counts: int [C], rows per class.
      num_chosen: int, classes wanted.
      seed: int.

    Raises:
      ConfigError: fewer classes with rows than ``num_chosen``.
    """
    present = np.flatnonzero(np.asarray(counts) > 0)
    if num_chosen > present.size:
        raise ConfigError(
            f"The MDS plot asks for {num_chosen} classes, but the run's bank holds examples of "
            f"only {present.size}. Give --classes={present.size} or fewer.")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(present, size=num_chosen, replace=False)).astype(np.int64)


def mds_classes(counts, num_chosen, class_ids, seed):
    """int64 [K]: the given ``class_ids`` (checked, sorted), or a seeded draw of ``num_chosen``.

    Raises:
      ConfigError: a given class out of range, repeated or without rows, or
        more classes asked for than have rows.
    """
    if class_ids is None:
        return choose_classes(counts, num_chosen, seed)
    class_ids = np.asarray(class_ids, np.int64)
    num_classes = len(counts)
    bad = [int(c) for c in class_ids if not 0 <= c < num_classes or counts[c] == 0]
    if bad or np.unique(class_ids).size != class_ids.size:
        raise ConfigError(
            f"The MDS classes {class_ids.tolist()} must be distinct classes in "
            f"[0, {num_classes}) that have examples in the bank; {bad or 'some repeat'} do not.")
    return np.sort(class_ids)


def sample_rows(true_classes, is_labeled, class_ids, points_per_class, seed):
    """Bank rows to draw in the MDS plot: up to ``points_per_class`` per class.

    The labelled rows of a class come first (a seeded draw of them if there
    are more than ``points_per_class``), then a seeded draw of its
    unlabelled rows fills the rest.

    Args:
      true_classes: int [N].
      is_labeled: bool [N].
      class_ids: int [K], the classes to sample.
      points_per_class: int > 0.
      seed: int.

    Returns:
      int64 [P], bank rows grouped by class in the order of ``class_ids``.
    """
    rng = np.random.default_rng(seed)
    true_classes = np.asarray(true_classes)
    is_labeled = np.asarray(is_labeled, bool)
    chosen = []
    for c in class_ids:
        labeled = np.flatnonzero((true_classes == c) & is_labeled)
        unlabeled = np.flatnonzero((true_classes == c) & ~is_labeled)
        take_labeled = min(labeled.size, points_per_class)
        take_unlabeled = min(unlabeled.size, points_per_class - take_labeled)
        chosen.append(np.sort(rng.choice(labeled, take_labeled, replace=False)))
        chosen.append(np.sort(rng.choice(unlabeled, take_unlabeled, replace=False)))
    return np.concatenate(chosen).astype(np.int64)


def chord_distances(rows):
    """float64 [P, P]: euclidean distances between the rows scaled to unit norm.

    Args:
      rows: float [P, D], nonzero rows.
    """
    unit = np.asarray(rows, np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    cosine = np.clip(unit @ unit.T, -1.0, 1.0)
    distances = np.sqrt(np.maximum(2.0 - 2.0 * cosine, 0.0))
    distances = (distances + distances.T) / 2.0  # exact symmetry for MDS
    np.fill_diagonal(distances, 0.0)
    return distances


def mds_2d(rows, seed):
    """Metric 2-D MDS of rows by their chord distances (see the module docstring).

    Args:
      rows: float [P, D], P >= 2.
      seed: int, the random state of scikit-learn's SMACOF.

    Returns:
      (coordinates float64 [P, 2], normalised stress (Stress-1) float; 0 is a
      perfect fit, above about 0.2 a poor one).
    """
    from sklearn.manifold import MDS  # noqa: PLC0415 -- scikit-learn imports slowly

    mds = MDS(n_components=2, metric_mds=True, metric="precomputed", init="classical_mds",
              max_iter=MDS_MAX_ITERATIONS, random_state=seed, normalized_stress=True)
    coordinates = mds.fit_transform(chord_distances(rows))
    return np.asarray(coordinates, np.float64), float(mds.stress_)


@dataclasses.dataclass(frozen=True)
class MDSProjection:
    """A 2-D MDS of a sample of bank rows.

    Attributes:
      class_ids: int64 [K], the classes drawn.
      rows: int64 [P], the bank rows drawn.
      classes: int64 [P], their true classes.
      labeled: bool [P], which of them are labelled.
      coordinates: float64 [P, 2].
      stress: float, Stress-1 of the fit.
    """

    class_ids: np.ndarray
    rows: np.ndarray
    classes: np.ndarray
    labeled: np.ndarray
    coordinates: np.ndarray
    stress: float


def project_classes(embeddings, true_classes, is_labeled, class_ids, points_per_class, seed):
    """`MDSProjection` of up to ``points_per_class`` rows of each class in ``class_ids``."""
    rows = sample_rows(true_classes, is_labeled, class_ids, points_per_class, seed)
    if rows.size < 2:
        raise ConfigError(f"The MDS needs at least 2 rows; the classes {list(class_ids)} have "
                          f"{rows.size}. Choose other classes or more points per class.")
    coordinates, stress = mds_2d(np.asarray(embeddings)[rows], seed)
    return MDSProjection(class_ids=np.asarray(class_ids, np.int64), rows=rows,
                         classes=np.asarray(true_classes)[rows].astype(np.int64),
                         labeled=np.asarray(is_labeled, bool)[rows], coordinates=coordinates,
                         stress=stress)


@dataclasses.dataclass(frozen=True)
class RunAnalysis:
    """Everything `analyze_run` found; see `analysis_report` for its rendering.

    Attributes:
      run_dir: str.
      dataset: str, the run's dataset name.
      class_names: tuple of C str.
      num_rows: int, N bank rows.
      num_labeled: int, M.
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
    class_names: tuple
    num_rows: int
    num_labeled: int
    warmup_epochs: int
    epochs: int
    steps_per_epoch: int
    latest: BankState
    trajectory: list
    history: list
    mds: MDSProjection
    mds_seed: int


def analyze_run(run_dir, num_mds_classes=5, points_per_class=100, seed=0, trajectory=True,
                class_ids=None, report=None):
    """Scores, trajectory and MDS of an LLP run's memory bank.

    Args:
      run_dir: str, a run directory written by `training_loop.run_training`.
      num_mds_classes: int > 0, classes in the MDS (a seeded draw), unless
        ``class_ids`` is given.
      points_per_class: int > 0, rows drawn per MDS class.
      seed: int, seeds the class draw, the row draw and the MDS.
      trajectory: bool, restore every kept checkpoint for the per-checkpoint
        scores (False: the latest only).
      class_ids: optional sequence of int, the MDS classes.
      report: optional callable taking a progress line (str).

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
    config = trained_run.read_config(run_dir)
    if config.method.name != "llp":
        raise ConfigError(
            f"{run_dir} is a {config.method.name} run, which keeps no memory bank: the embedding "
            "analysis reads an LLP run's bank. Give the --run_dir of an LLP run.")
    from llp_tf import data  # noqa: PLC0415 -- opening a source imports TFDS

    report(f"Opening the dataset {config.data.dataset}.")
    source = data.load_source(config.data.dataset, config.data.data_dir)
    info = source.info
    train_labels = source.train_labels()
    # Checks that the dataset still is the one the run trained on: the true
    # classes below are read through the run's split.
    _, used_index = splits.load_splits(RunDirectory(run_dir).split_path,
                                       train_labels, info.name)
    true_classes = train_labels[used_index]
    counts = np.bincount(true_classes, minlength=info.num_classes)
    # Bad MDS settings fail here, before the slow restores.
    class_ids = mds_classes(counts, num_mds_classes, class_ids, seed)
    report(f"Restoring the latest checkpoint of {run_dir}.")
    run = trained_run.load_run(run_dir, num_classes=info.num_classes)
    steps_per_epoch = max(pipeline.steps_per_epoch(len(used_index),
                                                    config.optimization.global_batch_size), 1)
    latest = bank_state(run, true_classes, steps_per_epoch)
    states = []
    if trajectory:
        report("Scoring the kept checkpoints.")
        states = checkpoint_trajectory(run, true_classes, steps_per_epoch, report)

    is_labeled = run.bank.is_labeled.numpy()
    rows_drawn = sum(min(int(counts[c]), points_per_class) for c in class_ids)
    report(f"MDS of {rows_drawn} bank rows of {len(class_ids)} classes.")
    projection = project_classes(run.bank.embeddings.numpy(), true_classes, is_labeled,
                                 class_ids, points_per_class, seed)
    return RunAnalysis(
        run_dir=run_dir, dataset=info.name, class_names=tuple(info.class_names),
        num_rows=int(len(used_index)), num_labeled=int(is_labeled.sum()),
        warmup_epochs=int(config.method.warmup_epochs),
        epochs=int(config.optimization.epochs),
        steps_per_epoch=steps_per_epoch, latest=latest, trajectory=states,
        history=read_metrics_history(run_dir), mds=projection, mds_seed=int(seed))

