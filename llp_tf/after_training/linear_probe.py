"""Linear probe: a linear readout trained on a frozen trunk's pooled features.

The paper's transfer protocol (Places205): freeze the trained network, train
a linear classifier on the pooled features (before both heads) with softmax
cross-entropy and SGD from lr 0.01, dropping the rate x0.1 whenever
validation top-1 saturates (two drops), and report validation top-1 of a
single centre crop.

Two protocols (``ProbeSettings.protocol``):

- ``cached`` (the default): because the trunk is frozen and evaluation uses
  one centre crop, every image's features are fixed, so they are computed
  once per split with the evaluation preprocessing and the readout is
  trained on them. They live in a disk cache
  (`llp_tf.after_training.feature_cache`: an [N, F] float32 .npy file per
  split, written batch by batch and read a batch at a time), so the
  probe's memory does not grow with N: Places205 with ResNet-50 needs
  2.45M x 2048 x 4 bytes, about 20 GB, of disk, not of RAM. A cache is
  reused by later probes of the same trunk and data. The readout's training
  images are not augmented (one centre crop each); the paper does not say
  whether its were.
- ``online`` (the paper's setting, `llp_tf.after_training.online_readout`):
  every step runs the frozen trunk (batch norm in inference mode) on
  freshly augmented training images (the run's training augmentation);
  only the validation features, one centre crop each, come from a cache.
  One trunk pass per image per epoch instead of one in all.

``ProbeSettings.max_train_examples`` limits the training split to a uniform
draw (given the seed) before any image is read.

Training of the readout (`readout_training.train_readout`, and
`online_readout.train_online_readout` for the online protocol):

- ``keras.layers.Dense(C)`` with zero-initialised weights (the problem is
  convex, so no random initialisation is needed and only the batch order
  depends on the seed);
- SGD with momentum 0.9 (the paper names SGD and lr 0.01 only; 0.9 is the
  momentum of its network training, and without momentum lr 0.01 moves a
  readout ten times slower), no weight decay (none is stated);
- after every epoch, validation top-1 (one centre crop) goes to a
  `schedule.PlateauTracker`: ``patience`` epochs without a new best drop
  the rate by ``drop_factor``; once ``max_drops`` drops are taken, the next
  plateau ends training (the readout has saturated at its last rate),
  otherwise ``epochs`` ends it;
- the batch order of epoch e is ``numpy.random.default_rng([seed, e])``'s
  permutation, so a probe is deterministic given its seed.

The reported top-1 / top-5 are those of the final readout (as the paper
reports the end of training); the best epoch's top-1 is recorded as well.

Standardisation (``ProbeSettings.standardize``, off by default as in the
paper; cached protocol only): each feature is shifted and scaled by the
training split's mean and standard deviation (streamed over the cache in
chunks, `feature_statistics.standardizer`; each batch standardised in
float32 as it is read). The readout stays linear (an affine map of the
features folds into the Dense layer), so the classifiers it can express are
the same; only SGD's conditioning changes. Pooled ReLU features have large means and
small spreads, so on raw features SGD at lr 0.01 is slow and the plateau
rule stops it underfitted (training top-1 no higher than validation's). On
the demo run (LLP on mnist5k, 1% labels), probing digits, raw features gave
86.5 / 91.3 / 92.1% top-1 with patience 5 / 10 / 20 and a random trunk
16 / 40 / 69%, while standardised ones gave 94.9-95.2% and 94.9% whatever the
patience; probing mnist5k (patience 10): raw 93.7% vs random 46.5%,
standardised 96.2% vs 78.3%. Use it when the numbers must measure the
features rather than the optimisation (small datasets, random-trunk
contrasts).

The contrast baseline is the same probe on a randomly initialised trunk of
the same architecture (`random_trunk_model`).
"""

import contextlib
import os
import tempfile
import time
from typing import Any, TextIO

import keras

from llp_tf.after_training.feature_cache import cached_features
from llp_tf.after_training.feature_statistics import standardizer  # noqa: F401
from llp_tf.after_training.features import (DEFAULT_BATCH_SIZE, FeatureSet,  # noqa: F401
                                            extract_features, subsample_index)
from llp_tf.after_training.online_readout import train_online_readout
from llp_tf.after_training.readout import (DEFAULT_DROP_FACTOR, DEFAULT_EPOCHS,  # noqa: F401
                                           DEFAULT_LEARNING_RATE, DEFAULT_MAX_DROPS,
                                           DEFAULT_MOMENTUM, DEFAULT_PATIENCE, PROTOCOLS,
                                           LinearReadout, ProbeResult, ProbeSettings, TOP_K)
from llp_tf.after_training.readout_training import train_readout
from llp_tf.data import TRAIN, VALIDATION, Source
from llp_tf.data import augment
from llp_tf.models.factory import build_model_from_config
from llp_tf.models.llp_model import LLPModel
from llp_tf.training.config import TrainConfig

# -- trunks --------------------------------------------------------------------


def random_trunk_model(config: TrainConfig, num_classes: int, seed: int) -> LLPModel:
    """An unrestored `LLPModel` of a run's architecture, initialised from ``seed``.

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
                                         image_size, settings, probe.get("augmentation", "paper"),
                                         probe.get("min_crop_area", augment.CROP_AREA_RANGE[0]),
                                         stream, description)
    else:
        _, result = train_readout(caches[TRAIN].feature_set(), validation,
                                  source.info.num_classes, settings, stream, description)
    return result


def probe_trunk(model: LLPModel, source: Source, image_size: int,
                settings: ProbeSettings = ProbeSettings(), cache_dir: str | None = None,
                trunk: str = "trunk", trunk_description: str = "", reuse_cache: bool = True,
                augmentation: str = "paper", min_crop_area: float = augment.CROP_AREA_RANGE[0],
                feature_batch_size: int | None = None, stream: TextIO | None = None,
                description: str = "readout") -> tuple[ProbeResult, dict[str, Any]]:
    """Caches the features of ``source``'s splits from a frozen model, then trains
    the readout by ``settings.protocol`` (see the module docstring).

    Args:
      model: `LLPModel`.
      source: `llp_tf.data.Source` with train and validation splits; C is its
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
