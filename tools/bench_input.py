"""Input-pipeline throughput in images/s, to show that input is not the bottleneck.

  python tools/bench_input.py [--seconds=8] [--output_json=bench_out/input.json]

Measures the training and evaluation pipelines of llp_tf.data.pipeline on
  - the embedded mnist5k set (28x28 PNG in TFDS shards) at --small_size, and
  - a generated set of --num_generated 224x224 JPEGs in TFRecord shards of
    the authors' format, at 224 (decode, random resized crop, colour jitter,
    ...), like ImageNet,
each for about --seconds after a warm-up, on all CPU cores; and the random
crop's decoding on one core, fused (`llp_tf.data.crop_decode`, only the
window of a JPEG decoded) against the full decode followed by the crop, on
--num_crop_decode generated JPEGs of ImageNet-like sizes (~400x350), as a
ratio measured in the same run. Temporary data goes to a fresh temporary
folder that is removed at the end.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import quiet_start  # noqa: E402 -- tools/ is on the path of a script run from it
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import app, flags  # noqa: E402

from llp_tf.errors import LLPError  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_float("seconds", 8.0, "Time measured per pipeline, after warm-up.")
flags.DEFINE_integer("batch_size", 128, "Global batch size (one replica).")
flags.DEFINE_integer("small_size", 32, "Output image side for the embedded set.")
flags.DEFINE_integer("num_generated", 512, "Images in the generated 224x224 JPEG set.")
flags.DEFINE_integer("num_crop_decode", 64, "Generated ~400x350 JPEGs for the crop-decode "
                     "figure.")
flags.DEFINE_string("output_json", None, "Optional file to write the results to as JSON.")


def _generate_jpeg_set(folder, count, size=224, shards=8):
    """Writes ``count`` smooth random 224x224 JPEGs (quality 90) as TFRecord shards."""
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    from llp_tf.data.tfrecord_source import serialize_example, shard_name  # noqa: PLC0415

    rng = np.random.default_rng(0)
    records = []
    for index in range(count):
        coarse = tf.constant(rng.integers(0, 256, (size // 8, size // 8, 3)), tf.float32)
        image = tf.cast(tf.image.resize(coarse, [size, size], method="bicubic")
                        + tf.random.stateless_normal([size, size, 3], [index, 0], stddev=12.0),
                        tf.float32)
        jpeg = tf.io.encode_jpeg(tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), quality=90)
        records.append(serialize_example(jpeg.numpy(), index % 10, index))
    for shard in range(shards):
        with tf.io.TFRecordWriter(os.path.join(folder, shard_name("train", shard, shards))) as w:
            for record in records[shard::shards]:
                w.write(record)
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        json.dump({"class_names": [str(c) for c in range(10)]}, f)
    return sum(len(r) for r in records) / count


def _measure(make_dataset, seconds, warmup_batches=3):
    """images/s of iterating fresh datasets from ``make_dataset(epoch)``."""
    from llp_tf.data import data_errors  # noqa: PLC0415

    images, elapsed, epoch, warm = 0, 0.0, 0, 0
    with data_errors():
        while elapsed < seconds:
            start = time.perf_counter()
            for batch in make_dataset(epoch):
                size = int(batch["image"].shape[0])
                now = time.perf_counter()
                if warm < warmup_batches:
                    warm += 1
                else:
                    images += size
                    elapsed += now - start
                start = now
                if elapsed >= seconds:
                    break
            epoch += 1
    return images / elapsed if elapsed else float("nan")


def _imagenet_like_jpegs(count):
    """``count`` JPEG bytes (quality 90) of smooth noisy images, sides 330-450 px."""
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    rng = np.random.default_rng(1)
    jpegs = []
    for index in range(count):
        height, width = (int(v) for v in rng.integers(330, 451, 2))
        coarse = tf.constant(rng.integers(0, 256, (height // 8, width // 8, 3)), tf.float32)
        image = (tf.image.resize(coarse, [height, width], method="bicubic")
                 + tf.random.stateless_normal([height, width, 3], [index, 1], stddev=12.0))
        jpegs.append(tf.io.encode_jpeg(tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8),
                                       quality=90).numpy())
    return jpegs


def _crop_decode_rates(jpegs, seconds, rounds=4):
    """(fused, full) images/s on one core of decoding an image's random crop
    window (`augment.crop_window`), rounds of the two interleaved."""
    import tensorflow as tf  # noqa: PLC0415

    from llp_tf.data import augment, crop_decode, decode  # noqa: PLC0415

    def window_fn(index):
        return lambda shape: augment.crop_window(shape, tf.stack([index, 0]))

    loads = {
        "fused": lambda e, i: crop_decode.decode_window(e, window_fn(i)),
        "full": lambda e, i: crop_decode.crop_image(decode.decode_image(e), window_fn(i)),
    }
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    counts, times = dict.fromkeys(loads, 0), dict.fromkeys(loads, 0.0)
    base = tf.data.Dataset.from_tensor_slices((jpegs, tf.range(len(jpegs))))
    for _ in range(rounds):
        for name, load in loads.items():
            dataset = base.repeat().map(lambda e, i, f=load: f(e, i)[0, 0, 0]).with_options(
                options)
            iterator = iter(dataset)
            next(iterator)  # warm-up: tracing and the first image
            start = time.perf_counter()
            while time.perf_counter() - start < seconds / (2 * rounds):
                next(iterator)
                counts[name] += 1
            times[name] += time.perf_counter() - start
    return counts["fused"] / times["fused"], counts["full"] / times["full"]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from llp_tf.data import load_source, pipeline  # noqa: PLC0415 -- imports TF

    scratch = tempfile.mkdtemp(prefix="llp_bench_input_")
    results = []
    try:
        mnist = load_source("mnist5k", data_dir=os.path.join(scratch, "tfds"))
        jpeg_dir = os.path.join(scratch, "jpeg224")
        os.makedirs(jpeg_dir)
        mean_bytes = _generate_jpeg_set(jpeg_dir, FLAGS.num_generated)
        jpegs = load_source(f"tfrecord:{jpeg_dir}")
        cases = [
            ("mnist5k", mnist, FLAGS.small_size),
            (f"jpeg224 ({mean_bytes / 1024:.0f} KiB/image)", jpegs, 224),
        ]
        for label, source, size in cases:
            batch = min(FLAGS.batch_size, source.info.num_train)
            train = _measure(lambda epoch, s=source, b=batch, z=size: pipeline.make_train_input_fn(
                s, b, z, seed=0, epoch=epoch)(None), FLAGS.seconds)
            results.append({"set": label, "pipeline": "train", "image_size": size,
                            "images_per_second": round(train, 1)})
            split = "validation" if source.info.num_validation else "train"
            evaluate = _measure(lambda epoch, s=source, b=batch, z=size, p=split:
                                pipeline.make_eval_input_fn(s, b, z, split=p)(None),
                                FLAGS.seconds / 2)
            results.append({"set": label, "pipeline": f"eval ({split})", "image_size": size,
                            "images_per_second": round(evaluate, 1)})
        jpegs = _imagenet_like_jpegs(FLAGS.num_crop_decode)
        fused, full = _crop_decode_rates(jpegs, FLAGS.seconds)
        mean_kib = sum(len(j) for j in jpegs) / len(jpegs) / 1024
        for name, rate in (("crop-decode full", full), ("crop-decode fused", fused)):
            results.append({"set": f"jpeg ~400x350 ({mean_kib:.0f} KiB/image)",
                            "pipeline": f"{name}, 1 core", "image_size": None,
                            "images_per_second": round(rate, 1)})
        crop_ratio = fused / full
    except LLPError as error:
        print(f"bench_input: {error}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"input pipeline throughput, {os.cpu_count()} CPU cores, batch {FLAGS.batch_size}")
    for r in results:
        size = f"{r['image_size']}px" if r["image_size"] else "window"
        print(f"  {r['set']:<28} {r['pipeline']:<25} {size:>6} "
              f"{r['images_per_second']:>9.1f} images/s")
    print(f"  crop-decode per core, fused / full: {crop_ratio:.2f}x")
    if FLAGS.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output_json)), exist_ok=True)
        with open(FLAGS.output_json, "w") as f:
            json.dump({"cpu_cores": os.cpu_count(), "results": results,
                       "crop_decode_fused_over_full": round(crop_ratio, 3)}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
