"""The configuration of a training run: one frozen dataclass per concern.

`TrainConfig` holds five sections, each owned by its package:
`llp_tf.data.config.DataConfig`, `llp_tf.models.config.ModelConfig`,
`OptimizationConfig`, `MethodConfig` (which method) and `RunConfig` (here),
and one section per registered method (`llp_tf.training.methods.METHODS`),
the method's own ``Settings`` dataclass, in ``methods`` by method name;
``method_settings`` is the chosen method's. Each field is made by
`llp_tf.config_fields.setting`: it carries its help text, choices, flag name
(the field's name unless given, unique over all sections;
`MethodConfig.name` is ``--method``) and whether it shapes the run's saved
state. The flags of tools/train.py are generated from these fields
(`llp_tf.training.config_flags`), and choices are validated from them, so every
default, choice and help text is written once. Library code takes the
sections or fields it needs. Reading the method sections imports the
methods, and with them TensorFlow.

A run records its config as JSON (nested by section, `TrainConfig.to_json`)
in ``config.json``, and its changes on resume beside it (`run_record`).
"""

import dataclasses
import functools
import json
import typing
from typing import Any, Mapping, Optional, Tuple

from llp_tf.config_fields import choice_problems, flag_name, setting
from llp_tf.data.config import DataConfig, data_problems
from llp_tf.errors import ConfigError
from llp_tf.models.config import (PRECISIONS, ModelConfig, final_feature_map_side,
                                  model_problems)
from llp_tf.training.methods import DEFAULT_METHOD, METHODS, method_class
from llp_tf.training.methods.context import MethodContext

#: The paper's global batch; the base learning rate is given at it.
PAPER_BATCH_SIZE = 128
#: The ``--cluster`` settings (`llp_tf.training.cluster`).
CLUSTERS = ("auto", "none", "slurm")


@dataclasses.dataclass(frozen=True)
class OptimizationConfig:
    """SGD, weight decay and the learning-rate schedule."""

    global_batch_size: int = setting(PAPER_BATCH_SIZE, "Examples per step over all replicas "
                                     f"(the protocol's {PAPER_BATCH_SIZE}); more replicas "
                                     "split it. Fixed for a run: its step counter, the "
                                     "epochs of its checkpoints and its learning-rate "
                                     "schedule count batches of this size, so a resume "
                                     "cannot change it.", state=True)
    base_learning_rate: float = setting(0.03, "Learning rate at a global batch of "
                                        f"{PAPER_BATCH_SIZE}; scaled linearly with the global "
                                        "batch size.")
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


#: ``--baseline_preset``: the family of sources a baseline follows whole
#: (`llp_tf.training.methods.recipes`).
BASELINE_PRESETS = ("fixmatch_cifar", "imagenet")
#: ``--baseline_optimizer``: the baseline's source optimiser, or the LLP protocol's.
BASELINE_OPTIMIZERS = ("source", "protocol")


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """Which training method; its settings are the section named after it. The baselines'
    sources: which family (``baseline_preset``) and whose optimiser (``baseline_optimizer``)."""

    name: str = setting(
        DEFAULT_METHOD, f"The training method: {DEFAULT_METHOD} (the paper's), or a baseline "
        "trained under the same protocol: "
        f"{', '.join(name for name in METHODS if name != DEFAULT_METHOD)}. "
        "A flag that belongs to one method says so first in its help.",
        choices=tuple(METHODS), flag="method", state=True)
    baseline_preset: str = setting(
        BASELINE_PRESETS[0], "[--method=mean_teacher, pseudo_label, fixmatch] The published "
        "configuration each baseline follows whole (loss weights, ramps, thresholds, batch "
        "make-up, optimiser, schedule, weight decay, moving average). "
        "fixmatch_cifar (small data, the default): google-research/fixmatch mean_teacher.py, "
        "pseudo_label.py and fixmatch.py with libml/. imagenet (the r18_*/r50_* flagfiles): "
        "Mean Teacher from CuriousAI/mean-teacher pytorch/experiments/imagenet_valid.py and "
        "pytorch/main.py, FixMatch from google-research/fixmatch imagenet/fixmatch.py, "
        "pseudo-label from pseudo_label.py (no ImageNet one is published). A method's own "
        "flags override single values.", choices=BASELINE_PRESETS)
    baseline_optimizer: str = setting(
        BASELINE_OPTIMIZERS[0], "[--method=mean_teacher, pseudo_label, fixmatch] source (the "
        "default): the optimiser, learning rate, schedule and weight decay of the baseline's "
        "source file (--baseline_preset), each schedule a share of the run. protocol: the LLP "
        "protocol's SGD (--base_learning_rate, --momentum, --lr_drop_epochs, --weight_decay "
        "on all but batch-norm weights) for a like-for-like table; loss and moving average "
        "stay the source's.", choices=BASELINE_OPTIMIZERS)


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
                                "over them (multi-replica training without GPUs); with "
                                "--cluster, each worker's replicas (a worker without GPUs).")
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
        "heads, embedding, memory bank, propagation, densities and losses stay float32 (the "
        "bank's storage: --bank_dtype). "
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


