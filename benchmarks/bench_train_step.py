"""Benchmark of the training step: LLP against supervised, bfloat16 against
float32, XLA-compiled against not.

Same model architecture, batch and thread count, on synthetic in-memory
batches (so the input pipeline is not measured), with an ImageNet-shaped
bank by default (N = 1,281,167 rows of 128 float32, 10 % labelled, 1000
classes). Prints the time per step of

  - the supervised baseline (forward, cross-entropy, backward, SGD),
  - the LLP step (the same plus the aggregation loss over the whole bank,
    propagation from the labelled rows and the bank update),
  - the LLP step with --mixed_precision=bfloat16, and with --jit_compile,
  - the bank work alone (aggregation loss forward + backward from fixed
    embeddings, propagation, bank update),

all interleaved in one run, and their ratios: (LLP - supervised) beside the
bank work (LLP should add only the bank matmuls and top-k), bfloat16 /
float32 and XLA / not. On a CPU these ratios say little about a GPU (see
tools/bench_gpu_model.py for that); they show the options work at this scale.
"""

import os
import sys
import time

import quiet_start  # noqa: E402 -- tools/ is on the path of a script run from it
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("architecture", "resnet18", "Model architecture.")
flags.DEFINE_float("width", 0.25, "Width multiplier of the model.")
flags.DEFINE_integer("image_size", 32, "Input side (small inputs use the CIFAR stem).")
flags.DEFINE_integer("batch", 128, "Global batch size.")
flags.DEFINE_integer("bank", 1_281_167, "N: bank rows (ImageNet's training set).")
flags.DEFINE_integer("labeled", 128_116, "M: labelled rows (10 %).")
flags.DEFINE_integer("classes", 1000, "C: classes.")
flags.DEFINE_integer("steps", 4, "Steps per timed call.")
flags.DEFINE_integer("rounds", 9, "Timed calls per phase (alternating); the median is kept.")
flags.DEFINE_integer("threads", os.cpu_count(), "TensorFlow intra-op threads.")


def _methods(strategy, rng, b, n, m, c, size, precision="float32", jit_compile=False):
    """(bank, LLP method, supervised method) sharing one model and optimizer."""
    import keras

    from llp_tf.core.memory_bank import MemoryBank
    from llp_tf.models import build_model
    from llp_tf.models import precision as precision_lib
    from llp_tf.training.methods import LLPMethod, SupervisedMethod

    keras.utils.set_random_seed(0)
    model = build_model(FLAGS.architecture, c, width=FLAGS.width, small_inputs=size <= 64,
                        precision=precision).create_weights(size)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    optimizer = precision_lib.wrap_optimizer(optimizer, precision, model.trainable_variables)
    labeled = np.random.default_rng(0).choice(n, m, replace=False)
    bank = MemoryBank(n, 128, c, labeled, rng.integers(0, c, m))
    common = dict(num_classes=c, global_batch_size=b, weight_decay=1e-4,
                  jit_compile=jit_compile)
    llp = LLPMethod(strategy, model, optimizer, bank, temperature=0.07, k=10, t=25,
                    propagation_method="local", weight_by_confidence=True,
                    use_categorisation=True, density_chunk_size=1024, **common)
    llp.refresh_density()
    supervised = SupervisedMethod(strategy, model, optimizer, **common)
    return bank, llp, supervised


def _synthetic_batches(strategy, rng, b, n, size):
    """(endless iterator of one batch of images with new bank indices each time, the
    permutation of the bank rows the indices follow)."""
    import tensorflow as tf

    images = tf.constant(rng.normal(size=(b, size, size, 3)).astype(np.float32))
    order = rng.permutation(n)
    batches = tf.data.Dataset.range(10**9).map(lambda i: {
        "image": images,
        "label": tf.zeros([b], tf.int64),
        # Distinct indices within a batch, different batches over time.
        "index": tf.gather(tf.constant(order), (i * b + tf.range(b, dtype=tf.int64)) % n),
    }).prefetch(2)
    return iter(strategy.distribute_datasets_from_function(lambda ctx: batches)), order


def _bank_work(bank, embeddings, index, c):
    """tf.function(steps): the LLP step's bank work alone, ``steps`` times."""
    import tensorflow as tf

    from llp_tf.core import losses, propagation

    @tf.function
    def bank_work(steps):
        for _ in tf.range(steps):
            labels, _ = bank.read(index)
            with tf.GradientTape() as tape:
                tape.watch(embeddings)
                loss = tf.reduce_sum(losses.aggregation_loss(embeddings, bank.embeddings,
                                                             bank.labels, labels))
            # Feeding the gradient into the update keeps tf.function from pruning it.
            moved = tf.math.l2_normalize(embeddings - 1e-3 * tape.gradient(loss, embeddings), 1)
            classes, confidence = propagation.propagate(
                moved, bank.labeled_embeddings(), bank.labeled_classes(), c,
                density=bank.density)
            bank.update(index, moved, classes, confidence)

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


def _print_report(median, b, n, m, c, size):
    supervised, llp, bank_only = (median["supervised step"], median["LLP step"],
                                  median["bank work alone"])
    print(f"training step, {FLAGS.architecture} x{FLAGS.width} at {size}px, batch {b}, "
          f"bank N={n}, M={m} labelled, C={c} ({FLAGS.threads} threads)")
    for name, value in median.items():
        print(f"  {name:24s} {value * 1e3:8.1f} ms")
    print(f"  LLP / supervised = {llp / supervised:.2f}; LLP - supervised = "
          f"{(llp - supervised) * 1e3:.1f} ms, bank work alone = {bank_only * 1e3:.1f} ms "
          f"(ratio {(llp - supervised) / bank_only:.2f})")
    print(f"  LLP step bfloat16 / float32 = {median['LLP step, bfloat16'] / llp:.2f}; "
          f"XLA-compiled / not = {median['LLP step, jit_compile'] / llp:.2f}")


def main(argv):
    del argv
    import tensorflow as tf

    from llp_tf.training.methods import StepRunner

    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    rng = np.random.default_rng(0)
    b, n, m, c, size = FLAGS.batch, FLAGS.bank, FLAGS.labeled, FLAGS.classes, FLAGS.image_size
    strategy = tf.distribute.get_strategy()
    bank, llp, supervised = _methods(strategy, rng, b, n, m, c, size)
    runners = {"supervised step": (StepRunner(supervised), "supervised"),
               "LLP step": (StepRunner(llp), "llp"),
               "LLP step, bfloat16": (StepRunner(_methods(
                   strategy, rng, b, n, m, c, size, precision="bfloat16")[1]), "llp"),
               "LLP step, jit_compile": (StepRunner(_methods(
                   strategy, rng, b, n, m, c, size, jit_compile=True)[1]), "llp")}
    iterator, order = _synthetic_batches(strategy, rng, b, n, size)
    embeddings = tf.math.l2_normalize(tf.constant(rng.normal(size=(b, 128)), tf.float32), 1)
    bank_work = _bank_work(bank, embeddings, tf.constant(order[:b]), c)
    contenders = {name: (lambda r=runner, p=phase: r.run(iterator, FLAGS.steps, p))
                  for name, (runner, phase) in runners.items()}
    contenders["bank work alone"] = lambda: bank_work(tf.constant(FLAGS.steps))
    _print_report(_median_step_seconds(contenders, FLAGS.steps, FLAGS.rounds), b, n, m, c, size)


if __name__ == "__main__":
    app.run(main)
