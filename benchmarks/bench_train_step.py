"""Benchmark of the training step: LLP against supervised, bfloat16 against
float32, XLA-compiled against not.

Same model architecture, batch and thread count, on synthetic in-memory
batches (so the input pipeline is not measured), with a bank of --bank
rows of 128 float32, 10 % labelled, 1000 classes (--full: ImageNet's,
N = 1,281,167). Prints the time per step of

  - the supervised baseline (forward, cross-entropy, backward, SGD),
  - the LLP step (the same plus the aggregation loss over the whole bank,
    propagation from the labelled rows and the bank update),
  - the LLP step with --mixed_precision=bfloat16, and with --jit_compile,
  - the LLP step with the device-side augmentation ("paper") first in the
    replica function (`streams.finish_batch`, as ``--augment_on=device``
    runs it), on batches of uint8 resized crops and their random choices,
  - the bank work alone (aggregation loss forward + backward from fixed
    embeddings, propagation, bank update),

all interleaved in one run, and their ratios: (LLP - supervised) beside the
bank work (LLP should add only the bank matmuls and top-k), bfloat16 /
float32, XLA / not, and the step with device-side augmentation / without
(what the step pays for what the input saves). On a CPU these ratios say little about a GPU (see
benchmarks/bench_gpu_model.py for that); they show the options work at this
scale.
"""

import os
import sys
import time

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

#: The sizes of docs/performance.md's figures, for --full: ImageNet's bank.
FULL_SIZES = {"bank": 1_281_167, "labelled": 128_116, "steps": 4, "rounds": 9}


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_string("architecture", "resnet18", "Model architecture.", flag_values=values)
    flags.DEFINE_float("width", 0.25, "Width multiplier of the model.", flag_values=values)
    flags.DEFINE_integer("image_size", 32, "Input side (small inputs use the CIFAR stem).",
                         flag_values=values)
    flags.DEFINE_integer("batch", 128, "Global batch size.", flag_values=values)
    flags.DEFINE_integer("bank", 128_000, "N: bank rows (--full: 1,281,167, ImageNet's "
                         "training set).", flag_values=values)
    flags.DEFINE_integer("labelled", 12_800, "M: labelled rows, 10 % (--full: 128,116).",
                         flag_values=values)
    flags.DEFINE_integer("classes", 1000, "C: classes.", flag_values=values)
    flags.DEFINE_integer("steps", 2, "Steps per timed call (--full: 4).", flag_values=values)
    flags.DEFINE_integer("rounds", 5, "Timed calls per phase (alternating); the median is kept "
                         "(--full: 9).", flag_values=values)
    flags.DEFINE_integer("threads", os.cpu_count(), "TensorFlow intra-op threads.",
                         flag_values=values)
    return values


def _methods(values, strategy, rng, precision="float32", jit_compile=False):
    """(bank, LLP method, supervised method) sharing one model and optimizer."""
    import keras

    from llp_tf.core.memory_bank import MemoryBank
    from llp_tf.models.config import EMBEDDING_DIM
    from llp_tf.models.factory import build_model
    from llp_tf.models import precision as precision_lib
    from llp_tf.training.methods import LLPMethod, SupervisedMethod

    b, n, m, c, size = (values.batch, values.bank, values.labelled, values.classes,
                        values.image_size)
    keras.utils.set_random_seed(0)
    model = build_model(values.architecture, c, width=values.width, small_inputs=size <= 64,
                        precision=precision).create_weights(size)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    optimizer = precision_lib.wrap_optimizer(optimizer, precision, model.trainable_variables)
    labelled = np.random.default_rng(0).choice(n, m, replace=False)
    bank = MemoryBank(n, EMBEDDING_DIM, c, labelled, rng.integers(0, c, m))
    common = dict(num_classes=c, global_batch_size=b, weight_decay=1e-4,
                  jit_compile=jit_compile)
    llp = LLPMethod(strategy, model, optimizer, bank, settings=bench_cli.paper_llp_settings(),
                    **common)
    llp.refresh_density()
    supervised = SupervisedMethod(strategy, model, optimizer, **common)
    return bank, llp, supervised


#: The stream names the methods' steps read (`Method.input_spec`): each gets the same batch.
STREAM_NAMES = ("used", "labelled")


def _device_images(rng, b, size):
    """{"image": uint8 [b, S, S, 3] resized crops, "augment": {"image": their
    random choices of the "paper" policy, each [b, ...]}}, as a batch made with
    ``augment_on="device"`` holds them (`views.make_views`)."""
    import tensorflow as tf

    from llp_tf.data.augmentation import views

    choices = [views.view_params(tf.constant([0, k], tf.int64), size, "paper", views.WEAK)
               for k in range(b)]
    return {"image": tf.constant(rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8)),
            "augment": {"image": tf.nest.map_structure(lambda *x: tf.stack(x), *choices)}}


