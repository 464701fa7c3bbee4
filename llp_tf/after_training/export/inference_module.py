"""The functions a SavedModel export serves (`InferenceModule`): each takes raw uint8
images [B, H, W, C] (C = 1 or 3) and applies the evaluation resize and crop inside."""

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from llp_tf.core import hyperparameters, label_encoding, propagation
from llp_tf.data.augmentation import eval_transform
from llp_tf.tensor_types import Array, FloatTensor, IntTensor, Tensor

TOP_CLASSES = 5
GRAYSCALE_CHANNELS = 1
RGB_CHANNELS = 3
# The class of a knn neighbour that has no class (an instance id in the bank).
NO_CLASS = -1

EMBED = "embed"
CLASSIFY = "classify"
KNN = "knn"
SERVING_DEFAULT = "serving_default"

# An open rank, so that an image without its batch dimension reaches `_as_batch`'s message.
IMAGES_SPEC = tf.TensorSpec(None, tf.uint8, name="images")
IMAGES_RANK = 4


def bank_classes(labels: Array, num_classes: int) -> Array:
    """int64 [N]: the class of each bank row, `NO_CLASS` where it holds an instance id."""
    return label_encoding.classes_or(labels, num_classes, NO_CLASS)


class InferenceModule(tf.Module):
    """The exported functions of a built model (a layer returning `EmbeddingClassifier`'s
    dict); ``bank_embeddings`` float32 [N, D] with ``bank_classes`` int64 [N] add ``knn``
    (``k`` neighbours, capped at N, voting with weights ``exp(similarity / temperature)``)."""

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
        """Keeps the Keras model out of the SavedModel, which would hold each Keras 3
        variable twice (`trace_signatures` tracks the variables read)."""
        self._model = model

    def preprocess(self, images: IntTensor) -> FloatTensor:
        """uint8 [B, H, W, 1 or 3] -> float32 [B, S, S, 3], the evaluation transform."""
        images = _as_batch(images)
        shape = tf.shape(images)
        channels = shape[3]
        valid = tf.logical_or(tf.equal(channels, GRAYSCALE_CHANNELS),
                              tf.equal(channels, RGB_CHANNELS))
        checks = [
            tf.debugging.Assert(valid, [
                "images must have 1 (grayscale) or 3 (RGB) channels; got", channels]),
            tf.debugging.Assert(shape[0] > 0, ["images must hold at least one image"]),
        ]
        with tf.control_dependencies(checks):
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
        embedding = self._outputs(images)["embedding"]
        similarity = tf.matmul(embedding, self.bank_embeddings, transpose_b=True)
        top_similarity, rows = tf.math.top_k(similarity, k=self.knn_k, index_type=tf.int64)
        classes = tf.gather(self.bank_classes, rows)
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
        """dict name -> concrete function, for `tf.saved_model.save`; sets
        ``served_variables`` to the `tf.Variable`s they read, which TensorFlow's C++ loader
        would otherwise find uninitialised (Keras 3 wraps them)."""
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
    # Not tf.ensure_shape: the optimiser would carry its rank back and drop the check.
    return tf.reshape(images, [shape[i] for i in range(IMAGES_RANK)])
