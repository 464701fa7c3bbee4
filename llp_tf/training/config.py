"""The configuration of a training run: one frozen dataclass per concern.

`TrainConfig` holds five sections: `DataConfig`, `ModelConfig`,
`OptimizationConfig`, `MethodConfig` and `RunConfig`. Each field carries its
help text (and choices) as metadata, and its flag name: the field's name,
unique over all sections (`MethodConfig.name` is ``--method``). The
command-line flags of tools/train.py are generated from these fields
(`tools/config_flags.py`), so every default, choice and help text is written
here once. Library code takes the sections or fields it needs.

A run records its config as JSON (nested by section, `TrainConfig.to_json`)
in ``config.json``, and its changes on resume beside it (`run_record`).
``config.json`` files of earlier versions, flat ``{flag name: value}``
objects, are read as well.
"""

import dataclasses
import json
import typing
from typing import Any, Optional, Sequence, Tuple

from llp_tf.data import data_service
from llp_tf.errors import ConfigError
from llp_tf.models.factory import ARCHITECTURES
from llp_tf.models.precision import PRECISIONS
from llp_tf.training.cluster import CLUSTERS
from llp_tf.training.methods import METHODS, PROPAGATIONS

AUGMENTATIONS = ("paper", "light")


def setting(default: Any, help: str, choices: Optional[Sequence[str]] = None,  # noqa: A002
            flag: Optional[str] = None) -> Any:
    """A config field with its flag's help text, choices and (if not the field's) name."""
    return dataclasses.field(default=default,
                             metadata={"help": help, "choices": choices, "flag": flag})


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which data, which split, which augmentation."""

    dataset: str = setting("mnist5k", 'Training data: "mnist5k", "digits", "tfds:<name>", '
                           '"tfrecord:<folder>", "folder:<folder>", "list:<root>?train=<file>'
                           '[&validation=<file>][&classes=<file>]" or "places205:<folder>".')
    data_dir: Optional[str] = setting(None, "TFDS data_dir, or the folder relative paths in "
                                      "--dataset are resolved against.")
    image_size: int = setting(224, "Side of the square training and evaluation images.")
    label_percent: float = setting(10.0, "p: percent of each class's training images that keep "
                                   "their label (the lowest-index ones unless --split_seed is "
                                   "set).")
    data_percent: float = setting(100.0, "q: percent of the training images used at all; the "
                                  "used subset always contains the labelled set.")
    split_seed: Optional[int] = setting(None, "Draw the labelled and used sets at random with "
                                        "this seed instead of the release's lowest-index rule.")
    split_file: Optional[str] = setting(None, "Use this split file (from tools/make_splits.py) "
                                        "instead of drawing one.")
    label_subset: Optional[str] = setting(
        None, "Label exactly the training images named in this list (one image file name per "
        "line, e.g. n01440764_10026.JPEG) instead of --label_percent: a file, or 1percent / "
        "10percent for ImageNet's standard subsets published with SimCLR (fetched once "
        "through TFDS into <data_dir>/downloads). The used subset (--data_percent) is drawn "
        "around them. Needs a dataset that records file names (folder:, tfds:imagenet2012).")
    augmentation: str = setting("paper", "Training augmentation: the paper's recipe (random "
                                "resized crop, grayscale, colour jitter, flips), or light (the "
                                "random resized crop only), for grayscale digits.",
                                choices=AUGMENTATIONS)
    min_crop_area: float = setting(0.2, "Smallest area fraction of the random resized crop, in "
                                   "(0, 1] (the release: 0.2).")
    input_service: str = setting(
        "", "Address of a tf.data service dispatcher, host:port or grpc://host:port (as "
        "tools/input_service.py prints it), whose workers then build the training batches; "
        "empty: built in this process. Evaluation input stays local. Each step holds the same "
        "examples and pixels either way; the order of steps within an epoch is kept only with "
        "one service worker (README, 'Remote input workers'). Not part of the run's state: it "
        "may change on resume.")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The network: ResNet-v2 trunk and the two heads."""

    architecture: str = setting("resnet18", "resnet10 (tiny), resnet18, resnet34, resnet50, "
                                "resnet101 or resnet152 (pre-activation, v2).")
    width: float = setting(1.0, "Filter-count multiplier of the ResNet (0.25 for CPU demos).")
    blocks_per_stage: Optional[Tuple[int, ...]] = setting(
        None, "Override the architecture's blocks per stage, e.g. 1,1,1 for a three-stage toy "
        "network.")
    small_inputs: bool = setting(False, "CIFAR-style stem (3x3 conv, no pooling) for 28-32 px "
                                 "images.")
    embedding_dim: int = setting(128, "D: size of the L2-normalised embedding.")
    sync_batch_norm: bool = setting(False, "Batch-norm statistics over all replicas (needed for "
                                    "results identical to one replica).")
    batch_norm_momentum: float = setting(
        0.997, "Decay of the batch-norm moving statistics (the release's 0.997 suits long "
        "runs; short runs need ~0.9, or evaluation sees statistics that lag training).")


