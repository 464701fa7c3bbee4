"""A performance model of the training step for GPU users, computed on any machine.

  python benchmarks/bench_gpu_model.py [--architectures=resnet18,resnet50] [--output_json=...]

For each architecture at --image_size, global batch --batch on one replica
and an ImageNet-shaped bank (--bank rows, --labelled of them labelled,
--classes classes), and for each step (the supervised baseline, the
instance-recognition warm start, the LLP step), it counts

  - floating-point operations of the replica step's forward and backward
    pass (`Method.forward_backward`, the part `--jit_compile` compiles), and
  - bytes moved by it once XLA has fused the element-wise work
    (`step_cost.py`),

in float32. XLA here is the CPU backend; a GPU build fuses similarly but
not identically, so the bytes are an estimate. The CPU backend also computes
bfloat16 convolutions in float32, so its bfloat16 program does not show
bfloat16 traffic: for ``--mixed_precision=bfloat16`` the trunk's bytes (the
supervised step's) are taken as half the float32 ones, the bank's (LLP
minus supervised) as they are.

From these and published peak rates (`GPUS`) it gives a roofline bound on
images/s per GPU: time per step >= max(FLOPs / peak FLOP/s, bytes / memory
bandwidth), the trunk's FLOPs at the float32 or the bfloat16 tensor-core
rate, the bank's at the float32 rate (the bank stays float32; TensorFlow's
default TF32 matmuls on A100/H100 would run them ~8x faster, rounding
their inputs to 10 mantissa bits). Real steps reach perhaps 40-60 % of
such a bound. Nothing is timed.
"""

import json
import os
import sys

import bench_cli  # noqa: E402 -- benchmarks/ is on the path of a script run from it
from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import flags  # noqa: E402

#: Published dense peak rates: (low-precision tensor FLOP/s, float32 FLOP/s
#: (no TF32), memory bytes/s). A100 SXM 80 GB and H100 SXM data sheets.
GPUS = {
    "A100": (312e12, 19.5e12, 2.039e12),
    "H100": (989e12, 67e12, 3.35e12),
}
STEPS = ("supervised", "warmup", "llp")


def make_flags():
    """The benchmark's `flags.FlagValues`."""
    values = bench_cli.new_flag_values()
    flags.DEFINE_list("architectures", ["resnet18", "resnet50"], "Architectures to model.",
                      flag_values=values)
    flags.DEFINE_integer("image_size", 224, "Input side (ImageNet stem).", flag_values=values)
    flags.DEFINE_integer("batch", 128, "Images per step (one replica: the global batch).",
                         flag_values=values)
    flags.DEFINE_integer("bank", 1_281_167, "N: bank rows (ImageNet's training set).",
                         flag_values=values)
    flags.DEFINE_integer("labelled", 128_116, "M: labelled rows (10 %).", flag_values=values)
    flags.DEFINE_integer("classes", 1000, "C: classes.", flag_values=values)
    flags.DEFINE_string("output_json", None, "Optional file for the figures as JSON.",
                        flag_values=values)
    return values


def _method(values, step, architecture, bank):
    import keras  # noqa: PLC0415

    from llp_tf.models.factory import build_model  # noqa: PLC0415
    from llp_tf.training.methods import LLPMethod, SupervisedMethod  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    model = build_model(architecture, values.classes).create_weights(values.image_size)
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    common = dict(num_classes=values.classes, global_batch_size=values.batch, weight_decay=1e-4)
    strategy = tf.distribute.get_strategy()
    if step == "supervised":
        return SupervisedMethod(strategy, model, optimizer, **common)
    return LLPMethod(strategy, model, optimizer, bank, settings=bench_cli.paper_llp_settings(),
                     **common)


