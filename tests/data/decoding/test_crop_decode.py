"""Fused crop-decode (llp_tf.data.decoding.crop_decode): same windows and pixels as the
full decode followed by the crop, and the training pipeline unchanged by it."""

import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import weak
from llp_tf.data.decoding import crop_decode, decode
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns
from llp_tf.data.sources.registry import load_source
from llp_tf.errors import DataError
from tests.data.helpers import all_labelled, example_bytes, random_image, write_shards

SEEDS = 60


def _photo(rng, height, width, channels=3):
    """uint8 [H, W, C]: smooth blobs plus noise, so the JPEG has real detail."""
    noise = rng.normal(0.0, 10.0, (height, width, channels))
    return np.clip(random_image(rng, height, width, channels) + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def jpegs():
    """JPEG bytes at quality 95: colour 400x350 and 333x500 (4:2:0 chroma),
    an odd 401x353, and a grayscale 375x500."""
    rng = np.random.default_rng(0)
    shapes = [(400, 350, 3), (333, 500, 3), (401, 353, 3), (375, 500, 1)]
    return [tf.io.encode_jpeg(_photo(rng, *shape), quality=95).numpy() for shape in shapes]


# `weak.crop_window` as a graph: the same windows, at a fraction of its many eager ops' time
# (traced once per area range; the tests call it thousands of times).
_crop_window = tf.function(weak.crop_window)


def _window_fn(seed, area_range=weak.CROP_AREA_RANGE):
    return lambda shape: _crop_window(tf.cast(shape, tf.int32), tf.constant([seed, 7]),
                                      area_range)


@pytest.fixture(scope="module")
def decoded(jpegs):
    """The full decode of each of `jpegs`, made once."""
    return [decode.decode_image(encoded) for encoded in jpegs]


def _full_then_crop(encoded, window_fn):
    return crop_decode.crop_image(decode.decode_image(encoded), window_fn)


def test_window_is_crop_window_of_the_decoded_shape(jpegs, decoded):
    for encoded, image in zip(jpegs, decoded):
        decoded_shape = tf.shape(image)
        for seed in range(SEEDS):
            seen = []

            def recording(shape, seed=seed):
                window = _window_fn(seed)(shape)
                seen.append([int(v) for v in window])
                return window

            crop = crop_decode.decode_jpeg_window(encoded, recording)
            want = [int(v) for v in _window_fn(seed)(decoded_shape)]
            assert seen == [want]
            assert crop.shape == (want[2], want[3], 3)


@pytest.fixture(scope="module")
def full_crops(jpegs, decoded):
    """[(JPEG bytes, crop seed, area range, that window of the full decode as int32)]: SEEDS
    windows of each of `jpegs`, at the release's areas and at small ones (0.05-0.2), cropped
    once for the tests that compare with them."""
    crops = []
    for encoded, image in zip(jpegs, decoded):
        for seed in range(SEEDS):
            area_range = (0.05, 0.2) if seed % 2 else weak.CROP_AREA_RANGE
            window = crop_decode.crop_image(image, _window_fn(seed, area_range))
            crops.append((encoded, tf.constant([seed, 7]), area_range,
                          window.numpy().astype(np.int32)))
    return crops


def _differences(full_crops, load):
    """(max, mean) |load - full decode then crop| in uint8 levels over `full_crops`' windows;
    ``load(encoded, window_fn)`` runs as a graph, as in the pipeline (traced once per area
    range, not once per window)."""
    graph = tf.function(lambda encoded, seed, area_range: load(
        encoded, lambda shape: weak.crop_window(shape, seed, area_range)))
    largest, total, count = 0, 0.0, 0
    for encoded, seed, area_range, want in full_crops:
        got = graph(encoded, seed, area_range).numpy().astype(np.int32)
        assert got.shape == want.shape and got.shape[-1] == 3
        difference = np.abs(got - want)
        largest = max(largest, int(difference.max()))
        total, count = total + float(difference.sum()), count + difference.size
    return largest, total / count


def test_fused_pixels_equal_the_full_decode(full_crops):
    # Tolerance 0: with the 4-pixel margin the window's pixels are the full
    # decode's exactly (measured: max 0, mean 0 levels).
    largest, mean = _differences(full_crops, crop_decode.decode_window)
    assert (largest, mean) == (0, 0.0)


def test_without_the_margin_only_the_window_border_differs(full_crops):
    # Why the margin: a tight partial decode upsamples chroma at its border
    # without neighbours (measured here: max 38 levels, mean 0.009).
    largest, mean = _differences(
        full_crops, lambda e, w: crop_decode.decode_jpeg_window(e, w, margin=0))
    assert largest > 0
    assert mean < 0.05


def test_one_pixel_of_margin_is_enough_for_420_chroma(full_crops):
    # Why JPEG_MARGIN = 4 is safe: with 4:2:0 chroma (2-pixel samples) one
    # pixel already gives identical pixels; 4 covers 4-pixel samples (4:1:1).
    assert crop_decode.JPEG_MARGIN >= 4
    largest, _ = _differences(full_crops,
                              lambda e, w: crop_decode.decode_jpeg_window(e, w, margin=1))
    assert largest == 0


def test_grayscale_jpeg_gives_three_equal_channels(jpegs):
    crop = crop_decode.decode_window(jpegs[-1], _window_fn(3)).numpy()
    assert crop.shape[-1] == 3
    np.testing.assert_array_equal(crop[..., 0], crop[..., 2])


def test_png_falls_back_to_the_full_decode_exactly():
    rng = np.random.default_rng(1)
    for channels in (3, 1):
        png = tf.io.encode_png(_photo(rng, 120, 90, channels)).numpy()
        for seed in range(10):
            np.testing.assert_array_equal(crop_decode.decode_window(png, _window_fn(seed)),
                                          _full_then_crop(png, _window_fn(seed)))


def test_train_augment_is_train_augment_crop_of_its_window():
    image = tf.constant(_photo(np.random.default_rng(2), 60, 50))
    seed = tf.constant([5, 9], tf.int64)
    for policy, area in (("paper", 0.2), ("light", 0.6)):
        window = weak.crop_window(tf.shape(image), weak.crop_seed(seed), (area, 1.0))
        crop = tf.image.crop_to_bounding_box(image, *window)
        np.testing.assert_array_equal(
            weak.train_augment(image, seed, 16, policy, area),
            weak.train_augment_crop(crop, seed, 16, policy))


@pytest.fixture(scope="module")
def jpeg_records(tmp_path_factory):
    """A TFRecord set of 10 JPEGs (one grayscale) and 2 PNGs, 150x130."""
    rng = np.random.default_rng(3)
    root = str(tmp_path_factory.mktemp("jpeg_records"))
    records = []
    for index in range(12):
        image = _photo(rng, 150, 130, 1 if index == 4 else 3)
        data = (tf.io.encode_png(image) if index % 6 == 5 else
                tf.io.encode_jpeg(image, quality=95)).numpy()
        records.append(example_bytes(data, index % 3, index))
    write_shards(root, "train", records, 2)
    return root


def _elements(source, fused):
    dataset = input_fns.make_train_input_fn(source, 4, 32, seed=3, epoch=1,
                                           fused_crop=fused,
                                           labelled_index=all_labelled(source))(None)
    with data_errors():
        return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def test_training_pipeline_fused_equals_full(jpeg_records):
    source = load_source(f"tfrecord:{jpeg_records}")
    fused, full = _elements(source, True), _elements(source, False)
    assert len(fused) == len(full) == 3
    for got, want in zip(fused, full):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key].shape == want[key].shape and got[key].dtype == want[key].dtype
        np.testing.assert_array_equal(got["label"], want["label"])
        np.testing.assert_array_equal(got["index"], want["index"])
        np.testing.assert_allclose(got["image"], want["image"], atol=1e-6)


