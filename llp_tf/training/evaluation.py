"""Evaluation of a run (docs/training.md, "Evaluation"): ``val_top1``, ``val_top5`` and
``val_categorisation`` of the category head over ``val_examples`` real validation examples;
``val_nn_top1``, the true label of the nearest bank row (as in the paper's ablations); and
the bank's statistics (`llp_tf.core.bank_statistics`). `validation_fn`: a run's evaluation of
its models over the validation set."""

from collections.abc import Callable, Mapping
from typing import Optional

import numpy as np
import tensorflow as tf

from llp_tf.core import bank_statistics
from llp_tf.core.bank import Bank
from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.base import Source
from llp_tf.data.splits.run_split import RunSplit
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training import cluster, iterator_release
from llp_tf.training import metrics as metrics_lib
from llp_tf.tensor_types import Array


class Evaluator:
    """Computes the metrics above for one run.

    Args:
      strategy: the run's `tf.distribute.Strategy`; model: `EmbeddingClassifier`.
      bank: a `Bank`, or None (validation accuracy only).
      bank_true_labels: int64 [N], the true class of each bank row (-1 where unknown).
      num_classes: int, C."""

    def __init__(self, strategy: tf.distribute.Strategy, model: EmbeddingClassifier,
                 bank: Optional[Bank], bank_true_labels: Array,
                 num_classes: int) -> None:
        self.strategy = strategy
        self.model = model
        self.bank = bank
        self.num_classes = int(num_classes)
        self.bank_true_labels = np.asarray(bank_true_labels, np.int64)
        self._bank_true_labels_tensor = tf.constant(self.bank_true_labels)
        self._eval_loop = tf.function(self._loop)

    def evaluate(self, distributed_dataset: tf.distribute.DistributedDataset,
                 num_steps: int) -> dict[str, float]:
        """All metrics, name -> Python float (``val_examples``: int), the validation ones from one
        pass over ``distributed_dataset`` (elements "image", "label", "mask") of ``num_steps``
        global batches."""
        spent = [iter(distributed_dataset)]
        counts = self._eval_loop(spent[0], tf.constant(num_steps))
        iterator_release.release(spent)
        counts = {name: float(value.numpy()) for name, value in counts.items()}
        examples = int(round(counts.pop("examples")))
        metrics = {metrics_lib.validation_name(name): value / max(examples, 1)
                   for name, value in counts.items()}
        metrics[metrics_lib.validation_name("examples")] = examples
        if self.bank is not None:
            metrics.update(self.bank_metrics())
        return metrics

    def bank_metrics(self) -> dict[str, float]:
        """``aggregation_score`` and, once an unlabelled row of known class has a pseudo label,
        ``pseudo_label_accuracy``, ``_coverage`` and ``_confidence``: name -> Python float.
        Each process sums over the rows it holds, a block at a time (`Bank.held_blocks`); a
        bank sharded across workers adds up their sums."""
        start, stop = self.bank.held_rows
        held = bank_statistics.held_sums(self.bank, self.bank_true_labels, self.num_classes)
        counts, (sums, class_counts) = held.label_counts, held.groups["true"]
        if stop - start < len(self.bank_true_labels):
            counts, sums, class_counts = cluster.process_sum(self.strategy)(
                (counts, sums, class_counts.astype(np.float64)))
        stats = bank_statistics.stats_of_counts(counts)
        metrics = {}
        if stats.coverage > 0:
            metrics["pseudo_label_accuracy"] = stats.accuracy
            metrics["pseudo_label_coverage"] = stats.coverage
            metrics["pseudo_label_confidence"] = stats.confidence
        metrics["aggregation_score"] = bank_statistics.scores_of_sums(
            sums, np.rint(class_counts).astype(np.int64)).mean
        return metrics

    def _loop(self, iterator, num_steps):
        names = ("examples", "top1", "top5", "categorisation") + (
            ("nn_top1",) if self.bank is not None else ())

        def body(i, *totals):
            per_replica = self.strategy.run(self._replica_step, args=(next(iterator),))
            return (i + 1,) + tuple(
                total + self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[name],
                                             axis=None)
                for total, name in zip(totals, names))

        zeros = tuple(tf.constant(0.0) for _ in names)
        _, *totals = tf.while_loop(lambda i, *_: i < num_steps, body, (0,) + zeros,
                                   parallel_iterations=1)
        return dict(zip(names, totals))

    def _replica_step(self, batch):
        outputs = self.model(batch["image"], training=False)
        labels, mask = batch["label"], batch["mask"]
        logits = outputs["logits"]
        counts = {
            "examples": tf.reduce_sum(tf.cast(mask, tf.float32)),
            "top1": metrics_lib.top_k_count(logits, labels, mask, 1),
            "top5": metrics_lib.top_k_count(logits, labels, mask, 5),
            "categorisation": metrics_lib.cross_entropy_sum(logits, labels, mask),
        }
        if self.bank is not None:
            counts["nn_top1"] = metrics_lib.nearest_neighbour_count(
                self.bank.nearest_rows(outputs["embedding"]), self._bank_true_labels_tensor,
                labels, mask)
        return counts



def validation_fn(strategy: tf.distribute.Strategy, models: Mapping[str, EmbeddingClassifier],
                  bank: Optional[Bank], source: Source, split: RunSplit, global_batch_size: int,
                  image_size: int) -> Callable[[], dict[str, float]]:
    """() -> the metrics of ``models`` (`Method.evaluated_models`) over the validation examples
    ``split`` does not exclude, the extra ones' named after the model (``val_student_top1``);
    ``bank``'s and ``val_examples`` go with the unnamed one ("")."""
    bank_labels = split.train_labels[split.used_index]
    evaluators = {prefix: Evaluator(strategy, model, None if prefix else bank, bank_labels,
                                    source.info.num_classes)
                  for prefix, model in models.items()}
    dataset = strategy.distribute_datasets_from_function(input_fns.make_eval_input_fn(
        source, global_batch_size, image_size, excluded_index=split.excluded_validation))
    steps = input_fns.eval_steps(source.info.num_validation - split.excluded_validation.size,
                                 global_batch_size)
    prefix = metrics_lib.VALIDATION_PREFIX

    def of_model(model, name):
        return metrics_lib.validation_name(name[len(prefix):], model) if model else name

    return lambda: {of_model(model, name): value
                    for model, evaluator in evaluators.items()
                    for name, value in evaluator.evaluate(dataset, steps).items()
                    if not (model and name == metrics_lib.validation_name("examples"))}