def method_sections() -> dict[str, type]:
    """dict method name -> its ``Settings`` dataclass, over the registry."""
    return {name: method_class(name).Settings for name in METHODS}


def _section_classes() -> dict[str, type]:
    """dict section name -> dataclass: `SECTIONS`, then the method sections."""
    return {**SECTIONS, **method_sections()}


def settings_fields() -> dict[str, tuple[str, dataclasses.Field]]:
    """dict flag name -> (section name, `dataclasses.Field`), over all sections;
    a method's section is named after the method.

    Raises:
      ValueError: two fields with one flag name (a method's settings must name
        theirs apart, e.g. with the method's name as a prefix).
    """
    fields = {}
    for section, cls in _section_classes().items():
        for field in dataclasses.fields(cls):
            name = flag_name(field)
            if name in fields:
                raise ValueError(f"The settings {fields[name][0]}.{fields[name][1].name} and "
                                 f"{section}.{field.name} share the flag name --{name}.")
            fields[name] = (section, field)
    return fields


def field_type(section: str, field: dataclasses.Field) -> Any:
    """The resolved type annotation of a section's field."""
    return typing.get_type_hints(_section_classes()[section])[field.name]


def state_settings() -> tuple[str, ...]:
    """Flag names of the settings whose change would make a checkpoint's state
    meaningless (data, split, model, method, the global batch its step counts): a resume
    cannot change them."""
    return tuple(name for name, (_, field) in settings_fields().items()
                 if field.metadata["state"])


def _problems(c: "TrainConfig") -> list[str]:
    """What is wrong with the whole config, one message each, naming settings as
    ``{flag name}`` (`llp_tf.errors`); choices first (other checks assume valid
    choices)."""
    sections = [getattr(c, section) for section in SECTIONS] + list(c.methods.values())
    choices = [message for section in sections for message in choice_problems(section)]
    if choices:
        return choices
    data, model, optimization, run = c.data, c.model, c.optimization, c.run
    side = final_feature_map_side(model, data.image_size) if run.jit_compile else None
    checks = [
        (bool(run.run_dir), "give --run_dir"),
        (optimization.global_batch_size > 0, "{global_batch_size} must be positive"),
        (optimization.epochs > 0, "{epochs} must be positive"),
        (all(0 < e for e in optimization.lr_drop_epochs),
         "every epoch of {lr_drop_epochs} must be positive"),
        (0 < optimization.lr_drop_factor <= 1, "{lr_drop_factor} must lie in (0, 1]"),
        (run.steps_per_loop > 0, "{steps_per_loop} must be positive"),
        (run.checkpoint_every > 0, "{checkpoint_every} must be positive"),
        (run.keep_checkpoints > 0, "{keep_checkpoints} must be positive"),
        (run.eval_every > 0, "{eval_every} must be positive"),
        (run.cpu_replicas >= 0, "{cpu_replicas} cannot be negative"),
        (run.cluster_timeout > 0, "{cluster_timeout} must be positive"),
        (not (run.jit_compile and model.sync_batch_norm),
         "{jit_compile} cannot compile the cross-replica statistics of {sync_batch_norm}; "
         "drop one of them"),
        (side is None or side >= 4,
         f"{{jit_compile}} needs a last feature map of at least 4x4 (XLA miscomputes "
         f"gradients below), not {side}x{side} with {{image_size}}: use larger images or "
         "--nojit_compile"),
    ]
    return (data_problems(data) + model_problems(model)
            + c.method_settings.problems(c.method_context())
            + [message for ok, message in checks if not ok])


def _model_of(config: "TrainConfig", num_classes: int) -> Any:
    """A new model of ``config``'s architecture and precision, its weights created."""
    from llp_tf.models.factory import build_model_from_config

    return build_model_from_config(config.model, num_classes, config.data.image_size,
                                   precision=config.run.mixed_precision)


