"""Benchmark of the LLP core against reference implementations, in one run.

Prints, on the same arrays and with the same thread count:
  1. per-batch propagation (B queries against M labelled rows, top-k voting)
     next to faiss `IndexFlatIP.search` doing the same neighbour search;
  2. a density refresh (Q labelled rows against the N-row bank, top-t) next
     to faiss doing the same search;
  3. the aggregation loss forward + backward (B x N bank) in GFLOP/s, counting
     4 B N D, next to a plain `tf.matmul` of the same [B, D] x [D, N] shape;
  4. peak resident memory of the density refresh at two chunk sizes and two
     query counts (each in a fresh subprocess), showing it follows the chunk;
  5. peak resident memory of the aggregation loss forward + backward against
     an ImageNet-sized bank (N = 1,281,167 rows, one replica batch) and a
     5,000,000-row one, each in a fresh subprocess, next to the B x N float32
     logits (which the loss does not hold: its memory follows its block of
     rows, so the two figures should be equal).

Contenders run in alternating blocks (ours x n, theirs x n, ours x n, ...),
each opened by an untimed call, and their medians are compared, so the
ratios (faiss time / our time; our GFLOP/s / matmul GFLOP/s) hold even on a
machine whose speed drifts. Measurements 1-4 use a smaller bank than the
figures of docs/performance.md unless --full is given.
"""

import json
import os
import sys
import time

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import peak_rss  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.core import hyperparameters  # noqa: E402 -- no TensorFlow
from llp_tf.models.config import EMBEDDING_DIM  # noqa: E402 -- no TensorFlow

#: The sizes of docs/performance.md's figures, for --full.
FULL_SIZES = {"bank": 128_000, "density_queries": 12_800}


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_integer("threads", os.cpu_count(), "Threads for TensorFlow (intra-op) and "
                         "faiss (OpenMP) alike.", flag_values=values)
    flags.DEFINE_integer("repeats", 6, "Timed runs per measurement (over 3 rounds); the median "
                         "is reported.", flag_values=values)
    flags.DEFINE_integer("batch", 128, "B: queries per propagation batch and loss batch.",
                         flag_values=values)
    flags.DEFINE_integer("labelled", 12_800, "M: labelled rows for per-batch propagation.",
                         flag_values=values)
    flags.DEFINE_integer("bank", 32_000, "N: bank rows for the density refresh and the loss "
                         "(--full: 128,000).", flag_values=values)
    flags.DEFINE_integer("density_queries", 8_192, "Q: rows whose density is refreshed "
                         "(--full: 12,800); the memory measurement takes Q / 4 and Q.",
                         flag_values=values)
    flags.DEFINE_integer("dim", EMBEDDING_DIM, "D: embedding size.", flag_values=values)
    flags.DEFINE_integer("k", hyperparameters.K, "Voters per propagation.", flag_values=values)
    flags.DEFINE_integer("t", hyperparameters.T, "Neighbours in the density estimate.",
                         flag_values=values)
    flags.DEFINE_list("memory_chunks", ["256", "2048"],
                      "Two chunk sizes for the density memory measurement.", flag_values=values)
    flags.DEFINE_string("output", "", "Optional path of a JSON file for the figures.",
                        flag_values=values)
    flags.DEFINE_list("loss_memory_banks", ["1281167", "5000000"], "Bank sizes N of the "
                      "aggregation loss memory measurement, a fresh process each (ImageNet's "
                      "train split, and about 4 times it); empty skips it.",
                      flag_values=values)
    flags.DEFINE_integer("memory_probe_chunk", 0, "Internal: run one density refresh with "
                         "this chunk size and print the peak RSS growth (used by the memory "
                         "measurement).", flag_values=values)
    flags.DEFINE_integer("memory_probe_queries", 0, "Internal: Q for --memory_probe_chunk.",
                         flag_values=values)
    flags.DEFINE_integer("loss_memory_probe", 0, "Internal: run one aggregation loss "
                         "forward + backward against a bank of this many rows and print the "
                         "peak RSS growth (used by the memory measurement).",
                         flag_values=values)
    return values


