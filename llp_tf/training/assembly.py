"""One training run from its config: `run_training` builds the data, split, model, optimizer,
method, checkpoint, evaluator and actions and hands them to the `Controller`. Data order and
augmentation are stateless functions of (seed, epoch, example): no random state is saved."""

import contextlib
import dataclasses
import functools
import io
import sys
import tempfile
from typing import Any, Optional, TextIO

import keras
import tensorflow as tf

from llp_tf.counted_nouns import counted, numbered_range
from llp_tf.training import schedule
from llp_tf.data.config import HOST
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns
from llp_tf.data.pipeline import streams as input_streams
from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import regime, run_split
from llp_tf.training.distribution import first_device, make_strategy
from llp_tf.errors import ConfigError
from llp_tf.training.evaluation import validation_fn
from llp_tf.models import precision
from llp_tf.training import actions
from llp_tf.training import config as config_lib
from llp_tf.training.controller import Controller, LoopSettings
from llp_tf.training.epoch_totals import EpochTotals
from llp_tf.training.methods import StepRunner, TrainingSplit, method_class
from llp_tf.training import cluster as cluster_lib
from llp_tf.training import disk_space, resumption, run_record, summaries
from llp_tf.training.preemption import PreemptionWatch
from llp_tf.training.progress import format_table
from llp_tf.training.checkpoints import RunCheckpoints
from llp_tf.training.run_directory import RunDirectory, start_afresh
from llp_tf.training.run_lock import RunLock
from llp_tf.training.lost_worker import report_lost_worker

_log = actions.log_line


def _prepare_run_directory(config, source, stream, chief, afresh):
    """The run's split (`run_split.prepare`, saved by the chief) and, on the chief, its
    ``config.json`` if new, after every check that can refuse the run."""
    split_path = RunDirectory(config.run_dir).split_path
    split = run_split.prepare(config.data, split_path, source,
                              config.optimization.global_batch_size, afresh, chief,
                              functools.partial(_log, stream))
    if chief and run_record.started_config(config.run_dir) is None:
        run_record.save_config(config, regime.read_made_from(split_path))
    return split


def _training_split(split):
    """The `TrainingSplit` a method sees: labels of the labelled examples only."""
    return TrainingSplit(split.labelled_index, split.used_index,
                         split.train_labels[split.labelled_index])


def _input_maker(config, source, strategy, spec, split, steps_per_epoch):
    """make_iterator(epoch, start_step): the distributed iterator of the method's input streams."""
    input_streams.check_batch_split(spec.streams, strategy.num_replicas_in_sync)
    d = config.data
    cached = [name for name, stream in spec.streams.items()
              if stream.repeats and len(stream.index) <= d.cache_labelled_limit]

    def make_iterator(epoch, start_step):
        input_fn = input_streams.make_streams_input_fn(
            source, spec.streams, d.image_size, config.run.seed, epoch, start_step,
            steps_per_epoch, labelled_index=split.labelled_index,
            augmentation=d.augmentation, min_crop_area=d.min_crop_area, cached=cached,
            input_service=d.input_service, augment_on=d.augment_on)
        return iter(strategy.distribute_datasets_from_function(input_fn))

    return make_iterator


@dataclasses.dataclass
class _RunState:
    """What the run's checkpoint holds, created in the strategy's scope."""

    model: object
    optimizer: object
    step: tf.Variable
    plateau: schedule.PlateauTracker
    method: object
    checkpoints: RunCheckpoints
    totals: EpochTotals


