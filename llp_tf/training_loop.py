"""The outer training loop: epochs, checkpoints, evaluation, summaries.

`run_training(config)` builds everything from a `TrainConfig`, resumes from
the run directory's latest checkpoint when there is one, and trains epoch by
epoch: the instance-recognition warm start, then LLP (or the supervised
baseline). The step logic lives in `trainer.LLPTrainer`.

The run directory holds:

- ``config.json``: the resolved settings;
- ``split.npz``: the labelled / used split, drawn once and reloaded on resume;
- ``checkpoints/``: one `tf.train.Checkpoint` of all training state (model,
  optimizer, bank with labels, confidences and densities, step, the epoch
  whose densities are current, plateau state); there is no random-generator
  state to save because data order and augmentation are stateless functions
  of (seed, epoch, example);
- ``metrics.jsonl``: one JSON line per evaluation;
- ``tensorboard/``: ``train/...`` and ``eval/...`` scalars.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from llp_tf import config as config_lib
from llp_tf import data, schedule
from llp_tf.data import label_subsets, pipeline, splits
from llp_tf.distribution import make_strategy
from llp_tf.errors import ConfigError, LLPError
from llp_tf.evaluation import Evaluator
from llp_tf.memory_bank import MemoryBank
from llp_tf.progress import EpochProgress
from llp_tf.trained_run import CHECKPOINT_DIR, SPLIT_FILE, build_run_model
from llp_tf.trainer import LLPTrainer

METRICS_FILE = "metrics.jsonl"


class TrainingDiverged(LLPError):
    """The loss became NaN or infinite."""


def _log(stream, message):
    stream.write(message + "\n")
    stream.flush()


def _resolve_split(config, source, train_labels, stream):
    """(labeled_index, used_index, new): the run's saved split, or else a given split
    file, a subset list or a new draw; ``new`` says the split is not saved yet."""
    path = os.path.join(config.run_dir, SPLIT_FILE)
    name = source.info.name
    if os.path.exists(path):
        return (*splits.load_splits(path, train_labels, name), False)
    warning = splits.absent_classes_warning(train_labels, source.info.num_classes)
    if warning:
        _log(stream, warning)
    if config.split_file:
        labeled_index, used_index = splits.load_splits(config.split_file, train_labels, name)
        _log(stream, f"Split from {config.split_file}.")
    elif config.label_subset:
        labeled_index, used_index, list_path = label_subsets.make_subset_splits(
            source, config.label_subset, config.data_percent, config.split_seed,
            config.data_dir)
        _log(stream, f"Labelled set: the {len(labeled_index)} images listed in {list_path} "
                     "(--label_percent is not used).")
    else:
        labeled_index, used_index = splits.make_splits(
            train_labels, config.label_percent, config.data_percent, seed=config.split_seed,
            num_classes=source.info.num_classes)
    return labeled_index, used_index, True


def _check_one_batch(num_used, global_batch_size):
    if pipeline.steps_per_epoch(num_used, global_batch_size) == 0:
        raise ConfigError(
            f"The run uses {num_used} training examples, fewer than one global batch "
            f"(--global_batch_size={global_batch_size}), so an epoch would have no step. "
            f"Give --global_batch_size={num_used} or less, or use more data "
            "(--data_percent, or a larger dataset).")


class _RunState:
    """Everything a run trains and saves, created inside the strategy scope."""

    def __init__(self, config, strategy, num_classes, labeled_positions, labeled_classes,
                 num_bank_rows):
        with strategy.scope():
            self.model = build_run_model(config, num_classes)
            self.optimizer = keras.optimizers.SGD(learning_rate=config.learning_rate,
                                                  momentum=config.momentum)
            # Keras 3 restores nothing into slots that do not exist yet.
            self.optimizer.build(self.model.trainable_variables)
            self.bank = None
            if config.method == "llp":
                self.bank = MemoryBank(num_bank_rows, config.embedding_dim, num_classes,
                                       labeled_positions, labeled_classes,
                                       momentum=config.bank_momentum, seed=config.seed)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.density_epoch = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                             name="density_epoch")
            self.plateau = schedule.PlateauTracker(config.plateau_patience)
        tracked = dict(model=self.model, optimizer=self.optimizer, step=self.step,
                       density_epoch=self.density_epoch, plateau=self.plateau)
        if self.bank is not None:
            tracked["bank"] = self.bank
        self.checkpoint = tf.train.Checkpoint(**tracked)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(config.run_dir, CHECKPOINT_DIR),
            max_to_keep=config.keep_checkpoints)

    def restore_latest(self):
        """Restores the newest checkpoint; returns its path or None."""
        path = self.manager.latest_checkpoint
        if path is None:
            return None
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
            raise ConfigError(
                f"The checkpoint {path} does not fit this run's data and model (its "
                f"examples N, embedding size D or classes C differ): {error}. Use a new "
                "--run_dir or the settings the checkpoint was written with.") from None
        return path

    def warm_start(self, warm_start, train_labels, used_index, step):
        """Loads the model and bank rows of an instance-recognition run."""
        run_dir = warm_start if os.path.isdir(warm_start) else os.path.dirname(
            os.path.dirname(warm_start))
        path = (tf.train.latest_checkpoint(os.path.join(warm_start, CHECKPOINT_DIR))
                if os.path.isdir(warm_start) else warm_start)
        if path is None:
            raise ConfigError(f"--warm_start {warm_start} holds no checkpoint.")
        split_path = os.path.join(run_dir, SPLIT_FILE)
        if os.path.exists(split_path):
            _, warm_used = splits.load_splits(split_path, train_labels)
            if not np.array_equal(warm_used, used_index):
                raise ConfigError(
                    f"The warm-start run {run_dir} used another set of training examples "
                    "than this run; its bank rows would belong to other images.")
        partial = tf.train.Checkpoint(model=self.model,
                                      bank=tf.train.Checkpoint(embeddings=self.bank.embeddings))
        try:
            partial.restore(path).expect_partial().assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.InvalidArgumentError) as error:
            raise ConfigError(f"Cannot warm-start from {path}: {error}") from None
        self.step.assign(step)


def _phase(config, epoch):
    if config.method == "supervised":
        return "supervised"
    return "warmup" if epoch < config.warmup_epochs else "llp"


def _finite_or_raise(metrics, global_step, steps, run_dir, last_checkpoint):
    for name, values in metrics.items():
        bad = ~np.isfinite(values)
        if bad.any():
            at = global_step + int(np.argmax(bad)) + 1
            kept = (f"the last good checkpoint ({last_checkpoint}) is kept"
                    if last_checkpoint else "no checkpoint had been written yet")
            raise TrainingDiverged(
                f"The training {name} became {values[bad][0]} at step {at} (of the "
                f"{steps} steps just run) in {run_dir}; {kept}. Lower the learning rate "
                "or check the data, then rerun the same command to resume.")


def format_table(metrics):
    """A two-column text table of metric name and value."""
    width = max(len(name) for name in metrics)
    lines = [f"{'metric'.ljust(width)}  value", f"{'-' * width}  ------"]
    for name, value in metrics.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        lines.append(f"{name.ljust(width)}  {shown}")
    return "\n".join(lines)


def run_training(config, stream=None):
    """Trains (or resumes) the run described by ``config``; returns the final metrics.

    Raises:
      LLPError (DataError, ConfigError, TrainingDiverged) for bad input or a
      diverged run; the message says what to do.
    """
    stream = stream or sys.stdout
    config_lib.check_resumable(config)
    strategy = make_strategy(config.cpu_replicas)
    if config.global_batch_size % strategy.num_replicas_in_sync:
        raise ConfigError(
            f"The global batch size {config.global_batch_size} does not split evenly over "
            f"{strategy.num_replicas_in_sync} replicas.")
    source = data.load_source(config.dataset, config.data_dir)
    info = source.info
    train_labels = source.train_labels()
    labeled_index, used_index, new_split = _resolve_split(config, source, train_labels, stream)
    # Checked before anything is written, so a refused run leaves no files.
    _check_one_batch(len(used_index), config.global_batch_size)
    if new_split:
        splits.save_splits(os.path.join(config.run_dir, SPLIT_FILE), labeled_index, used_index,
                           train_labels, info.name, config.label_percent, config.data_percent,
                           config.split_seed)
    bank_true_labels = train_labels[used_index]
    labeled_positions = splits.dense_index(used_index, labeled_index)
    config_lib.save_config(config)

    # Seeds weight initialisation, so a run is reproducible from its settings.
    keras.utils.set_random_seed(config.seed)
    state = _RunState(config, strategy, info.num_classes, labeled_positions,
                      train_labels[labeled_index], len(used_index))
    steps_per_epoch = pipeline.steps_per_epoch(len(used_index), config.global_batch_size)
    restored = state.restore_latest()
    if restored:
        _log(stream, f"Resumed from {restored} (step {int(state.step.numpy())}).")
    elif config.warm_start and config.method == "llp":
        state.warm_start(config.warm_start, train_labels, used_index,
                         config.warmup_epochs * steps_per_epoch)
        _log(stream, f"Warm start from {config.warm_start}: LLP from epoch "
                     f"{config.warmup_epochs}.")

    trainer = LLPTrainer(
        strategy, state.model, state.optimizer, state.bank, num_classes=info.num_classes,
        global_batch_size=config.global_batch_size, weight_decay=config.weight_decay,
        temperature=config.temperature, k=config.k, t=config.t,
        propagation_method=config.propagation, weight_by_confidence=config.weight_by_confidence,
        use_categorisation=config.use_categorisation,
        density_chunk_size=config.density_chunk_size)
    evaluator = Evaluator(strategy, state.model, state.bank, bank_true_labels, info.num_classes)
    eval_dataset = strategy.distribute_datasets_from_function(pipeline.make_eval_input_fn(
        source, config.global_batch_size, config.image_size))
    eval_steps = pipeline.eval_steps(info.num_validation, config.global_batch_size)
    writer = tf.summary.create_file_writer(os.path.join(config.run_dir, "tensorboard"))
    # The supervised baseline reads only labelled examples, for as many steps
    # as an epoch of the used set, so both methods share one schedule.
    train_index = labeled_index if config.method == "supervised" else used_index
    cache_passes = (config.method == "supervised"
                    and len(labeled_index) <= config.cache_labeled_limit)

    _log(stream, f"{info.name}: {len(used_index)} training examples used, "
                 f"{len(labeled_index)} labelled, {info.num_classes} classes; "
                 f"{strategy.num_replicas_in_sync} replica(s); {steps_per_epoch} steps per "
                 f"epoch of {config.global_batch_size}.")
    final = {}
    with data.data_errors():
        while True:
            global_step = int(state.step.numpy())
            epoch, start = divmod(global_step, steps_per_epoch)
            if epoch >= config.epochs:
                break
            phase = _phase(config, epoch)
            if (phase == "llp" and config.propagation == "local"
                    and int(state.density_epoch.numpy()) != epoch):
                trainer.refresh_density()
                state.density_epoch.assign(epoch)
            learning_rate = schedule.learning_rate_at(
                epoch, config.learning_rate, config.lr_drop_epochs, config.lr_drop_factor,
                int(state.plateau.drops.numpy()))
            state.optimizer.learning_rate.assign(learning_rate)

            input_fn = pipeline.make_train_input_fn(
                source, config.global_batch_size, config.image_size, config.seed, epoch,
                start_step=start, used_index=train_index, steps=steps_per_epoch,
                batches_cross_passes=config.method == "supervised",
                augmentation=config.augmentation, min_crop_area=config.min_crop_area,
                cache_passes=cache_passes)
            iterator = iter(strategy.distribute_datasets_from_function(input_fn))
            progress = EpochProgress(f"epoch {epoch + 1}/{config.epochs} ({phase})",
                                     steps_per_epoch, config.global_batch_size, start, stream)
            epoch_means = {}
            while start < steps_per_epoch:
                to_checkpoint = config.checkpoint_every - global_step % config.checkpoint_every
                steps = min(config.steps_per_loop, steps_per_epoch - start, to_checkpoint)
                metrics = trainer.train(iterator, steps, phase)
                _finite_or_raise(metrics, global_step, steps, config.run_dir,
                                 state.manager.latest_checkpoint)
                state.step.assign_add(steps)
                start += steps
                global_step += steps
                means = {name: float(np.mean(values)) for name, values in metrics.items()}
                for name, value in means.items():
                    epoch_means.setdefault(name, []).append((value, steps))
                with writer.as_default(step=global_step):
                    for name, value in means.items():
                        tf.summary.scalar(f"train/{name}", value)
                    tf.summary.scalar("train/learning_rate", learning_rate)
                progress.update(start, means)
                if global_step % config.checkpoint_every == 0 and start < steps_per_epoch:
                    state.manager.save(checkpoint_number=global_step)

            epoch_done = epoch + 1
            if epoch_done % config.eval_every == 0 or epoch_done == config.epochs:
                evaluated = evaluator.evaluate(eval_dataset, eval_steps)
                train_means = {f"train_{name}": sum(v * n for v, n in pairs) /
                               sum(n for _, n in pairs) for name, pairs in epoch_means.items()}
                final = {"epoch": epoch_done, "step": global_step, "phase": phase,
                         "learning_rate": learning_rate, **train_means, **evaluated}
                with writer.as_default(step=global_step):
                    for name, value in evaluated.items():
                        tf.summary.scalar(f"eval/{name}", value)
                with open(os.path.join(config.run_dir, METRICS_FILE), "a") as f:
                    f.write(json.dumps(final) + "\n")
                _log(stream, f"epoch {epoch_done}: " + " ".join(
                    f"{name} {value:.4f}" for name, value in evaluated.items()
                    if name != "examples"))
                if phase != "warmup" and state.plateau.update(evaluated["top1"]):
                    _log(stream, "Validation top-1 has plateaued: the learning rate drops "
                                 f"x{config.lr_drop_factor} from the next epoch.")
            state.manager.save(checkpoint_number=global_step)
    writer.flush()
    if final:
        _log(stream, "\n" + format_table(final))
    else:
        _log(stream, f"The run in {config.run_dir} has finished its {config.epochs} epochs; "
                     f"its metrics are in {METRICS_FILE}. Raise --epochs to train further.")
    return final
