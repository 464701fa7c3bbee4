"""Input-pipeline throughput in images/s, to show that input is not the bottleneck.

  python benchmarks/bench_input.py [--full] [--output_json=bench_out/input.json]

Measures the training and evaluation pipelines of llp_tf.data.pipeline.input_fns on
  - the embedded mnist5k set (28x28 PNG in TFDS shards) at --small_size, and
  - a generated set of --num_generated 224x224 JPEGs in TFRecord shards of
    the authors' format, at 224 (decode, random resized crop, colour jitter,
    ...), like ImageNet,
each for about --seconds after a warm-up, on all CPU cores; then, on one
core (a private tf.data thread pool of one thread, one thread per op), in
--rounds rounds with the contenders interleaved, each in steady state: per
round, a fresh iterator over its dataset (built once) first reads 2 uncounted
batches of 64 (start-up, buffers filling), then --per_core_images images are
counted, the wall and CPU clocks taken around these only, and the iterator is
dropped while it still works ahead (as much as when counting began). Set-up
that ImageNet would spread over an epoch is thus left out. The contenders:
  - the random crop's decoding, fused (`llp_tf.data.decoding.crop_decode`, only the
    window of a JPEG decoded) against the full decode then the crop, cycling
    over --num_crop_decode JPEGs of ImageNet-like sizes (sides 330-450 px,
    quality 90, 4:2:0) of two kinds: cut from real photographs
    (scikit-learn's sample images) and smooth images plus pixel noise, whose
    entropy decoding weighs more; and
  - the whole training input (read, decode, crop, augment at 224 px, batch)
    on the photographs (repeated into one pass of TFRecord shards long enough
    for a round), with fused and with full decoding, and with
    ``augment_on="device"`` (fused; the host reads, decodes the crop window,
    resizes it to uint8, draws the random choices and batches; the pixel
    work is left to the replica step): a GPU that takes G images/s needs
    about G / (this rate) such cores to be fed. The fused crop-decode of the
    photographs runs in the same rounds, and

      input/decode per core = R

    is the device-side input's images per CPU second over the crop-decode's
    (1.0: the input costs no more than its decode), the host-side input's
    beside it.
Every op runs on one thread: the process's intra-op thread pool has
--intra_op_threads threads (1). tf.data's ``max_intra_op_parallelism = 1``
alone leaves some kernels (ScaleAndTranslate, transposes) spreading over
that pool, whose idle threads then spin: on this 2-core machine, with 2
threads the device-side input took 1.25x the CPU time per image that it
takes with 1 (docs/performance.md).
One-core figures are given per wall second and per CPU second of the
process; the latter still counts one core when other processes share it.
Mean KiB per image is given for each set. Temporary data goes to a fresh
temporary folder that is removed at the end.
"""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import flags, logging  # noqa: E402

#: The sizes of docs/performance.md's figures, for --full.
FULL_SIZES = {"seconds": 8.0, "num_generated": 512, "num_crop_decode": 256, "rounds": 5,
              "per_core_images": 1024}
#: Images per batch of the one-core figures; batches per round left uncounted
#: at the start (start-up, buffers filling) and left unread at the end (work
#: ahead, as much as when counting began).
PER_CORE_BATCH, WARMUP_BATCHES, AHEAD_BATCHES = 64, 2, 2


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_float("seconds", 4.0, "Time measured per pipeline, after warm-up (--full: 8).",
                       flag_values=values)
    flags.DEFINE_integer("batch_size", 128, "Global batch size (one replica).",
                         flag_values=values)
    flags.DEFINE_integer("small_size", 32, "Output image side for the embedded set.",
                         flag_values=values)
    flags.DEFINE_integer("num_generated", 256, "Images in the generated 224x224 JPEG set "
                         "(--full: 512).", flag_values=values)
    flags.DEFINE_integer("num_crop_decode", 128, "Generated ~400x350 JPEGs of each kind for "
                         "the one-core figures (--full: 256).", flag_values=values)
    flags.DEFINE_integer("rounds", 3, "Measured rounds of the one-core figures, contenders "
                         "interleaved (--full: 5).", flag_values=values)
    flags.DEFINE_integer("per_core_images", 512, "Images counted per contender and round of "
                         "the one-core figures, after a warm-up (--full: 1024).",
                         flag_values=values)
    flags.DEFINE_integer("intra_op_threads", 1, "Threads of the process's intra-op pool, on "
                         "which ops spread their work; 0: TensorFlow's default, one per core.",
                         flag_values=values)
    flags.DEFINE_string("output_json", None, "Optional file to write the results to as JSON.",
                        flag_values=values)
    return values


