"""The Table 5 comparison's one hyperparameter rule: every method takes a stated external
default, none chosen on the embeddings compared (docs/after-training.md says why). A value
given on the command line replaces its default and is recorded as given. Needs no TensorFlow."""

import dataclasses
from collections.abc import Mapping
from typing import Any

from llp_tf.after_training.transduction import dlp_diffusion, dmt_normalized_cut
from llp_tf.after_training.transduction.rbf_graph_propagation import (
    SKLEARN_RBF_GAMMA, ZHOU_LABEL_SPREADING_ALPHA)
from llp_tf.core import hyperparameters

RULE = "external defaults"
RULE_TEXT = ("every method takes a stated external default; none is chosen on the embeddings "
             "compared")
GIVEN = "given on the command line"

SOURCES = {
    "k": "the LLP paper's K = 10",
    "t": "the LLP paper's T = 25 (the authors' release: 50)",
    "temperature": "the LLP paper's tau = 0.07",
    "rbf_gamma": "scikit-learn's LabelSpreading/LabelPropagation default gamma = 20",
    "label_spreading_alpha": "Zhou et al. 2004's alpha = 0.99",
    "dmt_k": ("ceil(ln n) for the n drawn points, von Luxburg 2007's rule for a kNN graph (DMT's "
              "release: K = 500 for 151,517 points)"),
    "dmt_eigenvectors": ("the classes of a draw, von Luxburg 2007's rule for C clusters, the "
                         "first (constant) dropped as DMT's release does (its 200 are for "
                         "1,000 classes)"),
    "dlp_k": ("a tenth of the images per class, at least 1, at most 50 (Iscen et al.'s "
              "release: k = 50 on CIFAR-100's 500 training images a class)"),
}
DLP_RELEASE = "Iscen et al. 2019's release (ahmetius/LP-DeepSSL)"
DMT_RELEASE = "DMT's release (microsoft/metric-transfer.pytorch notebooks/nc_imagenet.ipynb)"


@dataclasses.dataclass(frozen=True)
class Setting:
    """A hyperparameter's value and where it comes from."""

    value: float
    source: str

    def as_json(self) -> dict[str, Any]:
        """``{"value": ..., "source": ...}``."""
        return {"value": self.value, "source": self.source}


@dataclasses.dataclass(frozen=True)
class MethodSettings:
    """The comparison's settings: LLP's and the kNN's ``k`` and ``temperature``, LLP's ``t``,
    label spreading's and propagation's ``rbf_gamma``, label spreading's
    ``label_spreading_alpha``, LP_DMT's ``dmt_k`` and ``dmt_eigenvectors``, DLP's ``dlp_k``;
    each a `Setting`."""

    k: Setting
    t: Setting
    temperature: Setting
    rbf_gamma: Setting
    label_spreading_alpha: Setting
    dmt_k: Setting
    dmt_eigenvectors: Setting
    dlp_k: Setting

    def values(self) -> dict[str, float]:
        """Setting name -> value, the keyword arguments of `methods.standard_methods`."""
        return {field.name: getattr(self, field.name).value for field in dataclasses.fields(self)}

    def given(self) -> list[str]:
        """Names of the settings given on the command line (not the rule's defaults)."""
        return [field.name for field in dataclasses.fields(self)
                if getattr(self, field.name).source == GIVEN]

    def by_method(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Each method's hyperparameters, ``{method: {name: {"value", "source"}}}``; DLP's and
        LP_DMT's fixed ones from their releases."""
        def release(value, source=DLP_RELEASE):
            return {"value": value, "source": source}

        return {
            "local_knn": {"k": self.k.as_json(), "t": self.t.as_json(),
                          "temperature": self.temperature.as_json()},
            "knn": {"k": self.k.as_json(), "temperature": self.temperature.as_json()},
            "label_spreading": {"alpha": self.label_spreading_alpha.as_json(),
                                "rbf_gamma": self.rbf_gamma.as_json(),
                                "solver": {"value": "closed form (I - alpha S)^-1 Y",
                                           "source": "Zhou et al. 2004"}},
            "label_propagation": {"rbf_gamma": self.rbf_gamma.as_json(),
                                  "solver": {"value": "harmonic solution",
                                             "source": "Zhu & Ghahramani 2002"}},
            "lp_dmt": {"k": self.dmt_k.as_json(),
                       "eigenvectors": self.dmt_eigenvectors.as_json(),
                       "weights": release("exp(-d / d_K), d = (1 - cos) / 2", DMT_RELEASE),
                       "alpha": release(0, DMT_RELEASE),
                       "prior": release("+1 / -1, balanced by degree", DMT_RELEASE)},
            "dlp": {"k": self.dlp_k.as_json(), "gamma": release(dlp_diffusion.DLP_GAMMA),
                    "alpha": release(dlp_diffusion.DLP_ALPHA),
                    "max_iter": release(dlp_diffusion.DLP_MAX_ITER),
                    "tol": release(dlp_diffusion.DLP_TOLERANCE)},
        }

    def as_json(self) -> dict[str, Any]:
        """The results file's ``hyperparameter_rule``."""
        return {"rule": RULE, "text": RULE_TEXT, "given_on_command_line": self.given(),
                "methods": self.by_method()}

    def summary(self) -> str:
        """One line: the rule and every method's values."""
        given = self.given()
        rule = RULE + (f" but {', '.join('--' + name for name in given)} (given)" if given else
                       ", none chosen on these embeddings")
        return (f"hyperparameters: {rule}: LLP K={self.k.value} T={self.t.value} "
                f"tau={self.temperature.value:g}, kNN K={self.k.value} (LLP paper); "
                f"LS alpha={self.label_spreading_alpha.value:g} (Zhou et al.), "
                f"gamma={self.rbf_gamma.value:g} (scikit-learn), LP gamma="
                f"{self.rbf_gamma.value:g} (scikit-learn); LP_DMT K={self.dmt_k.value}, "
                f"{self.dmt_eigenvectors.value} eigenvectors (von Luxburg's rules: ln n, C); "
                f"DLP k={self.dlp_k.value} (a tenth of "
                f"the class size), gamma={dlp_diffusion.DLP_GAMMA:g} alpha="
                f"{dlp_diffusion.DLP_ALPHA:g}, {dlp_diffusion.DLP_MAX_ITER} CG steps "
                f"(Iscen et al.'s release)")


def resolve(images_per_class: int, given: Mapping[str, float | None],
            num_classes: int) -> MethodSettings:
    """The rule's `MethodSettings` for draws of ``num_classes`` classes of ``images_per_class``
    images, with the values in ``given`` (setting name -> value, or None for the default)
    replacing defaults."""
    defaults = {"k": hyperparameters.K, "t": hyperparameters.T,
                "temperature": hyperparameters.TEMPERATURE, "rbf_gamma": SKLEARN_RBF_GAMMA,
                "label_spreading_alpha": ZHOU_LABEL_SPREADING_ALPHA,
                "dmt_k": dmt_normalized_cut.default_k(num_classes * images_per_class),
                "dmt_eigenvectors": dmt_normalized_cut.default_eigenvectors(num_classes),
                "dlp_k": dlp_diffusion.dlp_k_for(images_per_class)}
    unknown = set(given) - set(defaults)
    if unknown:
        raise ValueError(f"Unknown settings {sorted(unknown)}.")
    settings = {}
    for name, default in defaults.items():
        value = given.get(name)
        settings[name] = (Setting(default, SOURCES[name]) if value is None
                          else Setting(value, GIVEN))
    return MethodSettings(**settings)
