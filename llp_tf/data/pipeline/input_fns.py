"""Input pipelines: ``input_fn(input_context or None)`` for training and evaluation.

Each yields per-replica batches of b = G / replicas, for
``strategy.distribute_datasets_from_function``; a step's per-replica batches, in replica order,
are the global batch. Iterate inside `llp_tf.data.decoding.decode.data_errors()` for a
`DataError` naming an image that cannot be decoded."""

import functools
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from llp_tf.counted_nouns import counted
from llp_tf.data import service_address
from llp_tf.data.augmentation import eval_transform, weak
from llp_tf.data.augmentation import views as views_lib
from llp_tf.data.config import HOST, MIN_CROP_AREA, PAPER
from llp_tf.data.pipeline import data_service, epoch_order
from llp_tf.data.pipeline.epoch_order import DEFAULT_CYCLE_LENGTH
from llp_tf.data.sources.base import TRAIN, VALIDATION, Source
from llp_tf.data.splits import exclusions
from llp_tf.data.splits.regime import check_index_set
from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

#: The training label of an example outside the run's labelled set.
UNLABELLED = -1

#: ``input_fn(input_context or None) -> tf.data.Dataset`` of one worker.
InputFn = Callable[[tf.distribute.InputContext | None], tf.data.Dataset]


def _check_positive(name, value):
    if not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer; got {value!r}.")


def steps_per_epoch(num_used: int, global_batch_size: int) -> int:
    """int: global batches of one training epoch, ``floor(num_used / G)``."""
    return int(num_used) // int(global_batch_size)


def eval_steps(num_examples: int, global_batch_size: int) -> int:
    """int: global batches of an evaluation pass, ``ceil(num_examples / G)``."""
    return -(-int(num_examples) // int(global_batch_size))


def _batch_layout(global_batch_size, input_context):
    """(per-replica batch b, number of input pipelines W, this pipeline's id)."""
    if input_context is None:
        return int(global_batch_size), 1, 0
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ConfigError(
            f"The global batch size {global_batch_size} does not split evenly over "
            f"{replicas} replicas; choose a multiple of {replicas}.")
    return (input_context.get_per_replica_batch_size(int(global_batch_size)),
            input_context.num_input_pipelines, input_context.input_pipeline_id)


def _keep_worker_part(dataset, global_batch_size, num_pipelines, pipeline_id):
    """Keeps this worker's part of every global batch of an element stream."""
    if num_pipelines == 1:
        return dataset
    part = global_batch_size // num_pipelines
    return dataset.batch(part, drop_remainder=True).shard(num_pipelines, pipeline_id).unbatch()


def _options():
    options = tf.data.Options()
    options.deterministic = True
    # The dataset is already this worker's part; auto-sharding would cut it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _checked_train_settings(source, global_batch_size, image_size, seed, epoch, start_step,
                            used_index, steps, batches_cross_passes, augmentation,
                            min_crop_area, input_service, augment_on):
    """Checks `make_train_input_fn`'s settings; returns (the checked used_index or None, the
    epoch's steps, the records of a pass)."""
    epoch_order.check_seed_epoch(seed, epoch)
    if input_service:
        service_address.check_address(input_service)
    _check_positive("global_batch_size", global_batch_size)
    _check_positive("image_size", image_size)
    try:
        weak.check_policy(augmentation, min_crop_area)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    views_lib.check_augment_on(augment_on)
    source.require_split(TRAIN)
    if used_index is not None:
        used_index = check_index_set("used_index", used_index, source.info.num_train)
    num_used = source.info.num_train if used_index is None else used_index.size
    steps_per_pass = steps_per_epoch(num_used, global_batch_size)
    if batches_cross_passes and steps is None:
        raise ConfigError("batches_cross_passes needs an explicit number of steps.")
    if steps_per_pass == 0 and not batches_cross_passes:
        raise ConfigError(
            f"The global batch size {global_batch_size} is larger than the "
            f"{counted(num_used, 'training example')} used from {source.info.name}; an epoch "
            "would have no step.")
    if steps is None:
        steps = steps_per_pass
    elif not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"steps must be an integer >= 0; got {steps!r}.")
    if not isinstance(start_step, (int, np.integer)) or not 0 <= start_step <= steps:
        raise ConfigError(f"start_step must lie in [0, {steps}] (steps per epoch); got "
                          f"{start_step!r}.")
    pass_records = num_used if batches_cross_passes else steps_per_pass * global_batch_size
    return used_index, steps, pass_records


