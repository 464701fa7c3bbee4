"""The sampling protocol of the paper's Table 5: each draw picks S classes, I images of
each and keeps the labels of L per class; every `methods.PropagationMethod` predicts the
other ``S * (I - L)`` images, which alone are scored. A sweep over L (`compare_sweep`) scores
the same draws at each L, the labelled images of a smaller L among those of a larger one.
Needs no TensorFlow."""

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from llp_tf.counted_nouns import counted
from llp_tf.errors import ConfigError, DataError
from llp_tf.tensor_types import Array

if TYPE_CHECKING:
    from llp_tf.after_training.transduction.methods import PropagationMethod

# The paper's Table 5 protocol.
PAPER_CLASSES = 50
PAPER_IMAGES_PER_CLASS = 50
PAPER_LABELLED_PER_CLASS = 5
PAPER_DRAWS = 10

#: ``on_draw(draw_number, total_draws, {method name: accuracy}, seconds)``.
OnDraw = Callable[[int, int, dict[str, float], float], None]


@dataclasses.dataclass(frozen=True)
class Draw:
    """One drawn subset: feature rows ``index`` int64 [S * I] class by class, the
    ``labelled_mask`` bool [S * I] and the rows' ``classes`` int64 [S * I] renumbered 0..S-1."""

    index: np.ndarray
    labelled_mask: np.ndarray
    classes: np.ndarray


def check_protocol(labels: Array, num_classes: int, images_per_class: int,
                   labelled_per_class: int, draws: int) -> None:
    """Raises ConfigError when S x I with L labelled cannot be drawn R times from ``labels``
    int [N]."""
    lowest = {"classes": (num_classes, 2), "images_per_class": (images_per_class, 2),
              "labelled_per_class": (labelled_per_class, 1), "draws": (draws, 1)}
    for name, (value, low) in lowest.items():
        if int(value) < low:
            raise ConfigError(f"{name} must be at least {low}, got {value}.")
    if labelled_per_class >= images_per_class:
        raise ConfigError(
            f"labelled_per_class ({labelled_per_class}) must be smaller than images_per_class "
            f"({images_per_class}): the unlabelled drawn images are the ones scored.")
    present, counts = np.unique(labels, return_counts=True)
    if num_classes > len(present):
        raise ConfigError(
            f"Asked for {counted(num_classes, 'class')} per draw, but the labels have only "
            f"{counted(len(present), 'class')}; lower --classes to at most {len(present)}.")
    eligible = int((counts >= images_per_class).sum())
    if eligible < num_classes:
        raise ConfigError(
            f"Asked for {counted(num_classes, 'class')} of {counted(images_per_class, 'image')} "
            f"each, but only {eligible} of the {counted(len(present), 'class')} have "
            f"{counted(images_per_class, 'image')} (class "
            f"sizes range from {counts.min()} to {counts.max()}); lower --images_per_class "
            f"or --classes.")


def eligible_classes(labels: Array, images_per_class: int) -> int:
    """How many classes of ``labels`` int [N] have at least ``images_per_class`` examples."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return int((counts >= images_per_class).sum())


def class_draw_is_vacuous(labels: Array, num_classes: int, images_per_class: int) -> bool:
    """True when every draw must take the same classes: no more than ``num_classes`` classes
    have ``images_per_class`` examples (only the images are drawn)."""
    return eligible_classes(labels, images_per_class) <= num_classes


def with_labelled_per_class(draw: Draw, images_per_class: int, labelled_per_class: int) -> Draw:
    """``draw`` with the first ``labelled_per_class`` drawn images of each class labelled."""
    position = np.tile(np.arange(images_per_class), len(draw.index) // images_per_class)
    return dataclasses.replace(draw, labelled_mask=position < labelled_per_class)


def draw_subsets(labels: Array, num_classes: int, images_per_class: int,
                 labelled_per_class: int, draws: int, seed: int) -> list[Draw]:
    """The protocol's R random `Draw`s given ``seed`` (ConfigError: `check_protocol`)."""
    labels = np.asarray(labels, np.int64)
    check_protocol(labels, num_classes, images_per_class, labelled_per_class, draws)
    present, counts = np.unique(labels, return_counts=True)
    eligible = present[counts >= images_per_class]
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(draws):
        classes = np.sort(rng.choice(eligible, size=num_classes, replace=False))
        index = np.concatenate([
            rng.choice(np.flatnonzero(labels == c), size=images_per_class, replace=False)
            for c in classes])
        position = np.tile(np.arange(images_per_class), num_classes)
        result.append(Draw(index=index.astype(np.int64),
                           labelled_mask=position < labelled_per_class,
                           classes=np.repeat(np.arange(num_classes, dtype=np.int64),
                                             images_per_class)))
    return result


