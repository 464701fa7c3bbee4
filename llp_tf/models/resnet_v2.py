"""Pre-activation ResNet trunks (ResNet-v2; He et al. 2016), laid out as TF official
`resnet_model.py` (v2), the network the LLP release trains: a bias-free stem conv (7x7/2 and
a 3x3/2 max-pool; 3x3/1 without pool for 28-32 px), stages of ``x + F(relu(bn(x)))`` blocks
whose first strides and projects the shortcut, a final batch norm and ReLU, global average
pooling. Strided convs use TF official's fixed padding, not Keras's "same". Every layer class is
registered with Keras as "llp_tf>NAME" and has a config, so a saved model rebuilds it."""

import math
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.models.batch_norm import BatchNormalization, batch_norm
from llp_tf.models.config import BATCH_NORM_EPSILON, BATCH_NORM_MOMENTUM
from llp_tf.tensor_types import FloatTensor

BASE_FILTERS = 64

BOTTLENECK_EXPANSION = 4


def _conv_initializer():
    # TF1 `tf.variance_scaling_initializer()` defaults, as the release: fan-in, truncated normal.
    return keras.initializers.VarianceScaling(
        scale=1.0, mode="fan_in", distribution="truncated_normal")


@keras.saving.register_keras_serializable(package="llp_tf")
class FixedPaddingConv2D(keras.layers.Layer):
    """Bias-free 2-D convolution with input-size-independent padding: float [B, H, W, C_in] ->
    [B, ceil(H / s), ceil(W / s), filters] for odd kernels."""

    def __init__(self, filters: int, kernel_size: int, strides: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.strides = int(strides)
        self.conv = keras.layers.Conv2D(
            filters, self.kernel_size, strides=self.strides,
            padding="same" if self.strides == 1 else "valid",
            use_bias=False, kernel_initializer=_conv_initializer(),
            name="conv")

    @property
    def kernel(self) -> keras.Variable:
        """The conv kernel, float32 [k, k, C_in, filters]."""
        return self.conv.kernel

    def call(self, inputs: FloatTensor) -> FloatTensor:
        if self.strides > 1:
            pad_total = self.kernel_size - 1
            pad_before = pad_total // 2
            pad_after = pad_total - pad_before
            inputs = tf.pad(inputs, [[0, 0], [pad_before, pad_after],
                                     [pad_before, pad_after], [0, 0]])
        return self.conv(inputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": self.kernel_size, "strides": self.strides}


class _PreActivationBlock(keras.layers.Layer):
    """Shared plumbing of the two block types (layers as attributes, never in lists)."""

    _residual_conv_names = ()
    _residual_norm_names = ()

    def __init__(self, output_filters: int, strides: int, project_shortcut: bool,
                 sync_batch_norm: bool, batch_norm_momentum: float,
                 batch_norm_epsilon: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._block_settings = {"strides": int(strides),
                                "project_shortcut": bool(project_shortcut),
                                "sync_batch_norm": bool(sync_batch_norm),
                                "batch_norm_momentum": float(batch_norm_momentum),
                                "batch_norm_epsilon": float(batch_norm_epsilon)}
        self._norm_settings = (sync_batch_norm, batch_norm_momentum,
                               batch_norm_epsilon)
        self.preactivation_bn = self._make_norm("preactivation_bn")
        self.shortcut_conv = (
            FixedPaddingConv2D(output_filters, 1, strides,
                               name="shortcut_conv")
            if project_shortcut else None)

    def _make_norm(self, name):
        return batch_norm(name, *self._norm_settings)

    def batch_norm_layers(self) -> list[BatchNormalization]:
        """The block's `keras.layers.BatchNormalization` layers."""
        return [self.preactivation_bn] + [
            getattr(self, name) for name in self._residual_norm_names]

    def conv_layers(self) -> list[FixedPaddingConv2D]:
        """The block's `FixedPaddingConv2D` layers (shortcut first if any)."""
        shortcut = [self.shortcut_conv] if self.shortcut_conv else []
        return shortcut + [
            getattr(self, name) for name in self._residual_conv_names]

    def call(self, inputs: FloatTensor, training: bool = False) -> FloatTensor:
        preactivated = tf.nn.relu(
            self.preactivation_bn(inputs, training=training))
        # The projection reads the pre-activated input (TF official v2).
        shortcut = (self.shortcut_conv(preactivated)
                    if self.shortcut_conv is not None else inputs)
        return shortcut + self._residual(preactivated, training)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "filters": self.filters, **self._block_settings}


@keras.saving.register_keras_serializable(package="llp_tf")
class PreActivationBasicBlock(_PreActivationBlock):
    """bn-relu-conv3x3(stride)-bn-relu-conv3x3 plus shortcut:
    [B, H, W, C_in] -> [B, H / s, W / s, filters]."""

    _residual_conv_names = ("conv1", "conv2")
    _residual_norm_names = ("bn2",)

    def __init__(self, filters: int, strides: int = 1, project_shortcut: bool = False,
                 sync_batch_norm: bool = False,
                 batch_norm_momentum: float = BATCH_NORM_MOMENTUM,
                 batch_norm_epsilon: float = BATCH_NORM_EPSILON, **kwargs: Any) -> None:
        super().__init__(filters, strides, project_shortcut, sync_batch_norm,
                         batch_norm_momentum, batch_norm_epsilon, **kwargs)
        self.filters = int(filters)
        self.conv1 = FixedPaddingConv2D(filters, 3, strides, name="conv1")
        self.bn2 = self._make_norm("bn2")
        self.conv2 = FixedPaddingConv2D(filters, 3, 1, name="conv2")

    def _residual(self, preactivated, training):
        x = self.conv1(preactivated)
        x = tf.nn.relu(self.bn2(x, training=training))
        return self.conv2(x)


@keras.saving.register_keras_serializable(package="llp_tf")
class PreActivationBottleneckBlock(_PreActivationBlock):
    """bn-relu-conv1x1-bn-relu-conv3x3(stride)-bn-relu-conv1x1 plus shortcut:
    [B, H, W, C_in] -> [B, H / s, W / s, 4 * filters]."""

    _residual_conv_names = ("conv1", "conv2", "conv3")
    _residual_norm_names = ("bn2", "bn3")

    def __init__(self, filters: int, strides: int = 1, project_shortcut: bool = False,
                 sync_batch_norm: bool = False,
                 batch_norm_momentum: float = BATCH_NORM_MOMENTUM,
                 batch_norm_epsilon: float = BATCH_NORM_EPSILON, **kwargs: Any) -> None:
        super().__init__(BOTTLENECK_EXPANSION * filters, strides,
                         project_shortcut, sync_batch_norm,
                         batch_norm_momentum, batch_norm_epsilon, **kwargs)
        self.filters = int(filters)
        self.conv1 = FixedPaddingConv2D(filters, 1, 1, name="conv1")
        self.bn2 = self._make_norm("bn2")
        self.conv2 = FixedPaddingConv2D(filters, 3, strides, name="conv2")
        self.bn3 = self._make_norm("bn3")
        self.conv3 = FixedPaddingConv2D(BOTTLENECK_EXPANSION * filters, 1, 1,
                                        name="conv3")

    def _residual(self, preactivated, training):
        x = self.conv1(preactivated)
        x = tf.nn.relu(self.bn2(x, training=training))
        x = self.conv2(x)
        x = tf.nn.relu(self.bn3(x, training=training))
        return self.conv3(x)


def scaled_filters(width: float) -> int:
    """First-stage filter count at width multiplier `width` (64 at 1.0)."""
    return max(1, int(round(BASE_FILTERS * width)))


@keras.saving.register_keras_serializable(package="llp_tf")
class ResNetV2(keras.layers.Layer):
    """A pre-activation ResNet trunk: images float32 [B, H, W, 3] -> features [B, feature_dim].

    Args:
      blocks_per_stage: blocks of each stage, e.g. (2, 2, 2, 2) for ResNet-18.
      bottleneck: bottleneck blocks (ResNet-50 and deeper) or basic blocks.
      width: multiplier of every layer's filter count (0.25: 16 first-stage filters, not 64).
      small_inputs: the stem for 28-32 px images.
      sync_batch_norm, batch_norm_momentum, batch_norm_epsilon: of every batch norm."""

    def __init__(self, blocks_per_stage: Sequence[int], bottleneck: bool,
                 width: float = 1.0, small_inputs: bool = False,
                 sync_batch_norm: bool = False,
                 batch_norm_momentum: float = BATCH_NORM_MOMENTUM,
                 batch_norm_epsilon: float = BATCH_NORM_EPSILON,
                 name: str = "resnet_v2", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        blocks_per_stage = _validated_blocks_per_stage(blocks_per_stage)
        if not (isinstance(width, (int, float)) and math.isfinite(width)
                and width > 0):
            raise ConfigError(
                f"ResNet width multiplier {width!r} must be a positive "
                "number (1.0 is the standard network, 0.25 a quarter as many "
                "filters per layer).")
        self.blocks_per_stage = blocks_per_stage
        self.bottleneck = bool(bottleneck)
        self.width = float(width)
        self.small_inputs = bool(small_inputs)
        self.sync_batch_norm = bool(sync_batch_norm)
        self.batch_norm_momentum = float(batch_norm_momentum)
        self.batch_norm_epsilon = float(batch_norm_epsilon)

        base = scaled_filters(width)
        if self.small_inputs:
            self.stem_conv = FixedPaddingConv2D(base, 3, 1, name="stem_conv")
            self.stem_pool = None
        else:
            self.stem_conv = FixedPaddingConv2D(base, 7, 2, name="stem_conv")
            self.stem_pool = keras.layers.MaxPooling2D(
                pool_size=3, strides=2, padding="same", name="stem_pool")

        block_class = (PreActivationBottleneckBlock if self.bottleneck
                       else PreActivationBasicBlock)
        # One attribute per block: Keras 3 lists are not in the checkpoint's object graph.
        self._block_names = []
        for stage, num_blocks in enumerate(blocks_per_stage):
            for index in range(num_blocks):
                first = index == 0
                block_name = f"stage{stage + 1}_block{index + 1}"
                setattr(self, block_name, block_class(
                    base * 2**stage,
                    strides=2 if first and stage > 0 else 1,
                    # TF official projects in every stage's first block, even where shapes match.
                    project_shortcut=first,
                    sync_batch_norm=self.sync_batch_norm,
                    batch_norm_momentum=batch_norm_momentum,
                    batch_norm_epsilon=batch_norm_epsilon,
                    name=block_name))
                self._block_names.append(block_name)
        self.final_bn = batch_norm(
            "final_bn", self.sync_batch_norm, batch_norm_momentum,
            batch_norm_epsilon)

        expansion = BOTTLENECK_EXPANSION if self.bottleneck else 1
        self.feature_dim = expansion * base * 2**(len(blocks_per_stage) - 1)
        self.output_stride = ((1 if self.small_inputs else 4)
                              * 2**(len(blocks_per_stage) - 1))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "blocks_per_stage": list(self.blocks_per_stage),
                "bottleneck": self.bottleneck, "width": self.width,
                "small_inputs": self.small_inputs, "sync_batch_norm": self.sync_batch_norm,
                "batch_norm_momentum": self.batch_norm_momentum,
                "batch_norm_epsilon": self.batch_norm_epsilon}

    def build_from_config(self, config: dict[str, Any]) -> None:
        """Creates every weight for the input shape a saved trunk recorded (Keras's loading),
        by a symbolic run."""
        if config and "input_shape" in config:
            self.compute_output_spec(keras.KerasTensor(config["input_shape"]))
            self._build_shapes_dict = {"images": tuple(config["input_shape"])}  # as saved
            self.built = True

    @property
    def blocks(self) -> list[_PreActivationBlock]:
        """The residual blocks, in order of application."""
        return [getattr(self, name) for name in self._block_names]

    def feature_map(self, images: FloatTensor,
                    training: bool = False) -> FloatTensor:
        """The last feature map float32 [B, H', W', feature_dim] (after the final batch norm and
        ReLU) of images float32 [B, H, W, 3]."""
        x = self.stem_conv(images)
        if self.stem_pool is not None:
            x = self.stem_pool(x)
        for block in self.blocks:
            x = block(x, training=training)
        return tf.nn.relu(self.final_bn(x, training=training))

    def call(self, images: FloatTensor, training: bool = False) -> FloatTensor:
        """Pooled features float32 [B, feature_dim] of images [B, H, W, 3]."""
        return tf.reduce_mean(self.feature_map(images, training=training),
                              axis=[1, 2])

    def batch_norm_layers(self) -> list[BatchNormalization]:
        """Every `keras.layers.BatchNormalization` layer of the trunk."""
        norms = [norm for block in self.blocks
                 for norm in block.batch_norm_layers()]
        return norms + [self.final_bn]

    def conv_layers(self) -> list[FixedPaddingConv2D]:
        """Every `FixedPaddingConv2D` of the trunk, stem first."""
        return [self.stem_conv] + [conv for block in self.blocks
                                   for conv in block.conv_layers()]


def _validated_blocks_per_stage(blocks_per_stage):
    valid = (isinstance(blocks_per_stage, Sequence)
             and not isinstance(blocks_per_stage, str)
             and len(blocks_per_stage) > 0
             and all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                     for n in blocks_per_stage))
    if not valid:
        raise ConfigError(
            f"ResNet blocks per stage {blocks_per_stage!r} must be a "
            "non-empty list of positive integers, e.g. [2, 2, 2, 2] for "
            "ResNet-18 or [1, 1, 1, 1] for a tiny test network.")
    return tuple(blocks_per_stage)
