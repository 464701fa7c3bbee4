"""The data section of a run's config, and the augmentation choices defined here once; imports
no TensorFlow."""

import dataclasses
from typing import Optional

from llp_tf.config_fields import setting
from llp_tf.data.service_address import address_problem

#: Augmentation policies: the release's recipe, and its random resized crop alone.
PAPER, LIGHT = "paper", "light"
AUGMENTATIONS = (PAPER, LIGHT)
#: Where the pixel work after the resize runs: tf.data on the CPU, or the replica step.
HOST, DEVICE = "host", "device"
AUGMENT_ON = (HOST, DEVICE)
#: Smallest area fraction of the random resized crop (the release's 0.2).
MIN_CROP_AREA = 0.2


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which data, which split, which augmentation."""

    dataset: str = setting("mnist5k", 'Training data: "mnist5k", "digits", "tfds:<name>", '
                           '"tfrecord:<folder>", "folder:<folder>", "list:<root>?train=<file>'
                           '[&validation=<file>][&classes=<file>]" or "places205:<folder>".',
                           state=True)
    data_dir: Optional[str] = setting(None, "TFDS data_dir, or the folder relative paths in "
                                      "--dataset are resolved against.")
    image_size: int = setting(224, "Side of the square training and evaluation images.",
                              state=True)
    label_percent: Optional[float] = setting(
        10.0, "p: percent of each class's training images that keep their label (the "
        "lowest-index ones unless --split_seed is set). Not used with --label_subset, and then "
        "recorded as null.", state=True)
    data_percent: float = setting(100.0, "q: percent of the training images used at all; the "
                                  "used subset always contains the labelled set.", state=True)
    split_seed: Optional[int] = setting(None, "Draw the labelled and used sets at random with "
                                        "this seed instead of the release's lowest-index rule.",
                                        state=True)
    split_file: Optional[str] = setting(None, "Use this split file (from tools/make_splits.py) "
                                        "instead of drawing one.", state=True)
    label_subset: Optional[str] = setting(
        None, "Label exactly the training images named in this list (one image file name per "
        "line, e.g. n01440764_10026.JPEG) instead of --label_percent: a file, or 1percent / "
        "10percent for ImageNet's standard subsets published with SimCLR (fetched once "
        "through TFDS into <data_dir>/downloads). The used subset (--data_percent) is drawn "
        "around them. Needs a dataset that records file names (folder:, tfds:imagenet2012).",
        state=True)
    exclude_list: Optional[str] = setting(
        None, "File naming training and validation examples to leave out, e.g. images that "
        "cannot be decoded (tools/check_data.py --write_exclude_list writes it): they keep "
        "their index but are never labelled, trained on or evaluated. Recorded in split.npz; "
        "a resume must exclude the same examples.")
    augmentation: str = setting(PAPER, "Training augmentation: the paper's recipe (random "
                                "resized crop, grayscale, colour jitter, flips), or light (the "
                                "random resized crop only), for grayscale digits.",
                                choices=AUGMENTATIONS)
    augment_on: str = setting(
        DEVICE, "Where the training augmentation's pixel work runs: device (in the replica "
        "step, batched, on the accelerator) or host (tf.data, on the CPU, per example). The "
        "host always decodes the crop window and resizes it to uint8; with device it ships "
        "that and each example's random choices, drawn on the host from the same seeds, so "
        "both give the same images up to float rounding. host suits a CPU-only machine, where "
        "tf.data's threads overlap the step.",
        choices=AUGMENT_ON)
    min_crop_area: float = setting(MIN_CROP_AREA, "Smallest area fraction of the random resized "
                                   f"crop, in (0, 1] (the release: {MIN_CROP_AREA}).")
    cache_labelled_limit: int = setting(
        20000, "A method that reads the labelled set for many passes per epoch (the "
        "supervised baseline, and the labelled stream of the two-stream methods) holds their "
        "encoded records in memory, read once per epoch, when there are at most this many "
        "(ImageNet p1: 12,811 JPEGs, about 1.4 GB); otherwise every pass reads the whole "
        "training split again. 0: never cache.")
    input_service: str = setting(
        "", "Address of a tf.data service dispatcher, host:port or grpc://host:port (as "
        "tools/input_service.py prints it), whose workers then build the training batches; "
        "empty: built in this process. Evaluation input stays local. Each step holds the same "
        "examples and pixels either way; the order of steps within an epoch is kept only with "
        "one service worker. Not part of the run's state: it "
        "may change on resume.")

    def __post_init__(self):
        if self.label_subset and self.label_percent is not None:
            # The list sets the labels: a label_percent it overrides is not recorded.
            object.__setattr__(self, "label_percent", None)


def data_problems(data: DataConfig) -> list[str]:
    """What is wrong with the data settings, one message each (settings named
    as ``{flag name}``, `llp_tf.errors`)."""
    service_problem = data.input_service and address_problem(data.input_service)
    checks = [
        (0 < data.min_crop_area <= 1, "{min_crop_area} must lie in (0, 1]"),
        (not service_problem, service_problem),
        (not (data.split_file and data.label_subset),
         "give {split_file} or {label_subset}, not both (each sets the labelled examples)"),
        (data.label_percent is not None or data.label_subset,
         "give --label_percent or --label_subset"),
        (data.label_percent is None or 0 < data.label_percent <= 100,
         "{label_percent} must lie in (0, 100]"),
        (0 < data.data_percent <= 100, "{data_percent} must lie in (0, 100]"),
        (data.label_percent is None or data.label_percent <= data.data_percent,
         "{label_percent} cannot exceed {data_percent} (the used subset holds the labels)"),
        (data.image_size >= 8, "{image_size} must be at least 8"),
        (data.cache_labelled_limit >= 0, "{cache_labelled_limit} cannot be negative"),
    ]
    return [message for ok, message in checks if not ok]
