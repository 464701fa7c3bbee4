"""Training steps of LLP, the warm start and the supervised baseline.

`LLPTrainer` owns the step logic only (what one step computes and updates);
the outer loop in `training_loop.py` owns epochs, checkpoints, evaluation
and summaries, as in TF Model Garden's Orbit trainers.

Phases:

- ``"warmup"``: instance recognition (Wu et al. 2018). Every example's label
  is its own instance id, so the aggregation loss over the whole bank is the
  exact non-parametric softmax; no categorisation loss.
- ``"llp"``: read the batch's labels and confidences from the bank; loss =
  mean of c * (L_C + L_A) + weight decay; SGD step; propagate pseudo labels
  to the batch from its embeddings; write them and the new embeddings into
  the bank (identically on every replica).
- ``"supervised"``: cross-entropy on labelled examples only (the batches hold
  only labelled examples); the baseline of the paper's tables.
"""

import tensorflow as tf

from llp_tf import label_encoding, losses, propagation

PHASES = ("warmup", "llp", "supervised")
METRICS = {
    "warmup": ("loss", "aggregation", "weight_decay"),
    "llp": ("loss", "aggregation", "categorisation", "weight_decay", "confidence",
            "pseudo_labelled"),
    "supervised": ("loss", "categorisation", "weight_decay"),
}


