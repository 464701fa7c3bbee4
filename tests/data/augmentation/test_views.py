"""Views of a training example: one decode, own crops and seeds, view 0 the
one-view image, the strong view RandAugment of the un-normalised weak one."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.augmentation import rand_augment, views, weak
from llp_tf.data.config import LIGHT, PAPER
from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import epoch_order, input_fns
from llp_tf.errors import ConfigError
from tests.data.helpers import all_labelled

SIZE = 8
SEED, EPOCH = 3, 1
THREE_VIEWS = {"image": "weak", "other": "weak", "strong": "strong"}


def _epoch(source, augmentation=PAPER, **kwargs):
    """One epoch of 1-example batches, every field concatenated."""
    input_fn = input_fns.make_train_input_fn(
        source, 1, SIZE, SEED, EPOCH, augmentation=augmentation,
        labelled_index=all_labelled(source), **kwargs)
    with data_errors():
        batches = list(input_fn(None).as_numpy_iterator())
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def _raw_images(source):
    with data_errors():
        return {int(e["index"]): e["image"] for e in source.raw_dataset("train").as_numpy_iterator()}


def test_views_of_one_decode_have_their_shapes_and_differ(folder_source):
    out = _epoch(folder_source, views=THREE_VIEWS)
    n = folder_source.info.num_train
    assert set(out) == {"image", "other", "strong", "label", "index"}
    for key in THREE_VIEWS:
        assert out[key].shape == (n, SIZE, SIZE, 3) and out[key].dtype == np.float32
    assert out["index"].dtype == np.int64 and out["label"].dtype == np.int64
    for k in range(n):
        assert not np.array_equal(out["image"][k], out["other"][k])
        assert not np.array_equal(out["image"][k], out["strong"][k])
    # View 0 is the one-view pipeline's image, to the bit.
    one_view = _epoch(folder_source)
    np.testing.assert_array_equal(out["index"], one_view["index"])
    np.testing.assert_array_equal(out["image"], one_view["image"])


def _example_seed(index):
    """The seed of training example ``index`` in pass 0 of epoch EPOCH (folded
    in as int64, as the pipeline's records hold them)."""
    fold = tf.random.experimental.stateless_fold_in
    return fold(fold(epoch_order.augment_seed(SEED, EPOCH), tf.constant(0, tf.int64)),
                tf.constant(index, tf.int64))


# make test keeps "paper": "light" is its crop and a subset of its strong ops in narrower
# ranges, through the same code; make test-all runs it too.
@pytest.mark.parametrize("augmentation", [PAPER, pytest.param(LIGHT, marks=pytest.mark.slow)])
def test_views_are_their_policies_of_their_own_crops(folder_source, augmentation):
    """Each view from the whole decoded image: weak = the run's augmentation of
    its crop; strong = normalize(strong_augment(the un-normalised weak view))."""
    out = _epoch(folder_source, augmentation, views={"weak": "weak", "strong": "strong"})
    raw = _raw_images(folder_source)
    for k, index in enumerate(out["index"][:8]):
        image = tf.constant(raw[int(index)])
        weak_seed, strong_seed = views.view_seeds(_example_seed(index), 2)
        # To float rounding: where the resized crop's shape is static, graph
        # optimisation may fold normalize's scale into to_unit's (1 ulp).
        np.testing.assert_allclose(
            out["weak"][k], weak.train_augment(image, weak_seed, SIZE, augmentation).numpy(),
            atol=1e-6)
        crop = weak.crop_window(tf.shape(image), weak.crop_seed(strong_seed))
        unnormalised = weak.train_augment_crop_unnormalised(
            tf.image.crop_to_bounding_box(image, *crop), strong_seed, SIZE, augmentation)
        strong = weak.normalize(rand_augment.strong_augment(unnormalised, strong_seed,
                                                               augmentation))
        np.testing.assert_allclose(out["strong"][k], strong.numpy(), atol=1e-6)


def test_views_cut_from_the_decoded_union_equal_those_of_a_full_decode(folder_source):
    two_views = {"image": "weak", "other": "weak"}
    fused = _epoch(folder_source, LIGHT, views=two_views)
    whole = _epoch(folder_source, LIGHT, views=two_views, fused_crop=False)
    for key in two_views:
        np.testing.assert_array_equal(fused[key], whole[key])


def test_view_settings_are_checked():
    assert views.check_views({"a": "strong", "b": "weak"}) == {"a": "strong", "b": "weak"}
    with pytest.raises(ConfigError, match="Unknown view policy 'mild' of view 'a'"):
        views.check_views({"a": "mild"})
    with pytest.raises(ConfigError, match="cannot be named 'label'"):
        views.check_views({"label": "weak"})
    with pytest.raises(ConfigError, match="views must map element keys"):
        views.check_views({})


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    """An image folder of 256 training images (JPEG and PNG, some grayscale)."""
    from llp_tf.data.sources.registry import load_source
    from tests.data.helpers import write_image_folder

    root = tmp_path_factory.mktemp("many")
    write_image_folder(str(root / "train"), {"a": 128, "b": 128}, size=(22, 19),
                       grayscale_every=7)
    return load_source(f"folder:{root}")


def _batches(source, augment_on, views_, augmentation):
    input_fn = input_fns.make_train_input_fn(
        source, 32, SIZE, SEED, EPOCH, augmentation=augmentation, views=views_,
        labelled_index=all_labelled(source), augment_on=augment_on)
    with data_errors():
        return list(input_fn(None))


# make test keeps "paper": "light" is its crop and a subset of its strong ops in narrower
# ranges, through the same code; make test-all runs it too.
@pytest.mark.parametrize("augmentation", [PAPER, pytest.param(LIGHT, marks=pytest.mark.slow)])
def test_device_views_are_the_host_views(many_images, augmentation):
    """Every view of 256 examples: shipped as uint8 crops and choices, then
    finished on the device (`views.finish_views`), equals the host path's image."""
    views_ = {"image": "weak", "other": "weak", "strong": "strong"}
    host = _batches(many_images, "host", views_, augmentation)
    device = _batches(many_images, "device", views_, augmentation)
    finish = tf.function(lambda batch: views.finish_views(batch, views_, augmentation))
    assert len(host) == len(device) == 8
    for want, shipped in zip(host, device):
        assert shipped["image"].dtype == tf.uint8 and set(shipped["augment"]) == set(views_)
        got = finish(shipped)
        assert set(got) == set(want)
        np.testing.assert_array_equal(got["index"], want["index"])
        for key in views_:
            np.testing.assert_allclose(got[key], want[key], atol=1e-4, err_msg=key)


def test_augment_on_is_checked(folder_source):
    with pytest.raises(ConfigError, match="augment_on must be one of"):
        input_fns.make_train_input_fn(folder_source, 1, SIZE, SEED, EPOCH, augment_on="gpu",
                                     labelled_index=all_labelled(folder_source))
