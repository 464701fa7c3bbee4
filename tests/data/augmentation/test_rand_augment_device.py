"""The batched strong augmentation against `rand_augment.apply_strong_params`
of each example: every op of both policies in each step at several
magnitudes, drawn choices, Cutout squares reaching outside the image, each
example's own choices, and no loop over the examples."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import rand_augment, rand_augment_device
from llp_tf.data.config import LIGHT, PAPER

# Ops whose per-example result the batched one reproduces to the bit: 8-bit
# level ops, elementwise ones, nearest-neighbour geometry.
EXACT = {"auto_contrast", "brightness", "equalize", "identity", "posterize", "solarize",
         *rand_augment.GEOMETRIC}
# The float ops (a mean, a matrix-vector product, a convolution) differ by rounding.
ATOL = 1e-6


def _images(count, height, width, seed=0):
    """float32 [count, H, W, 3] of 8-bit levels with skewed histograms (equalize
    has work to do) and a constant channel in every 7th image."""
    rng = np.random.default_rng(seed)
    levels = (rng.random((count, height, width, 3)) ** 2 * 220 + 10).astype(np.uint8)
    levels[::7, ..., 1] = 99
    return levels.astype(np.float32) / 255.0


def _params(ops, magnitudes, cutout):
    return {"ops": tf.constant(ops, tf.int32), "magnitudes": tf.constant(magnitudes, tf.float32),
            "cutout": tf.constant(cutout, tf.int32)}


@functools.cache
def _per_example_fn(policy):
    """`rand_augment.apply_strong_params` of ``policy`` as one tf.function, so that the tests'
    maps of one image size share its trace."""
    return tf.function(lambda image, example: rand_augment.apply_strong_params(image, example,
                                                                               policy))


def _per_example(images, params, policy):
    """`rand_augment.apply_strong_params` of each example, in a tf.data map (the host path)."""
    dataset = tf.data.Dataset.from_tensor_slices((images, params)).map(_per_example_fn(policy))
    return np.stack([image.numpy() for image in dataset])


@functools.cache
def _strong_graph(height, width, policy):
    """`rand_augment_device.strong_batch` traced as a replica step's graph of [any, height,
    width, 3] images: once per image size and policy for the tests that share them."""
    return tf.function(rand_augment_device.strong_batch).get_concrete_function(
        tf.TensorSpec([None, height, width, 3], tf.float32),
        {"ops": tf.TensorSpec([None, rand_augment.NUM_OPS], tf.int32),
         "magnitudes": tf.TensorSpec([None, rand_augment.NUM_OPS], tf.float32),
         "cutout": tf.TensorSpec([None, 3], tf.int32)}, policy)


def _batched(images, params, policy):
    """`rand_augment_device.strong_batch` in a tf.function, as the replica step runs it."""
    return _strong_graph(*images.shape[1:3], policy)(tf.constant(images), params,
                                                     policy).numpy()


def _names(params, policy):
    ops = rand_augment.POLICY_OPS[policy]
    return [[ops[i].name for i in row] for row in params["ops"].numpy()]


def _assert_matches(got, want, names):
    """Equal to ``ATOL``, and to the bit for the examples with only exact ops."""
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0.0, atol=ATOL)
    exact = np.array([set(row) <= EXACT for row in names])
    assert exact.any()
    np.testing.assert_array_equal(got[exact], want[exact])
    return float(np.abs(got - want).max())


def _forced_params(policy, count_per_op):
    """Every op of ``policy`` in each step at ``count_per_op`` magnitudes across
    its range (each integer of an integer op), its partner in the other step
    cycling over all the ops; Cutout squares anywhere, some reaching outside."""
    ops = rand_augment.POLICY_OPS[policy]
    rng = np.random.default_rng(1)
    rows, magnitudes = [], []
    for index, op in enumerate(ops):
        levels = (np.arange(op.low, op.high + 1) if op.integer
                  else np.linspace(op.low, op.high, count_per_op))
        for step in range(rand_augment.NUM_OPS):
            for k, level in enumerate(levels):
                partner = (index + 1 + k + step) % len(ops)
                row = [partner, partner]
                row[step] = index
                rows.append(row)
                partner_op = ops[partner]
                partner_level = (rng.integers(partner_op.low, partner_op.high + 1)
                                 if partner_op.integer
                                 else rng.uniform(partner_op.low, partner_op.high))
                magnitudes.append([level, partner_level] if step == 0 else [partner_level, level])
    cutout = np.stack([rng.integers(-8, 36, len(rows)), rng.integers(-8, 36, len(rows)),
                       rng.integers(0, 17, len(rows))], axis=1)
    return _params(rows, magnitudes, cutout)


# make test keeps "paper": "light" runs the same ops (a subset, in narrower ranges) through
# the same code; make test-all runs it too.
@pytest.mark.parametrize("policy", [PAPER, pytest.param(LIGHT, marks=pytest.mark.slow)])
@pytest.mark.parametrize("height, width", [(32, 32), (24, 30)])
def test_every_op_in_each_step_is_the_per_example_op(policy, height, width):
    params = _forced_params(policy, count_per_op=5)
    count = len(params["ops"])
    assert count == len(rand_augment.POLICY_OPS[policy]) * rand_augment.NUM_OPS * 5
    images = _images(count, height, width)
    want = _per_example(images, params, policy)
    got = _batched(images, params, policy)
    difference = _assert_matches(got, want, _names(params, policy))
    print(f"{policy} {height}x{width}: {count} examples, max |difference| {difference:.2e}")
    # The ops did something: the images are not the inputs.
    assert np.mean(np.any(got != images, axis=(1, 2, 3))) > 0.9


def _drawn_params(count, size, policy):
    seeds = tf.stack([tf.fill([count], tf.constant(11, tf.int64)),
                      tf.range(count, dtype=tf.int64)], axis=1)
    dataset = tf.data.Dataset.from_tensor_slices(seeds).map(
        lambda seed: rand_augment.draw_strong_params(seed, [size, size], policy)).batch(count)
    return next(iter(dataset))


# make test keeps "paper": "light" runs the same ops (a subset, in narrower ranges) through
# the same code; make test-all runs it too.
@pytest.mark.parametrize("policy", [PAPER, pytest.param(LIGHT, marks=pytest.mark.slow)])
def test_drawn_choices_give_the_per_example_images(policy):
    params = _drawn_params(256, 32, policy)
    images = _images(256, 32, 32, seed=2)
    want = _per_example(images, params, policy)
    difference = _assert_matches(_batched(images, params, policy), want, _names(params, policy))
    print(f"{policy} drawn: 256 examples, max |difference| {difference:.2e}")


def test_cutout_squares_reach_outside_the_image():
    # identity twice, then squares: inside, over each border, over all, empty.
    squares = [[4, 5, 6], [-3, 20, 8], [26, -4, 10], [-10, -10, 60], [10, 10, 0], [29, 29, 9]]
    params = _params([[4, 4]] * len(squares), [[0.0, 0.0]] * len(squares), squares)
    assert rand_augment.POLICY_OPS[PAPER][4].name == "identity"
    images = _images(len(squares), 32, 32, seed=3)
    got = _batched(images, params, PAPER)
    np.testing.assert_array_equal(got, _per_example(images, params, PAPER))
    for image, out, (top, left, side) in zip(images, got, squares):
        expected = image.copy()
        expected[max(top, 0):max(top + side, 0), max(left, 0):max(left + side, 0)] = 0.5
        np.testing.assert_array_equal(out, expected)
    # No 8-bit level is 0.5: the grey pixels are the clipped squares.
    assert [int(np.sum(out[..., 0] == 0.5)) for out in got] == [36, 40, 36, 1024, 0, 9]


def test_each_example_gets_its_own_ops_magnitudes_and_order():
    names = [op.name for op in rand_augment.POLICY_OPS[PAPER]]
    ops = [[names.index("rotate"), names.index("equalize")],
           [names.index("solarize"), names.index("posterize")],
           [names.index("posterize"), names.index("solarize")],
           [names.index("translate_x"), names.index("identity")],
           [names.index("identity"), names.index("translate_x")]]
    magnitudes = [[25.0, 0.0], [0.4, 4.0], [4.0, 0.4], [0.25, 0.0], [0.0, -0.125]]
    params = _params(ops, magnitudes, [[0, 0, 0]] * 5)
    image = _images(1, 32, 32, seed=4)
    images = np.repeat(image, 5, axis=0)
    got = _batched(images, params, PAPER)
    want = _per_example(images, params, PAPER)
    np.testing.assert_array_equal(got, want)
    # Each example differs from every other's choices applied to it.
    for k in range(5):
        for other in range(5):
            assert np.array_equal(got[k], want[other]) == (k == other), (k, other)
    # The translations moved the content by 8 px right and 4 px left.
    np.testing.assert_array_equal(got[3][:, 8:], image[0][:, :-8])
    np.testing.assert_array_equal(got[4][:, :-4], image[0][:, 4:])
    assert np.all(got[3][:, :8] == 0.5) and np.all(got[4][:, -4:] == 0.5)


def _op_types(graph):
    """The op types of ``graph`` and of every function in its library."""
    types = {op.type for op in graph.get_operations()}
    for function in graph.as_graph_def().library.function:
        types |= {node.op for node in function.node_def}
    return types


def test_no_loop_over_the_examples():
    params = _drawn_params(8, 16, PAPER)
    traced = tf.function(rand_augment_device.strong_batch).get_concrete_function(
        tf.TensorSpec([None, 16, 16, 3], tf.float32),
        {key: tf.TensorSpec([None, *value.shape[1:]], value.dtype)
         for key, value in params.items()}, PAPER)
    types = _op_types(traced.graph)
    assert "ImageProjectiveTransformV3" in types and types & {"If", "StatelessIf"}
    assert not types & {"While", "StatelessWhile", "TensorListReserve", "TensorListFromTensor"}


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="policy"):
        rand_augment_device.strong_batch(tf.zeros([1, 8, 8, 3]),
                                         _params([[0, 0]], [[0.0, 0.0]], [[0, 0, 0]]), "strong")


def test_one_op_for_the_whole_batch_and_an_empty_batch():
    names = [op.name for op in rand_augment.POLICY_OPS[LIGHT]]
    params = _params([[names.index("equalize"), names.index("shear_y")]] * 3,
                     [[0.0, -0.1], [0.0, 0.0], [0.0, 0.15]], [[0, 0, 0]] * 3)
    images = _images(3, 20, 20, seed=5)
    got = _batched(images, params, LIGHT)
    np.testing.assert_array_equal(got, _per_example(images, params, LIGHT))
    assert not np.array_equal(got[0], got[2])
    empty = _params(np.zeros([0, 2]), np.zeros([0, 2]), np.zeros([0, 3]))
    assert _batched(np.zeros([0, 20, 20, 3], np.float32), empty, LIGHT).shape == (0, 20, 20, 3)
