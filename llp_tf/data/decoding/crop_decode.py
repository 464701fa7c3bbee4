"""Decoding only the window of an image that a random crop keeps: of a JPEG the region around
it (``JPEG_MARGIN`` pixels cut off again), with the full decode's pixels; other formats whole,
then cropped. Windows leave as uint8 [h, w, 3]."""

import functools
import struct
from collections.abc import Callable

import tensorflow as tf

from llp_tf.data.decoding import decode
from llp_tf.tensor_types import IntTensor, StringTensor

#: image shape (int32 [3], height first) -> (top, left, height, width), int32: a window.
WindowFn = Callable[[IntTensor], tuple[IntTensor, IntTensor, IntTensor, IntTensor]]

#: Pixels decoded around the window: chroma upsampling reaches at most 4 across its border.
JPEG_MARGIN = 4


def crop_image(image: IntTensor, window_fn: WindowFn) -> IntTensor:
    """uint8 [h, w, 3]: the window ``window_fn`` picks of ``image``, uint8 [H, W, 3]."""
    top, left, height, width = window_fn(tf.shape(image))
    return tf.image.crop_to_bounding_box(image, top, left, height, width)


def _region(shape, window, margin):
    """(decode_and_crop_jpeg's box: the window grown by ``margin``, clipped; row; column)."""
    top, left, height, width = window
    region_top = tf.maximum(top - margin, 0)
    region_left = tf.maximum(left - margin, 0)
    region_bottom = tf.minimum(top + height + margin, shape[0])
    region_right = tf.minimum(left + width + margin, shape[1])
    box = tf.stack([region_top, region_left, region_bottom - region_top,
                    region_right - region_left])
    return box, top - region_top, left - region_left


def decode_jpeg_window(encoded: StringTensor, window_fn: WindowFn,
                       margin: int = JPEG_MARGIN) -> IntTensor:
    """uint8 [h, w, 3]: the window of JPEG bytes ``encoded`` (colour, grayscale or CMYK) that
    ``window_fn`` picks from the header's shape, decoding only it and ``margin`` around it."""
    shape = tf.image.extract_jpeg_shape(encoded, output_type=tf.int32)
    _, _, height, width = window = window_fn(shape)
    box, row, column = _region(shape, window, margin)
    region = tf.image.decode_and_crop_jpeg(encoded, box, channels=3)
    window = region[row:row + height, column:column + width, :]
    window.set_shape([None, None, 3])
    return window


@functools.cache
def _stand_ins() -> tuple[bytes, bytes]:
    """(JPEG, BMP) bytes of a 1x1 image, decoded instead of the real bytes by the unused path."""
    bmp = (b"BM" + struct.pack("<IHHI", 58, 0, 0, 54)
           + struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, 4, 2835, 2835, 0, 0)
           + bytes(4))
    with tf.init_scope():
        jpeg = tf.io.encode_jpeg(tf.zeros([1, 1, 1], tf.uint8)).numpy()
    return jpeg, bmp


def decode_window(encoded: StringTensor, window_fn: WindowFn) -> IntTensor:
    """uint8 [h, w, 3]: the window ``window_fn`` picks of an encoded JPEG, PNG, GIF or BMP
    image; of a JPEG only the window is decoded (`decode_jpeg_window`'s pixels). Both decodes
    run, without control flow, the unused one on a 1x1 stand-in."""
    stand_in_jpeg, stand_in_other = _stand_ins()
    is_jpeg = tf.io.is_jpeg(encoded)
    jpeg = tf.where(is_jpeg, encoded, stand_in_jpeg)
    other = decode.decode_image(tf.where(is_jpeg, stand_in_other, encoded))
    shape = tf.where(is_jpeg, tf.image.extract_jpeg_shape(jpeg, output_type=tf.int32),
                     tf.shape(other))
    top, left, height, width = window = window_fn(shape)
    box, row, column = _region(shape, window, JPEG_MARGIN)
    jpeg_height = tf.where(is_jpeg, height, 0)
    region = tf.image.decode_and_crop_jpeg(jpeg, tf.where(is_jpeg, box, [0, 0, 1, 1]),
                                           channels=3)
    parts = [region[row:row + jpeg_height, column:column + width],
             other[top:top + height - jpeg_height, left:left + width]]
    window = tf.concat([tf.reshape(part, [-1, width, 3]) for part in parts], axis=0)
    window.set_shape([None, None, 3])
    return window
