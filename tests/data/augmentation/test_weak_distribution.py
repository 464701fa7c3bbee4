"""The random choices the host draws (`weak.crop_window`,
`weak.draw_pixel_params`) against the release's recipe
(../shared/llp-reference.md, "Augmentation"), with the seeds the input
pipeline gives its examples. Statistical tests at fixed seeds: each compares
a sample of N draws with the recipe's distribution and fails below P_MIN."""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from llp_tf.data.augmentation import weak
from llp_tf.data.pipeline import epoch_order

# The recipe, written out here rather than read from `weak`.
AREA = (0.2, 1.0)
ASPECT = (3 / 4, 4 / 3)
GRAYSCALE_RATE = 0.2
FACTORS = (0.6, 1.4)
HUE = (-0.4, 0.4)
FLIP_RATE = 0.5

N = 4800
# A correct sampler fails a test at this level once in 10,000 seed sets.
P_MIN = 1e-4


def _example_seeds(count):
    """int [count, 2]: the examples' seeds of run seed 0, epoch 0, first pass,
    as the input pipeline folds them (pass, then example index)."""
    pass_seed = tf.random.experimental.stateless_fold_in(epoch_order.augment_seed(0, 0), 0)
    return tf.stack([tf.random.experimental.stateless_fold_in(pass_seed, k)
                     for k in range(count)])


@pytest.fixture(scope="module")
def seeds():
    return _example_seeds(N)


@pytest.fixture(scope="module")
def pixel_params(seeds):
    draws = tf.data.Dataset.from_tensor_slices(seeds).map(weak.draw_pixel_params)
    return {key: value.numpy() for key, value in next(iter(draws.batch(N))).items()}


def _binomial_p(successes, trials, rate):
    return stats.binomtest(int(successes), trials, rate).pvalue


def test_grayscale_and_flip_rates(pixel_params):
    assert _binomial_p(pixel_params["grayscale"].sum(), N, GRAYSCALE_RATE) > P_MIN
    assert _binomial_p(pixel_params["flip"].sum(), N, FLIP_RATE) > P_MIN
    # Independent decisions: grayscale is as frequent among flipped examples.
    flipped = pixel_params["flip"]
    assert _binomial_p(pixel_params["grayscale"][flipped].sum(), flipped.sum(),
                       GRAYSCALE_RATE) > P_MIN


def test_jitter_factors_and_hue_are_uniform(pixel_params):
    factors = pixel_params["factors"]
    assert factors.shape == (N, 3)
    for column in factors.T:
        assert stats.kstest(column, stats.uniform(FACTORS[0], FACTORS[1] - FACTORS[0]).cdf
                            ).pvalue > P_MIN
    assert stats.kstest(pixel_params["hue"], stats.uniform(HUE[0], HUE[1] - HUE[0]).cdf
                        ).pvalue > P_MIN
    # The three factors and the hue are drawn apart: uncorrelated.
    correlations = np.corrcoef(np.column_stack([factors, pixel_params["hue"]]).T)
    assert np.abs(correlations[np.triu_indices(4, 1)]).max() < 4 / math.sqrt(N)


def test_order_is_uniform_over_the_24_permutations(pixel_params):
    orders = [tuple(row) for row in pixel_params["order"]]
    permutations = list(itertools.permutations(range(4)))
    assert set(orders) <= set(permutations)
    counts = [orders.count(permutation) for permutation in permutations]
    assert stats.chisquare(counts).pvalue > P_MIN


def _fitting_area_cdf(area):
    """CDF of the area fraction of a box drawn with area uniform in AREA and
    log-aspect uniform in log(ASPECT), given that it fits a square image
    (aspect and 1 / aspect at most 1 / area)."""
    half_range = math.log(ASPECT[1])
    corner = math.exp(-half_range)

    def mass(a):  # integral from AREA[0] to a of min(half_range, -ln t) dt
        below = (np.minimum(a, corner) - AREA[0]) * half_range
        top = np.clip(a, corner, 1.0)
        return below + (top - top * np.log(top)) - (corner - corner * math.log(corner))

    return mass(np.asarray(area)) / mass(1.0)


def _fitting_log_aspect_cdf(log_aspect):
    """CDF of the log-aspect of the same boxes: density proportional to
    exp(-|l|) - AREA[0] on log(ASPECT)."""
    grid = np.linspace(math.log(ASPECT[0]), math.log(ASPECT[1]), 20001)
    density = np.exp(-np.abs(grid)) - AREA[0]
    cumulative = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2)])
    return np.interp(log_aspect, grid, cumulative / cumulative[-1])


def test_crop_boxes_follow_the_recipe(seeds):
    side = 2000  # large enough that whole-pixel boxes barely move area and ratio
    windows = tf.data.Dataset.from_tensor_slices(seeds).map(
        lambda seed: tf.stack(weak.crop_window([side, side, 3], weak.crop_seed(seed))))
    top, left, height, width = next(iter(windows.batch(N))).numpy().T.astype(np.float64)
    assert (top >= 0).all() and (top + height <= side).all()
    assert (left >= 0).all() and (left + width <= side).all()
    assert stats.kstest(height * width / side ** 2, _fitting_area_cdf).pvalue > P_MIN
    assert stats.kstest(np.log(width / height), _fitting_log_aspect_cdf).pvalue > P_MIN
    # Positions uniform over the places the box fits: a uniform offset in
    # [0, 1) spreads each whole-pixel position over its own unit interval.
    spread = np.random.default_rng(0).random((2, len(top)))
    for start, extent, offset in ((top, height, spread[0]), (left, width, spread[1])):
        assert stats.kstest((start + offset) / (side - extent + 1), "uniform").pvalue > P_MIN
