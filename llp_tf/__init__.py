"""llp_tf: Local Label Propagation (Zhuang et al. 2019) in TensorFlow 2 / Keras.

The public API is the core users build on, importable from the top:

    from llp_tf import MemoryBank, propagate, aggregation_loss

- `MemoryBank`: every example's embedding, label, confidence and density;
- `local_density`, `propagate`: eq. 7 and the (locally) weighted kNN of
  eq. 5-8;
- `aggregation_loss`, `categorisation_loss`, `llp_loss`, `l2_penalty`: eq.
  2-4 and 9, weight decay as the release trained it;
- `make_splits`: a regime's labelled and used examples.

Subpackages: `core` (the above, and the statistics of a bank's state),
`data`, `models`, `training` and `after_training` (a run read back, and its
`export`, `probe`, `transduction` and `analysis`; docs/architecture.md).
The library never reads flags; the entry points, `cli` (run from tools/ or as
console scripts), turn flags into one frozen config and pass explicit
arguments. Names are loaded on first use, so importing a light module such as
`llp_tf.errors` does not import TensorFlow.
"""

from llp_tf.lazy_attributes import lazy_getattr

__version__ = "0.1.0"

_PUBLIC = {
    "MemoryBank": "llp_tf.core.memory_bank",
    "local_density": "llp_tf.core.propagation",
    "propagate": "llp_tf.core.propagation",
    "aggregation_loss": "llp_tf.core.losses",
    "categorisation_loss": "llp_tf.core.losses",
    "llp_loss": "llp_tf.core.losses",
    "l2_penalty": "llp_tf.core.losses",
    "make_splits": "llp_tf.data.splits.regime",
}

__all__ = sorted(_PUBLIC)


__getattr__ = lazy_getattr(__name__, _PUBLIC)


def __dir__():
    return sorted(list(globals()) + __all__)