def count_step(values, step, architecture, bank):
    """(FLOPs, bytes) of one float32 replica step's forward and backward pass."""
    import tensorflow as tf  # noqa: PLC0415

    import step_cost  # noqa: PLC0415 -- benchmarks/ is on the path of a script run from it

    method = _method(values, step, architecture, bank)
    phase = {"supervised": "supervised"}.get(step, step)
    compute = method.forward_backward(method.phase_step(phase))
    size, b = values.image_size, values.batch
    rows = {"image": tf.zeros([b, size, size, 3]), "label": tf.zeros([b], tf.int64),
            "index": tf.range(b, dtype=tf.int64)}
    # The supervised step reads the labelled stream, LLP's the used one.
    batch = {"labelled": rows, "used": rows}
    return step_cost.step_flops(compute, batch), step_cost.step_bytes(compute, batch)


def roofline(counts, gpu, precision, batch):
    """images/s bounds of each step on ``gpu`` in ``precision`` from the float32
    `count_step` figures (see the module docstring)."""
    low_peak, float32_peak, bandwidth = GPUS[gpu]
    trunk_flops, trunk_bytes = counts["supervised"]
    trunk_peak = float32_peak if precision == "float32" else low_peak
    bytes_factor = 1.0 if precision == "float32" else 0.5
    result = {}
    for step, (flops, moved) in counts.items():
        seconds = max(trunk_flops / trunk_peak + max(flops - trunk_flops, 0) / float32_peak,
                      (trunk_bytes * bytes_factor + max(moved - trunk_bytes, 0)) / bandwidth)
        result[step] = batch / seconds
    return result


def _bounds_rows(values, architecture, counts):
    """One row per precision and step: the `count_step` figures and the
    `roofline` bound on each GPU."""
    rows = []
    for precision in ("float32", "bfloat16"):
        bounds = {gpu: roofline(counts, gpu, precision, values.batch) for gpu in GPUS}
        rows += [{"architecture": architecture, "precision": precision, "step": step,
                  "flops": counts[step][0], "float32_bytes": counts[step][1],
                  **{f"{gpu}_images_per_second_bound": round(bounds[gpu][step])
                     for gpu in GPUS}} for step in STEPS]
    return rows


def performance_model(values, out, err):
    """Counts every step of every architecture, then prints the bounds."""
    del err
    import numpy as np  # noqa: PLC0415

    from llp_tf.core.memory_bank import MemoryBank  # noqa: PLC0415
    from llp_tf.models.config import EMBEDDING_DIM  # noqa: PLC0415

    rng = np.random.default_rng(0)
    labelled = rng.choice(values.bank, values.labelled, replace=False)
    bank = MemoryBank(values.bank, EMBEDDING_DIM, values.classes, labelled,
                      rng.integers(0, values.classes, values.labelled))
    rows = []
    for architecture in values.architectures:
        counts = {}
        for step in STEPS:
            counts[step] = count_step(values, step, architecture, bank)
            print(f"{architecture} {step:10s} {counts[step][0] / 1e12:7.3f} TFLOP "
                  f"{counts[step][1] / 1e9:7.2f} GB per step of {values.batch} (float32)",
                  file=out, flush=True)
        rows += _bounds_rows(values, architecture, counts)
    print(f"\nroofline images/s per GPU ({values.image_size}px, batch {values.batch}, "
          f"bank {values.bank} x 128 float32)", file=out)
    for row in rows:
        bounds = "  ".join(f"{gpu} {row[f'{gpu}_images_per_second_bound']:>7}" for gpu in GPUS)
        print(f"  {row['architecture']:9s} {row['precision']:8s} {row['step']:10s} "
              f"{row['flops'] / 1e12:6.3f} TFLOP {row['float32_bytes'] / 1e9:6.2f} GB  {bounds}",
              file=out)
    if values.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(values.output_json)), exist_ok=True)
        with open(values.output_json, "w") as f:
            json.dump({"settings": {"image_size": values.image_size, "batch": values.batch,
                                    "bank": values.bank, "labelled": values.labelled,
                                    "classes": values.classes},
                       "gpus": GPUS, "rows": rows}, f, indent=1)


def main(argv, stdout=None, stderr=None):
    """Runs the model; argv[0] is the program name. Returns the exit code."""
    return bench_cli.run(argv, stdout, stderr, make_flags(), __doc__, performance_model)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
