"""Benchmark: peak memory of the linear probe at two dataset sizes.

Writes two synthetic image folders (N and 8 N training images of --classes
classes, --validation validation images, --image_size px PNGs) and runs, for
each, in a fresh subprocess:

  - the cached probe (`probe.linear_probe.probe_trunk`, protocol "cached", with
    --standardize): features extracted into the disk cache, standardisation
    statistics streamed over it, --epochs of readout training from it;
  - for contrast, the same work in memory (`features.extract_features` into
    [N, F] arrays, then `train_readout` on the arrays).

Each subprocess first probes a 256-image subsample (so TensorFlow's start-up,
thread pools and allocator arenas are in the baseline), resets its peak
resident set (VmHWM, through /proc/self/clear_refs), runs the full probe and
reports the peak's growth over the baseline. The trunk is a small ResNet
(resnet10, one block per stage, --width 2: F = 1024 features), so the
feature array, N x F x 4 bytes, is large next to the rest. The cached probe's
growth should stay flat from N to 8 N while the in-memory one grows with the
array.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import peak_rss  # noqa: E402 -- benchmarks/ is on the path of a script run from it

WARM_UP_EXAMPLES = 256
#: The sizes of docs/performance.md's figures, for --full.
FULL_SIZES = {"sizes": ["5000", "40000"]}


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    # 8x apart: the cached probe's growth varies by ~15 MiB from run to run
    # (allocator arenas), which 4x the features of a quick run does not dwarf.
    flags.DEFINE_list("sizes", ["2500", "20000"], "The two training-set sizes, N and 8 N "
                      "(--full: 5000,40000).", flag_values=values)
    flags.DEFINE_integer("validation", 500, "Validation images of each folder.",
                         flag_values=values)
    flags.DEFINE_integer("classes", 10, "Classes of the synthetic folders.", flag_values=values)
    flags.DEFINE_integer("image_size", 16, "Side of the images and of the trunk's input.",
                         flag_values=values)
    flags.DEFINE_float("width", 2.0, "Width of the resnet10 trunk (F = 512 x width).",
                       flag_values=values)
    flags.DEFINE_integer("epochs", 2, "Readout epochs.", flag_values=values)
    flags.DEFINE_integer("batch", 128, "Images per forward pass and features per SGD step.",
                         flag_values=values)
    flags.DEFINE_integer("threads", os.cpu_count(), "Threads for TensorFlow (intra-op).",
                         flag_values=values)
    flags.DEFINE_string("output", "", "Optional path of a JSON file for the figures.",
                        flag_values=values)
    flags.DEFINE_string("probe_folder", "", "Internal: measure one probe on this image folder.",
                        flag_values=values)
    flags.DEFINE_enum("probe_mode", "cached", ["cached", "in_memory"], "Internal: which probe.",
                      flag_values=values)
    return values


def _write_folder(values, root, num_train, rng):
    """An image folder of ``num_train`` training and --validation validation PNGs:
    class c is a noisy image around a colour of its own."""
    import tensorflow as tf
    colours = rng.integers(0, 256, (values.classes, 3))
    for split, count in (("train", num_train), ("validation", values.validation)):
        for c in range(values.classes):
            folder = os.path.join(root, split, f"class{c:02d}")
            os.makedirs(folder)
            for i in range(count // values.classes):
                noise = rng.normal(0, 40, (values.image_size, values.image_size, 3))
                image = np.clip(colours[c] + noise, 0, 255).astype(np.uint8)
                with open(os.path.join(folder, f"{i:06d}.png"), "wb") as f:
                    f.write(tf.io.encode_png(image).numpy())


def _run_probe(values, model, source, mode, max_examples, cache_dir):
    from llp_tf.data.sources.base import TRAIN, VALIDATION
    from llp_tf.after_training import features
    from llp_tf.after_training.probe import linear_probe, readout
    settings = readout.ProbeSettings(epochs=values.epochs, batch_size=values.batch,
                                     patience=100, standardize=True,
                                     max_train_examples=max_examples)
    with open(os.devnull, "w") as quiet:
        if mode == "cached":
            return linear_probe.probe_trunk(model, source, values.image_size, settings,
                                            cache_dir=cache_dir, stream=quiet)[0]
        index = features.subsample_index(source.info.num_train, max_examples, 0)
        train = features.extract_features(model, source, TRAIN, values.image_size,
                                          values.batch, quiet, index=index)
        validation = features.extract_features(model, source, VALIDATION,
                                               values.image_size, values.batch, quiet)
        return readout.train_readout(train, validation, source.info.num_classes, settings,
                                     quiet)[1]


def probe_memory(values, out):
    """Runs one probe (--probe_mode on --probe_folder) in this process; prints its
    peak RSS growth in MiB."""
    import tensorflow as tf
    from llp_tf.data.sources.registry import load_source
    from llp_tf.models.factory import build_model
    folder, mode = values.probe_folder, values.probe_mode
    tf.config.threading.set_intra_op_parallelism_threads(values.threads)
    source = load_source(f"folder:{folder}")
    model = build_model("resnet10", values.classes, embedding_dim=16, width=values.width,
                        blocks_per_stage=(1, 1, 1, 1)).create_weights(values.image_size)
    caches = tempfile.mkdtemp(prefix="bench_probe_cache_", dir=os.path.dirname(folder))
    _run_probe(values, model, source, mode, WARM_UP_EXAMPLES, os.path.join(caches, "warm"))
    baseline = peak_rss.reset_peak_rss()
    start = time.monotonic()
    result = _run_probe(values, model, source, mode, None, os.path.join(caches, "full"))
    growth = peak_rss.peak_growth_mib(baseline)
    shutil.rmtree(caches)
    print(json.dumps({"growth_mib": growth, "seconds": time.monotonic() - start,
                      "val_top1": result.val_top1, "feature_dim": model.feature_dim,
                      "num_train": source.info.num_train}), file=out)


def _measure(values, folder, mode):
    """The figures a fresh run of this script measuring ``mode`` prints."""
    flag_args = [f"--{name}={getattr(values, name)}" for name in
                 ("validation", "classes", "image_size", "width", "epochs", "batch", "threads")]
    return peak_rss.fresh_process_figures(os.path.abspath(__file__), [
        f"--probe_folder={folder}", f"--probe_mode={mode}"] + flag_args)


def _report(rows, out):
    print(f"{'N':>7} {'F':>5} {'features MiB':>12} {'cached: growth MiB':>19} "
          f"{'in memory: growth MiB':>22} {'cached s':>8}", file=out)
    for row in rows:
        print(f"{row['num_train']:7d} {row['feature_dim']:5d} {row['features_mib']:12.1f} "
              f"{row['cached']['growth_mib']:19.1f} {row['in_memory']['growth_mib']:22.1f} "
              f"{row['cached']['seconds']:8.1f}", file=out)
    small, large = rows
    ratios = {mode: large[mode]["growth_mib"] / max(small[mode]["growth_mib"], 1e-9)
              for mode in ("cached", "in_memory")}
    print(f"peak growth at {large['num_train']} / at {small['num_train']} images "
          f"({large['features_mib'] / small['features_mib']:.0f}x the features): cached "
          f"{ratios['cached']:.2f}x, in memory {ratios['in_memory']:.2f}x", file=out)
    return ratios


def benchmark(values, out, err):
    """Runs the benchmark, or with --probe_folder one probe's measurement."""
    del err
    if values.probe_folder:
        probe_memory(values, out)
        return
    work = tempfile.mkdtemp(prefix="bench_probe_")
    rows = []
    try:
        rng = np.random.default_rng(0)
        for size in [int(size) for size in values.sizes]:
            folder = os.path.join(work, f"n{size}")
            _write_folder(values, folder, size, rng)
            row = {mode: _measure(values, folder, mode) for mode in ("cached", "in_memory")}
            row.update(num_train=row["cached"]["num_train"],
                       feature_dim=row["cached"]["feature_dim"])
            row["features_mib"] = row["num_train"] * row["feature_dim"] * 4 / 2**20
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = _report(rows, out)
    if values.output:
        with open(values.output, "w") as f:
            json.dump({"rows": rows, "growth_ratios": ratios}, f, indent=2)


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
