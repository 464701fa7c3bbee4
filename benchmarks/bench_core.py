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
     an ImageNet-sized bank (N = 1,281,167 rows, one replica batch), in a
     fresh subprocess, next to the B x N float32 logits it must hold.

Contenders run in alternating blocks (ours x n, theirs x n, ours x n, ...),
each opened by an untimed call, and their medians are compared, so the
ratios (faiss time / our time; our GFLOP/s / matmul GFLOP/s) hold even on a
machine whose speed drifts.
"""

import json
import os
import subprocess
import sys
import time

import quiet_start  # noqa: E402 -- tools/ is on the path of a script run from it
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow
from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import peak_rss  # noqa: E402 -- tools/ is on the path of a script run from it

FLAGS = flags.FLAGS
flags.DEFINE_integer("threads", os.cpu_count(),
                     "Threads for TensorFlow (intra-op) and faiss (OpenMP) alike.")
flags.DEFINE_integer("repeats", 6, "Timed runs per measurement (over 3 rounds); the median "
                     "is reported.")
flags.DEFINE_integer("batch", 128, "B: queries per propagation batch and loss batch.")
flags.DEFINE_integer("labeled", 12_800, "M: labelled rows for per-batch propagation.")
flags.DEFINE_integer("bank", 128_000, "N: bank rows for the density refresh and the loss.")
flags.DEFINE_integer("density_queries", 12_800, "Q: rows whose density is refreshed.")
flags.DEFINE_integer("dim", 128, "D: embedding size.")
flags.DEFINE_integer("k", 10, "Voters per propagation.")
flags.DEFINE_integer("t", 25, "Neighbours in the density estimate.")
flags.DEFINE_list("memory_chunks", ["256", "2048"],
                  "Two chunk sizes for the density memory measurement.")
flags.DEFINE_string("output", "", "Optional path of a JSON file for the figures.")
flags.DEFINE_integer("memory_probe_chunk", 0,
                     "Internal: run one density refresh with this chunk size and print "
                     "the peak RSS growth (used by the memory measurement).")
flags.DEFINE_integer("memory_probe_queries", 0, "Internal: Q for --memory_probe_chunk.")
flags.DEFINE_integer("loss_memory_bank", 1_281_167,
                     "N of the aggregation loss memory measurement (ImageNet's train split); "
                     "0 skips it.")
flags.DEFINE_boolean("loss_memory_probe", False,
                     "Internal: run one aggregation loss forward + backward with "
                     "--loss_memory_bank rows and print the peak RSS growth.")


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








def memory_probe(chunk_size, num_queries):
    """Runs one density refresh in this process; prints its peak RSS growth in MiB."""
    import tensorflow as tf
    from llp_tf.core import propagation
    _configure_threads(FLAGS.threads)
    rng = np.random.default_rng(0)
    bank = tf.constant(_unit_rows(rng, FLAGS.bank, FLAGS.dim))
    queries = tf.constant(bank[:num_queries])
    # A small call first, so TF's start-up allocations are in the baseline.
    propagation.local_density(queries[:8], bank[:64], t=FLAGS.t, chunk_size=8).numpy()
    baseline = peak_rss.reset_peak_rss()
    propagation.local_density(queries, bank, t=FLAGS.t, chunk_size=chunk_size).numpy()
    print(json.dumps({"growth_mib": peak_rss.peak_growth_mib(baseline)}))


def loss_memory_probe():
    """One aggregation loss forward + backward (B x --loss_memory_bank) in this
    process; prints the peak RSS growth in MiB over the bank and the batch."""
    import tensorflow as tf
    _configure_threads(FLAGS.threads)
    rng = np.random.default_rng(0)
    # The bank is drawn in a loop of row blocks: a [N, D] float64 normal
    # array would be four times the bank.
    bank = np.concatenate([_unit_rows(rng, min(65_536, FLAGS.loss_memory_bank - start),
                                      FLAGS.dim)
                           for start in range(0, FLAGS.loss_memory_bank, 65_536)])
    loss_step, _ = _loss_step(rng, tf.constant(bank), FLAGS.batch, FLAGS.loss_memory_bank,
                              FLAGS.dim)
    del bank
    # Traced before the baseline, but not run: the allocator keeps what a run
    # frees, so a second run would not show the peak. XLA's compilation of the
    # two element-wise kernels (a few MiB) is in the figure.
    loss_step.get_concrete_function()
    baseline = peak_rss.reset_peak_rss()
    loss_step().numpy()
    print(json.dumps({"growth_mib": peak_rss.peak_growth_mib(baseline)}))


def _probe_in_subprocess(args):
    """The JSON line a fresh run of this script with ``args`` prints last."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), f"--dim={FLAGS.dim}", f"--t={FLAGS.t}",
         f"--threads={FLAGS.threads}", f"--batch={FLAGS.batch}"] + args,
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _density_memory(chunks, query_counts):
    rows = []
    for chunk in chunks:
        for queries in query_counts:
            growth = _probe_in_subprocess([f"--memory_probe_chunk={chunk}",
                                           f"--memory_probe_queries={queries}",
                                           f"--bank={FLAGS.bank}"])["growth_mib"]
            rows.append({"chunk": chunk, "queries": queries, "growth_mib": growth,
                         "chunk_scores_mib": chunk * FLAGS.bank * 4 / 2**20})
    return rows