@pytest.mark.parametrize("damage", ["truncated_header", "garbage_body"])
def test_corrupt_jpeg_in_a_folder_names_the_file(tmp_path, jpegs, damage):
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
        for i in range(2):
            (tmp_path / name / f"{i}.jpg").write_bytes(jpegs[i])
    bad = tmp_path / "b" / "1.jpg"
    good = jpegs[1]
    bad.write_bytes(good[:40] if damage == "truncated_header"
                    else good[:400] + b"\x00" * (len(good) - 400))
    source = load_source(f"folder:{tmp_path}")
    with pytest.raises(DataError,
                       match=f"image of file {bad} \\(train example 3\\): .*not a JPEG, PNG"):
        _elements(source, True)


def test_jpeg_cut_short_fails_once_a_window_reaches_the_missing_rows(jpegs):
    cut = jpegs[0][:len(jpegs[0]) // 2]
    top = crop_decode.decode_window(cut, lambda shape: (0, 0, 40, 40))
    np.testing.assert_array_equal(top, decode.decode_image(jpegs[0])[:40, :40])
    with pytest.raises(tf.errors.InvalidArgumentError):
        crop_decode.decode_window(cut, lambda shape: (shape[0] - 40, 0, 40, 40))


def test_corrupt_jpeg_in_a_shard_names_the_shard_and_record(tmp_path, jpegs):
    records = [example_bytes(jpegs[i % 2] if i != 2 else b"\xff\xd8\xff" + b"x" * 300,
                             i % 2, i) for i in range(4)]
    paths = write_shards(str(tmp_path), "train", records, 1)
    source = load_source(f"tfrecord:{tmp_path}")
    with pytest.raises(DataError, match=f"shard {paths[0]}, record 2"):
        _elements(source, True)
