"""Linear probe: a linear readout trained on a frozen trunk's pooled features.

`probe_trunk` caches the features of a source's splits (`feature_cache`) and
trains the readout (`readout`) by ``ProbeSettings.protocol``: ``cached``
trains on one centre crop per training image, its features computed once;
``online`` (the paper's) runs the frozen trunk on freshly augmented training
images at every step (`online_readout`). Validation is one centre crop per
image, from the cache, for both. `random_trunk_model` is the contrast
baseline: the same architecture, randomly initialised. The protocol, its
settings and their measurements: docs/after-training.md, "Linear probe (transfer)".
"""

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

# -- trunks --------------------------------------------------------------------


def random_trunk_model(config: TrainConfig, num_classes: int, seed: int) -> EmbeddingClassifier:
    """An unrestored `EmbeddingClassifier` of a run's architecture, initialised from ``seed``.

    Sets Keras's global random seed (`keras.utils.set_random_seed`), which the
    initialisers draw from, so the same seed gives the same weights. Its
    batch-norm moving statistics are the initial ones (mean 0, variance 1).
    """
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
    """(`ProbeResult`) of the readout trained by ``settings.protocol``."""
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
    """Caches the features of ``source``'s splits from a frozen model, then trains
    the readout by ``settings.protocol`` (see the module docstring).

    Args:
      model: `EmbeddingClassifier`.
      source: `Source` with train and validation splits; C is its
        number of classes (independent of the model's).
      image_size: int, the run's image size.
      settings: `ProbeSettings`.
      cache_dir: str, the folder of the caches ``<trunk>-train`` (cached
        protocol only) and ``<trunk>-validation``; None: a temporary folder
        removed afterwards.
      trunk: str, the caches' name prefix (e.g. "trained", "random").
      trunk_description: str recorded in the caches' manifests (e.g. the
        checkpoint), for messages.
      reuse_cache: bool; use existing caches (their manifests must match:
        `feature_cache.cached_features`), else rebuild them.
      augmentation, min_crop_area: the run's training augmentation, for the
        online protocol.
      feature_batch_size: int, images per forward pass; ``settings.batch_size``
        when None.
      stream: progress (stdout when None).
      description: str for progress lines.

    Returns:
      (`ProbeResult`, dict of facts: feature_dim, num_train (examples trained
      on), num_validation, extraction_seconds, cache (split -> folder, None
      for a temporary one or a split not cached), cache_reused (split -> bool)).

    Raises:
      ConfigError: bad settings, or a cache made from other weights or data.
    """
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
    """The extraction facts `probe_trunk` returns, of its caches (split -> FeatureCache)."""
    validation = caches[VALIDATION]
    return {"feature_dim": int(validation.features.shape[1]), "num_train": num_train,
            "num_validation": len(validation.labels), "extraction_seconds": extraction_seconds,
            "cache": {split: cache.directory if kept else None for split, cache in caches.items()},
            "cache_reused": {split: cache.reused for split, cache in caches.items()}}
