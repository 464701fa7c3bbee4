"""Evaluation of a run: validation accuracy and the memory bank's state.

- softmax top-1 / top-5 of the category head on the validation split;
- nearest neighbour (NN) top-1: the true training label of the bank row
  closest to the validation image's embedding (as in the paper's ablations);
- pseudo-label accuracy, coverage and mean confidence on the unlabelled
  examples, where their true labels are known (a diagnostic);
- aggregation score: per class, the L2 norm of the mean bank row of the
  class's examples (higher is tighter), averaged over classes.
"""

import numpy as np
import tensorflow as tf

from llp_tf.core import propagation


class Evaluator:
    """Computes the metrics above for one run.

    Args:
      strategy: the run's `tf.distribute.Strategy`.
      model: `LLPModel`.
      bank: `MemoryBank`, or None (supervised baseline: validation accuracy only).
      bank_true_labels: int64 [N], the true class of each bank row (-1 where
        unknown); used for NN accuracy, pseudo-label accuracy and aggregation.
      num_classes: int, C.
    """

    def __init__(self, strategy, model, bank, bank_true_labels, num_classes):
        self.strategy = strategy
        self.model = model
        self.bank = bank
        self.num_classes = int(num_classes)
        self.bank_true_labels = np.asarray(bank_true_labels, np.int64)
        self._bank_true_labels_tensor = tf.constant(self.bank_true_labels)
        self._eval_loop = tf.function(self._loop)

    def evaluate(self, distributed_dataset, num_steps):
        """All metrics; validation ones from one pass over ``distributed_dataset``.

        Args:
          distributed_dataset: from `strategy.distribute_datasets_from_function`
            of an evaluation input_fn (elements with "image", "label", "mask").
          num_steps: int, its number of global batches (`pipeline.eval_steps`).

        Returns:
          dict of metric name -> Python float.
        """
        counts = self._eval_loop(iter(distributed_dataset), tf.constant(num_steps))
        counts = {name: float(value.numpy()) for name, value in counts.items()}
        total = max(counts.pop("examples"), 1.0)
        metrics = {"top1": counts["top1"] / total, "top5": counts["top5"] / total,
                   "examples": total}
        if self.bank is not None:
            metrics["nn_top1"] = counts["nn_top1"] / total
            metrics.update(self.bank_metrics())
        return metrics

    def bank_metrics(self):
        """Pseudo-label and aggregation statistics of the bank's current state."""
        labels = self.bank.labels.numpy()
        confidence = self.bank.confidence.numpy()
        unlabeled = ~self.bank.is_labeled.numpy() & (self.bank_true_labels >= 0)
        has_class = labels < self.num_classes
        metrics = {}
        if unlabeled.any():
            pseudo = unlabeled & has_class
            metrics["pseudo_label_accuracy"] = float(np.mean(
                labels[unlabeled] == self.bank_true_labels[unlabeled]))
            metrics["pseudo_label_coverage"] = float(np.mean(has_class[unlabeled]))
            metrics["pseudo_label_confidence"] = (float(np.mean(confidence[pseudo]))
                                                  if pseudo.any() else 0.0)
        metrics["aggregation_score"] = float(self._aggregation_score().numpy())
        return metrics

    @tf.function
    def _aggregation_score(self):
        known = self._bank_true_labels_tensor >= 0
        rows = tf.boolean_mask(self.bank.embeddings, known)
        classes = tf.boolean_mask(self._bank_true_labels_tensor, known)
        means = tf.math.unsorted_segment_mean(rows, classes, self.num_classes)
        present = tf.math.unsorted_segment_sum(tf.ones_like(classes, tf.float32), classes,
                                               self.num_classes) > 0
        return tf.reduce_mean(tf.boolean_mask(tf.norm(means, axis=1), present))

    def _loop(self, iterator, num_steps):
        names = ("examples", "top1", "top5") + (("nn_top1",) if self.bank is not None else ())

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
        labels = tf.cast(batch["label"], tf.int64)
        mask = tf.cast(batch["mask"], tf.float32)
        logits = outputs["logits"]
        top5 = min(5, self.num_classes)
        counts = {
            "examples": tf.reduce_sum(mask),
            "top1": tf.reduce_sum(mask * tf.cast(
                tf.equal(tf.argmax(logits, axis=1), labels), tf.float32)),
            "top5": tf.reduce_sum(mask * tf.cast(
                tf.math.in_top_k(labels, logits, top5), tf.float32)),
        }
        if self.bank is not None:
            _, nearest = propagation.nearest_rows(outputs["embedding"], self.bank.embeddings, 1)
            neighbour_labels = tf.gather(self._bank_true_labels_tensor, nearest[:, 0])
            counts["nn_top1"] = tf.reduce_sum(mask * tf.cast(
                tf.equal(neighbour_labels, labels), tf.float32))
        return counts