@dataclasses.dataclass(frozen=True)
class OptimizationConfig:
    """SGD, weight decay and the learning-rate schedule."""

    global_batch_size: int = setting(128, "Examples per step over all replicas (the protocol's "
                                     "128); more replicas split it.")
    base_learning_rate: float = setting(0.03, "Learning rate at a global batch of 128; scaled "
                                        "linearly with the global batch size.")
    momentum: float = setting(0.9, "SGD momentum.")
    weight_decay: float = setting(
        1e-4, "lambda of the L2 penalty on all weights except batch-norm parameters, added as "
        "the release trained it: lambda * sum(tf.nn.l2_loss(w)) = lambda/2 * sum ||w||^2, whose "
        "gradient is lambda * w (the paper's eq. 9 writes lambda * ||theta||^2, but its numbers "
        "come from the release's convention).")
    epochs: int = setting(300, "Total epochs, counting the warm-start epochs.")
    lr_drop_epochs: Tuple[int, ...] = setting((), "Epochs (counting the warm start) at which "
                                              "the learning rate is multiplied by "
                                              "--lr_drop_factor.")
    lr_drop_factor: float = setting(0.1, "Factor of each learning-rate drop.")
    plateau_patience: int = setting(0, "Also drop the learning rate after this many evaluations "
                                    "without a new best validation top-1 (0: never).")


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The training method and its settings."""

    name: str = setting("llp", "llp, or supervised: cross-entropy on the labelled examples "
                        "only (the baseline).", choices=tuple(METHODS), flag="method")
    warmup_epochs: int = setting(10, "Epochs of instance-recognition warm start before LLP "
                                 "(ignored by --method=supervised).")
    propagation: str = setting(
        "local", "Pseudo labels from the locally weighted kNN (LLP, eq. 7-8), the plain "
        "weighted kNN (eq. 5-6), or the category head's argmax with its probability as "
        "confidence (classifier: the variant the release intended; the release itself stored "
        "that class without its label offset, so its pseudo labels fell among the instance "
        "ids, never aggregated with their class and had no categorisation loss, a slip that "
        "is not reproduced here).", choices=PROPAGATIONS)
    k: int = setting(10, "K: labelled neighbours that vote.")
    t: int = setting(25, "T: neighbours in the local density estimate (the release used 50).")
    temperature: float = setting(0.07, "tau of every softmax over the memory bank.")
    bank_momentum: float = setting(0.5, "m of the memory-bank row update.")
    weight_by_confidence: bool = setting(True, "Weight each example's loss by its confidence "
                                         "(--noweight_by_confidence: the 'woc' ablation).")
    use_categorisation: bool = setting(True, "Include the category head's cross-entropy in the "
                                       "LLP loss.")
    density_chunk_size: int = setting(1024, "Labelled rows per chunk of the density refresh; "
                                      "bounds its memory.")
    cache_labeled_limit: int = setting(
        20000, "The supervised baseline trains on the labelled set for many passes per epoch; "
        "with at most this many labelled examples their encoded records are read once per "
        "epoch and held in memory (ImageNet p1: 12,811 JPEGs, about 1.4 GB), otherwise every "
        "pass reads the whole training split again. 0: never cache.")
    warm_start: Optional[str] = setting(None, "Run directory or checkpoint of an instance-"
                                        "recognition run: start LLP from its model and bank.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where the run lives and how its loop runs."""

    run_dir: Optional[str] = setting(None, "Directory of the run: config, split, checkpoints, "
                                     "metrics, TensorBoard logs. Rerunning with the same "
                                     "directory resumes.")
    seed: int = setting(0, "Seed of data order, augmentation and the bank's initial rows.")
    steps_per_loop: int = setting(100, "Steps per call of the compiled training loop.")
    checkpoint_every: int = setting(1000, "Write a checkpoint every this many steps (and at "
                                    "every epoch end).")
    keep_checkpoints: int = setting(3, "Checkpoints kept in --run_dir/checkpoints.")
    eval_every: int = setting(1, "Evaluate every this many epochs (and after the last).")
    cpu_replicas: int = setting(0, "Split the CPU into this many logical devices and mirror "
                                "over them (multi-replica training without GPUs).")
    cluster: str = setting("auto", "Several processes (workers) train together with "
                           "MultiWorkerMirroredStrategy: auto = when the TF_CONFIG environment "
                           "variable describes a cluster; slurm = the SLURM job's tasks "
                           "(SlurmClusterResolver); none = one process. The global batch is split "
                           "over all replicas of all workers; only the chief writes --run_dir "
                           "(see tools/launch_local.py).", choices=CLUSTERS)
    cluster_timeout: int = setting(300, "Seconds to wait for all workers to join the cluster "
                                   "before a worker stops with an error naming the silent ones.")
    mixed_precision: str = setting(
        "float32", "Compute precision of the ResNet trunk: float32, or bfloat16 / float16 with "
        "float32 weights (Keras mixed precision; float16 adds dynamic loss scaling). The "
        "heads, embedding, memory bank, propagation, densities and losses stay float32. "
        "Checkpoints hold float32 weights, so a run can change this on resume. Not in the "
        "paper or the release (both float32). bfloat16 suits GPUs from A100 on and TPUs; "
        "float16 older GPUs (V100, T4).", choices=PRECISIONS)
    jit_compile: bool = setting(
        False, "Compile each replica's forward and backward pass, loss and propagation with "
        "XLA (the gradient all-reduce, the optimizer update and the bank update run outside "
        "it). Same results within float tolerance; not with --sync_batch_norm, whose "
        "cross-replica statistics XLA cannot compile in a replica step, nor for a network "
        "whose last feature map is smaller than 4x4 (e.g. 28 px inputs with the ImageNet "
        "stem, or 16 px with the CIFAR one): there XLA (TensorFlow 2.21, CPU) computed "
        "gradients of the early layers that were wrong by several percent against a float64 "
        "reference.")