def _example_seed(augment_seed, record):
    """int32 [2]: the epoch's ``augment_seed`` with the record's pass and original index."""
    pass_seed = tf.random.experimental.stateless_fold_in(augment_seed, record["pass"])
    return tf.random.experimental.stateless_fold_in(pass_seed, record["index"])


def _labelled_mask(labelled_index, num_examples):
    """bool [N]: whether each training example is labelled (ValueError outside [0, N))."""
    labelled_index = np.asarray(labelled_index, np.int64)
    if labelled_index.size and (labelled_index.min() < 0 or labelled_index.max() >= num_examples):
        raise ValueError(f"labelled_index must lie in [0, {num_examples}).")
    mask = np.zeros(num_examples, bool)
    mask[labelled_index] = True
    return mask


@functools.cache
def _views_function(image_size, augmentation, views, augment_on):
    """``make_views(resized, seeds)``: `views.make_views` of those settings (``views`` a tuple
    of (key, policy)), one tf.function per settings for the process, so that the views' graph
    (RandAugment's is thousands of ops) is traced once, not again in every epoch's pipeline."""
    return tf.function(lambda resized, seeds: views_lib.make_views(
        resized, list(seeds), image_size, augmentation, dict(views), augment_on))


def _train_examples_fn(source, augment_seed, image_size, augmentation, min_crop_area,
                       fused_crop, labelled_index, views, augment_on):
    """Dataset of records -> Dataset of training elements, one per record, in order: the union
    of the views' crop windows decoded once (`views.load_views`), each view resized and
    augmented."""
    area_range = (float(min_crop_area), 1.0)
    labelled = tf.constant(_labelled_mask(labelled_index, source.info.num_train))

    def seeds(record):
        return views_lib.view_seeds(_example_seed(augment_seed, record), len(views))

    def load_views(record):
        loaded = views_lib.load_views(source, record, seeds(record), area_range, fused_crop)
        return views_lib.resize_views(*loaded, image_size)

    make_views = _views_function(image_size, augmentation, tuple(views.items()), augment_on)

    def train_element(record, resized):
        label = tf.where(tf.gather(labelled, record["index"]), record["label"],
                         tf.constant(UNLABELLED, record["label"].dtype))
        images = make_views(resized, seeds(record))
        return {**images, "label": label, "index": record["dense_index"]}

    return lambda records: source.decode(records, TRAIN, load_views).map(
        train_element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _train_batches(records, train_examples, global_batch_size, input_context, input_service):
    """This pipeline's per-replica training batches of the epoch's ``records``,
    built here or, with a dispatcher address, by the tf.data service's workers."""
    per_replica, num_pipelines, pipeline_id = _batch_layout(global_batch_size, input_context)
    records = _keep_worker_part(records, global_batch_size, num_pipelines, pipeline_id)
    if input_service:
        replicas = global_batch_size // num_pipelines // per_replica
        return data_service.served_steps(records, train_examples, per_replica, replicas,
                                         input_service)
    return train_examples(records).batch(per_replica, drop_remainder=True)


def make_train_input_fn(source: Source, global_batch_size: int, image_size: int, seed: int,
                        epoch: int, start_step: int = 0, used_index: Array | None = None,
                        steps: int | None = None, cycle_length: int = DEFAULT_CYCLE_LENGTH,
                        shuffle_block: int | None = None, batches_cross_passes: bool = False,
                        augmentation: str = PAPER, cache_passes: bool = False,
                        min_crop_area: float = MIN_CROP_AREA, fused_crop: bool = True,
                        input_service: str = "", *, labelled_index: Array,
                        views: Mapping[str, str] = views_lib.ONE_VIEW,
                        augment_on: str = HOST) -> InputFn:
    """``input_fn`` of one training epoch: global batch k is elements [k G, (k + 1) G) of the
    epoch order (`epoch_order`) after ``start_step``, the remainder dropped, worker w of W
    keeping the w-th of W parts of each; each example is augmented with a stateless seed of
    (seed, epoch, pass, original index), whatever the replicas or the resume point.

    Elements: {view key ("image" first; ``views``: key -> "weak" or "strong"): float32 [b, S,
    S, 3], "label": int64 [b], `UNLABELLED` outside ``labelled_index``, "index": int64 [b], the
    position in ``used_index`` (the bank row) or the original index}. With
    ``augment_on="device"`` a view is its uint8 [b, S, S, 3] resized crop and "augment" holds
    the choices `views.finish_views` applies.

    ``steps`` (default one pass): more start further passes, each in its own order and of whole
    batches, unless ``batches_cross_passes`` (for a set smaller than a batch; never with a
    memory bank). ``cache_passes`` holds the used records in memory; ``fused_crop`` decodes
    only JPEG crop windows; ``input_service`` is a tf.data service dispatcher whose workers
    build the batches ("": built here)."""
    used_index, steps, pass_records = _checked_train_settings(
        source, global_batch_size, image_size, seed, epoch, start_step, used_index, steps,
        batches_cross_passes, augmentation, min_crop_area, input_service, augment_on)
    train_examples = _train_examples_fn(
        source, epoch_order.augment_seed(seed, epoch), image_size, augmentation, min_crop_area,
        fused_crop, labelled_index, views_lib.check_views(views), augment_on)

    def input_fn(input_context=None):
        records = epoch_order.epoch_records(
            source, seed, epoch, start_step, steps, global_batch_size, pass_records,
            used_index, cycle_length, shuffle_block, cache_passes)
        dataset = _train_batches(records, train_examples, global_batch_size, input_context,
                                 input_service)
        return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())

    return input_fn


