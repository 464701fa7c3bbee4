"""Linear probe: a linear readout trained on a frozen trunk's pooled features.

The paper's transfer protocol (Places205): freeze the trained network, train
a linear classifier on the pooled features (before both heads) with softmax
cross-entropy and SGD from lr 0.01, dropping the rate x0.1 whenever
validation top-1 saturates (two drops), and report validation top-1 of a
single centre crop.

Because the trunk is frozen and evaluation uses one centre crop, every
image's features are fixed: they are computed once per split with the
evaluation preprocessing (`pipeline.make_eval_input_fn`, padding masked
out) and the readout is trained on the cached [N, F] arrays, so a probe
runs on a CPU in seconds to minutes. The paper does not say whether the
readout's training images were augmented; here they are not (one centre
crop each). The cache lives in memory: N x F x 4 bytes (Places205 with
ResNet-50: 2.45M x 2048, about 20 GB).

Training of the readout (`train_readout`):

- ``keras.layers.Dense(C)`` with zero-initialised weights (the problem is
  convex, so no random initialisation is needed and only the batch order
  depends on the seed);
- SGD with momentum 0.9 (the paper names SGD and lr 0.01 only; 0.9 is the
  momentum of its network training, and without momentum lr 0.01 moves a
  readout ten times slower), no weight decay (none is stated);
- after every epoch, validation top-1 goes to a `schedule.PlateauTracker`:
  ``patience`` epochs without a new best drop the rate by ``drop_factor``;
  once ``max_drops`` drops are taken, the next plateau ends training (the
  readout has saturated at its last rate), otherwise ``epochs`` ends it;
- the batch order of epoch e is ``numpy.random.default_rng([seed, e])``'s
  permutation, so a probe is deterministic given its seed.

The reported top-1 / top-5 are those of the final readout (as the paper
reports the end of training); the best epoch's top-1 is recorded as well.

Standardisation (``ProbeSettings.standardize``, off by default as in the
paper): each feature is shifted and scaled by the training split's mean and
standard deviation. The readout stays linear (an affine map of the features
folds into the Dense layer), so the classifiers it can express are the same;
only SGD's conditioning changes. Pooled ReLU features have large means and
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


import time
from typing import Any, TextIO

import keras

from llp_tf.after_training.features import (DEFAULT_BATCH_SIZE, FeatureSet,  # noqa: F401
                                            extract_features, standardizer)
from llp_tf.after_training.readout import (DEFAULT_DROP_FACTOR, DEFAULT_EPOCHS,  # noqa: F401
                                           DEFAULT_LEARNING_RATE, DEFAULT_MAX_DROPS,
                                           DEFAULT_MOMENTUM, DEFAULT_PATIENCE, LinearReadout,
                                           ProbeResult, ProbeSettings, TOP_K, train_readout)
from llp_tf.data import TRAIN, VALIDATION, Source
from llp_tf.models import LLPModel, build_model_from_config
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


#: The checkpoint key of the category head's bias, whose length is the run's C.
def probe_trunk(model: LLPModel, source: Source, image_size: int,
                settings: ProbeSettings = ProbeSettings(), feature_batch_size: int | None = None,
                stream: TextIO | None = None,
                description: str = "readout") -> tuple[ProbeResult, dict[str, Any]]:
    """Features of both splits of ``source`` from a frozen model, then `train_readout`.

    Args:
      model: `LLPModel`.
      source: `llp_tf.data.Source` with train and validation splits; C is its
        number of classes (independent of the model's).
      image_size: int, the run's image size.
      settings: `ProbeSettings`.
      feature_batch_size: int, images per forward pass; ``settings.batch_size``
        when None.
      stream: progress (stdout when None).
      description: str for progress lines.

    Returns:
      (`ProbeResult`, dict of extraction facts: feature_dim, num_train,
      num_validation, extraction_seconds).
    """
    batch = feature_batch_size or settings.batch_size
    start = time.monotonic()
    train = extract_features(model, source, TRAIN, image_size, batch, stream)
    validation = extract_features(model, source, VALIDATION, image_size, batch, stream)
    extraction_seconds = time.monotonic() - start
    _, result = train_readout(train, validation, source.info.num_classes, settings, stream,
                              description)
    facts = {"feature_dim": int(train.features.shape[1]), "num_train": len(train.labels),
             "num_validation": len(validation.labels),
             "extraction_seconds": extraction_seconds}
    return result, facts