def _measure(make_dataset, seconds, warmup_batches=3):
    """images/s of iterating fresh datasets from ``make_dataset(epoch)``."""
    from llp_tf.data.decoding.decode import data_errors  # noqa: PLC0415

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


def _one_core():
    """tf.data options that run a dataset, and each op in it, on one thread."""
    import tensorflow as tf  # noqa: PLC0415

    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return options


def _steady_rates(contenders, rounds, counted):
    """{name: (images per wall second, images per CPU second)} in steady state.
    ``contenders[name]()`` is a fresh iterator of image counts, one per batch
    of `PER_CORE_BATCH`, at least ``WARMUP_BATCHES + counted + AHEAD_BATCHES``
    long. In each round, round-robin, each contender's fresh iterator yields
    `WARMUP_BATCHES` uncounted batches (start-up, buffers filling), then
    ``counted`` batches with the clocks (wall, and CPU of the whole process,
    all threads: the core really used even when others share it) around these
    only; it is dropped while still working ahead, as much as when counting
    began, and before the next contender starts."""
    import resource  # noqa: PLC0415

    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    totals = {name: [0, 0.0, 0.0] for name in contenders}
    for _ in range(rounds):
        for name, contender in contenders.items():
            sizes = contender()
            for _ in range(WARMUP_BATCHES):
                next(sizes)
            wall, used = time.perf_counter(), cpu()
            images = sum(next(sizes) for _ in range(counted))
            totals[name][1] += time.perf_counter() - wall
            totals[name][2] += cpu() - used
            totals[name][0] += images
            sizes.close()
            del sizes
    return {name: (n / wall, n / used) for name, (n, wall, used) in totals.items()}


def _batch_sizes(dataset, key=None):
    """A generator of the images in each batch of ``dataset`` (of ``batch[key]``
    when given); closing it drops the dataset's iterator."""
    from llp_tf.data.decoding.decode import data_errors  # noqa: PLC0415

    with data_errors():
        for batch in dataset:
            yield int((batch if key is None else batch[key]).shape[0])


def _crop_decode_runs(jpegs):
    """{"fused"|"full": a `_steady_rates` contender}: on one core, decoding the
    random crop window (`weak.crop_window`) of each of ``jpegs`` in turn,
    endlessly, batched by `PER_CORE_BATCH`: `crop_decode.decode_window` against
    `decode.decode_image` then the crop, as the pipeline did before."""
    import tensorflow as tf  # noqa: PLC0415

    from llp_tf.data.augmentation import weak  # noqa: PLC0415
    from llp_tf.data.decoding import crop_decode, decode  # noqa: PLC0415

    def window_fn(index):
        return lambda shape: weak.crop_window(shape, tf.stack([index, 0]))

    loads = {
        "fused": lambda e, i: crop_decode.decode_window(e, window_fn(i)),
        "full": lambda e, i: crop_decode.crop_image(decode.decode_image(e), window_fn(i)),
    }
    base = tf.data.Dataset.from_tensor_slices((jpegs, tf.range(len(jpegs)))).repeat()
    runs = {}
    for name, load in loads.items():
        # One pixel per image kept: batches of scalars, one Python step per batch.
        dataset = base.map(lambda e, i, f=load: f(e, i)[0, 0, 0]).batch(
            PER_CORE_BATCH).with_options(_one_core())
        runs[name] = lambda d=dataset: _batch_sizes(d)
    return runs


