"""The strong augmentation (RandAugment and Cutout) on a batch, on the
accelerator: `rand_augment.apply_strong_params` of each example with its
host-drawn choices (`rand_augment.draw_strong_params`), as whole-batch
tensor ops (no loop over the examples).

Each of the ``NUM_OPS`` steps gathers, for each photometric op some
example chose, the examples that chose it, runs the op on them at once, and
stitches the results back in place (`tf.dynamic_stitch`): the work is that
of the per-example path, in a few kernels per op. The geometric ops of a
step are one projective transform per example, sampled in a single
`rand_augment.warp`. The ops' kernels are `rand_augment`'s own, which take a
leading batch axis; an example's image is the per-example one to float
rounding, and exactly where the op is exact (the 8-bit level ops, nearest
neighbour geometry, Cutout). Not for XLA: ImageProjectiveTransformV3 has no
XLA kernel (TensorFlow 2.21), and the gathered batches have dynamic sizes.
"""

import tensorflow as tf

from llp_tf.data.augmentation import rand_augment, weak
from llp_tf.data.config import PAPER
from llp_tf.tensor_types import FloatTensor, Tensor


def _on_picked(function, images, arguments, picked):
    """``function(images[picked], arguments[picked])`` (float32 [n, H, W, 3])
    for the examples ``picked`` (int32 [n]), run only if n > 0."""
    return tf.cond(tf.size(picked) > 0,
                   lambda: function(tf.gather(images, picked), tf.gather(arguments, picked)),
                   lambda: tf.zeros_like(images[:0]))


def _apply_step(images, indices, magnitudes, policy):
    """float32 [B, H, W, 3] -> same: each image's op ``indices`` (int32 [B],
    into ``POLICY_OPS[policy]``) with its ``magnitudes`` (float32 [B])."""
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
    """float32 [B, S, S, 3] in [0, 1] -> same: each image's RandAugment ops and
    Cutout of ``params`` (`rand_augment.draw_strong_params`, each with a
    leading axis [B]: "ops" int32 [B, NUM_OPS], indices into
    ``POLICY_OPS[policy]``, "magnitudes" float32 [B, NUM_OPS], "cutout" int32
    [B, 3])."""
    weak.check_policy(policy, weak.CROP_AREA_RANGE[0])
    images = tf.convert_to_tensor(images, tf.float32)
    out = images
    for step in range(rand_augment.NUM_OPS):
        out = _apply_step(out, params["ops"][:, step], params["magnitudes"][:, step], policy)
    out = rand_augment.grey_squares(out, params["cutout"])
    out.set_shape(images.shape)
    return out