def _as_field_value(section, field, value):
    """JSON or flag values in the field's Python type (lists become tuples)."""
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    if value is not None and field_type(section, field) in (float, Optional[float]):
        return float(value)
    return value


def _default_method_settings() -> dict[str, Any]:
    return {name: settings() for name, settings in method_sections().items()}


def _nested_settings(values: Any) -> dict[str, Any]:
    """The settings, by flag name, of `TrainConfig.to_json`'s form; raises ConfigError for
    anything else (a ``config.json`` of another version)."""
    by_field = {(section, field.name): flag
                for flag, (section, field) in settings_fields().items()}
    if not (isinstance(values, dict)
            and all(isinstance(values.get(section), dict) for section in (*SECTIONS, "methods"))):
        raise ConfigError("This config.json is not in the form llp-tf writes (one object per "
                          f"section: {', '.join(SECTIONS)}, methods); it was written by "
                          "another version.")
    entries = [(section, values[section]) for section in SECTIONS]
    entries += list(values["methods"].items())
    unknown = [f"{section}.{name}" for section, section_values in entries
               for name in section_values if (section, name) not in by_field]
    if unknown:
        raise ConfigError(f"Unknown training setting(s) in config.json: {', '.join(unknown)} "
                          "(written by another version of llp-tf).")
    return {by_field[(section, name)]: value for section, section_values in entries
            for name, value in section_values.items()}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a training run, by concern (see tools/train.py --helpfull);
    ``methods``: dict method name -> its settings (every registered method's)."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimization: OptimizationConfig = dataclasses.field(default_factory=OptimizationConfig)
    method: MethodConfig = dataclasses.field(default_factory=MethodConfig)
    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    methods: Mapping[str, Any] = dataclasses.field(default_factory=_default_method_settings)

    def __post_init__(self):
        problems = _problems(self)
        if problems:
            raise ConfigError("Invalid training settings: " + "; ".join(problems) + ".",
                              settings=self.settings())

    @property
    def method_settings(self) -> Any:
        """The chosen method's settings (its ``Settings`` dataclass)."""
        return self.methods[self.method.name]

    def method_context(self) -> MethodContext:
        """What the chosen method reads of this config: its settings and a few run values;
        its ``build_model`` makes models of this config's architecture and precision."""
        o = self.optimization
        return MethodContext(
            settings=self.method_settings, global_batch_size=o.global_batch_size,
            weight_decay=o.weight_decay, jit_compile=self.run.jit_compile, epochs=o.epochs,
            seed=self.run.seed, learning_rate=self.learning_rate, momentum=o.momentum,
            baseline_preset=self.method.baseline_preset,
            baseline_optimizer=self.method.baseline_optimizer,
            build_model=functools.partial(_model_of, self))

    @classmethod
    def from_settings(cls, **settings: Any) -> "TrainConfig":
        """A config from settings named by their flag names; the rest default."""
        fields = settings_fields()
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise ConfigError(f"Unknown training setting(s): {', '.join(unknown)}.")
        classes = _section_classes()
        by_section = {section: {} for section in classes}
        for name, value in settings.items():
            section, field = fields[name]
            by_section[section][field.name] = _as_field_value(section, field, value)
        built = {section: classes[section](**values) for section, values in by_section.items()}
        return cls(**{section: built.pop(section) for section in SECTIONS}, methods=built)

    def settings(self) -> dict[str, Any]:
        """dict flag name -> value of every setting."""
        sections = {**{section: getattr(self, section) for section in SECTIONS}, **self.methods}
        return {name: getattr(sections[section], field.name)
                for name, (section, field) in settings_fields().items()}

    def replace(self, **settings: Any) -> "TrainConfig":
        """A copy with the given settings (by flag name) changed."""
        return TrainConfig.from_settings(**{**self.settings(), **settings})

    @property
    def run_dir(self) -> str:
        return self.run.run_dir

    @property
    def learning_rate(self) -> float:
        """The initial learning rate: base rate scaled by global batch / `PAPER_BATCH_SIZE`."""
        return (self.optimization.base_learning_rate * self.optimization.global_batch_size
                / PAPER_BATCH_SIZE)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        """Reads `to_json`'s form."""
        values = json.loads(text)
        return cls.from_settings(**_nested_settings(values))