def _loss_memory():
    n, b = FLAGS.loss_memory_bank, FLAGS.batch
    growth = _probe_in_subprocess(["--loss_memory_probe",
                                   f"--loss_memory_bank={n}"])["growth_mib"]
    logits_mib = b * n * 4 / 2**20
    return {"bank_rows": n, "batch": b, "growth_mib": growth, "logits_mib": logits_mib,
            "growth_over_logits": growth / logits_mib}


def _bench_propagation(rng, faiss, b, m, d):
    """Per-batch propagation (LLP's locally weighted vote, the default) vs faiss's search."""
    import tensorflow as tf
    from llp_tf.core import propagation

    queries = _unit_rows(rng, b, d)
    labeled = _unit_rows(rng, m, d)
    classes = rng.integers(0, 1000, m)
    density = rng.uniform(1e6, 4e7, m).astype(np.float32)
    tf_args = [tf.constant(x) for x in (queries, labeled, classes, density)]
    propagate = tf.function(lambda e, l, c, r: propagation.propagate(
        e, l, c, 1000, k=FLAGS.k, density=r))
    index = faiss.IndexFlatIP(d)
    index.add(labeled)
    ours, theirs = _interleaved_seconds(
        [lambda: [x.numpy() for x in propagate(*tf_args)],
         lambda: index.search(queries, FLAGS.k)], FLAGS.repeats * 12)
    return {"ours_ms": ours * 1e3, "faiss_ms": theirs * 1e3, "faiss_over_ours": theirs / ours}


def _bench_density(rng, faiss, n, d, q):
    """(figures, the bank as a tensor): a density refresh of Q rows against the whole bank."""
    import tensorflow as tf
    from llp_tf.core import propagation

    bank = _unit_rows(rng, n, d)
    density_queries = bank[:q]
    bank_t, density_queries_t = tf.constant(bank), tf.constant(density_queries)
    index = faiss.IndexFlatIP(d)
    index.add(bank)
    ours, theirs = _interleaved_seconds(
        [lambda: propagation.local_density(density_queries_t, bank_t, t=FLAGS.t).numpy(),
         lambda: index.search(density_queries, FLAGS.t)], FLAGS.repeats)
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


def _bench_aggregation_loss(rng, bank_t, b, n, d):
    """The aggregation loss forward + backward against the whole bank vs a plain matmul."""
    import tensorflow as tf

    loss_step, embeddings = _loss_step(rng, bank_t, b, n, d)

    @tf.function
    def matmul():
        return tf.matmul(embeddings, bank_t, transpose_b=True)

    # The matmul is reduced on device so that neither side pays a copy to numpy.
    loss_s, matmul_s = _interleaved_seconds(
        [lambda: loss_step().numpy(), lambda: tf.reduce_sum(matmul()[:, :1]).numpy()],
        FLAGS.repeats * 4)
    loss_gflops = 4 * b * n * d / loss_s / 1e9
    matmul_gflops = 2 * b * n * d / matmul_s / 1e9
    return {"loss_ms": loss_s * 1e3, "matmul_ms": matmul_s * 1e3, "loss_gflops": loss_gflops,
            "matmul_gflops": matmul_gflops, "ratio": loss_gflops / matmul_gflops}