def _unit_rows(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _interleaved_seconds(functions, repeats, rounds=3):
    """Median seconds of each function, measured in alternating blocks.

    Each round runs every function ``repeats`` times in a row, one after the
    other (A A A B B B A A A ...), so all of them see the same drift of the
    machine's speed. A block starts with an untimed call: OpenMP (faiss) and
    TensorFlow thread pools spin for a while after their work, and a timed
    call right after the other library would pay for its spinning.
    """
    times = [[] for _ in functions]
    for _ in range(rounds):
        for fn, record in zip(functions, times):
            fn()  # warm-up: tracing, allocation, the other library's spinning threads
            for _ in range(max(1, repeats // rounds)):
                start = time.perf_counter()
                fn()
                record.append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def _configure_threads(threads):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def memory_probe(values, out):
    """Runs one density refresh (--memory_probe_queries rows, chunks of
    --memory_probe_chunk) in this process; prints its peak RSS growth in MiB."""
    import tensorflow as tf
    from llp_tf.core import propagation
    _configure_threads(values.threads)
    rng = np.random.default_rng(0)
    bank = tf.constant(_unit_rows(rng, values.bank, values.dim))
    queries = tf.constant(bank[:values.memory_probe_queries])
    # A small call first, so TF's start-up allocations are in the baseline.
    propagation.local_density(queries[:8], bank[:64], t=values.t, chunk_size=8).numpy()
    baseline = peak_rss.reset_peak_rss()
    propagation.local_density(queries, bank, t=values.t,
                              chunk_size=values.memory_probe_chunk).numpy()
    print(json.dumps({"growth_mib": peak_rss.peak_growth_mib(baseline)}), file=out)


def loss_memory_probe(values, out):
    """One aggregation loss forward + backward (B x --loss_memory_probe rows)
    in this process; prints the peak RSS growth in MiB over the bank and the batch."""
    import tensorflow as tf
    _configure_threads(values.threads)
    rng = np.random.default_rng(0)
    n = values.loss_memory_probe
    # The bank is drawn a block of rows at a time into its array: a [N, D]
    # float64 normal array would be twice the bank, and a concatenation of
    # blocks would hold it twice.
    bank = np.empty((n, values.dim), np.float32)
    for start in range(0, n, 65_536):
        bank[start:start + 65_536] = _unit_rows(rng, min(65_536, n - start), values.dim)
    loss_step, _ = _loss_step(rng, tf.constant(bank), values.batch, n, values.dim)
    del bank
    # Traced before the baseline, but not run: the allocator keeps what a run
    # frees, so a second run would not show the peak. XLA's compilation of the
    # element-wise kernels is in the figure.
    loss_step.get_concrete_function()
    baseline = peak_rss.reset_peak_rss()
    loss_step().numpy()
    print(json.dumps({"growth_mib": peak_rss.peak_growth_mib(baseline)}), file=out)


def _probe_in_subprocess(values, args):
    """The figures a fresh run of this script with ``args`` prints."""
    return peak_rss.fresh_process_figures(os.path.abspath(__file__), [
        f"--dim={values.dim}", f"--t={values.t}", f"--threads={values.threads}",
        f"--batch={values.batch}"] + args)


def _density_memory(values, chunks, query_counts):
    rows = []
    for chunk in chunks:
        for queries in query_counts:
            growth = _probe_in_subprocess(values, [f"--memory_probe_chunk={chunk}",
                                                   f"--memory_probe_queries={queries}",
                                                   f"--bank={values.bank}"])["growth_mib"]
            rows.append({"chunk": chunk, "queries": queries, "growth_mib": growth,
                         "chunk_scores_mib": chunk * values.bank * 4 / 2**20})
    return rows


def _loss_memory(values):
    rows = []
    for n in (int(n) for n in values.loss_memory_banks):
        growth = _probe_in_subprocess(values, [f"--loss_memory_probe={n}"])["growth_mib"]
        logits_mib = values.batch * n * 4 / 2**20
        rows.append({"bank_rows": n, "batch": values.batch, "growth_mib": growth,
                     "logits_mib": logits_mib, "growth_over_logits": growth / logits_mib})
    return rows


def _bench_propagation(values, rng, faiss):
    """Per-batch propagation (LLP's locally weighted vote, the default) vs faiss's search."""
    import tensorflow as tf
    from llp_tf.core import propagation

    b, m, d = values.batch, values.labelled, values.dim
    queries = _unit_rows(rng, b, d)
    labelled = _unit_rows(rng, m, d)
    classes = rng.integers(0, 1000, m)
    density = rng.uniform(1e6, 4e7, m).astype(np.float32)
    tf_args = [tf.constant(x) for x in (queries, labelled, classes, density)]
    propagate = tf.function(lambda e, l, c, r: propagation.propagate(
        e, l, c, 1000, k=values.k, density=r))
    index = faiss.IndexFlatIP(d)
    index.add(labelled)
    ours, theirs = _interleaved_seconds(
        [lambda: [x.numpy() for x in propagate(*tf_args)],
         lambda: index.search(queries, values.k)], values.repeats * 12)
    return {"ours_ms": ours * 1e3, "faiss_ms": theirs * 1e3, "faiss_over_ours": theirs / ours}


def _bench_density(values, rng, faiss):
    """(figures, the bank as a tensor): a density refresh of Q rows against the whole bank."""
    import tensorflow as tf
    from llp_tf.core import propagation

    n, d, q = values.bank, values.dim, values.density_queries
    bank = _unit_rows(rng, n, d)
    density_queries = bank[:q]
    bank_t, density_queries_t = tf.constant(bank), tf.constant(density_queries)
    index = faiss.IndexFlatIP(d)
    index.add(bank)
    ours, theirs = _interleaved_seconds(
        [lambda: propagation.local_density(density_queries_t, bank_t, t=values.t).numpy(),
         lambda: index.search(density_queries, values.t)], values.repeats)
    return {"ours_s": ours, "faiss_s": theirs, "faiss_over_ours": theirs / ours}, bank_t


def _loss_step(rng, bank_t, b, n, d):
    """(a tf.function giving d(sum of the aggregation loss)/d embeddings, the
    [B, D] embeddings variable): labels of 1000 classes, the batch's from the bank."""
    import tensorflow as tf
    from llp_tf.core import losses

    embeddings = tf.Variable(_unit_rows(rng, b, d))
    bank_labels = tf.constant(rng.integers(0, 1000, n))
    labels = tf.gather(bank_labels, tf.range(b))

    @tf.function
    def loss_step():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(losses.aggregation_loss(embeddings, bank_t, bank_labels,
                                                          labels))
        return tape.gradient(total, embeddings)

    return loss_step, embeddings


def _bench_aggregation_loss(values, rng, bank_t):
    """The aggregation loss forward + backward against the whole bank vs a plain matmul."""
    import tensorflow as tf

    b, n, d = values.batch, values.bank, values.dim
    loss_step, embeddings = _loss_step(rng, bank_t, b, n, d)

    @tf.function
    def matmul():
        return tf.matmul(embeddings, bank_t, transpose_b=True)

    # The matmul is reduced on device so that neither side pays a copy to numpy.
    loss_s, matmul_s = _interleaved_seconds(
        [lambda: loss_step().numpy(), lambda: tf.reduce_sum(matmul()[:, :1]).numpy()],
        values.repeats * 4)
    loss_gflops = 4 * b * n * d / loss_s / 1e9
    matmul_gflops = 2 * b * n * d / matmul_s / 1e9
    return {"loss_ms": loss_s * 1e3, "matmul_ms": matmul_s * 1e3, "loss_gflops": loss_gflops,
            "matmul_gflops": matmul_gflops, "ratio": loss_gflops / matmul_gflops}


def run_benchmarks(values):
    """dict of the five measurements of the module docstring, with the sizes and threads."""
    import faiss

    _configure_threads(values.threads)
    faiss.omp_set_num_threads(values.threads)
    rng = np.random.default_rng(0)
    results = {"threads": values.threads, "sizes": dict(
        B=values.batch, M=values.labelled, N=values.bank, Q=values.density_queries,
        D=values.dim, k=values.k, t=values.t)}
    # The measurements draw from one generator in this order.
    results["propagation"] = _bench_propagation(values, rng, faiss)
    results["density"], bank_t = _bench_density(values, rng, faiss)
    results["aggregation_loss"] = _bench_aggregation_loss(values, rng, bank_t)
    # Memory of the density refresh: bounded by the chunk, not by Q.
    chunks = [int(c) for c in values.memory_chunks]
    q = values.density_queries
    results["density_memory"] = _density_memory(values, chunks, [q // 4, q])
    if values.loss_memory_banks:
        results["loss_memory"] = _loss_memory(values)
    return results


def _print_loss_memory(rows, out):
    print(f"aggregation loss fwd+bwd peak RSS growth (B={rows[0]['batch']}, fresh process "
          "each, bank and batch excluded)", file=out)
    for m in rows:
        target = "   (target <= 0.25)" if m is rows[0] else ""
        print(f"  N={m['bank_rows']:9d}: {m['growth_mib']:8.1f} MiB = "
              f"{m['growth_over_logits']:.3f} x the B x N float32 logits "
              f"({m['logits_mib']:.0f} MiB){target}", file=out)
    if len(rows) > 1:
        print(f"  growth at N={rows[-1]['bank_rows']} / at N={rows[0]['bank_rows']} = "
              f"{rows[-1]['growth_mib'] / rows[0]['growth_mib']:.2f}   (target <= 1.1)",
              file=out)


def print_report(r, out):
    s = r["sizes"]
    print(f"LLP core benchmark  ({r['threads']} threads for TensorFlow and faiss alike)",
          file=out)
    print("-" * 78, file=out)
    p = r["propagation"]
    print(f"propagation  B={s['B']} vs M={s['M']}, D={s['D']}, k={s['k']} (local weights)",
          file=out)
    print(f"  ours {p['ours_ms']:8.2f} ms   faiss IndexFlatIP {p['faiss_ms']:8.2f} ms   "
          f"faiss/ours = {p['faiss_over_ours']:.2f}   (target >= 1.0)", file=out)
    dn = r["density"]
    print(f"density refresh  Q={s['Q']} vs N={s['N']}, t={s['t']}", file=out)
    print(f"  ours {dn['ours_s']:8.2f} s    faiss IndexFlatIP {dn['faiss_s']:8.2f} s    "
          f"faiss/ours = {dn['faiss_over_ours']:.2f}   (target >= 1.0)", file=out)
    a = r["aggregation_loss"]
    print(f"aggregation loss fwd+bwd  B={s['B']} vs N={s['N']}, D={s['D']} (4BND flops)",
          file=out)
    print(f"  loss {a['loss_ms']:8.2f} ms = {a['loss_gflops']:6.1f} GFLOP/s   "
          f"tf.matmul {a['matmul_ms']:7.2f} ms = {a['matmul_gflops']:6.1f} GFLOP/s   "
          f"ratio = {a['ratio']:.2f}   (target >= 0.82)", file=out)
    print(f"density refresh peak RSS growth (N={s['N']}, fresh process each)", file=out)
    for row in r["density_memory"]:
        print(f"  chunk {row['chunk']:5d}  Q={row['queries']:6d}: {row['growth_mib']:8.1f} MiB"
              f"   (one chunk of scores: {row['chunk_scores_mib']:.0f} MiB)", file=out)
    if "loss_memory" in r:
        _print_loss_memory(r["loss_memory"], out)


def benchmark(values, out, err):
    """Runs the benchmark, or with an internal flag one memory probe."""
    del err
    if values.memory_probe_chunk:
        memory_probe(values, out)
        return
    if values.loss_memory_probe:
        loss_memory_probe(values, out)
        return
    results = run_benchmarks(values)
    print_report(results, out)
    if values.output:
        with open(values.output, "w") as f:
            json.dump(results, f, indent=2)


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