class LLPTrainer:
    """Step functions of one run (see the module docstring).

    Create the model, optimizer and bank inside ``strategy.scope()`` first.
    """

    def __init__(self, strategy, model, optimizer, bank, *, num_classes, global_batch_size,
                 weight_decay, temperature, k, t, propagation_method, weight_by_confidence,
                 use_categorisation, density_chunk_size):
        """
        Args:
          strategy: the `tf.distribute.Strategy` the variables were created in.
          model: `LLPModel`, built.
          optimizer: a Keras optimizer, built for the model's trainable variables.
          bank: `MemoryBank`, or None for the supervised baseline.
          num_classes: int, C.
          global_batch_size: int, examples per step over all replicas.
          weight_decay: float, lambda.
          temperature: float, tau.
          k: int, voters per propagation.
          t: int, neighbours of the density estimate.
          propagation_method: "local" (LLP, eq. 7-8), "knn" (eq. 5-6) or
            "classifier" (the category head's argmax and maximum probability,
            stored as real classes: the variant the release intended; the
            release stored the class without its label offset, so its pseudo
            labels landed among the instance ids).
          weight_by_confidence: bool, False for the "woc" ablation.
          use_categorisation: bool, False to drop L_C.
          density_chunk_size: int, query rows per chunk of the density refresh.
        """
        if propagation_method not in ("local", "knn", "classifier"):
            raise ValueError(f"Unknown propagation method {propagation_method!r}.")
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.bank = bank
        self.num_classes = int(num_classes)
        self.global_batch_size = int(global_batch_size)
        self.weight_decay = float(weight_decay)
        self.temperature = float(temperature)
        self.k = int(k)
        self.t = int(t)
        self.propagation_method = propagation_method
        self.weight_by_confidence = bool(weight_by_confidence)
        self.use_categorisation = bool(use_categorisation)
        self.density_chunk_size = int(density_chunk_size)
        self._loops = {}
        self._density_function = None

    # ---- public API ---------------------------------------------------------

    def train(self, iterator, num_steps, phase):
        """Runs ``num_steps`` steps of ``phase`` from a distributed iterator.

        Returns:
          dict of metric name -> float32 numpy [num_steps], each the mean over
          the step's global batch (``loss`` includes the weight decay).
        """
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, not {phase!r}.")
        if phase != "supervised" and self.bank is None:
            raise ValueError(f"The {phase!r} phase needs a memory bank.")
        if phase not in self._loops:
            self._loops[phase] = tf.function(
                lambda it, n: self._train_loop(it, n, phase))
        results = self._loops[phase](iterator, tf.constant(num_steps, tf.int32))
        return {name: value.numpy() for name, value in results.items()}

    def refresh_density(self):
        """Recomputes rho of every labelled example against the whole bank (eq. 7)."""
        if self._density_function is None:
            self._density_function = tf.function(lambda: propagation.local_density(
                self.bank.labeled_embeddings(), self.bank.embeddings, t=self.t,
                temperature=self.temperature, chunk_size=self.density_chunk_size))
        self.bank.assign_density(self._density_function())

    # ---- the loop inside one tf.function -------------------------------------

    def _train_loop(self, iterator, num_steps, phase):
        replica_step = {"warmup": self._warmup_step, "llp": self._llp_step,
                        "supervised": self._supervised_step}[phase]
        names = METRICS[phase]

        def body(i, *records):
            per_replica = self.strategy.run(replica_step, args=(next(iterator),))
            # Replicas return sums divided by the global batch: their sum is the mean.
            records = tuple(
                record.write(i, self.strategy.reduce(tf.distribute.ReduceOp.SUM,
                                                     per_replica[name], axis=None))
                for record, name in zip(records, names))
            return (i + 1,) + records

        records = tuple(tf.TensorArray(tf.float32, size=num_steps) for _ in names)
        # Steps are strictly sequential: each reads what the last one wrote.
        _, *records = tf.while_loop(lambda i, *_: i < num_steps, body, (0,) + records,
                                    parallel_iterations=1)
        return {name: record.stack() for name, record in zip(names, records)}

    # ---- replica steps -------------------------------------------------------

    def _weight_decay_share(self):
        # Gradients are summed over replicas, so each replica adds 1/R of it.
        replicas = self.strategy.num_replicas_in_sync
        return losses.l2_penalty(self.model.weight_decay_variables(),
                                 self.weight_decay) / replicas

    def _apply(self, tape, loss):
        variables = self.model.trainable_variables
        gradients = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))

    def _warmup_step(self, batch):
        index = tf.cast(batch["index"], tf.int64)
        labels = label_encoding.instance_labels(index, self.num_classes)
        bank_labels = label_encoding.instance_labels(
            tf.range(self.bank.num_examples, dtype=tf.int64), self.num_classes)
        with tf.GradientTape() as tape:
            outputs = self.model(batch["image"], training=True)
            aggregation = losses.aggregation_loss(
                outputs["embedding"], self.bank.embeddings, bank_labels, labels,
                self.temperature)
            data_loss = tf.reduce_sum(aggregation) / self.global_batch_size
            decay = self._weight_decay_share()
            loss = data_loss + decay
        self._apply(tape, loss)
        self.bank.update(index, tf.stop_gradient(outputs["embedding"]))
        return {"loss": loss, "aggregation": data_loss, "weight_decay": decay}

    def _llp_step(self, batch):
        index = tf.cast(batch["index"], tf.int64)
        # The loss uses the state as read at the start of the step.
        labels, confidence = self.bank.read(index)
        with tf.GradientTape() as tape:
            outputs = self.model(batch["image"], training=True)
            aggregation = losses.aggregation_loss(
                outputs["embedding"], self.bank.embeddings, self.bank.labels, labels,
                self.temperature)
            categorisation = losses.categorisation_loss(outputs["logits"], labels)
            data_loss = losses.llp_loss(aggregation, categorisation, confidence,
                                        self.global_batch_size, self.weight_by_confidence,
                                        self.use_categorisation)
            decay = self._weight_decay_share()
            loss = data_loss + decay
        self._apply(tape, loss)

        embedding = tf.stop_gradient(outputs["embedding"])
        classes, new_confidence = self._propagate(embedding, outputs["logits"])
        self.bank.update(index, embedding, classes, new_confidence)

        share = 1.0 / self.global_batch_size
        has_class = tf.cast(label_encoding.is_class(labels, self.num_classes), tf.float32)
        return {
            "loss": loss,
            "aggregation": tf.reduce_sum(aggregation) * share,
            "categorisation": tf.reduce_sum(categorisation) * share,
            "weight_decay": decay,
            "confidence": tf.reduce_sum(confidence) * share,
            "pseudo_labelled": tf.reduce_sum(has_class) * share,
        }

    def _propagate(self, embedding, logits):
        """Pseudo classes int64 [B] and confidences float32 [B] for a batch."""
        if self.propagation_method == "classifier":
            probabilities = tf.nn.softmax(tf.stop_gradient(logits))
            return tf.argmax(probabilities, axis=1), tf.reduce_max(probabilities, axis=1)
        density = self.bank.density if self.propagation_method == "local" else None
        return propagation.propagate(
            embedding, self.bank.labeled_embeddings(), self.bank.labeled_classes(),
            self.num_classes, k=self.k, temperature=self.temperature, density=density)

    def _supervised_step(self, batch):
        labels = tf.cast(batch["label"], tf.int64)
        with tf.GradientTape() as tape:
            outputs = self.model(batch["image"], training=True)
            cross_entropy = losses.categorisation_loss(outputs["logits"], labels)
            data_loss = tf.reduce_sum(cross_entropy) / self.global_batch_size
            decay = self._weight_decay_share()
            loss = data_loss + decay
        self._apply(tape, loss)
        return {"loss": loss, "categorisation": data_loss, "weight_decay": decay}
