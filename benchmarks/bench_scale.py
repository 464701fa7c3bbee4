"""Benchmark of the memory bank at scale: what --shard_bank saves, in one run.

On --replicas logical CPU devices under MirroredStrategy, with a tiny network
(resnet10 x0.125 on 8-pixel images, batch norm per replica), a global batch of --batch, C = 1000
classes and 1 % of the rows labelled, each measurement in a fresh process:

  1. peak RSS of the process through one LLP step with a synthetic bank of
     --bank rows, the bank sharded (each replica holds N / R rows) against
     replicated (each replica holds all N), and their ratio;
  2. one sharded LLP step at each size of --largest, in increasing order, until
     one does not complete within --memory_limit GiB of RSS (its process is
     stopped there): the largest N that completed, its peak RSS and time;
  3. the bank sharded across --workers local worker processes (127.0.0.1) of
     --replicas / --workers logical CPUs each, at each size of --checkpointed, in
     increasing order until one does not complete within --memory_limit GiB of
     RSS over all of them: the workers take one LLP step, write a checkpoint of the
     bank in --checkpoint_dir (each its rows' part, merged by the chief), then
     restore it. Per worker: how far its peak RSS rose during the save and during
     the restore, against its share of the bank (the rows it holds) and the whole
     bank (what a replicated run holds on each replica).

With --phases, instead: each phase of a run with the bank sharded across --workers
local worker processes, in fresh processes each time, at --rows: build (the bank
made), step (one LLP step), density_refresh (one refresh of the labelled rows'
densities; the bank then has --density_labelled labelled rows, one chunk per
replica: a chunk's memory does not depend on how many there are), evaluation (the
bank's statistics), save (a checkpoint) and restore (that checkpoint into a fresh
process's bank). Each phase's figure is the largest worker's absolute peak RSS
(VmHWM, reset as the phase starts) in bytes; --json writes
{"rows", "workers", "bank_dtype", "share_bytes", "phases": {phase: bytes}}, share_bytes the
largest worker's rows x 525 bytes (269 with a half-precision --bank_dtype).
"""

import dataclasses
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

#: The sizes of docs/performance.md's figures, for --full: the searches for the largest N.
FULL_SIZES = {"largest": [20_000_000, 28_000_000, 36_000_000],
              "checkpointed": [4_000_000, 12_000_000, 16_000_000, 20_000_000]}
CLASSES, IMAGE_SIZE, LABELLED_SHARE = 1000, 8, 0.01
#: Bytes of a row's embedding element by --bank_dtype.
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def bank_row_bytes(dtype="float32"):
    """A row's state: its 128 embeddings of ``dtype``, label int64, confidence float32,
    labelled bool (525 bytes at float32, 269 at half precision)."""
    return 128 * ELEMENT_BYTES[dtype] + 8 + 4 + 1


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values(FULL_SIZES)
    flags.DEFINE_integer("replicas", 4, "R: logical CPU devices, one replica each.",
                         flag_values=values)
    flags.DEFINE_integer("batch", 32, "Global batch size.", flag_values=values)
    flags.DEFINE_integer("bank", 2_000_000, "N of the sharded-against-replicated comparison.",
                         flag_values=values)
    flags.DEFINE_list("largest", ["20000000"], "Bank sizes tried for one sharded step, in "
                      "increasing order (--full: 20M, 28M, 36M).", flag_values=values)
    flags.DEFINE_float("memory_limit", 21.0, "GiB of RSS at which a measurement's process is "
                       "stopped (this machine has 24).", flag_values=values)
    flags.DEFINE_enum("step_probe", None, ["sharded", "replicated"], "Internal: build a bank "
                      "of --bank rows so and run one LLP step in this process; print its "
                      "figures (used by the measurements).", flag_values=values)
    flags.DEFINE_integer("workers", 2, "Worker processes of the checkpoint measurement.",
                         flag_values=values)
    flags.DEFINE_list("checkpointed", ["1000000"], "Bank sizes of the checkpoint measurement, "
                      "in increasing order (--full: 4M, 12M, 16M, 20M).", flag_values=values)
    flags.DEFINE_string("checkpoint_dir", None, "Where the checkpoint measurement writes (a "
                        "checkpoint of N x 525 bytes at float32); default: a temporary folder.",
                        flag_values=values)
    flags.DEFINE_boolean("checkpoint_probe", False, "Internal: be one worker of the "
                         "checkpoint measurement (TF_CONFIG names the cluster); print its "
                         "figures.", flag_values=values)
    flags.DEFINE_boolean("phases", False, "Measure each phase of a run instead (module "
                         "docstring): the largest worker's peak RSS per phase.",
                         flag_values=values)
    flags.DEFINE_integer("rows", 2_000_000, "N of --phases.", flag_values=values)
    flags.DEFINE_enum("bank_dtype", "float32", list(ELEMENT_BYTES), "The bank's embedding "
                      "storage (LLP's --bank_dtype) in every measurement.", flag_values=values)
    flags.DEFINE_integer("density_labelled", 1024, "Labelled rows of --phases' "
                         "density_refresh (a chunk per replica at the default chunk of "
                         "1,024 queries over every replica).", flag_values=values)
    flags.DEFINE_string("json", None, "With --phases: write the figures there as JSON.",
                        flag_values=values)
    flags.DEFINE_enum("phase_probe", None, list(PHASES), "Internal: be one worker of "
                      "--phases' measurement of this phase (TF_CONFIG names the cluster).",
                      flag_values=values)
    return values


