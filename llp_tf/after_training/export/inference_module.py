"""The functions a SavedModel export serves: `InferenceModule`.

Every signature takes raw uint8 images [B, H, W, C] of any size (C = 1 or
3) and applies the evaluation resize and centre crop inside; `saved_model`
writes it with its description and states the signatures' outputs. Class
indices and bank rows are int64 in every signature.
"""

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding, propagation
from llp_tf.data.augmentation import eval_transform
from llp_tf.tensor_types import Array, FloatTensor, IntTensor, Tensor

# The paper reports top-1 and top-5 accuracy; classify returns the five best.
TOP_CLASSES = 5
# Channel counts the signatures accept: grayscale (repeated to RGB) or RGB.
GRAYSCALE_CHANNELS = 1
RGB_CHANNELS = 3
# The class of a knn neighbour that has no class (an instance id in the bank).
NO_CLASS = -1

EMBED = "embed"
CLASSIFY = "classify"
KNN = "knn"
SERVING_DEFAULT = "serving_default"

# The rank is left open in the signatures so that an image without its batch
# dimension reaches the graph's own check (`_as_batch`), which names the
# mistake; with a declared rank 4, the graph optimiser assumes rank 4 and the
# call fails later with a bare shape error.
IMAGES_SPEC = tf.TensorSpec(None, tf.uint8, name="images")
IMAGES_RANK = 4


def bank_classes(labels: Array, num_classes: int) -> Array:
    """int64 [N]: the class of each bank row, `NO_CLASS` (-1) where it holds an
    instance id (`label_encoding.classes_or`)."""
    return label_encoding.classes_or(labels, num_classes, NO_CLASS)


