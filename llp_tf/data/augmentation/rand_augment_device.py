"""The strong augmentation on a batch, on the accelerator: `rand_augment.apply_strong_params`
of each example with its host-drawn choices, as whole-batch ops (each photometric op on the
examples that chose it, the geometric ops as one warp), equal to the per-example path to float
rounding. Not for XLA: ImageProjectiveTransformV3 has no XLA kernel."""

import tensorflow as tf

from llp_tf.data.augmentation import rand_augment, weak
from llp_tf.data.config import PAPER
from llp_tf.tensor_types import FloatTensor, Tensor


def _on_picked(function, images, arguments, picked):
    """``function(images[picked], arguments[picked])``, run only if ``picked`` is not empty."""
    return tf.cond(tf.size(picked) > 0,
                   lambda: function(tf.gather(images, picked), tf.gather(arguments, picked)),
                   lambda: tf.zeros_like(images[:0]))


def _apply_step(images, indices, magnitudes, policy):
    """float32 [B, H, W, 3] -> same: each image's op ``indices`` (int32 [B]) at ``magnitudes``."""
    shape = tf.cast(tf.shape(images), tf.float32)
    height, width = shape[1], shape[2]
    coefficients = rand_augment.affine_coefficients("translate_x", tf.zeros_like(magnitudes),
                                                    height, width)
    geometric = tf.zeros_like(indices, tf.bool)
    positions, results = [], []
    for index, op in enumerate(rand_augment.POLICY_OPS[policy]):
        chosen = tf.equal(indices, index)
        if op.name in rand_augment.GEOMETRIC:
            mapped = rand_augment.affine_coefficients(op.name, magnitudes, height, width)
            coefficients = tuple(tf.where(chosen, new, old)
                                 for new, old in zip(mapped, coefficients))
            geometric |= chosen
        else:
            positions.append(tf.cast(tf.where(chosen)[:, 0], tf.int32))
            results.append(_on_picked(rand_augment.OP_FUNCTIONS[op.name], images,
                                      magnitudes[:, None, None, None], positions[-1]))
    positions.append(tf.cast(tf.where(geometric)[:, 0], tf.int32))
    transforms = rand_augment.projective_transform(coefficients, height, width)
    results.append(_on_picked(rand_augment.warp, images, transforms, positions[-1]))
    return tf.dynamic_stitch(positions, results)


def strong_batch(images: FloatTensor, params: dict[str, Tensor],
                 policy: str = PAPER) -> FloatTensor:
    """float32 [B, S, S, 3] in [0, 1] -> same: each image's RandAugment ops and Cutout of
    ``params`` (`rand_augment.draw_strong_params`, each with a leading [B])."""
    weak.check_policy(policy, weak.CROP_AREA_RANGE[0])
    images = tf.convert_to_tensor(images, tf.float32)
    out = images
    for step in range(rand_augment.NUM_OPS):
        out = _apply_step(out, params["ops"][:, step], params["magnitudes"][:, step], policy)
    out = rand_augment.grey_squares(out, params["cutout"])
    out.set_shape(images.shape)
    return out