#: --phases' phases, in the order they run (restore reads the checkpoint save wrote).
PHASES = ("build", "step", "density_refresh", "evaluation", "save", "restore")


def _strategy(replicas):
    import tensorflow as tf

    from llp_tf.training.distribution import mirrored_strategy

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    return mirrored_strategy([d.name for d in tf.config.list_logical_devices("CPU")])


def _batches(strategy, rng, batch, num_rows):
    """Endless distributed iterator of one batch of images with random distinct bank rows."""
    import tensorflow as tf

    images = tf.constant(rng.normal(size=(batch, IMAGE_SIZE, IMAGE_SIZE, 3)), tf.float32)
    index = tf.constant(rng.choice(num_rows, batch, replace=False), tf.int64)
    element = {"used": {"image": images, "label": tf.zeros([batch], tf.int64), "index": index}}
    replicas = strategy.num_replicas_in_sync
    return iter(strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensors(element).repeat().unbatch().batch(
            batch // replicas),
        tf.distribute.InputOptions(experimental_fetch_to_device=False)))


def _llp_method(values, strategy, rng, sharded, labelled=None):
    """(the LLP method of the measurements, the tiny network and a bank of --bank rows
    sharded over ``strategy``'s replicas or replicated; {"before_bank_kib": the RSS before
    the bank was built, "bank_seconds": its building time})."""
    import keras

    from llp_tf.core.bank_factory import build_bank
    from llp_tf.models.config import EMBEDDING_DIM
    from llp_tf.models.factory import build_model
    from llp_tf.training.methods import LLPMethod

    n = values.bank
    labelled = labelled or max(1, int(values.bank * LABELLED_SHARE))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build_model("resnet10", CLASSES, width=0.125,
                            small_inputs=True).create_weights(IMAGE_SIZE)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        optimizer.build(model.trainable_variables)
    split = (np.sort(rng.choice(n, labelled, replace=False)), rng.integers(0, CLASSES, labelled))
    before_bank = peak_rss.status_kib("VmRSS")
    start = time.perf_counter()
    bank = build_bank(strategy, n, EMBEDDING_DIM, CLASSES, *split, sharded=sharded,
                      embedding_dtype=values.bank_dtype)
    bank_seconds = time.perf_counter() - start
    settings = dataclasses.replace(bench_cli.paper_llp_settings(), shard_bank=sharded,
                                   bank_dtype=values.bank_dtype)
    method = LLPMethod(strategy, model, optimizer, bank, num_classes=CLASSES,
                       global_batch_size=values.batch, weight_decay=1e-4, settings=settings)
    return method, {"before_bank_kib": before_bank, "bank_seconds": bank_seconds}


