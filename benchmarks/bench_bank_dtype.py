"""What storing the bank at half precision (--bank_dtype) costs, from the same state.

  python benchmarks/bench_bank_dtype.py [--bank=200000] [--batch=256] [--dtypes=bfloat16,float16]

A bank of --bank rows of --dim (clustered unit embeddings around --classes centres, a
--labelled_share of the rows labelled, the others pseudo-labelled with their cluster's
class, the densities refreshed once in float32) is held at float32 and at each of --dtypes
(the same rows rounded to nearest), with the same labels and densities. A batch of --batch
unit embeddings near bank rows is then taken through each bank, and each half bank's results
are compared with the float32 bank's:

  - propagation (eq. 7-8, K = 10): the fraction of the batch given the same class, and the
    largest |confidence difference|;
  - the aggregation loss (eq. 2-4) with the rows' labels (LLP) and with instance labels (the
    warm start): the relative difference of the batch's mean loss, and the largest of any
    example's;
  - its gradient with respect to the batch's embeddings (of the mean loss): the relative
    difference ||G_half - G_32|| / ||G_32|| (Frobenius), and the largest of any example's row;
  - a density refresh (eq. 7, T = 25) from each bank: the largest |log rho difference|;
  - the bytes of the bank's embeddings, and of its whole state a row (embedding, int64 label,
    float32 confidence, bool).

It imports `llp_tf` from the path, so the same run measures another checkout with
PYTHONPATH pointing at it. Nothing is timed.
"""

import math
import sys

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

TAU, K, T = 0.07, 10, 25
#: Bytes of a row's state beside its embedding: int64 label, float32 confidence, bool.
OTHER_ROW_BYTES = 8 + 4 + 1


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values()
    flags.DEFINE_integer("bank", 200_000, "N: rows of the bank.", flag_values=values)
    flags.DEFINE_integer("dim", 128, "D: embedding size.", flag_values=values)
    flags.DEFINE_integer("classes", 1000, "C: classes (the clusters' centres).",
                         flag_values=values)
    flags.DEFINE_float("labelled_share", 0.01, "Share of the rows labelled (1 %: the "
                       "ImageNet 1 % regime).", flag_values=values)
    flags.DEFINE_float("spread", 0.8, "Spread of a cluster: rows are normalise(centre + "
                       "spread * g / sqrt(D)), g standard normal.", flag_values=values)
    flags.DEFINE_integer("batch", 256, "B: the batch's embeddings.", flag_values=values)
    flags.DEFINE_list("dtypes", ["bfloat16", "float16"], "The half dtypes compared with "
                      "float32.", flag_values=values)
    return values


