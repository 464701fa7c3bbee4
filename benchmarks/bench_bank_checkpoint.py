"""Benchmark of a memory bank's checkpoint: peak memory of its save and of a cold restore.

For each --kind (the replicated bank, or the bank sharded over --replicas logical CPU
replicas), a bank of --bank rows of 128 float32 (1 % labelled), its rows scattered into as
training does, in fresh processes (`peak_rss`):

  1. the save: the process builds the bank, then writes `tf.train.Checkpoint(bank=...)`
     in --checkpoint_dir; how far its peak RSS rose during the write;
  2. the cold restore: a new process builds the bank and restores that checkpoint; how far
     its peak RSS rose during the restore, and its peak over its RSS before the bank.

Each as a ratio to the bank's bytes (the rows' 525 bytes each and the densities), its share
(this one process holds every row). It imports `llp_tf` from the path, so the same run
measures another checkout with PYTHONPATH pointing at it.
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

DIM, CLASSES, LABELLED_SHARE = 128, 1000, 0.01
FULL_SIZES = {"bank": 4_000_000}


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_integer("bank", 2_000_000, "N: rows of the bank (--full: 4M, 2 GiB).",
                         flag_values=values)
    flags.DEFINE_list("kind", ["replicated", "sharded"], "The banks measured.",
                      flag_values=values)
    flags.DEFINE_integer("replicas", 2, "Logical CPU replicas of the sharded bank.",
                         flag_values=values)
    flags.DEFINE_string("checkpoint_dir", None, "Where the checkpoints go (N x 525 bytes "
                        "each); default: a temporary folder.", flag_values=values)
    flags.DEFINE_enum("probe", None, ["save", "restore"], "Internal: build the bank of "
                      "--kind (one) and save it to or restore it from --checkpoint_dir; print "
                      "its figures.", flag_values=values)
    return values


def _bank(values):
    """(the bank of --kind, its bytes): its rows scattered into, as a training step does."""
    import tensorflow as tf

    from llp_tf.core.memory_bank import MemoryBank
    from llp_tf.core.sharded_bank import ShardedMemoryBank

    n, kind = values.bank, values.kind[0]
    rng = np.random.default_rng(0)
    labelled = np.sort(rng.choice(n, max(1, int(n * LABELLED_SHARE)), replace=False))
    split = (n, DIM, CLASSES, labelled, rng.integers(0, CLASSES, labelled.size))
    if kind == "replicated":
        bank, holders = MemoryBank(*split), None
    else:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * values.replicas)
        strategy = tf.distribute.MirroredStrategy(
            [d.name for d in tf.config.list_logical_devices("CPU")])
        bank = ShardedMemoryBank(strategy, *split)
        holders = bank.shards
    for holder in holders or [bank]:
        rows = tf.range(0, int(holder.embeddings.shape[0]), 1000, dtype=tf.int64)
        holder.embeddings.scatter_update(tf.IndexedSlices(
            tf.math.l2_normalize(tf.gather(holder.embeddings, rows), axis=1), rows))
        holder.labels.scatter_update(tf.IndexedSlices(tf.gather(holder.labels, rows), rows))
    return bank, n * (DIM * 4 + 8 + 4 + 1) + labelled.size * 4


def probe(values, out):
    """One fresh process's measurement (module docstring): prints its figures as JSON."""
    import tensorflow as tf

    before_bank = peak_rss.status_kib("VmRSS")
    start = time.perf_counter()
    bank, bank_bytes = _bank(values)
    figures = {"bank_bytes": bank_bytes, "build_seconds": time.perf_counter() - start,
               "build_peak_mib": (peak_rss.status_kib("VmHWM") - before_bank) / 1024}
    checkpoint = tf.train.Checkpoint(bank=bank)
    prefix = os.path.join(values.checkpoint_dir, f"{values.kind[0]}-bank")
    baseline = peak_rss.reset_peak_rss()
    start = time.perf_counter()
    if values.probe == "save":
        checkpoint.write(prefix)
    else:
        checkpoint.read(prefix).assert_existing_objects_matched()
    figures["seconds"] = time.perf_counter() - start
    figures["growth_mib"] = peak_rss.peak_growth_mib(baseline)
    figures["peak_over_before_bank_mib"] = (peak_rss.status_kib("VmHWM") - before_bank) / 1024
    print(json.dumps(figures), file=out)


def _measure(values, kind, folder):
    common = [f"--bank={values.bank}", f"--kind={kind}", f"--replicas={values.replicas}",
              f"--checkpoint_dir={folder}"]
    return {step: peak_rss.fresh_process_figures(__file__, [f"--probe={step}", *common])
            for step in ("save", "restore")}


def benchmark(values, out, err):
    """The measurements of the module docstring, printed."""
    del err
    if values.probe:
        return probe(values, out)
    import shutil
    import tempfile

    import llp_tf

    print(f"a bank's checkpoint, N={values.bank:,} x {DIM} float32, fresh process each "
          f"(llp_tf from {os.path.dirname(llp_tf.__file__)})", file=out)
    for kind in values.kind:
        folder = tempfile.mkdtemp(prefix="bench-bank-checkpoint-", dir=values.checkpoint_dir)
        try:
            figures = _measure(values, kind, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        mib = figures["save"]["bank_bytes"] / 2**20
        name = kind if kind == "replicated" else f"sharded over {values.replicas}"
        print(f"  {name}: the bank {mib:,.0f} MiB", file=out)
        for step, got in figures.items():
            print(f"    {step:7s} peak RSS growth {got['growth_mib']:7,.0f} MiB "
                  f"({got['growth_mib'] / mib:.2f} x the bank; {got['seconds']:5.1f} s); "
                  f"process peak over its RSS before the bank "
                  f"{got['peak_over_before_bank_mib'] / mib:.2f} x the bank (building it "
                  f"{got['build_peak_mib'] / mib:.2f} x)", file=out)
    return 0


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