def run_benchmarks():
    """dict of the four measurements of the module docstring, with the sizes and threads."""
    import faiss

    _configure_threads(FLAGS.threads)
    faiss.omp_set_num_threads(FLAGS.threads)
    rng = np.random.default_rng(0)
    b, m, n, d, q = FLAGS.batch, FLAGS.labeled, FLAGS.bank, FLAGS.dim, FLAGS.density_queries
    results = {"threads": FLAGS.threads, "sizes": dict(B=b, M=m, N=n, Q=q, D=d, k=FLAGS.k,
                                                        t=FLAGS.t)}
    # The measurements draw from one generator in this order.
    results["propagation"] = _bench_propagation(rng, faiss, b, m, d)
    results["density"], bank_t = _bench_density(rng, faiss, n, d, q)
    results["aggregation_loss"] = _bench_aggregation_loss(rng, bank_t, b, n, d)
    # Memory of the density refresh: bounded by the chunk, not by Q.
    chunks = [int(c) for c in FLAGS.memory_chunks]
    results["density_memory"] = _density_memory(chunks, [q // 4, q])
    if FLAGS.loss_memory_bank:
        results["loss_memory"] = _loss_memory()
    return results


def _print_loss_memory(m):
    print(f"aggregation loss fwd+bwd peak RSS growth (B={m['batch']} vs N={m['bank_rows']}, "
          "fresh process, bank and batch excluded)")
    print(f"  {m['growth_mib']:8.1f} MiB = {m['growth_over_logits']:.2f} x the B x N float32 "
          f"logits ({m['logits_mib']:.0f} MiB)")


def print_report(r):
    s = r["sizes"]
    print(f"LLP core benchmark  ({r['threads']} threads for TensorFlow and faiss alike)")
    print("-" * 78)
    p = r["propagation"]
    print(f"propagation  B={s['B']} vs M={s['M']}, D={s['D']}, k={s['k']} (local weights)")
    print(f"  ours {p['ours_ms']:8.2f} ms   faiss IndexFlatIP {p['faiss_ms']:8.2f} ms   "
          f"faiss/ours = {p['faiss_over_ours']:.2f}   (target >= 1.0)")
    dn = r["density"]
    print(f"density refresh  Q={s['Q']} vs N={s['N']}, t={s['t']}")
    print(f"  ours {dn['ours_s']:8.2f} s    faiss IndexFlatIP {dn['faiss_s']:8.2f} s    "
          f"faiss/ours = {dn['faiss_over_ours']:.2f}   (target >= 1.0)")
    a = r["aggregation_loss"]
    print(f"aggregation loss fwd+bwd  B={s['B']} vs N={s['N']}, D={s['D']} (4BND flops)")
    print(f"  loss {a['loss_ms']:8.2f} ms = {a['loss_gflops']:6.1f} GFLOP/s   "
          f"tf.matmul {a['matmul_ms']:7.2f} ms = {a['matmul_gflops']:6.1f} GFLOP/s   "
          f"ratio = {a['ratio']:.2f}   (target >= 0.7)")
    print(f"density refresh peak RSS growth (N={s['N']}, fresh process each)")
    for row in r["density_memory"]:
        print(f"  chunk {row['chunk']:5d}  Q={row['queries']:6d}: {row['growth_mib']:8.1f} MiB"
              f"   (one chunk of scores: {row['chunk_scores_mib']:.0f} MiB)")
    if "loss_memory" in r:
        _print_loss_memory(r["loss_memory"])


def main(argv):
    del argv
    if FLAGS.memory_probe_chunk:
        memory_probe(FLAGS.memory_probe_chunk, FLAGS.memory_probe_queries)
        return
    if FLAGS.loss_memory_probe:
        loss_memory_probe()
        return
    results = run_benchmarks()
    print_report(results)
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    app.run(main)
