"""ResNet-v2 trunk: parameter counts, feature-map sizes, layout details."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models.resnet_v2 import FixedPaddingConv2D, ResNetV2
from tests.models.helpers import random_images


def hand_counted_trunk_params(blocks_per_stage, bottleneck, base=64,
                              stem_kernel=7):
    """(total, trainable) parameters of a TF-official ResNet-v2 trunk.

    Written from the architecture, not from the code under test: bias-free
    convs; every batch norm has gamma, beta (trainable) and moving mean and
    variance (not trainable); a 1x1 projection in the first block of every
    stage; a final batch norm.
    """
    conv = stem_kernel * stem_kernel * 3 * base
    norm_channels = 0
    in_channels = base
    for stage, num_blocks in enumerate(blocks_per_stage):
        filters = base * 2**stage
        out_channels = 4 * filters if bottleneck else filters
        for index in range(num_blocks):
            norm_channels += in_channels  # pre-activation
            if index == 0:
                conv += in_channels * out_channels
            if bottleneck:
                conv += (in_channels * filters + 9 * filters * filters
                         + filters * out_channels)
                norm_channels += 2 * filters
            else:
                conv += 9 * in_channels * filters + 9 * filters * filters
                norm_channels += filters
            in_channels = out_channels
    norm_channels += in_channels  # final batch norm
    return conv + 4 * norm_channels, conv + 2 * norm_channels


def built_trunk(blocks_per_stage, bottleneck, size=32, **kwargs):
    # Parameter counts do not depend on the input size; 32 px keeps the
    # forward pass that creates the weights cheap.
    trunk = ResNetV2(blocks_per_stage, bottleneck, **kwargs)
    trunk(tf.zeros([1, size, size, 3]))
    return trunk


def trainable_count(layer):
    return sum(int(np.prod(v.shape)) for v in layer.trainable_weights)


def test_resnet18_full_width_parameter_count():
    trunk = built_trunk((2, 2, 2, 2), bottleneck=False)
    total, trainable = hand_counted_trunk_params((2, 2, 2, 2), False)
    # torchvision's ResNet-18 trunk has 11,166,912 conv weights; TF official
    # v2 adds a 64x64 projection in stage 1 (4,096), and has 3,904
    # batch-norm channels (x4 parameters each).
    assert total == 11_166_912 + 4_096 + 4 * 3_904 == 11_186_624
    assert trainable == 11_178_816
    assert trunk.count_params() == total
    assert trainable_count(trunk) == trainable
    assert trunk.feature_dim == 512


# Slow: 23.5M weights made. make test keeps the hand count against the code for bottleneck
# blocks at width 1/8, for the full-width ResNet-18 (the ImageNet stem, base 64), and the
# full-width ResNet-50's hand count against Keras's ResNet50V2.
@pytest.mark.slow
def test_resnet50_full_width_parameter_count():
    trunk = built_trunk((3, 4, 6, 3), bottleneck=True)
    total, trainable = hand_counted_trunk_params((3, 4, 6, 3), True)
    assert total == 23_545_792
    assert trunk.count_params() == total
    assert trainable_count(trunk) == trainable
    assert trunk.feature_dim == 2048


def test_resnet50_matches_keras_applications_up_to_conv_biases():
    # Keras's ResNet50V2 has the same conv kernels and batch norms, plus
    # biases on its stem conv, shortcut projections and each block's last
    # 1x1 conv; TF official (and this trunk) has no conv biases.
    reference = keras.applications.ResNet50V2(
        weights=None, include_top=False, input_shape=(32, 32, 3))
    conv_biases = sum(int(layer.bias.shape[0]) for layer in reference.layers
                      if isinstance(layer, keras.layers.Conv2D)
                      and layer.use_bias)
    assert reference.count_params() == 23_564_800
    assert conv_biases == 64 + (256 + 512 + 1024 + 2048) + (
        3 * 256 + 4 * 512 + 6 * 1024 + 3 * 2048)
    assert reference.count_params() - conv_biases == 23_545_792


@pytest.mark.parametrize("bottleneck", [False, True])
def test_narrow_tiny_trunk_parameter_count(bottleneck):
    trunk = built_trunk((1, 1), bottleneck, width=0.125, small_inputs=True)
    total, trainable = hand_counted_trunk_params(
        (1, 1), bottleneck, base=8, stem_kernel=3)
    assert trunk.count_params() == total
    assert trainable_count(trunk) == trainable
    assert trunk.feature_dim == (4 if bottleneck else 1) * 16


def test_cifar_stem_at_32_px_ends_at_4x4():
    trunk = ResNetV2((2, 2, 2, 2), bottleneck=False, width=0.125,
                     small_inputs=True)
    feature_map = trunk.feature_map(random_images(2, size=32))
    assert feature_map.shape == (2, 4, 4, 64)
    assert trunk.output_stride == 8


def test_imagenet_stem_at_224_px_ends_at_7x7():
    trunk = ResNetV2((2, 2, 2, 2), bottleneck=False, width=0.125)
    feature_map = trunk.feature_map(random_images(1, size=224))
    assert feature_map.shape == (1, 7, 7, 64)
    assert trunk.output_stride == 32


def test_pooled_features_are_the_mean_of_the_final_feature_map():
    trunk = ResNetV2((1, 1, 1, 1), bottleneck=True, width=0.125,
                     small_inputs=True)
    images = random_images(3)
    features = trunk(images)
    assert features.shape == (3, 4 * 8 * 8) and features.dtype == tf.float32
    np.testing.assert_allclose(
        features, tf.reduce_mean(trunk.feature_map(images), axis=[1, 2]),
        rtol=1e-6, atol=1e-6)
    # The trunk ends with a ReLU.
    assert np.all(trunk.feature_map(images).numpy() >= 0)


def test_width_multiplier_scales_every_stage():
    trunk = ResNetV2((1, 1, 1, 1), bottleneck=False, width=0.25,
                     small_inputs=True)
    trunk(random_images(1))
    assert [block.conv2.kernel.shape[-1] for block in trunk.blocks] == [
        16, 32, 64, 128]
    assert trunk.stem_conv.kernel.shape == (3, 3, 3, 16)


def test_stride_two_convs_use_fixed_padding():
    # A 3x3 stride-2 conv pads one pixel on each side whatever the input
    # size (TF official), where Keras "same" would pad 0 before and 1 after
    # an even-sized input.
    conv = FixedPaddingConv2D(1, 3, strides=2)
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    conv(image)
    conv.kernel.assign(np.ones((3, 3, 1, 1), np.float32))
    output = conv(image).numpy()[0, :, :, 0]
    padded = np.pad(image[0, :, :, 0], 1)
    expected = np.array([[padded[r:r + 3, c:c + 3].sum() for c in (0, 2)]
                         for r in (0, 2)])
    np.testing.assert_array_equal(output, expected)
    assert not conv.conv.use_bias


def test_batch_norm_settings_follow_the_release():
    trunk = built_trunk((1, 1, 1, 1), False, size=16, width=0.125,
                        small_inputs=True, sync_batch_norm=True)
    norms = trunk.batch_norm_layers()
    assert len(norms) == 2 * 4 + 1
    for norm in norms:
        assert norm.momentum == pytest.approx(0.997)
        assert norm.epsilon == pytest.approx(1e-5)
        assert norm.synchronized


def test_stem_has_no_batch_norm_and_stage_one_projects():
    trunk = built_trunk((2, 1), False, size=16, width=0.125,
                        small_inputs=True)
    first, second, third = trunk.blocks
    assert first.shortcut_conv is not None  # even though shapes match
    assert second.shortcut_conv is None
    assert third.shortcut_conv is not None
    assert first.conv1.strides == 1 and third.conv1.strides == 2


@pytest.mark.parametrize("blocks_per_stage",
                         [[], [2, 0], (1.5, 2), "2222", None])
def test_invalid_blocks_per_stage(blocks_per_stage):
    with pytest.raises(ConfigError, match="blocks per stage"):
        ResNetV2(blocks_per_stage, bottleneck=False)


@pytest.mark.parametrize("width", [0, -1.0, float("nan"), "wide"])
def test_invalid_width(width):
    with pytest.raises(ConfigError, match="width"):
        ResNetV2((1, 1), bottleneck=False, width=width)
