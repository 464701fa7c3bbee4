"""The paper's Table 1 (ResNet-18 top-1 on ImageNet at 1-10% of the labels) at small scale: its
label fractions as labelled images a class, and the orderings between LLP, Mean Teacher and
the supervised baseline that the table shows. Imports no TensorFlow.

A fraction pPP of a small dataset is ImageNet's PP% in labelled images a class, the quantity
label propagation's K is set against: round(PP% x 1,281,167 / 1,000) (half up), p1 13, p3 38,
p5 64, p10 128; on a balanced dataset of n images a class, --label_percent = 100 x that / n
(mnist5k, n = 400: 3.25, 9.5, 16, 32)."""

import math

from llp_tf.errors import ConfigError

#: ImageNet's training images and classes (ILSVRC-2012), over which the paper's p% is taken.
IMAGENET_TRAIN_IMAGES, IMAGENET_CLASSES = 1_281_167, 1000
#: Table 1's label fractions, by name: percent of ImageNet's labels.
FRACTIONS = {"p1": 1, "p3": 3, "p5": 5, "p10": 10}
#: Table 1's ResNet-18 top-1 (percent), by fraction and method.
PAPER_TOP1 = {
    "p1": {"llp": 27.14, "mean_teacher": 16.91, "supervised": 17.35},
    "p3": {"llp": 53.24, "mean_teacher": 40.81, "supervised": 28.61},
    "p5": {"llp": 57.04, "mean_teacher": 48.34, "supervised": 36.01},
    "p10": {"llp": 61.51, "mean_teacher": 56.70, "supervised": 47.89},
}
#: The orderings Table 1 shows, as (A, relation, B): at 1% LLP > supervised ~ Mean Teacher
#: (17.35 and 16.91), above it LLP > Mean Teacher > supervised.
CLAIMS = {
    "p1": (("llp", ">", "supervised"), ("llp", ">", "mean_teacher"),
           ("supervised", "≈", "mean_teacher")),
    **{name: (("llp", ">", "mean_teacher"), ("mean_teacher", ">", "supervised"),
              ("llp", ">", "supervised")) for name in ("p3", "p5", "p10")},
}


def labelled_per_class(fraction: str) -> int:
    """ImageNet's labelled images a class at ``fraction`` (a key of `FRACTIONS`), rounded half
    up."""
    if fraction not in FRACTIONS:
        raise ConfigError(f"Unknown label fraction {fraction!r}; known: "
                          f"{', '.join(FRACTIONS)} (Table 1's 1%, 3%, 5% and 10% of ImageNet).")
    mean = FRACTIONS[fraction] / 100 * IMAGENET_TRAIN_IMAGES / IMAGENET_CLASSES
    return int(math.floor(mean + 0.5))


def label_percent(fraction: str, images_per_class: int) -> float:
    """--label_percent that labels `labelled_per_class` of a class of ``images_per_class``."""
    wanted = labelled_per_class(fraction)
    if wanted > images_per_class:
        raise ConfigError(f"{fraction} labels {wanted} images a class, more than the "
                          f"{images_per_class} a class of the dataset (--images_per_class).")
    return 100.0 * wanted / images_per_class