def step_probe(values, out):
    """Builds the bank (``--step_probe`` sharded or replicated) and runs one LLP step; prints
    {"peak_gib", "after_bank_gib", "bank_seconds", "step_seconds"} as JSON."""
    from llp_tf.training.methods import StepRunner

    strategy = _strategy(values.replicas)
    rng = np.random.default_rng(0)
    method, built = _llp_method(values, strategy, rng, values.step_probe == "sharded")
    before_bank, bank_seconds = built["before_bank_kib"], built["bank_seconds"]
    after_bank = peak_rss.status_kib("VmRSS")
    bank_peak = peak_rss.status_kib("VmHWM")
    start = time.perf_counter()
    StepRunner(method).run(_batches(strategy, rng, values.batch, values.bank), 1, "llp")
    print(json.dumps({"peak_gib": peak_rss.status_kib("VmHWM") / 2**20,
                      "after_bank_gib": after_bank / 2**20, "bank_peak_gib": bank_peak / 2**20,
                      "before_bank_gib": before_bank / 2**20, "bank_seconds": bank_seconds,
                      "step_seconds": time.perf_counter() - start}), file=out)


def checkpoint_probe(values, out):
    """One worker of the checkpoint measurement (module docstring, 3.): prints {"worker",
    "rows", "step_seconds", "save_mib", "restore_mib", "save_seconds", "restore_seconds"}."""
    import tempfile

    from llp_tf.training import cluster
    from llp_tf.training.checkpoints import RunCheckpoints
    from llp_tf.training.distribution import make_strategy
    from llp_tf.training.methods import StepRunner
    from llp_tf.training.run_directory import RunDirectory

    strategy = make_strategy(values.replicas // values.workers, "auto")
    rng = np.random.default_rng(0)
    method, _ = _llp_method(values, strategy, rng, sharded=True)
    workers = cluster.workers_of(strategy)
    start = time.perf_counter()
    StepRunner(method).run(_batches(strategy, rng, values.batch, values.bank), 1, "llp")
    figures = {"worker": workers.index, "rows": list(method.bank.held_rows),
               "step_seconds": time.perf_counter() - start}
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = RunCheckpoints({"bank": method.bank}, RunDirectory(values.checkpoint_dir),
                                     1, sys.stderr, None if workers.index == 0 else scratch,
                                     workers)
        for name, work in (("save", lambda: checkpoints.save(1)),
                           ("restore", checkpoints.restore_latest)):
            workers.failing(True)  # all start together
            baseline = peak_rss.reset_peak_rss()
            start = time.perf_counter()
            work()
            figures[f"{name}_seconds"] = time.perf_counter() - start
            figures[f"{name}_mib"] = peak_rss.peak_growth_mib(baseline)
    print(json.dumps(figures), file=out)


def phase_probe(values, out):
    """One worker of --phases' measurement of --phase_probe: prints {"worker", "rows",
    "peak_bytes"}, its peak RSS through the phase."""
    from llp_tf.training import cluster
    from llp_tf.training.checkpoints import RunCheckpoints
    from llp_tf.training.distribution import make_strategy
    from llp_tf.training.evaluation import Evaluator
    from llp_tf.training.methods import StepRunner
    from llp_tf.training.run_directory import RunDirectory

    phase = values.phase_probe
    strategy = make_strategy(values.replicas // values.workers, "auto")
    workers = cluster.workers_of(strategy)
    rng = np.random.default_rng(0)
    if phase == "build":
        peak_rss.reset_peak_rss()
    labelled = values.density_labelled if phase == "density_refresh" else None
    method, _ = _llp_method(values, strategy, rng, sharded=True, labelled=labelled)
    run = RunDirectory(values.checkpoint_dir)
    checkpoints = RunCheckpoints({"bank": method.bank}, run, 1, sys.stderr,
                                 None if workers.index == 0 else f"{run.path}-scratch{workers.index}",
                                 workers)
    work = {"build": lambda: None,
            "step": lambda: StepRunner(method).run(
                _batches(strategy, rng, values.batch, values.bank), 1, "llp"),
            "density_refresh": method.refresh_density,
            "evaluation": Evaluator(strategy, None, method.bank,
                                    rng.integers(0, CLASSES, values.bank),
                                    CLASSES).bank_metrics,
            "save": lambda: checkpoints.save(1),
            "restore": checkpoints.restore_latest}[phase]
    workers.failing(True)  # all start together
    if phase != "build":
        peak_rss.reset_peak_rss()
    work()
    print(json.dumps({"worker": workers.index, "rows": list(method.bank.held_rows),
                      "peak_bytes": peak_rss.status_kib("VmHWM") * 1024}), file=out)


def _phases(values, out):
    """--phases (module docstring): each phase's workers in fresh processes, printed and
    written to --json."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="bench-scale-phases-", dir=values.checkpoint_dir)
    figures = {"rows": values.rows, "workers": values.workers, "bank_dtype": values.bank_dtype,
               "share_bytes": None,
               "phases": {}}
    print(f"the bank of N={values.rows:,} rows sharded across {values.workers} workers x "
          f"{values.replicas // values.workers} logical CPU replicas: each phase's largest "
          f"worker peak RSS (fresh processes each)", file=out)
    try:
        for phase in PHASES:
            workers = _cluster_figures(values, values.rows, os.path.join(folder, "run"),
                                       ["--phase_probe=" + phase])
            if workers is None:
                print(f"  {phase}: stopped over {values.memory_limit} GiB", file=out)
                break
            share = max(stop - start for start, stop in (w["rows"] for w in workers))
            figures["share_bytes"] = share * bank_row_bytes(values.bank_dtype)
            figures["phases"][phase] = max(w["peak_bytes"] for w in workers)
            print(f"  {phase:16s} {figures['phases'][phase] / 2**30:6.2f} GiB = "
                  f"{figures['phases'][phase] / figures['share_bytes']:5.2f} x the share "
                  f"({figures['share_bytes'] / 2**30:.2f} GiB)", file=out)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if values.json:
        with open(values.json, "w") as f:
            json.dump(figures, f, indent=1)
    return figures


def _checkpointed(values, num_rows, folder):
    """The workers' figures of the checkpoint measurement at ``num_rows``, in worker order, or
    None if together they went over --memory_limit."""
    return _cluster_figures(values, num_rows, folder, ["--checkpoint_probe"])


def _cluster_figures(values, num_rows, folder, probe_args):
    """The figures each of --workers local workers running this script with ``probe_args``
    prints, in worker order, or None if together they went over --memory_limit."""
    import subprocess

    from llp_tf.cli.command_line import free_ports
    from llp_tf.training.local_launcher import tf_config

    ports = free_ports(values.workers)
    limit_kib = int(values.memory_limit * 2**20)
    processes, outputs = [], []
    for index in range(values.workers):
        env = dict(os.environ, TF_CONFIG=tf_config(ports, index))
        processes.append(subprocess.Popen(
            [sys.executable, __file__, *probe_args, f"--bank={num_rows}",
             f"--replicas={values.replicas}", f"--workers={values.workers}",
             f"--batch={values.batch}", f"--checkpoint_dir={folder}",
             f"--density_labelled={values.density_labelled}",
             f"--bank_dtype={values.bank_dtype}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    try:
        while any(p.poll() is None for p in processes):
            if sum(peak_rss.rss_kib(p.pid) for p in processes if p.poll() is None) > limit_kib:
                return None
            time.sleep(0.1)
        for process in processes:
            out = process.stdout.read()
            if process.returncode:
                raise RuntimeError(f"a worker of {' '.join(probe_args)} failed (exit "
                                   f"{process.returncode})")
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def _checkpoint_rows(values, out):
    """The checkpoint measurement (module docstring, 3.), printed; the largest N done."""
    import shutil
    import tempfile

    per_worker = values.replicas // values.workers
    print(f"the bank sharded across {values.workers} workers x {per_worker} logical CPU "
          f"replicas: one LLP step, a checkpoint, its restore (peak RSS growth per worker; "
          f"stopped over {values.memory_limit} GiB RSS in all)", file=out)
    largest = None
    for num_rows in sorted(int(n) for n in values.checkpointed):
        folder = tempfile.mkdtemp(prefix="bench-scale-", dir=values.checkpoint_dir)
        try:
            figures = _checkpointed(values, num_rows, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        whole_mib = num_rows * bank_row_bytes(values.bank_dtype) / 2**20
        if figures is None:
            print(f"  N={num_rows:,}: stopped over {values.memory_limit} GiB", file=out)
            break
        largest = num_rows
        print(f"  N={num_rows:,}: the whole bank {whole_mib:,.0f} MiB", file=out)
        for worker in figures:
            start, stop = worker["rows"]
            share = (stop - start) * bank_row_bytes(values.bank_dtype) / 2**20
            print(f"    worker {worker['worker']}: rows [{start:,}, {stop:,}), its share "
                  f"{share:,.0f} MiB; peak RSS growth: save {worker['save_mib']:,.0f} MiB "
                  f"({worker['save_mib'] / share:.2f} x its share, "
                  f"{worker['save_mib'] / whole_mib:.2f} x the whole bank; "
                  f"{worker['save_seconds']:.1f} s), restore {worker['restore_mib']:,.0f} MiB "
                  f"({worker['restore_mib'] / share:.2f} x its share, "
                  f"{worker['restore_mib'] / whole_mib:.2f} x the whole bank; "
                  f"{worker['restore_seconds']:.1f} s); step "
                  f"{worker['step_seconds']:.1f} s", file=out)
    print(f"  largest N completing a step, a checkpoint and its restore on "
          f"{values.workers} workers: "
          f"{f'{largest:,}' if largest else 'none of ' + ','.join(values.checkpointed)}",
          file=out)


def _probe(values, kind, num_rows):
    """The figures of a fresh process's `step_probe`, or None if it went over --memory_limit."""
    try:
        return peak_rss.fresh_process_figures(
            __file__, [f"--step_probe={kind}", f"--bank={num_rows}",
                       f"--replicas={values.replicas}", f"--batch={values.batch}"],
            rss_limit_kib=int(values.memory_limit * 2**20))
    except peak_rss.MemoryLimitExceeded:
        return None


def _growth(figures):
    return figures["peak_gib"] - figures["before_bank_gib"]


def _row(name, figures):
    return (f"  {name:34s} peak RSS {figures['peak_gib']:6.2f} GiB (after the bank "
            f"{figures['after_bank_gib']:6.2f}; bank built in {figures['bank_seconds']:5.1f} s, "
            f"step {figures['step_seconds']:5.1f} s)")


def benchmark(values, out, err):
    """The measurements of the module docstring, printed."""
    del err
    if values.step_probe:
        return step_probe(values, out)
    if values.checkpoint_probe:
        return checkpoint_probe(values, out)
    if values.phase_probe:
        return phase_probe(values, out)
    if values.phases:
        _phases(values, out)
        return 0
    bank_gib = values.bank * 128 * 4 / 2**30
    print(f"one LLP step, bank N={values.bank:,} (its rows {bank_gib:.2f} GiB), "
          f"{values.replicas} logical CPU replicas, global batch {values.batch}, "
          f"{CLASSES} classes, {LABELLED_SHARE:.0%} labelled (fresh process each)", file=out)
    figures = {kind: _probe(values, kind, values.bank) for kind in ("replicated", "sharded")}
    for kind, value in figures.items():
        print(_row(kind, value) if value else f"  {kind}: over {values.memory_limit} GiB",
              file=out)
    if all(figures.values()):
        sharded, replicated = figures["sharded"], figures["replicated"]
        print(f"  sharded / replicated peak RSS = "
              f"{sharded['peak_gib'] / replicated['peak_gib']:.2f}; their growth over the RSS "
              f"before the bank (TensorFlow and the network) = "
              f"{_growth(sharded) / _growth(replicated):.2f}", file=out)
    print(f"one sharded LLP step at larger banks (stopped over {values.memory_limit} GiB RSS)",
          file=out)
    largest = None
    for num_rows in sorted(int(n) for n in values.largest):
        result = _probe(values, "sharded", num_rows)
        if result is None:
            print(f"  N={num_rows:,}: stopped over {values.memory_limit} GiB", file=out)
            break
        largest = num_rows
        print(_row(f"N={num_rows:,} ({num_rows * 512 / 2**30:.1f} GiB of rows)", result),
              file=out)
    print(f"  largest N completing one sharded step: "
          f"{f'{largest:,}' if largest else 'none of ' + ','.join(values.largest)}", file=out)
    _checkpoint_rows(values, out)
    return 0


def main(argv, stdout=None, stderr=None):
    """Runs the benchmark; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, benchmark, FULL_SIZES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