def normalize_rows(features: Array, row_ids: Array | None = None) -> Array:
    """float32 [n, D]: the rows of ``features`` scaled to unit length; DataError names a zero
    or non-finite row by ``row_ids`` int [n]."""
    features = np.asarray(features, np.float64)
    norms = np.linalg.norm(features, axis=1)
    bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
    if bad.size:
        first = bad[0] if row_ids is None else row_ids[bad[0]]
        raise DataError(f"Feature row {first} is zero or not finite ({bad.size} such rows "
                        f"among those drawn); it has no direction to compare.")
    return (features / norms[:, None]).astype(np.float32)


@dataclasses.dataclass
class Comparison:
    """Each method's accuracy float64 [R] per draw (a fraction) and total seconds, by name."""

    methods: tuple["PropagationMethod", ...]
    accuracy: dict[str, Array]
    seconds: dict[str, float]

    def mean(self, name: str) -> float:
        """Mean accuracy over the draws."""
        return float(np.mean(self.accuracy[name]))

    def std(self, name: str) -> float:
        """Sample standard deviation over the draws (0 for a single draw)."""
        values = self.accuracy[name]
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _check_features(features, labels):
    labels = np.asarray(labels)
    features = np.asarray(features)
    if features.ndim != 2 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise DataError(f"Features must be [N, D] and labels [N] with the same N; got "
                        f"{features.shape} and {labels.shape}.")
    return features, labels


def _score(features, subsets, methods, num_classes, on_draw):
    """`Comparison` of ``methods`` on the `Draw`s ``subsets``."""
    methods = tuple(methods)
    accuracy = {m.name: np.zeros(len(subsets)) for m in methods}
    seconds = {m.name: 0.0 for m in methods}
    for number, draw in enumerate(subsets):
        start = time.monotonic()
        embeddings = normalize_rows(features[draw.index], draw.index)
        visible = np.where(draw.labelled_mask, draw.classes, -1)
        scored = ~draw.labelled_mask
        for method in methods:
            method_start = time.monotonic()
            predictions = np.asarray(method.predict(embeddings, draw.labelled_mask, visible,
                                                    num_classes))
            seconds[method.name] += time.monotonic() - method_start
            accuracy[method.name][number] = np.mean(predictions[scored] == draw.classes[scored])
        if on_draw is not None:
            on_draw(number + 1, len(subsets),
                    {m.name: accuracy[m.name][number] for m in methods},
                    time.monotonic() - start)
    return Comparison(methods=methods, accuracy=accuracy, seconds=seconds)


def compare_methods(features: Array, labels: Array, methods: Sequence["PropagationMethod"],
                    num_classes: int, images_per_class: int, labelled_per_class: int, draws: int,
                    seed: int, on_draw: OnDraw | None = None) -> Comparison:
    """`Comparison` of ``methods`` on every draw of ``features`` float [N, D] (each draw's
    rows L2-normalised) with true ``labels`` int [N].

    Raises:
      ConfigError, DataError: a protocol that does not fit the labels, or features that do
        not match them.
    """
    features, labels = _check_features(features, labels)
    subsets = draw_subsets(labels, num_classes, images_per_class, labelled_per_class, draws,
                           seed)
    return _score(features, subsets, methods, num_classes, on_draw)


def compare_sweep(features: Array, labels: Array, methods: Sequence["PropagationMethod"],
                  num_classes: int, images_per_class: int, levels: Sequence[int], draws: int,
                  seed: int, on_draw: Callable[[int], OnDraw | None] | None = None
                  ) -> dict[int, Comparison]:
    """Labelled per class -> `Comparison` for each of ``levels``, all on the same draws (those
    of `compare_methods` with the same ``seed``); ``on_draw(level)`` gives a level's callback.

    Raises:
      ConfigError, DataError: as `compare_methods`, for the largest level.
    """
    features, labels = _check_features(features, labels)
    levels = sorted(set(int(level) for level in levels))
    if not levels:
        raise ConfigError("No labelled-per-class level to compare.")
    for level in levels:
        check_protocol(labels, num_classes, images_per_class, level, draws)
    subsets = draw_subsets(labels, num_classes, images_per_class, levels[-1], draws, seed)
    return {level: _score(features,
                          [with_labelled_per_class(d, images_per_class, level) for d in subsets],
                          methods, num_classes, on_draw(level) if on_draw else None)
            for level in levels}
