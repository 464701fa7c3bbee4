"""llp_tf's Keras classes registered with Keras's serialisation registry as soon as Keras is
imported, so that ``import llp_tf`` is enough for `keras.saving.load_model` to open an
exported ``model.keras``, whichever of the two a program imports first, while ``import
llp_tf`` itself imports neither Keras nor TensorFlow. `register_with_keras` runs at
``import llp_tf``: with Keras already imported it imports `CLASSES_MODULE` (which registers
the classes); otherwise a finder on `sys.meta_path` imports it once Keras's own import is done."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Optional, Sequence

#: The module whose import registers every Keras class of a saved model (it imports the
#: trunk's and batch norm's modules).
CLASSES_MODULE = "llp_tf.models.embedding_classifier"


def register_with_keras() -> None:
    """Registers the classes now if Keras is imported, else once it is (module docstring)."""
    if "keras" in sys.modules:
        importlib.import_module(CLASSES_MODULE)
    elif not any(isinstance(finder, _AfterKeras) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterKeras())


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Finds ``keras`` as the other finders do, its loader then importing `CLASSES_MODULE`
    after Keras's module has run; removes itself at that first import."""

    def find_spec(self, name: str, path: Optional[Sequence[str]],
                  target: Optional[types.ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        del path, target
        if name != "keras":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_keras = spec.loader.exec_module

        def run_keras_then_register(module: types.ModuleType) -> None:
            run_keras(module)
            importlib.import_module(CLASSES_MODULE)

        spec.loader.exec_module = run_keras_then_register
        return spec