def _synthetic_batches(strategy, rng, b, n, size, device=False):
    """(endless iterator of one batch of images with new bank indices each time, the
    permutation of the bank rows the indices follow). Each method's stream
    (`STREAM_NAMES`) reads that batch; with ``device``, its images are uint8
    crops to finish on the device (`_device_images`), else float32 images."""
    import tensorflow as tf

    images = ({"image": tf.constant(rng.normal(size=(b, size, size, 3)).astype(np.float32))}
              if not device else _device_images(rng, b, size))
    order = rng.permutation(n)

    def batch(i):
        # Distinct indices within a batch, different batches over time.
        index = tf.gather(tf.constant(order), (i * b + tf.range(b, dtype=tf.int64)) % n)
        element = {**images, "label": tf.zeros([b], tf.int64), "index": index}
        return {name: element for name in STREAM_NAMES}

    batches = tf.data.Dataset.range(10**9).map(batch).prefetch(2)
    return iter(strategy.distribute_datasets_from_function(lambda ctx: batches)), order


def _device_runner(llp, values):
    """A `StepRunner` of the LLP step that finishes a batch of device-side
    elements first in the replica function, as a run with ``--augment_on=device``."""
    from llp_tf.data.pipeline import streams
    from llp_tf.training.methods import StepRunner

    used = {"used": streams.Stream(np.arange(values.bank), values.batch)}
    return StepRunner(llp, lambda batch: streams.finish_batch(batch, used, "paper"))


def _bank_work(bank, embeddings, index):
    """tf.function(steps): the LLP step's bank work alone, ``steps`` times."""
    import tensorflow as tf

    from llp_tf.core.bank import BankWrite

    @tf.function
    def bank_work(steps):
        for _ in tf.range(steps):
            labels, _ = bank.read(index)
            with tf.GradientTape() as tape:
                tape.watch(embeddings)
                loss = tf.reduce_sum(bank.aggregation_loss(embeddings, labels))
            # Feeding the gradient into the update keeps tf.function from pruning it.
            moved = tf.math.l2_normalize(embeddings - 1e-3 * tape.gradient(loss, embeddings), 1)
            classes, confidence = bank.propagate(moved)
            bank.update(BankWrite(index, moved, classes, confidence))

    return bank_work


def _median_step_seconds(contenders, steps, rounds):
    """Median seconds per step of each contender (a call runs ``steps`` steps)."""
    times = {name: [] for name in contenders}
    for fn in contenders.values():
        fn()  # tracing and warm-up
    for _ in range(rounds):
        for name, fn in contenders.items():
            fn()  # settle the thread pools after the other contender
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) / steps)
    return {name: float(np.median(t)) for name, t in times.items()}


def _print_report(values, median, out):
    supervised, llp, bank_only = (median["supervised step"], median["LLP step"],
                                  median["bank work alone"])
    print(f"training step, {values.architecture} x{values.width} at {values.image_size}px, "
          f"batch {values.batch}, bank N={values.bank}, M={values.labelled} labelled, "
          f"C={values.classes} ({values.threads} threads)", file=out)
    for name, value in median.items():
        print(f"  {name:24s} {value * 1e3:8.1f} ms", file=out)
    print(f"  LLP / supervised = {llp / supervised:.2f}; LLP - supervised = "
          f"{(llp - supervised) * 1e3:.1f} ms, bank work alone = {bank_only * 1e3:.1f} ms "
          f"(ratio {(llp - supervised) / bank_only:.2f})", file=out)
    print(f"  LLP step bfloat16 / float32 = {median['LLP step, bfloat16'] / llp:.2f}; "
          f"XLA-compiled / not = {median['LLP step, jit_compile'] / llp:.2f}", file=out)
    device = median["LLP step, device augment"]
    print(f"  LLP step with device-side augmentation / without = {device / llp:.2f} "
          f"(+{(device - llp) * 1e3:.1f} ms per step)", file=out)


def benchmark(values, out, err):
    """Times the contenders of the module docstring, interleaved, and prints them."""
    del err
    import tensorflow as tf

    from llp_tf.training.methods import StepRunner

    tf.config.threading.set_intra_op_parallelism_threads(values.threads)
    rng = np.random.default_rng(0)
    strategy = tf.distribute.get_strategy()
    bank, llp, supervised = _methods(values, strategy, rng)
    runners = {"supervised step": (StepRunner(supervised), "supervised"),
               "LLP step": (StepRunner(llp), "llp"),
               "LLP step, bfloat16": (StepRunner(_methods(
                   values, strategy, rng, precision="bfloat16")[1]), "llp"),
               "LLP step, jit_compile": (StepRunner(_methods(
                   values, strategy, rng, jit_compile=True)[1]), "llp")}
    iterator, order = _synthetic_batches(strategy, rng, values.batch, values.bank,
                                         values.image_size)
    embeddings = tf.math.l2_normalize(tf.constant(rng.normal(size=(values.batch, 128)),
                                                  tf.float32), 1)
    bank_work = _bank_work(bank, embeddings, tf.constant(order[:values.batch]))
    contenders = {name: (lambda r=runner, p=phase: r.run(iterator, values.steps, p))
                  for name, (runner, phase) in runners.items()}
    device_iterator = _synthetic_batches(strategy, rng, values.batch, values.bank,
                                         values.image_size, device=True)[0]
    contenders["LLP step, device augment"] = lambda r=_device_runner(llp, values): r.run(
        device_iterator, values.steps, "llp")
    contenders["bank work alone"] = lambda: bank_work(tf.constant(values.steps))
    _print_report(values, _median_step_seconds(contenders, values.steps, values.rounds), out)


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