def _unit(rows):
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _state(values):
    """(rows float32 [N, D], labels int64 [N], labelled index int64 [M], queries float32
    [B, D], the queries' rows int64 [B])."""
    rng = np.random.default_rng(0)
    n, d = values.bank, values.dim
    centres = rng.standard_normal((values.classes, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    classes = rng.integers(0, values.classes, n)
    rows = _unit(centres[classes] + values.spread * rng.standard_normal((n, d)) / math.sqrt(d))
    labelled = np.sort(rng.choice(n, max(1, int(n * values.labelled_share)), replace=False))
    chosen = rng.choice(n, values.batch, replace=False)
    queries = _unit(rows[chosen] + 0.3 * values.spread * rng.standard_normal(
        (values.batch, d)) / math.sqrt(d))
    return rows, classes.astype(np.int64), labelled, queries, chosen.astype(np.int64)


def _bank(values, dtype, rows, labels, labelled, density=None):
    """A `MemoryBank` of ``dtype`` holding ``rows`` (rounded to nearest), ``labels`` and
    ``density`` (refreshed in it if None)."""
    import tensorflow as tf

    from llp_tf.core.memory_bank import MemoryBank

    bank = MemoryBank(values.bank, values.dim, values.classes, labelled, labels[labelled],
                      embedding_dtype=dtype)
    bank.embeddings.assign(tf.cast(rows, bank.embedding_dtype))
    bank.labels.assign(labels)
    if density is None:
        tf.function(lambda: bank.refresh_density(t=T, temperature=TAU))()
    else:
        bank.density.assign(density)
    return bank


def _results(bank, queries, chosen):
    """name -> numpy: propagation's classes and confidences, both losses and gradients (each
    query with its row's label, or its instance id), the refreshed log densities (refreshed
    last: the state is compared first)."""
    import tensorflow as tf

    from llp_tf.core import label_encoding

    labels = {"llp": tf.gather(bank.labels, chosen),
              "instance": label_encoding.instance_labels(chosen, bank.num_classes)}

    @tf.function
    def step(queries):
        found = {}
        for name, instance in (("llp", False), ("instance", True)):
            with tf.GradientTape() as tape:
                tape.watch(queries)
                loss = bank.aggregation_loss(queries, labels[name], TAU,
                                             instance_labels=instance)
                mean = tf.reduce_mean(loss)
            found[name + "_loss"], found[name + "_gradient"] = loss, tape.gradient(mean, queries)
        found["classes"], found["confidence"] = bank.propagate(queries, k=K, temperature=TAU)
        return found

    found = {name: t.numpy() for name, t in step(tf.constant(queries)).items()}
    tf.function(lambda: bank.refresh_density(t=T, temperature=TAU))()
    found["log_density"] = np.log(bank.density.numpy())
    return found


def _relative(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def compare(got, want):
    """The figures of the module docstring of ``got`` (a half bank's `_results`) against
    ``want`` (the float32 bank's)."""
    figures = {"same class": float(np.mean(got["classes"] == want["classes"])),
               "max |d confidence|": float(np.max(np.abs(got["confidence"]
                                                          - want["confidence"]))),
               "max |d log rho|": float(np.max(np.abs(got["log_density"]
                                                       - want["log_density"])))}
    for name in ("llp", "instance"):
        loss, loss_32 = got[name + "_loss"], want[name + "_loss"]
        gradient, gradient_32 = got[name + "_gradient"], want[name + "_gradient"]
        figures[f"{name} loss rel. diff (mean)"] = abs(float(loss.mean() / loss_32.mean() - 1))
        figures[f"{name} loss rel. diff (max)"] = float(np.max(np.abs(loss / loss_32 - 1)))
        figures[f"{name} gradient rel. diff"] = _relative(gradient, gradient_32)
        figures[f"{name} gradient rel. diff (max row)"] = float(np.max(
            np.linalg.norm(gradient - gradient_32, axis=1)
            / np.linalg.norm(gradient_32, axis=1)))
    return figures


def measure(values, stdout, stderr):
    """Prints the figures of the module docstring, one half dtype a column."""
    import tensorflow as tf

    rows, labels, labelled, queries, chosen = _state(values)
    full = _bank(values, "float32", rows, labels, labelled)
    density = full.density.numpy()
    want = _results(full, queries, chosen)
    columns = {}
    for dtype in values.dtypes:
        bank = _bank(values, dtype, rows, labels, labelled, density)
        columns[dtype] = compare(_results(bank, queries, chosen), want)
        del bank
    n, d = values.bank, values.dim
    stdout.write(f"bank {n:,} x {d}, {values.classes} classes, {labelled.size:,} labelled; "
                 f"batch {values.batch}; K = {K}, T = {T}, tau = {TAU}; the same state, "
                 "each half dtype against float32\n")
    stdout.write(f"{'':34}" + "".join(f"{dtype:>12}" for dtype in values.dtypes) + "\n")
    for name in next(iter(columns.values())):
        cells = "".join(f"{columns[dtype][name]:>12.3g}" for dtype in values.dtypes)
        stdout.write(f"{name:34}{cells}\n")
    for dtype in ["float32"] + values.dtypes:
        size = tf.as_dtype(dtype).size
        stdout.write(f"{dtype}: embeddings {n * d * size / 2 ** 20:,.1f} MiB, "
                     f"{d * size + OTHER_ROW_BYTES} bytes a row of state\n")
    return 0


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
