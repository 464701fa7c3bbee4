"""Strong augmentation: each op against numpy (and PIL, whose ops FixMatch
used), the op and magnitude distributions, Cutout's square, determinism."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageOps
from scipy import stats

from llp_tf.data.augmentation import rand_augment, weak
from llp_tf.data.config import LIGHT, PAPER
from tests.cli.tool_main import ROOT

# A chi-square test at this level fails a correct sampler once in 10,000 seeds sets.
P_MIN = 1e-4


def _levels_image(height=12, width=10, seed=0):
    """uint8 [H, W, 3] with a skewed histogram (equalize has work to do)."""
    rng = np.random.default_rng(seed)
    return (rng.random((height, width, 3)) ** 2 * 200 + 20).astype(np.uint8)


def _float(levels):
    return tf.constant(levels.astype(np.float32) / 255.0)


def _seed(k):
    return tf.constant([5, k], tf.int64)


def _op(policy, name):
    """(index, OpRange) of the op named ``name`` in ``policy``."""
    return next((i, op) for i, op in enumerate(rand_augment.POLICY_OPS[policy]) if op.name == name)


def _apply(name, image, magnitude, policy=PAPER):
    index, _ = _op(policy, name)
    return rand_augment.apply_op(image, tf.constant(index), tf.constant(magnitude, tf.float32),
                                 policy).numpy()


def _pil(levels, transform):
    return np.asarray(transform(Image.fromarray(levels))).astype(np.float64) / 255.0


def test_auto_contrast_against_numpy():
    x = np.random.default_rng(1).uniform(0.2, 0.7, (6, 5, 3))
    x[..., 2] = 0.3  # a constant channel is left alone
    expected = (x - x.min(axis=(0, 1))) / np.where(np.ptp(x, axis=(0, 1)) > 0,
                                                   np.ptp(x, axis=(0, 1)), 1.0)
    expected[..., 2] = 0.3
    np.testing.assert_allclose(_apply("auto_contrast", tf.constant(x, tf.float32), 0.0),
                               expected, atol=1e-6)


def _equalize_reference(levels):
    """PIL's equalize algorithm, one channel at a time, in float64."""
    out = np.empty(levels.shape)
    for c in range(3):
        histogram = np.bincount(levels[..., c].ravel(), minlength=256)
        occupied = histogram[histogram > 0]
        step = (occupied.sum() - occupied[-1]) // 255
        if step == 0:
            out[..., c] = levels[..., c]
            continue
        below = np.concatenate([[0], np.cumsum(histogram)[:-1]])
        out[..., c] = np.minimum((step // 2 + below) // step, 255)[levels[..., c]]
    return out / 255.0


def test_equalize_against_numpy_and_pil():
    # Over 255 pixels: with fewer PIL's step is 0 and every channel stays as it is.
    levels = _levels_image(48, 40)
    levels[..., 1] = 77  # a single level: unchanged
    out = rand_augment.equalize(_float(levels)).numpy()
    np.testing.assert_allclose(out, _equalize_reference(levels), atol=1e-6)
    np.testing.assert_allclose(out, _pil(levels, ImageOps.equalize), atol=1e-6)
    assert np.all(out[..., 1] == np.float32(77 / 255))
    # The skewed channels are spread over the whole range.
    assert out[..., 0].max() - out[..., 0].min() > 0.95
    assert np.abs(out[..., 0].mean() - 0.5) < 0.05 < np.abs(levels[..., 0].mean() / 255 - 0.5)


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_posterize_against_numpy_and_pil(bits):
    levels = _levels_image(seed=bits)
    step = 2 ** (8 - bits)
    expected = np.floor(levels / step) * step / 255.0
    out = _apply("posterize", _float(levels), float(bits))
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(out, _pil(levels, lambda im: ImageOps.posterize(im, bits)),
                               atol=1e-6)


def test_solarize_against_numpy_and_pil():
    levels = _levels_image()
    levels[0, 0] = 255  # stays white at T = 1 (PIL's threshold 256)
    x = levels / 255.0
    out = _apply("solarize", _float(levels), 0.5)  # PIL threshold 128
    np.testing.assert_allclose(out, np.where(levels >= 128, 1.0 - x, x), atol=1e-6)
    np.testing.assert_allclose(out, _pil(levels, lambda im: ImageOps.solarize(im, 128)),
                               atol=1e-6)
    np.testing.assert_allclose(_apply("solarize", _float(levels), 0.0), 1.0 - x, atol=1e-6)
    np.testing.assert_allclose(_apply("solarize", _float(levels), 1.0), x, atol=1e-6)


def test_sharpness_against_numpy_and_pil():
    levels = _levels_image()
    x = levels / 255.0
    smooth = x.copy()
    weights = np.ones((3, 3)) / 13.0
    weights[1, 1] = 5.0 / 13.0
    for i in range(1, x.shape[0] - 1):
        for j in range(1, x.shape[1] - 1):
            smooth[i, j] = np.tensordot(weights, x[i - 1:i + 2, j - 1:j + 2], axes=2)
    for factor in (0.05, 0.5, 0.95):
        out = _apply("sharpness", _float(levels), factor)
        np.testing.assert_allclose(out, np.clip(smooth + factor * (x - smooth), 0, 1),
                                   atol=1e-6)
        # PIL rounds the smoothed image (half a level) and then the blend (one level).
        pil = _pil(levels, lambda im, f=factor: ImageEnhance.Sharpness(im).enhance(f))
        np.testing.assert_allclose(out, pil, atol=1.51 / 255)
        assert np.mean(np.abs(out - pil)) < 0.5 / 255


def _luma(x):
    return x @ np.array([0.299, 0.587, 0.114])


def test_brightness_color_contrast_against_numpy():
    x = np.random.default_rng(2).random((5, 6, 3))
    image = tf.constant(x, tf.float32)
    gray = _luma(x)[..., None]
    np.testing.assert_allclose(_apply("brightness", image, 0.3), 0.3 * x, atol=1e-6)
    np.testing.assert_allclose(_apply("color", image, 0.2), gray + 0.2 * (x - gray), atol=1e-6)
    mean = _luma(x).mean()
    np.testing.assert_allclose(_apply("contrast", image, 0.6), mean + 0.6 * (x - mean),
                               atol=1e-6)
    np.testing.assert_array_equal(_apply("identity", image, 0.7), image.numpy())


def test_translate_by_whole_pixels():
    x = np.random.default_rng(3).random((8, 10, 3))
    image = tf.constant(x, tf.float32)
    right = np.full_like(x, 0.5)
    right[:, 2:] = x[:, :-2]
    np.testing.assert_allclose(_apply("translate_x", image, 2 / 10), right, atol=1e-6)
    up = np.full_like(x, 0.5)
    up[:-3] = x[3:]
    np.testing.assert_allclose(_apply("translate_y", image, -3 / 8), up, atol=1e-6)


@pytest.mark.parametrize("side", [6, 7])
def test_rotate_by_right_angles(side):
    x = np.random.default_rng(side).random((side, side, 3))
    image = tf.constant(x, tf.float32)
    np.testing.assert_allclose(_apply("rotate", image, 90.0), np.rot90(x), atol=1e-6)
    np.testing.assert_allclose(_apply("rotate", image, -90.0), np.rot90(x, -1), atol=1e-6)
    np.testing.assert_allclose(rand_augment.rotate(image, 180.0).numpy(), x[::-1, ::-1],
                               atol=1e-6)


def _affine_reference(x, matrix, shift=(0.0, 0.0)):
    """Nearest-neighbour affine map about the centre, and a mask of the pixels
    whose source lies near a rounding tie (float32 may round those either way)."""
    height, width = x.shape[:2]
    centre = np.array([(width - 1) / 2, (height - 1) / 2])
    ys, xs = np.mgrid[0:height, 0:width]
    points = np.stack([xs, ys], -1) - centre
    source = points @ np.array(matrix).T + centre - np.array(shift)
    near_tie = np.any(np.abs(source - np.floor(source) - 0.5) < 1e-3, axis=-1)
    rounded = np.floor(source + 0.5).astype(int)
    inside = ((rounded[..., 0] >= 0) & (rounded[..., 0] < width)
              & (rounded[..., 1] >= 0) & (rounded[..., 1] < height))
    out = np.full_like(x, 0.5)
    out[inside] = x[rounded[inside][:, 1], rounded[inside][:, 0]]
    return out, near_tie


@pytest.mark.parametrize("name, magnitude, matrix", [
    ("rotate", 30.0, ((math.cos(math.pi / 6), -0.5), (0.5, math.cos(math.pi / 6)))),
    ("shear_x", 0.3, ((1.0, 0.3), (0.0, 1.0))),
    ("shear_y", -0.15, ((1.0, 0.0), (-0.15, 1.0))),
])
def test_geometric_ops_against_numpy(name, magnitude, matrix):
    x = np.random.default_rng(4).random((9, 12, 3))
    out = _apply(name, tf.constant(x, tf.float32), magnitude)
    expected, near_tie = _affine_reference(x, matrix)
    assert near_tie.mean() < 0.1
    np.testing.assert_allclose(out[~near_tie], expected[~near_tie], atol=1e-6)
    assert np.mean(out == 0.5) > 0.05  # the uncovered corners are grey


def test_every_op_keeps_shape_and_range_at_both_ends_of_its_range():
    x = tf.constant(np.random.default_rng(5).random((11, 9, 3)), tf.float32)
    for policy in (PAPER, LIGHT):
        for index, op in enumerate(rand_augment.POLICY_OPS[policy]):
            for magnitude in (op.low, op.high):
                out = rand_augment.apply_op(x, tf.constant(index), tf.constant(
                    magnitude, tf.float32), policy).numpy()
                assert out.shape == (11, 9, 3) and out.dtype == np.float32, op
                assert out.min() >= 0.0 and out.max() <= 1.0, op


def _draws(function, count):
    """``function`` of the seeds [5, k], k < count, run inside tf.data (graph mode)."""
    seeds = tf.stack([tf.fill([count], tf.constant(5, tf.int64)),
                      tf.range(count, dtype=tf.int64)], axis=1)
    dataset = tf.data.Dataset.from_tensor_slices(seeds).map(function).batch(count)
    return tf.nest.map_structure(lambda t: t.numpy(), next(iter(dataset)))


@pytest.mark.parametrize("policy", [PAPER, LIGHT])
def test_ops_are_uniform_and_magnitudes_uniform_in_their_ranges(policy):
    ops = rand_augment.POLICY_OPS[policy]
    indices, magnitudes = _draws(lambda seed: rand_augment.sample_ops(seed, policy), 3000)
    assert indices.shape == magnitudes.shape == (3000, rand_augment.NUM_OPS)
    assert stats.chisquare(np.bincount(indices.ravel(), minlength=len(ops))).pvalue > P_MIN
    assert indices.min() == 0 and indices.max() == len(ops) - 1
    # The two ops of an image are drawn independently.
    assert np.mean(indices[:, 0] == indices[:, 1]) == pytest.approx(1 / len(ops), abs=0.02)
    units = []
    for index, op in enumerate(ops):
        drawn = magnitudes[indices == index]
        assert np.all(drawn >= op.low) and np.all(drawn <= op.high), op
        if op.integer:
            counts = np.bincount(drawn.astype(int) - int(op.low))
            assert len(counts) == op.high - op.low + 1 and np.all(drawn == np.round(drawn))
            assert stats.chisquare(counts).pvalue > P_MIN, op
        elif op.high > op.low:
            units.append((drawn - op.low) / (op.high - op.low))
    assert stats.kstest(np.concatenate(units), "uniform").pvalue > P_MIN


def test_posterize_draws_each_of_four_to_eight_bits():
    index, _ = _op(PAPER, "posterize")
    indices, magnitudes = _draws(lambda seed: rand_augment.sample_ops(seed, PAPER), 3000)
    assert set(magnitudes[indices == index]) == {4.0, 5.0, 6.0, 7.0, 8.0}


def test_cutout_window_size_and_centre():
    height, width, fraction = 20, 30, 0.5
    top, left, side = _draws(
        lambda seed: rand_augment.cutout_window([height, width, 3], seed, fraction), 3000)
    largest = round(fraction * height)
    assert side.min() == 0 and side.max() == largest
    # side = round(L * 20), L uniform in [0, 0.5): each of 1..9 has probability 1/10.
    counts = np.bincount(side, minlength=largest + 1)
    assert stats.chisquare(counts[1:largest]).pvalue > P_MIN
    assert counts[0] == pytest.approx(counts[1:largest].mean() / 2, rel=0.3)
    centre_row, centre_column = top + side // 2, left + side // 2
    assert centre_row.min() == 0 and centre_row.max() == height - 1
    assert stats.chisquare(np.bincount(centre_column, minlength=width)).pvalue > P_MIN


def test_cutout_greys_the_window_clipped_at_the_border():
    x = np.full((16, 12, 3), 0.2, np.float32)
    clipped = 0
    for k in range(40):
        out = rand_augment.cutout(tf.constant(x), _seed(k), 0.5).numpy()
        top, left, side = (int(v) for v in rand_augment.cutout_window([16, 12, 3], _seed(k), 0.5))
        expected = x.copy()
        expected[max(top, 0):max(top + side, 0), max(left, 0):max(left + side, 0)] = 0.5
        np.testing.assert_array_equal(out, expected)
        grey = np.argwhere(out[..., 0] == 0.5)
        if len(grey):
            rows, columns = np.ptp(grey, axis=0) + 1
            assert rows <= side and columns <= side and rows * columns == len(grey)
            clipped += (rows, columns) != (side, side)
    assert 0 < clipped < 40


@pytest.mark.parametrize("policy", [PAPER, LIGHT])
def test_strong_augment_is_its_ops_then_cutout(policy):
    x = tf.constant(np.random.default_rng(6).random((14, 14, 3)), tf.float32)
    for k in range(6):
        ops_seed, cutout_seed = rand_augment.strong_seeds(_seed(k))
        indices, magnitudes = rand_augment.sample_ops(ops_seed, policy)
        expected = x
        for step in range(rand_augment.NUM_OPS):
            expected = rand_augment.apply_op(expected, indices[step], magnitudes[step], policy)
        expected = rand_augment.cutout(expected, cutout_seed,
                                       rand_augment.CUTOUT_MAX_FRACTION[policy])
        np.testing.assert_array_equal(rand_augment.strong_augment(x, _seed(k), policy).numpy(),
                                      expected.numpy())


@pytest.mark.parametrize("policy", [PAPER, LIGHT])
def test_strong_augment_shape_range_and_determinism(policy):
    levels = _levels_image(28, 28)
    first = rand_augment.strong_augment(tf.constant(levels), _seed(1), policy).numpy()
    assert first.shape == (28, 28, 3) and first.dtype == np.float32
    assert first.min() >= 0.0 and first.max() <= 1.0
    np.testing.assert_array_equal(
        first, rand_augment.strong_augment(_float(levels), _seed(1), policy).numpy())
    # The pipeline's example seeds are int32: the same values, the same image.
    np.testing.assert_array_equal(first, rand_augment.strong_augment(
        tf.constant(levels), tf.constant([5, 1], tf.int32), policy).numpy())
    others = [rand_augment.strong_augment(tf.constant(levels), _seed(k), policy).numpy()
              for k in range(2, 6)]
    assert all(not np.array_equal(first, other) for other in others)


def test_strong_augment_in_parallel_tf_data_matches_eager():
    levels = tf.constant(_levels_image(16, 20))
    seeds = tf.constant([[9, k] for k in range(12)], tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((tf.range(12), seeds)).map(
        lambda i, seed: (i, rand_augment.strong_augment(levels, seed)),
        num_parallel_calls=4, deterministic=False)
    for index, image in dataset:
        assert image.shape == (16, 20, 3)
        np.testing.assert_array_equal(
            image.numpy(), rand_augment.strong_augment(levels, seeds[index]).numpy())


def test_strong_seeds_are_not_the_weak_views_seeds():
    seed = _seed(3)
    weak_seeds = tf.random.experimental.stateless_split(seed, num=8).numpy()
    strong = np.stack(rand_augment.strong_seeds(seed))
    assert not set(weak_seeds.ravel()) & set(strong.ravel())
    np.testing.assert_array_equal(weak.crop_seed(seed).numpy(), weak_seeds[0])


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown augmentation policy 'heavy'"):
        rand_augment.strong_augment(tf.zeros([8, 8, 3]), _seed(0), "heavy")


def _documented_ranges():
    """{policy: {op name: (low, high) or None}} read from docs/augmentation.md's table."""
    table = {PAPER: {}, LIGHT: {}}
    with open(os.path.join(ROOT, "docs", "augmentation.md")) as f:
        page = f.read()
    section = page.split("### RandAugment's ops and magnitudes\n", 1)[1]
    rows = next(part for part in section.split("\n\n") if part.startswith("| op ")).splitlines()
    assert len(rows) == 15
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("| ").split("|")]
        names = [cells[0]] if "/" not in cells[0] else [
            cells[0][:-len("_x/y")] + suffix for suffix in ("_x", "_y")]
        for policy, cell in ((PAPER, cells[2]), (LIGHT, cells[3])):
            numbers = [float(n) for n in cell.strip("[]{}").split(", ") if n[-1].isdigit()]
            for name in names:
                if cell != "left out":
                    table[policy][name] = tuple(numbers) or None
    return table


def test_documented_table_matches_the_policies():
    for policy, documented in _documented_ranges().items():
        assert documented.pop("cutout") == (0.0, rand_augment.CUTOUT_MAX_FRACTION[policy])
        ops = {op.name: (op.low, op.high) if op.high > op.low else None
               for op in rand_augment.POLICY_OPS[policy]}
        assert documented == ops, policy