def _train_runs(source, batches):
    """{"fused"|"full"|"device": a `_steady_rates` contender}: on one core, the
    whole training input (`input_fns.make_train_input_fn` at 224 px, "paper"
    augmentation, batches of `PER_CORE_BATCH`, ``batches`` of them in one pass
    over ``source``): read, decode, random resized crop, grayscale, colour
    jitter, flip, normalise, batch; "device": with ``augment_on="device"``,
    read, decode, resized crop as uint8, the random choices, batch. The dataset
    is built (traced) once; each contender call iterates it afresh."""
    from llp_tf.data.pipeline import input_fns  # noqa: PLC0415

    def runner(fused, augment_on="host"):
        dataset = input_fns.make_train_input_fn(
            source, PER_CORE_BATCH, 224, seed=0, epoch=0, steps=batches,
            fused_crop=fused, augment_on=augment_on,
            labelled_index=range(source.info.num_train))(None).with_options(_one_core())
        return lambda: _batch_sizes(dataset, "image")

    return {"fused": runner(True), "full": runner(False), "device": runner(True, "device")}


def _per_core_results(values, scratch, results):
    """Appends the one-core figures to ``results``; returns {"fused_over_full":
    {what: images/s fused / full, per wall and per CPU second},
    "input_over_decode": {"device"|"host": the training input's images per
    CPU second over the fused crop-decode's, measured in the same rounds}}."""
    import jpeg_sets  # noqa: PLC0415 -- imports TF; benchmarks/ is on the path
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415

    counted = -(-values.per_core_images // PER_CORE_BATCH)
    photos = jpeg_sets.photo_jpegs(values.num_crop_decode)
    noisy = jpeg_sets.noisy_jpegs(values.num_crop_decode)
    cases = [(name, jpegs, _steady_rates(_crop_decode_runs(jpegs), values.rounds, counted))
             for name, jpegs in (("photo", photos), ("noisy", noisy))]
    # One pass over records enough for a round: the photographs repeated.
    batches = WARMUP_BATCHES + counted + AHEAD_BATCHES
    folder = os.path.join(scratch, "photo")
    jpeg_sets.write_jpeg_records(
        folder, photos * -(-batches * PER_CORE_BATCH // len(photos)), shards=8)
    train = _steady_rates({**_train_runs(load_source(f"tfrecord:{folder}"), batches),
                           "decode": _crop_decode_runs(photos)["fused"]}, values.rounds, counted)
    decode = train.pop("decode")[1]
    cases.append(("photo", photos, train))
    ratios = {}
    for (name, jpegs, rates), what in zip(cases, ("crop-decode", "crop-decode",
                                                  "train input 224px")):
        kib = sum(len(j) for j in jpegs) / len(jpegs) / 1024
        for path, (wall, cpu) in sorted(rates.items(), reverse=True):
            results.append({"set": f"{name} ~400x350 ({kib:.0f} KiB/image)",
                            "pipeline": f"{what} {path}, 1 core",
                            "image_size": 224 if what.startswith("train") else None,
                            "images_per_second": round(wall, 1),
                            "images_per_cpu_second": round(cpu, 1)})
        ratios[f"{what}, {name} ({kib:.0f} KiB/image)"] = {
            "wall": round(rates["fused"][0] / rates["full"][0], 3),
            "cpu": round(rates["fused"][1] / rates["full"][1], 3)}
    return {"fused_over_full": ratios,
            "input_over_decode": {"device": round(train["device"][1] / decode, 3),
                                  "host": round(train["fused"][1] / decode, 3)}}


def _prepared_quietly(load):
    """``load()`` of an embedded set into a fresh folder, without TFDS's notices:
    its progress bars, the lines it prints while preparing and its warning
    that the fresh folder has no dataset_info.json. Errors still show."""
    import tensorflow_datasets as tfds  # noqa: PLC0415

    tfds.disable_progress_bar()
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return load()
    finally:
        logging.set_verbosity(verbosity)


def _throughput_results(values, scratch):
    """Rows of images/s of the training and evaluation pipelines, all cores,
    on the embedded mnist5k set and a generated JPEG set."""
    import jpeg_sets  # noqa: PLC0415 -- imports TF; benchmarks/ is on the path
    from llp_tf.data.pipeline import input_fns  # noqa: PLC0415 -- imports TF
    from llp_tf.data.sources.registry import load_source  # noqa: PLC0415 -- imports TF

    mnist = _prepared_quietly(lambda: load_source("mnist5k",
                                                  data_dir=os.path.join(scratch, "tfds")))
    jpeg_dir = os.path.join(scratch, "jpeg224")
    mean_bytes = jpeg_sets.write_jpeg_records(
        jpeg_dir, jpeg_sets.smooth_jpegs(values.num_generated), shards=8)
    jpegs = load_source(f"tfrecord:{jpeg_dir}")
    cases = [
        ("mnist5k", mnist, values.small_size),
        (f"jpeg224 ({mean_bytes / 1024:.0f} KiB/image)", jpegs, 224),
    ]
    results = []
    for label, source, size in cases:
        batch = min(values.batch_size, source.info.num_train)
        train = _measure(lambda epoch, s=source, b=batch, z=size: input_fns.make_train_input_fn(
            s, b, z, seed=0, epoch=epoch,
            labelled_index=range(s.info.num_train))(None), values.seconds)
        results.append({"set": label, "pipeline": "train", "image_size": size,
                        "images_per_second": round(train, 1)})
        split = "validation" if source.info.num_validation else "train"
        evaluate = _measure(lambda epoch, s=source, b=batch, z=size, p=split:
                            input_fns.make_eval_input_fn(s, b, z, split=p)(None),
                            values.seconds / 2)
        results.append({"set": label, "pipeline": f"eval ({split})", "image_size": size,
                        "images_per_second": round(evaluate, 1)})
    return results


def _print_report(values, results, per_core, out):
    print(f"input pipeline throughput, {os.cpu_count()} CPU cores, batch {values.batch_size}",
          file=out)
    for r in results:
        size = f"{r['image_size']}px" if r["image_size"] else "window"
        print(f"  {r['set']:<28} {r['pipeline']:<25} {size:>6} "
              f"{r['images_per_second']:>9.1f} images/s", file=out)
    for r in results:
        if "images_per_cpu_second" in r:
            print(f"  {r['set']:<28} {r['pipeline']:<25} {r['images_per_cpu_second']:>16.1f} "
                  "images per CPU second", file=out)
    for name, ratio in per_core["fused_over_full"].items():
        print(f"  per core, fused / full decode, {name}: {ratio}", file=out)
    ratio = per_core["input_over_decode"]
    print(f"input/decode per core = {ratio['device']:.2f}", file=out)
    print(f"  (whole training input per CPU second over the fused crop-decode's, photographs, "
          f"224 px, augment_on=device; augment_on=host: {ratio['host']:.2f})", file=out)


def benchmark(values, out, err):
    """Runs the benchmark in a temporary folder, removed at the end."""
    del err
    import tensorflow as tf  # noqa: PLC0415

    if values.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(values.intra_op_threads)
    scratch = tempfile.mkdtemp(prefix="llp_bench_input_")
    try:
        results = _throughput_results(values, scratch)
        per_core = _per_core_results(values, scratch, results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _print_report(values, results, per_core, out)
    if values.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(values.output_json)), exist_ok=True)
        with open(values.output_json, "w") as f:
            json.dump({"cpu_cores": os.cpu_count(), "results": results,
                       **per_core}, f, indent=1)


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
