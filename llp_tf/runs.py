"""Training runs from Python, for notebooks (docs/python-api.md): `train_regime` with
overrides, `load_run` of a run directory as a `Run` (config, metrics, the trained
`keras.Model`, the bank's arrays), and `Run.embed` / `Run.classify` images. Thin over the
library: the tools call the same functions (tools/train.py `run_training` on
`regimes.regime_config`'s config; tools/export.py `run_loader.load_run_with_data` and
`build_inference_module`; tools/predict.py `read_image` and `predict`)."""

import dataclasses
import io
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from llp_tf.after_training import run_loader
from llp_tf.after_training.export.inference_module import InferenceModule
from llp_tf.after_training.export.saved_model import build_inference_module
from llp_tf.after_training.predict import predict, read_image
from llp_tf.after_training.stored_bank import StoredBank
from llp_tf.training.regimes import regime_config
from llp_tf.models.embedding_classifier import EmbeddingClassifier
from llp_tf.tensor_types import Array
from llp_tf.training import run_training
from llp_tf.training.config import TrainConfig
from llp_tf.training.run_directory import RunDirectory

#: Images per call of the model, as tools/predict.py's --batch_size.
DEFAULT_BATCH_SIZE = 32


@dataclasses.dataclass
class Run:
    """A trained run read back from ``run_dir`` at ``checkpoint`` (global ``step``).

    ``config``: its `TrainConfig`; ``metrics``: the rows of its metrics.jsonl (dicts, one per
    evaluated epoch); ``model``: the trained `EmbeddingClassifier` (a `keras.Model`: float32
    [B, S, S, 3] preprocessed images -> {"embedding" [B, D] unit rows, "features" [B, F],
    "logits" [B, C]}); ``bank``: the memory bank (None for a method without one), a
    `StoredBank` that reads the checkpoint when asked: ``bank[name]`` is a whole array,
    "embeddings" float32 [N, D], "labels" int64 [N] (a class in [0, C), else C + an
    instance id), "confidence" float32 [N], "is_labelled" bool [N], "examples" int64 [N]
    (the training-set index of each row); ``bank.held_blocks(names)`` and
    ``bank.rows_at(names, rows)`` read only some rows; ``class_names``: C str."""

    run_dir: str
    config: TrainConfig
    checkpoint: str
    step: int
    metrics: list[dict]
    model: EmbeddingClassifier
    bank: StoredBank | None
    class_names: list[str]
    _module: InferenceModule = dataclasses.field(repr=False)

    def embed(self, images: Sequence[Array | str],
              batch_size: int = DEFAULT_BATCH_SIZE) -> Array:
        """float32 [B, D]: the unit embedding of each image (a file path, or uint8 [H, W, 1 or
        3] of any size), resized and centre-cropped as the export serves them."""
        return self._outputs(self._module.embed, images, batch_size, "embedding")

    def classify(self, images: Sequence[Array | str],
                 batch_size: int = DEFAULT_BATCH_SIZE) -> Array:
        """float32 [B, C]: the category head's class probabilities of each image (as
        `embed`'s); ``class_names[argmax]`` names the best class."""
        return self._outputs(self._module.classify, images, batch_size, "probabilities")

    def _outputs(self, function, images, batch_size, output):
        decoded = [read_image(image) if isinstance(image, str) else np.asarray(image, np.uint8)
                   for image in images]
        if not decoded:
            raise ValueError("Give at least one image.")
        return np.stack(predict(function, decoded, batch_size, output=output))


def load_run(run_dir: str, checkpoint: str | None = None, data_dir: str | None = None) -> Run:
    """`Run` of ``run_dir`` at ``checkpoint`` (default the latest), its class names read from
    its dataset (``data_dir`` replaces the run's data directory).

    Raises:
      ConfigError: not a run directory, no checkpoint, or one that does not fit the run.
      DataError: the run's dataset cannot be opened.
    """
    trained, source = run_loader.load_run_with_data(run_dir, checkpoint, data_dir)
    module = build_inference_module(trained, source.info.class_names)
    return Run(run_dir=run_dir, config=trained.config, checkpoint=trained.checkpoint,
               step=trained.step, metrics=RunDirectory(run_dir).read_metrics(),
               model=trained.model, bank=trained.bank,
               class_names=[name.decode("utf-8") for name in module.class_names.numpy()],
               _module=module)


def train_regime(regime: str, overwrite: bool = False, quiet: bool = False,
                 stream: TextIO | None = None, **settings: Any) -> Run:
    """Trains (or resumes) regime ``regime`` (a flagfile of flags/, e.g. "demo") with
    ``settings`` (training flags by name, e.g. ``epochs=3``; lists as tuples) over it, as
    ``tools/train.py --regime=REGIME --NAME=VALUE`` does; returns its `load_run`.
    The progress lines go to ``stream`` (default the current sys.stdout), or nowhere when
    ``quiet``; ``overwrite`` starts afresh.

    Raises:
      LLPError (ConfigError, DataError, ...): the message says what to do.
      TrainingStopped: SIGTERM or Ctrl-C stopped the run after a checkpoint.
    """
    config = regime_config(regime, **settings)
    run_training(config, io.StringIO() if quiet else stream or sys.stdout, overwrite=overwrite)
    return load_run(config.run_dir)