def _build_state(config, strategy, num_classes, split, stream, scratch_dir):
    keras.utils.set_random_seed(config.run.seed)
    optimization, context = config.optimization, config.method_context()
    method_type = method_class(config.method.name)
    spec = method_type.optimizer_spec(context)
    with strategy.scope():
        model = context.build_model(num_classes)
        optimizer = keras.optimizers.SGD(learning_rate=spec.learning_rate,
                                         momentum=spec.momentum, nesterov=spec.nesterov)
        # Keras 3 restores nothing into slots that do not exist yet.
        optimizer.build(model.trainable_variables)
        # The checkpoint holds the SGD itself, so the precision can change on resume.
        stepping = precision.wrap_optimizer(optimizer, config.run.mixed_precision,
                                            model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        plateau = schedule.PlateauTracker(optimization.plateau_patience)
    method = method_type.from_context(context, strategy, model, stepping, num_classes,
                                      _training_split(split))
    with strategy.scope():
        totals = EpochTotals(method.metric_kinds(phase) for phase in method.PHASES)
    checkpoints = RunCheckpoints(
        dict(model=model, optimizer=optimizer, step=step, plateau=plateau,
             epoch_totals=totals, **method.checkpoint_items()), RunDirectory(config.run_dir),
        config.run.keep_checkpoints, stream, scratch_dir=scratch_dir,
        workers=cluster_lib.workers_of(strategy))
    return _RunState(model, optimizer, step, plateau, method, checkpoints, totals)


def _learning_rate(config, plateau):
    """epoch -> the rate the optimizer starts the epoch with: the protocol's drops, or the
    method's constant rate (`OptimizerSpec.step_drops`)."""
    spec = method_class(config.method.name).optimizer_spec(config.method_context())
    optimization = config.optimization
    if not spec.step_drops:
        return lambda epoch: spec.learning_rate
    return lambda epoch: schedule.learning_rate_at(
        epoch, spec.learning_rate, optimization.lr_drop_epochs, optimization.lr_drop_factor,
        int(plateau.drops.numpy()))


def _controller(config, source, strategy, state, split, steps_per_epoch, stream, chief,
                stop_requested):
    run_directory = RunDirectory(config.run_dir)
    optimization, run, method = config.optimization, config.run, state.method
    writers = summaries.make_writers(run_directory.tensorboard_dir, chief)
    logs = [actions.EvaluationLog(run_directory, writers, stream)] if chief else []
    checkpoints = state.checkpoints
    spec = method.input_spec(_training_split(split))
    augmentation = config.data.augmentation
    prepare = (None if config.data.augment_on == HOST else
               lambda batch: input_streams.finish_batch(batch, spec.streams, augmentation))
    return Controller(
        method=method, runner=StepRunner(method, prepare), step=state.step,
        totals=state.totals, checkpoints=checkpoints, optimizer=state.optimizer,
        writer=writers[summaries.TRAIN_RUN], stream=stream,
        settings=LoopSettings(optimization.epochs, steps_per_epoch,
                              optimization.global_batch_size, run.steps_per_loop,
                              run.checkpoint_every, run.eval_every),
        learning_rate=_learning_rate(config, state.plateau),
        make_iterator=_input_maker(config, source, strategy, spec, split, steps_per_epoch),
        evaluate=validation_fn(strategy, method.evaluated_models(), method.bank, source, split,
                               optimization.global_batch_size, config.data.image_size),
        train_actions=[actions.NanGuard(config.run_dir, lambda: checkpoints.latest)],
        eval_actions=logs + [actions.PlateauRule(state.plateau, method.tracks_plateau,
                                                 optimization.lr_drop_factor, stream)],
        stop_requested=stop_requested)


def run_training(config: config_lib.TrainConfig, stream: Optional[TextIO] = None,
                 overwrite: bool = False) -> dict[str, Any]:
    """Trains (or resumes) the run of a `TrainConfig`; returns the final metrics ({} when nothing
    was left to train). Every worker of a cluster calls it; the chief alone locks and writes the
    run directory.

    Raises:
      LLPError (DataError, ConfigError, RunDirectoryBusy, CheckpointDamaged,
        CheckpointWriteFailed, TrainingDiverged): the message says what to do.
      TrainingStopped: SIGTERM or a first Ctrl-C stopped the run after a checkpoint."""
    stream = stream or sys.stdout
    run = config.run
    strategy = make_strategy(run.cpu_replicas, run.cluster, run.cluster_timeout)
    precision.require_supported(run.mixed_precision, first_device(strategy))
    worker = cluster_lib.describe_worker(strategy)
    if not cluster_lib.is_chief(strategy):
        _log(stream, f"This is {worker}: it trains, the chief writes {config.run_dir}.")
        with tempfile.TemporaryDirectory(prefix="llp-worker-checkpoints-") as scratch:
            return _train(config, strategy, stream, scratch, bool(worker), overwrite)
    try:
        with RunLock(config.run_dir, stream):
            return _train(config, strategy, stream, None, bool(worker), overwrite)
    except OSError as error:
        if not disk_space.is_full(error):
            raise
        raise disk_space.run_without_space(
            config.run_dir, RunDirectory(config.run_dir).latest_checkpoint(),
            lambda: _state_bytes(config, strategy)) from None


def _state_bytes(config, strategy):
    """Bytes of the variables of the state a new run of ``config`` builds (nothing written)."""
    source = load_source(config.data.dataset, config.data.data_dir)
    split = run_split.resolve(config.data, RunDirectory(config.run_dir).split_path, source,
                              afresh=True, log=lambda line: None)
    with tempfile.TemporaryDirectory(prefix="llp-space-") as scratch:
        state = _build_state(config, strategy, source.info.num_classes, split, io.StringIO(),
                             scratch)
    return state.checkpoints.variable_bytes()


def _train(config, strategy, stream, scratch_dir, multi_worker, overwrite):
    chief = scratch_dir is None
    afresh, notice = start_afresh(config.run_dir, overwrite, chief)
    if notice:
        _log(stream, notice)
    if not afresh:
        run_record.check_resumable(config)
    batch = config.optimization.global_batch_size
    if batch % strategy.num_replicas_in_sync:
        raise ConfigError(f"The global batch size {batch} does not split evenly over "
                          f"{strategy.num_replicas_in_sync} replicas.")
    source = load_source(config.data.dataset, config.data.data_dir)
    info = source.info
    split = _prepare_run_directory(config, source, stream, chief, afresh)
    state = _build_state(config, strategy, info.num_classes, split, stream, scratch_dir)
    steps_per_epoch = input_fns.steps_per_epoch(len(split.used_index), batch)
    log = functools.partial(_log, stream)
    resumed = resumption.start(state.checkpoints, state.step, state.totals, state.method,
                               steps_per_epoch, afresh, log)
    start = int(state.step.numpy())
    if not resumption.settle_records(config, resumed, start, steps_per_epoch, chief, log):
        return {}
    if chief and not resumed:
        summaries.write_hparams(RunDirectory(config.run_dir).tensorboard_dir, {
            name: value for name, value in config.settings().items()
            if name not in run_record.NOT_COMPARED})
    _log(stream, f"{info.name}: {counted(len(split.used_index), 'training example')} used, "
                 f"{len(split.labelled_index)} labelled, {counted(info.num_classes, 'class')}; "
                 f"{counted(strategy.num_replicas_in_sync, 'replica')}; "
                 f"{counted(steps_per_epoch, 'step')} per epoch of {batch}.")
    if config.data.input_service:
        _log(stream, f"Training batches from the tf.data service at {config.data.input_service} "
                     "(evaluation input is built here).")
    lost = (report_lost_worker(config.run_dir, cluster_lib.task_of(strategy)) if multi_worker
            else contextlib.nullcontext())
    with data_errors(), lost, PreemptionWatch(strategy, multi_worker) as watch:
        final = _controller(config, source, strategy, state, split, steps_per_epoch, stream,
                            chief, watch.stop_requested).run()
    end = int(state.step.numpy())
    if final:
        _log(stream, "\n" + format_table(final))
    epochs = numbered_range("epoch", start // steps_per_epoch + 1, end // steps_per_epoch)
    _log(stream, f"Trained steps {start}-{end} ({epochs}); the run in {config.run_dir} has "
                 f"trained {end // steps_per_epoch} of "
                 f"{counted(config.optimization.epochs, 'epoch')}.")
    return final