SECTIONS = {"data": DataConfig, "model": ModelConfig, "optimization": OptimizationConfig,
            "method": MethodConfig, "run": RunConfig}


def flag_name(field: dataclasses.Field) -> str:
    """The flag name of a config field."""
    return field.metadata.get("flag") or field.name


def settings_fields() -> dict[str, tuple[str, dataclasses.Field]]:
    """dict flag name -> (section name, `dataclasses.Field`), over all sections."""
    return {flag_name(field): (section, field) for section, cls in SECTIONS.items()
            for field in dataclasses.fields(cls)}


def field_type(section: str, field: dataclasses.Field) -> Any:
    """The resolved type annotation of a section's field."""
    return typing.get_type_hints(SECTIONS[section])[field.name]


def final_feature_map_side(model: ModelConfig, image_size: int) -> int:
    """Side of the trunk's last feature map for square ``image_size`` inputs."""
    stages = len(model.blocks_per_stage or ARCHITECTURES[model.architecture].blocks_per_stage)
    stride = (1 if model.small_inputs else 4) * 2 ** (stages - 1)
    return -(-image_size // stride)


def _checks(c):
    """(ok, message) pairs over the whole config."""
    data, model, optimization, method, run = c.data, c.model, c.optimization, c.method, c.run
    side = (final_feature_map_side(model, data.image_size)
            if run.jit_compile and model.architecture in ARCHITECTURES else None)
    service_problem = data.input_service and data_service.address_problem(data.input_service)
    return [
        (bool(run.run_dir), "run_dir must be given"),
        (data.augmentation in AUGMENTATIONS,
         f"augmentation must be one of {AUGMENTATIONS}, not {data.augmentation!r}"),
        (method.name in METHODS, f"method must be one of {tuple(METHODS)}, not {method.name!r}"),
        (method.propagation in PROPAGATIONS,
         f"propagation must be one of {PROPAGATIONS}, not {method.propagation!r}"),
        (0 < data.min_crop_area <= 1, "min_crop_area must lie in (0, 1]"),
        (not service_problem, service_problem),
        (not (data.split_file and data.label_subset),
         "give split_file or label_subset, not both (each sets the labelled examples)"),
        (0 < data.label_percent <= 100, "label_percent must lie in (0, 100]"),
        (0 < data.data_percent <= 100, "data_percent must lie in (0, 100]"),
        (data.label_percent <= data.data_percent,
         "label_percent cannot exceed data_percent (the used subset holds the labels)"),
        (data.image_size >= 8, "image_size must be at least 8"),
        (optimization.global_batch_size > 0, "global_batch_size must be positive"),
        (optimization.epochs > 0, "epochs must be positive"),
        (0 <= method.warmup_epochs, "warmup_epochs cannot be negative"),
        (method.name == "supervised" or method.warmup_epochs <= optimization.epochs,
         "warmup_epochs cannot exceed epochs (equal: an instance-recognition run only)"),
        (all(0 < e for e in optimization.lr_drop_epochs), "lr_drop_epochs must be positive"),
        (0 < optimization.lr_drop_factor <= 1, "lr_drop_factor must lie in (0, 1]"),
        (method.k > 0 and method.t > 0, "k and t must be positive"),
        (method.temperature > 0, "temperature must be positive"),
        (0 <= method.bank_momentum < 1, "bank_momentum must lie in [0, 1)"),
        (run.steps_per_loop > 0, "steps_per_loop must be positive"),
        (run.checkpoint_every > 0, "checkpoint_every must be positive"),
        (run.keep_checkpoints > 0, "keep_checkpoints must be positive"),
        (run.eval_every > 0, "eval_every must be positive"),
        (run.cpu_replicas >= 0, "cpu_replicas cannot be negative"),
        (run.cluster in CLUSTERS, f"cluster must be one of {CLUSTERS}, not {run.cluster!r}"),
        (run.cluster_timeout > 0, "cluster_timeout must be positive"),
        (run.mixed_precision in PRECISIONS,
         f"mixed_precision must be one of {PRECISIONS}, not {run.mixed_precision!r}"),
        (not (run.jit_compile and model.sync_batch_norm),
         "jit_compile cannot compile sync_batch_norm's cross-replica statistics; give one"),
        (side is None or side >= 4,
         f"jit_compile needs a last feature map of at least 4x4 (XLA miscomputes gradients "
         f"below), not {side}x{side}: use larger images or train without jit_compile"),
        (method.cache_labeled_limit >= 0, "cache_labeled_limit cannot be negative"),
        (model.width > 0, "width must be positive"),
        (0 <= model.batch_norm_momentum < 1, "batch_norm_momentum must lie in [0, 1)"),
    ]


def _as_field_value(section, field, value):
    """JSON or flag values in the field's Python type (lists become tuples)."""
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    if value is not None and field_type(section, field) is float:
        return float(value)
    return value


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a training run, by concern (see tools/train.py --helpfull)."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimization: OptimizationConfig = dataclasses.field(default_factory=OptimizationConfig)
    method: MethodConfig = dataclasses.field(default_factory=MethodConfig)
    run: RunConfig = dataclasses.field(default_factory=RunConfig)

    def __post_init__(self):
        problems = [message for ok, message in _checks(self) if not ok]
        if problems:
            raise ConfigError("Invalid training settings: " + "; ".join(problems) + ".")

    @classmethod
    def from_settings(cls, **settings: Any) -> "TrainConfig":
        """A config from settings named by their flag names; the rest default."""
        fields = settings_fields()
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise ConfigError(f"Unknown training setting(s): {', '.join(unknown)}.")
        by_section = {section: {} for section in SECTIONS}
        for name, value in settings.items():
            section, field = fields[name]
            by_section[section][field.name] = _as_field_value(section, field, value)
        return cls(**{section: SECTIONS[section](**values)
                      for section, values in by_section.items()})

    def settings(self) -> dict[str, Any]:
        """dict flag name -> value of every setting."""
        return {name: getattr(getattr(self, section), field.name)
                for name, (section, field) in settings_fields().items()}

    def replace(self, **settings: Any) -> "TrainConfig":
        """A copy with the given settings (by flag name) changed."""
        return TrainConfig.from_settings(**{**self.settings(), **settings})

    @property
    def run_dir(self) -> str:
        return self.run.run_dir

    @property
    def learning_rate(self) -> float:
        """The initial learning rate: base rate scaled by global batch / 128."""
        return (self.optimization.base_learning_rate * self.optimization.global_batch_size
                / 128.0)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        """Reads `to_json`'s nested form, or an earlier version's flat one."""
        values = json.loads(text)
        if not all(isinstance(values.get(section), dict) for section in SECTIONS):
            known = settings_fields()
            return cls.from_settings(**{k: v for k, v in values.items() if k in known})
        sections = {}
        for section, section_cls in SECTIONS.items():
            fields = {field.name: field for field in dataclasses.fields(section_cls)}
            sections[section] = section_cls(**{
                name: _as_field_value(section, fields[name], value)
                for name, value in values[section].items() if name in fields})
        return cls(**sections)