class InferenceModule(tf.Module):
    """The exported functions of a trained model (see the module docstring).

    Args:
      model: a built `EmbeddingClassifier` (any layer returning the dict of `EmbeddingClassifier`).
      image_size: int S, the side the evaluation transform crops to.
      class_names: sequence of C str.
      bank_embeddings: optional float32 [N, D], memory-bank rows; with
        ``bank_classes`` adds the ``knn`` function.
      bank_classes: optional int64 [N], the class of each row, -1 for none.
      k: int, neighbours of the knn function (capped at N).
      temperature: float tau of the knn vote's weights.
    """

    def __init__(self, model: keras.layers.Layer, image_size: int, class_names: Sequence[str],
                 bank_embeddings: Array | None = None, bank_classes: Array | None = None,
                 k: int = hyperparameters.K, temperature: float = hyperparameters.TEMPERATURE,
                 name: str = "llp_inference") -> None:
        super().__init__(name=name)
        if (bank_embeddings is None) != (bank_classes is None):
            raise ValueError("Give both bank_embeddings and bank_classes, or neither.")
        self._hold_untracked(model)
        self.image_size = int(image_size)
        self.num_classes = len(class_names)
        self._class_names = tuple(str(name) for name in class_names)
        self._top = min(TOP_CLASSES, self.num_classes)
        self.class_names = tf.Variable(self._class_names, trainable=False, name="class_names")
        self.knn_k = None
        if bank_embeddings is not None:
            bank_embeddings = np.asarray(bank_embeddings, np.float32)
            self.bank_embeddings = tf.Variable(bank_embeddings, trainable=False,
                                               name="bank_embeddings")
            self.bank_classes = tf.Variable(np.asarray(bank_classes, np.int64),
                                            trainable=False, name="bank_classes")
            self.knn_k = min(int(k), bank_embeddings.shape[0])
            self._temperature = float(temperature)
            self.knn = tf.function(self._knn, input_signature=[IMAGES_SPEC])
        self.served_variables = None

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _hold_untracked(self, model):
        """Keeps the Keras model out of what `tf.saved_model.save` writes: each
        Keras 3 variable would be written a second time, as a copy that no
        signature reads (`trace_signatures` tracks the variables they read)."""
        self._model = model

    def preprocess(self, images: IntTensor) -> FloatTensor:
        """uint8 [B, H, W, 1 or 3] -> float32 [B, S, S, 3]: the evaluation
        transform every signature applies before the network (the ONNX model's
        input, `onnx_model.preprocess_for_onnx`)."""
        images = _as_batch(images)
        shape = tf.shape(images)
        channels = shape[3]
        valid = tf.logical_or(tf.equal(channels, GRAYSCALE_CHANNELS),
                              tf.equal(channels, RGB_CHANNELS))
        checks = [
            tf.debugging.Assert(valid, [
                "images must have 1 (grayscale) or 3 (RGB) channels; got", channels]),
            # The network's graph fails on an empty batch with an obscure
            # shape error; say what is wrong instead.
            tf.debugging.Assert(shape[0] > 0, ["images must hold at least one image"]),
        ]
        with tf.control_dependencies(checks):
            # 3 // 1 repeats a grayscale channel three times; 3 // 3 keeps RGB.
            images = tf.tile(images, [1, 1, 1, RGB_CHANNELS // channels])
        images = tf.ensure_shape(images, [None, None, None, RGB_CHANNELS])
        return tf.map_fn(
            lambda image: eval_transform.eval_preprocess(image, self.image_size), images,
            fn_output_signature=tf.TensorSpec([self.image_size, self.image_size, RGB_CHANNELS],
                                              tf.float32))

    def _outputs(self, images):
        return self._model(self.preprocess(images), training=False)

    @tf.function(input_signature=[IMAGES_SPEC])
    def embed(self, images: IntTensor) -> dict[str, FloatTensor]:
        """uint8 [B, H, W, C] -> {"embedding": [B, D], "features": [B, F]}."""
        outputs = self._outputs(images)
        return {"embedding": outputs["embedding"], "features": outputs["features"]}

    @tf.function(input_signature=[IMAGES_SPEC])
    def classify(self, images: IntTensor) -> dict[str, Tensor]:
        """uint8 [B, H, W, C] -> probabilities and the top five classes."""
        probabilities = tf.nn.softmax(self._outputs(images)["logits"], axis=-1)
        top_probabilities, top_classes = tf.math.top_k(probabilities, k=self._top,
                                                       index_type=tf.int64)
        names = tf.gather(tf.constant(self._class_names, tf.string), top_classes)
        return {"probabilities": probabilities, "top5_classes": top_classes,
                "top5_probabilities": top_probabilities, "top5_names": names}

    def _knn(self, images):
        """uint8 [B, H, W, C] -> nearest bank rows and their weighted vote."""
        embedding = self._outputs(images)["embedding"]
        similarity = tf.matmul(embedding, self.bank_embeddings, transpose_b=True)
        top_similarity, rows = tf.math.top_k(similarity, k=self.knn_k, index_type=tf.int64)
        classes = tf.gather(self.bank_classes, rows)
        # Neighbours without a class (NO_CLASS) do not vote.
        probabilities = propagation.class_vote(top_similarity / self._temperature, classes,
                                               self.num_classes)
        voted = tf.reduce_any(label_encoding.is_class(classes, self.num_classes), axis=1)
        knn_class = tf.where(voted, tf.argmax(probabilities, axis=1),
                             tf.constant(NO_CLASS, tf.int64))
        return {"neighbor_rows": rows, "neighbor_similarities": top_similarity,
                "neighbor_classes": classes, "knn_probabilities": probabilities,
                "knn_class": knn_class,
                "knn_confidence": tf.reduce_max(probabilities, axis=1)}

    def trace_signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """dict name -> concrete function, for `tf.saved_model.save`.

        Also sets ``served_variables``, every `tf.Variable` the signatures
        read, so that the SavedModel's saver restores them: a Keras 3 variable
        is a wrapper that `tf.saved_model.save` writes as a new copy, while
        the graph reads the `tf.Variable` inside it, which TensorFlow's C++
        loader (saved_model_cli, TF Serving) then finds uninitialised.
        """
        classify = self.classify.get_concrete_function()
        signatures = {EMBED: self.embed.get_concrete_function(), CLASSIFY: classify,
                      SERVING_DEFAULT: classify}
        if self.knn_k is not None:
            signatures[KNN] = self.knn.get_concrete_function()
        read = {}
        for function in signatures.values():
            read.update((id(variable), variable) for variable in function.variables)
        self.served_variables = list(read.values())
        return signatures


def _as_batch(images: IntTensor) -> IntTensor:
    """uint8 of any rank -> [B, H, W, C]; a clear error unless the rank is 4."""
    rank_check = tf.debugging.Assert(tf.equal(tf.rank(images), IMAGES_RANK), [
        "images must be a batch [B, H, W, C]; add a batch dimension to a single "
        "[H, W, C] image (images[None] or np.expand_dims(image, 0)); got shape",
        tf.shape(images)])
    with tf.control_dependencies([rank_check]):
        shape = tf.shape(images)
    # A reshape, not tf.ensure_shape or set_shape: the graph optimiser would
    # carry their rank back to the input and drop the check as always true.
    return tf.reshape(images, [shape[i] for i in range(IMAGES_RANK)])
