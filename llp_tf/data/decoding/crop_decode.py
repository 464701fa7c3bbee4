"""Decoding only the window of an image that a random crop keeps.

For JPEG bytes the window is drawn from the shape in the JPEG header
(`tf.image.extract_jpeg_shape`, no decoding) and only the region around it
is decoded (`tf.image.decode_and_crop_jpeg`, the window grown by
``JPEG_MARGIN`` pixels that are cut off again); PNG, GIF and BMP are decoded
whole and then cropped. The window is a function of the image's shape alone
(``window_fn``), so for the same seed the fused and the full path crop the
same window, and its pixels equal the full decode's (tolerance 0,
tests/data/decoding/test_crop_decode.py). Images leave as uint8 [h, w, 3].

Errors: bytes that are not an image, or a JPEG whose header or data up to
the window is damaged, fail as the full decode does (and
`decode.decode_checked` names the file or record). A JPEG cut short *below*
a window decodes that window, whose data is intact; it fails on the first
crop that reaches the missing rows.

What it gains and why so little: docs/data.md, "Decoding only the crop", and docs/performance.md.
"""

import functools
import struct
from collections.abc import Callable

import tensorflow as tf

from llp_tf.data.decoding import decode
from llp_tf.tensor_types import IntTensor, StringTensor

#: image shape (int32 [3], height and width first) -> (top, left, height,
#: width), int32 scalars: a window inside the image.
WindowFn = Callable[[IntTensor], tuple[IntTensor, IntTensor, IntTensor, IntTensor]]

#: Pixels decoded on each side of the window and then cut off, so that
#: chroma upsampling at the decoded region's border does not reach the window:
#: there libjpeg has no neighbouring chroma sample and repeats the edge, and
#: its upsampler reaches at most one chroma sample (<= 4 pixels for any
#: standard subsampling) across.
JPEG_MARGIN = 4


def crop_image(image: IntTensor, window_fn: WindowFn) -> IntTensor:
    """The window of a decoded image.

    Args:
      image: uint8 [H, W, 3].
      window_fn: see `WindowFn`, called with ``tf.shape(image)``.

    Returns:
      uint8 [h, w, 3], ``image[top:top + h, left:left + w]``.
    """
    top, left, height, width = window_fn(tf.shape(image))
    return tf.image.crop_to_bounding_box(image, top, left, height, width)


def _region(shape, window, margin):
    """(box, row, column): the window (top, left, height, width) grown by
    ``margin`` on each side and clipped to ``shape``, as decode_and_crop_jpeg's
    int32 [4] crop window, and the window's offset inside it."""
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
    """Decodes only the window of a JPEG (plus ``margin``, cut off again).

    Args:
      encoded: string [], JPEG bytes (colour, grayscale or CMYK).
      window_fn: see `WindowFn`, called with the shape in the JPEG header,
        int32 [3] (height, width, channels in the file).
      margin: int >= 0, pixels decoded on each side of the window.

    Returns:
      uint8 [h, w, 3]: the window, grayscale expanded to three channels as
      `decode.decode_image` does.
    """
    shape = tf.image.extract_jpeg_shape(encoded, output_type=tf.int32)
    _, _, height, width = window = window_fn(shape)
    box, row, column = _region(shape, window, margin)
    region = tf.image.decode_and_crop_jpeg(encoded, box, channels=3)
    window = region[row:row + height, column:column + width, :]
    window.set_shape([None, None, 3])
    return window


@functools.cache
def _stand_ins() -> tuple[bytes, bytes]:
    """(JPEG, BMP) bytes of a 1x1 image: what the unused decode of
    `decode_window` reads, cheaply, instead of the real bytes."""
    # 24-bit 1x1 BMP: file header, BITMAPINFOHEADER, one 4-byte-padded row.
    bmp = (b"BM" + struct.pack("<IHHI", 58, 0, 0, 54)
           + struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, 4, 2835, 2835, 0, 0)
           + bytes(4))
    with tf.init_scope():  # eager even while a tf.data function is traced
        jpeg = tf.io.encode_jpeg(tf.zeros([1, 1, 1], tf.uint8)).numpy()
    return jpeg, bmp


def decode_window(encoded: StringTensor, window_fn: WindowFn) -> IntTensor:
    """The window of an encoded image, decoding only the window of a JPEG.

    Both decodes run on every image, without control flow: the one the
    format does not need reads a 1x1 stand-in instead (a tf.cond here cost
    more, about 0.2 ms per image, than the fused decode saves).

    Args:
      encoded: string [], JPEG, PNG, GIF (first frame) or BMP bytes.
      window_fn: see `WindowFn`, called once with the image's shape (int32 [3]).

    Returns:
      uint8 [h, w, 3]. For JPEG the pixels of `decode_jpeg_window`, equal to
      the full decode's; for other formats ``crop_image(decode_image(encoded))``
      exactly.
    """
    stand_in_jpeg, stand_in_other = _stand_ins()
    is_jpeg = tf.io.is_jpeg(encoded)
    jpeg = tf.where(is_jpeg, encoded, stand_in_jpeg)
    other = decode.decode_image(tf.where(is_jpeg, stand_in_other, encoded))
    shape = tf.where(is_jpeg, tf.image.extract_jpeg_shape(jpeg, output_type=tf.int32),
                     tf.shape(other))
    top, left, height, width = window = window_fn(shape)
    box, row, column = _region(shape, window, JPEG_MARGIN)
    # The stand-in JPEG's region is its one pixel; the unused path's window
    # has no rows, so the two windows concatenated are the used one.
    jpeg_height = tf.where(is_jpeg, height, 0)
    region = tf.image.decode_and_crop_jpeg(jpeg, tf.where(is_jpeg, box, [0, 0, 1, 1]),
                                           channels=3)
    parts = [region[row:row + jpeg_height, column:column + width],
             other[top:top + height - jpeg_height, left:left + width]]
    window = tf.concat([tf.reshape(part, [-1, width, 3]) for part in parts], axis=0)
    window.set_shape([None, None, 3])
    return window
