"""llp_tf: Local Label Propagation (Zhuang et al. 2019) in TensorFlow 2 / Keras.

The public API, importable from the top (``from llp_tf import MemoryBank``): the core,
`MemoryBank`; `local_density` and `propagate` (eq. 5-8); `aggregation_loss`,
`categorisation_loss`, `llp_loss` and `l2_penalty` (eq. 2-4 and 9); `make_splits`, a
regime's labelled and used examples; and runs (docs/python-api.md), `train_regime`,
`load_run` and its `Run`. Names load on first use, so a light module such as
`llp_tf.errors` does not import TensorFlow. Importing the package registers its Keras classes
once Keras is imported (`keras_registration`), so `keras.saving.load_model` opens an exported
``model.keras``. Layout: docs/architecture.md."""

from llp_tf.keras_registration import register_with_keras
from llp_tf.lazy_attributes import lazy_getattr

__version__ = "0.2.0"

_PUBLIC = {
    "MemoryBank": "llp_tf.core.memory_bank",
    "local_density": "llp_tf.core.propagation",
    "propagate": "llp_tf.core.propagation",
    "aggregation_loss": "llp_tf.core.losses",
    "categorisation_loss": "llp_tf.core.losses",
    "llp_loss": "llp_tf.core.losses",
    "l2_penalty": "llp_tf.core.losses",
    "make_splits": "llp_tf.data.splits.regime",
    "train_regime": "llp_tf.runs",
    "load_run": "llp_tf.runs",
    "Run": "llp_tf.runs",
}

__all__ = sorted(_PUBLIC)

register_with_keras()


__getattr__ = lazy_getattr(__name__, _PUBLIC)


def __dir__():
    return sorted(list(globals()) + __all__)
