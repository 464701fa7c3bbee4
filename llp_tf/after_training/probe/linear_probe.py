"""Linear probe (docs/after-training.md): `probe_trunk` caches a frozen trunk's features of
a source's splits and trains a linear readout, ``cached`` (one centre crop per image) or
``online`` (the paper's); `random_trunk_model` is the contrast baseline."""

import contextlib
import os
import tempfile
import time
from typing import Any, TextIO

import keras

from llp_tf.after_training.features import subsample_index
from llp_tf.after_training.probe.feature_cache import cached_features
from llp_tf.after_training.probe.online_readout import train_online_readout
from llp_tf.after_training.probe.readout import ProbeResult, ProbeSettings, train_readout
from llp_tf.data.config import MIN_CROP_AREA, PAPER
from llp_tf.data.sources.base import TRAIN, VALIDATION, Source
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.training.config import TrainConfig


def random_trunk_model(config: TrainConfig, num_classes: int, seed: int) -> EmbeddingClassifier:
    """An unrestored `EmbeddingClassifier` of a run's architecture, initialised from ``seed``
    (sets Keras's global random seed)."""
    keras.utils.set_random_seed(int(seed))
    return build_model_from_config(config.model, int(num_classes), config.data.image_size)


@contextlib.contextmanager
def _cache_folder(cache_dir):
    """``cache_dir``, or a temporary folder removed afterwards when it is None."""
    if cache_dir is not None:
        yield cache_dir
        return
    with tempfile.TemporaryDirectory(prefix="llp_probe_cache_") as folder:
        yield folder


def _train(model, source, image_size, settings, caches, probe, stream, description):
    validation = caches[VALIDATION].feature_set()
    if settings.protocol == "online":
        _, result = train_online_readout(model, source, validation, source.info.num_classes,
                                         image_size, settings, probe.get("augmentation", PAPER),
                                         probe.get("min_crop_area", MIN_CROP_AREA),
                                         stream, description)
    else:
        _, result = train_readout(caches[TRAIN].feature_set(), validation,
                                  source.info.num_classes, settings, stream, description)
    return result


def probe_trunk(model: EmbeddingClassifier, source: Source, image_size: int,
                settings: ProbeSettings = ProbeSettings(), cache_dir: str | None = None,
                trunk: str = "trunk", trunk_description: str = "", reuse_cache: bool = True,
                augmentation: str = PAPER, min_crop_area: float = MIN_CROP_AREA,
                feature_batch_size: int | None = None, stream: TextIO | None = None,
                description: str = "readout") -> tuple[ProbeResult, dict[str, Any]]:
    """(`ProbeResult`, facts: feature_dim, num_train, num_validation, extraction_seconds,
    cache and cache_reused by split) of a readout on ``model``'s features of ``source``
    (its own classes), cached in ``cache_dir`` as ``<trunk>-<split>`` (None: a temporary
    folder). ConfigError: bad settings, or a cache made from other weights or data."""
    batch = feature_batch_size or settings.batch_size
    train_index = subsample_index(source.info.num_train, settings.max_train_examples,
                                  settings.seed)
    splits = [VALIDATION] + ([TRAIN] if settings.protocol == "cached" else [])
    probe = {"augmentation": augmentation, "min_crop_area": min_crop_area}
    with _cache_folder(cache_dir) as folder:
        start, caches = time.monotonic(), {}
        for split in splits:
            caches[split] = cached_features(
                model, source, split, image_size, os.path.join(folder, f"{trunk}-{split}"),
                train_index if split == TRAIN else None, batch, reuse_cache,
                trunk_description or trunk, stream)
        extraction_seconds = time.monotonic() - start
        try:
            result = _train(model, source, image_size, settings, caches, probe, stream,
                            description)
        finally:
            for cache in caches.values():
                cache.features.close()
    num_train = source.info.num_train if train_index is None else len(train_index)
    return result, _facts(caches, num_train, extraction_seconds, cache_dir is not None)


def _facts(caches, num_train, extraction_seconds, kept):
    validation = caches[VALIDATION]
    return {"feature_dim": int(validation.features.shape[1]), "num_train": num_train,
            "num_validation": len(validation.labels), "extraction_seconds": extraction_seconds,
            "cache": {split: cache.directory if kept else None for split, cache in caches.items()},
            "cache_reused": {split: cache.reused for split, cache in caches.items()}}