def make_eval_input_fn(source: Source, global_batch_size: int, image_size: int,
                       split: str = VALIDATION,
                       cycle_length: int = DEFAULT_CYCLE_LENGTH,
                       excluded_index: Array | None = None) -> InputFn:
    """``input_fn`` of one pass over ``split``: ``eval_steps(N, G)`` elements per replica of
    {"image": float32 [b, S, S, 3], "label", "index": int64 [b], "mask": bool [b]}; the
    examples with mask True are each example once (N counts those not in ``excluded_index``),
    the rest copies of the first."""
    _check_positive("global_batch_size", global_batch_size)
    _check_positive("image_size", image_size)
    source.require_split(split)
    num_examples = source.info.num_examples(split) - (
        0 if excluded_index is None else len(excluded_index))
    steps = eval_steps(num_examples, global_batch_size)
    padding = steps * global_batch_size - num_examples

    def eval_element(record, image):
        return {"image": eval_transform.eval_preprocess(image, image_size),
                "label": record["label"], "index": record["index"], "mask": record["mask"]}

    def input_fn(input_context=None):
        per_replica, num_pipelines, pipeline_id = _batch_layout(global_batch_size, input_context)
        records = exclusions.drop_excluded(source.records(split, cycle_length),
                                           source.info.num_examples(split), excluded_index)
        records = records.map(lambda r: dict(r, mask=True))
        pads = records.take(1).map(lambda r: dict(r, mask=False)).repeat(padding)
        records = _keep_worker_part(records.concatenate(pads), global_batch_size,
                                    num_pipelines, pipeline_id)
        examples = source.decode(records, split).map(
            eval_element, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = examples.batch(per_replica, drop_remainder=True)
        return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options())

    return input_fn
