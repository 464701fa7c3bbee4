"""The one frozen configuration of a training run.

Entry points turn their flags into a `TrainConfig`; library code takes the
fields it needs as explicit arguments. The resolved config is saved as JSON
in the run directory, and a resumed run checks that the settings that shape
its state (data, split, model sizes) have not changed.
"""

import dataclasses
import json
import os
from typing import Optional, Tuple

from llp_tf.errors import ConfigError

METHODS = ("llp", "supervised")
PROPAGATIONS = ("local", "knn", "classifier")
AUGMENTATIONS = ("paper", "light")

# Fields whose change would make a checkpoint's state meaningless.
STATE_FIELDS = ("dataset", "label_percent", "data_percent", "split_seed", "architecture",
                "width", "blocks_per_stage", "embedding_dim", "method", "image_size",
                "small_inputs")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every setting of a training run (see tools/train.py --helpfull)."""

    run_dir: str
    # Data.
    dataset: str = "mnist5k"
    data_dir: Optional[str] = None
    image_size: int = 224
    label_percent: float = 10.0
    data_percent: float = 100.0
    split_seed: Optional[int] = None
    split_file: Optional[str] = None
    label_subset: Optional[str] = None
    augmentation: str = "paper"
    min_crop_area: float = 0.2
    # Model.
    architecture: str = "resnet18"
    width: float = 1.0
    blocks_per_stage: Optional[Tuple[int, ...]] = None
    small_inputs: bool = False
    embedding_dim: int = 128
    sync_batch_norm: bool = False
    batch_norm_momentum: float = 0.997
    # Optimisation.
    global_batch_size: int = 128
    base_learning_rate: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 1e-4
    epochs: int = 300
    warmup_epochs: int = 10
    lr_drop_epochs: Tuple[int, ...] = ()
    lr_drop_factor: float = 0.1
    plateau_patience: int = 0
    # Method.
    method: str = "llp"
    propagation: str = "local"
    k: int = 10
    t: int = 25
    temperature: float = 0.07
    bank_momentum: float = 0.5
    weight_by_confidence: bool = True
    use_categorisation: bool = True
    density_chunk_size: int = 1024
    # The supervised baseline holds its labelled records in memory up to this many.
    cache_labeled_limit: int = 20000
    # Loop.
    seed: int = 0
    steps_per_loop: int = 100
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    eval_every: int = 1
    warm_start: Optional[str] = None
    cpu_replicas: int = 0

    def __post_init__(self):
        checks = [
            (self.method in METHODS, f"method must be one of {METHODS}, not {self.method!r}"),
            (self.augmentation in AUGMENTATIONS,
             f"augmentation must be one of {AUGMENTATIONS}, not {self.augmentation!r}"),
            (self.propagation in PROPAGATIONS,
             f"propagation must be one of {PROPAGATIONS}, not {self.propagation!r}"),
            (0 < self.min_crop_area <= 1, "min_crop_area must lie in (0, 1]"),
            (not (self.split_file and self.label_subset),
             "give split_file or label_subset, not both (each sets the labelled examples)"),
            (0 < self.label_percent <= 100, "label_percent must lie in (0, 100]"),
            (0 < self.data_percent <= 100, "data_percent must lie in (0, 100]"),
            (self.label_percent <= self.data_percent,
             "label_percent cannot exceed data_percent (the used subset holds the labels)"),
            (self.image_size >= 8, "image_size must be at least 8"),
            (self.global_batch_size > 0, "global_batch_size must be positive"),
            (self.epochs > 0, "epochs must be positive"),
            (0 <= self.warmup_epochs, "warmup_epochs cannot be negative"),
            (self.method == "supervised" or self.warmup_epochs <= self.epochs,
             "warmup_epochs cannot exceed epochs (equal: an instance-recognition run only)"),
            (all(0 < e for e in self.lr_drop_epochs), "lr_drop_epochs must be positive"),
            (0 < self.lr_drop_factor <= 1, "lr_drop_factor must lie in (0, 1]"),
            (self.k > 0 and self.t > 0, "k and t must be positive"),
            (self.temperature > 0, "temperature must be positive"),
            (0 <= self.bank_momentum < 1, "bank_momentum must lie in [0, 1)"),
            (self.steps_per_loop > 0, "steps_per_loop must be positive"),
            (self.checkpoint_every > 0, "checkpoint_every must be positive"),
            (self.keep_checkpoints > 0, "keep_checkpoints must be positive"),
            (self.eval_every > 0, "eval_every must be positive"),
            (self.cpu_replicas >= 0, "cpu_replicas cannot be negative"),
            (self.cache_labeled_limit >= 0, "cache_labeled_limit cannot be negative"),
            (self.width > 0, "width must be positive"),
            (0 <= self.batch_norm_momentum < 1, "batch_norm_momentum must lie in [0, 1)"),
        ]
        problems = [message for ok, message in checks if not ok]
        if problems:
            raise ConfigError("Invalid training settings: " + "; ".join(problems) + ".")

    @property
    def learning_rate(self):
        """The initial learning rate: base rate scaled by global batch / 128."""
        return self.base_learning_rate * self.global_batch_size / 128.0

    @property
    def llp_start_epoch(self):
        """The first epoch of the LLP phase (0 for the supervised baseline)."""
        return 0 if self.method == "supervised" else self.warmup_epochs

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        values = json.loads(text)
        for name in ("blocks_per_stage", "lr_drop_epochs"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


CONFIG_FILE = "config.json"


def save_config(config):
    """Writes the resolved config to ``run_dir/config.json``."""
    os.makedirs(config.run_dir, exist_ok=True)
    path = os.path.join(config.run_dir, CONFIG_FILE)
    with open(path + ".tmp", "w") as f:
        f.write(config.to_json())
    os.replace(path + ".tmp", path)


def check_resumable(config):
    """Raises ConfigError when the run directory holds a run with other state settings."""
    path = os.path.join(config.run_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return
    with open(path) as f:
        saved = TrainConfig.from_json(f.read())
    changed = [f"{name}: saved {getattr(saved, name)!r}, now {getattr(config, name)!r}"
               for name in STATE_FIELDS if getattr(saved, name) != getattr(config, name)]
    if changed:
        raise ConfigError(
            f"The run directory {config.run_dir} holds a run with different settings ("
            + "; ".join(changed) + "). Its checkpoints cannot continue with these settings: "
            "use a new --run_dir, or rerun with the saved settings.")
