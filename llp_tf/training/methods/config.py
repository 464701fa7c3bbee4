"""The method section of a run's config, and the propagation choices it reads.

The method names come from the registry (`llp_tf.training.methods.METHODS`),
LLP's hyperparameter defaults from `llp_tf.core.hyperparameters`. Imports no
TensorFlow, so the config tree can be read without it.
"""

import dataclasses
from typing import Optional

from llp_tf.config_fields import setting
from llp_tf.core import hyperparameters
from llp_tf.training.methods import METHODS

#: Where LLP's pseudo labels come from: the locally weighted kNN (eq. 7-8),
#: the plain weighted kNN (eq. 5-6), or the category head's argmax.
PROPAGATIONS = ("local", "knn", "classifier")


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The training method and its settings."""

    name: str = setting("llp", "llp, or supervised: cross-entropy on the labelled examples "
                        "only (the baseline).", choices=tuple(METHODS), flag="method",
                        state=True)
    warmup_epochs: int = setting(10, "Epochs of instance-recognition warm start before LLP "
                                 "(ignored by --method=supervised).")
    propagation: str = setting(
        PROPAGATIONS[0], "Pseudo labels from the locally weighted kNN (LLP, eq. 7-8), the plain "
        "weighted kNN (eq. 5-6), or the category head's argmax with its probability as "
        "confidence (classifier: the variant the release intended; the release itself stored "
        "that class without its label offset, so its pseudo labels fell among the instance "
        "ids, never aggregated with their class and had no categorisation loss, a slip that "
        "is not reproduced here).", choices=PROPAGATIONS)
    k: int = setting(hyperparameters.K, "K: labelled neighbours that vote.")
    t: int = setting(hyperparameters.T, "T: neighbours in the local density estimate (the "
                     "release used 50).")
    temperature: float = setting(hyperparameters.TEMPERATURE, "tau of every softmax over the "
                                 "memory bank.")
    bank_momentum: float = setting(hyperparameters.BANK_MOMENTUM, "m of the memory-bank row "
                                   "update.")
    weight_by_confidence: bool = setting(True, "Weight each example's loss by its confidence "
                                         "(--noweight_by_confidence: the 'woc' ablation).")
    use_categorisation: bool = setting(True, "Include the category head's cross-entropy in the "
                                       "LLP loss.")
    density_chunk_size: int = setting(hyperparameters.DENSITY_CHUNK_SIZE, "Labelled rows per "
                                      "chunk of the density refresh; bounds its memory.")
    cache_labelled_limit: int = setting(
        20000, "The supervised baseline trains on the labelled set for many passes per epoch; "
        "with at most this many labelled examples their encoded records are read once per "
        "epoch and held in memory (ImageNet p1: 12,811 JPEGs, about 1.4 GB), otherwise every "
        "pass reads the whole training split again. 0: never cache.",
        aliases=("cache_labeled_limit",))
    warm_start: Optional[str] = setting(None, "Run directory or checkpoint of an instance-"
                                        "recognition run: start LLP from its model and bank.")


def method_problems(method: MethodConfig) -> list[str]:
    """What is wrong with the method settings on their own, one message each."""
    checks = [
        (0 <= method.warmup_epochs, "warmup_epochs cannot be negative"),
        (method.k > 0 and method.t > 0, "k and t must be positive"),
        (method.temperature > 0, "temperature must be positive"),
        (0 <= method.bank_momentum < 1, "bank_momentum must lie in [0, 1)"),
        (method.cache_labelled_limit >= 0, "cache_labelled_limit cannot be negative"),
    ]
    return [message for ok, message in checks if not ok]
