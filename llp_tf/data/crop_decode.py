"""Decoding only the window of an image that a random crop keeps.

A training example keeps one random-resized-crop window of its image (on
average 60 % of the area for the release's crop areas 0.2-1). For JPEG
bytes the window is drawn from the shape in the JPEG header
(`tf.image.extract_jpeg_shape`, no decoding) and only the rows and columns
around it are decoded (`tf.image.decode_and_crop_jpeg`): entropy decoding
stops below the window, and the inverse DCT, upsampling and colour
conversion run on the window alone. Other formats (PNG, GIF, BMP) are
decoded whole and then cropped, exactly as before.

The window is a function of the image's shape alone (``window_fn``, in
training `augment.crop_window` with the example's seed), and the header's
shape is the decoded image's shape, so the fused and the full path crop the
same window for the same seed.

Pixels: libjpeg upsamples subsampled chroma from the neighbouring chroma
samples; at the border of a partially decoded region it has no neighbour
and repeats the edge, so the outermost pixels of a tightly cropped decode
can differ from the full decode (here by up to 38 levels, mean 0.009). The
region decoded here is therefore the window grown by ``JPEG_MARGIN`` pixels
on each side (clipped to the image), and the margin is cut off after
decoding: the upsampler reaches at most one chroma sample (<= 4 pixels for
any standard subsampling) across, so the window's pixels equal the full
decode's (tests/data/test_crop_decode.py checks that they are identical).

Errors: bytes that are not an image, or a JPEG whose header or data up to
the window is damaged, fail as the full decode does (and
`decode.decode_checked` names the file or record). A JPEG cut short *below*
a window decodes that window, whose data is intact; it fails on the first
crop that reaches the missing rows.
"""

from collections.abc import Callable

import tensorflow as tf

from llp_tf.data import decode
from llp_tf.types import IntTensor, StringTensor

#: image shape (int32 [3], height and width first) -> (top, left, height,
#: width), int32 scalars: a window inside the image.
WindowFn = Callable[[IntTensor], tuple[IntTensor, IntTensor, IntTensor, IntTensor]]

#: Pixels decoded on each side of the window and then cut off, so that
#: chroma upsampling at the decoded region's border does not reach the window.
JPEG_MARGIN = 8


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
    top, left, height, width = window_fn(shape)
    region_top = tf.maximum(top - margin, 0)
    region_left = tf.maximum(left - margin, 0)
    region_bottom = tf.minimum(top + height + margin, shape[0])
    region_right = tf.minimum(left + width + margin, shape[1])
    region = tf.image.decode_and_crop_jpeg(
        encoded, tf.stack([region_top, region_left, region_bottom - region_top,
                           region_right - region_left]), channels=3)
    row, column = top - region_top, left - region_left
    window = region[row:row + height, column:column + width, :]
    window.set_shape([None, None, 3])
    return window


def decode_window(encoded: StringTensor, window_fn: WindowFn) -> IntTensor:
    """The window of an encoded image, decoding only the window of a JPEG.

    Args:
      encoded: string [], JPEG, PNG, GIF (first frame) or BMP bytes.
      window_fn: see `WindowFn`, called with the image's shape (int32 [3]).

    Returns:
      uint8 [h, w, 3]. For JPEG the pixels of `decode_jpeg_window`, equal to
      the full decode's; for other formats ``crop_image(decode_image(encoded))``
      exactly.
    """
    window = tf.cond(tf.io.is_jpeg(encoded),
                     lambda: decode_jpeg_window(encoded, window_fn),
                     lambda: crop_image(decode.decode_image(encoded), window_fn))
    window.set_shape([None, None, 3])
    return window
