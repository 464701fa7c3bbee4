"""Train with Local Label Propagation (or the supervised baseline).

  tools/train.py --regime=demo
  tools/train.py --regime=r18_p10_q100 --data_dir=/data/tfds
  tools/train.py --flagfile=my.flags --epochs=20

`--regime=NAME` reads flags/NAME.flags (the paper's runs and `demo`); flags
given after it override the file. Rerunning the same command resumes the run
in --run_dir from its latest checkpoint, with the split saved there.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

import tool_cli  # noqa: E402 -- tools/ is on the path of a script run from it

FLAGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flags")
FLAGS = flags.FLAGS

flags.DEFINE_string("regime", None, "Name of a flagfile in flags/ (e.g. demo, r18_p10_q100); "
                    "its settings apply first, later flags override them.")
flags.DEFINE_string("run_dir", None, "Directory of the run: config, split, checkpoints, "
                    "metrics, TensorBoard logs. Rerunning with the same directory resumes.")
# Data.
flags.DEFINE_string("dataset", "mnist5k", 'Training data: "mnist5k", "digits", "tfds:<name>" '
                    '(e.g. tfds:imagenet2012), "tfrecord:<folder>" or "folder:<folder>".')
flags.DEFINE_string("data_dir", None, "TFDS data_dir, or the folder relative paths in "
                    "--dataset are resolved against.")
flags.DEFINE_integer("image_size", 224, "Side of the square training and evaluation images.")
flags.DEFINE_float("label_percent", 10.0, "p: percent of each class's training images that "
                   "keep their label (the lowest-index ones unless --split_seed is set).")
flags.DEFINE_float("data_percent", 100.0, "q: percent of the training images used at all; "
                   "the used subset always contains the labelled set.")
flags.DEFINE_integer("split_seed", None, "Draw the labelled and used sets at random with this "
                     "seed instead of the release's lowest-index rule.")
flags.DEFINE_enum("augmentation", "paper", ["paper", "light"], "Training augmentation: the "
                  "paper's recipe (random resized crop, grayscale, colour jitter, flips), or "
                  "light (the random resized crop only), for grayscale digits.")
flags.DEFINE_float("min_crop_area", 0.2, "Smallest area fraction of the random resized crop, "
                   "in (0, 1] (the release: 0.2).")
flags.DEFINE_string("split_file", None, "Use this split file (from tools/make_splits.py) "
                    "instead of drawing one.")
flags.DEFINE_string("label_subset", None, "Label exactly the training images named in this "
                    "list (one image file name per line, e.g. n01440764_10026.JPEG) instead of "
                    "--label_percent: a file, or 1percent / 10percent for ImageNet's standard "
                    "subsets published with SimCLR (fetched once through TFDS into "
                    "<data_dir>/downloads). The used subset (--data_percent) is drawn around "
                    "them. Needs a dataset that records file names (folder:, tfds:imagenet2012).")
# Model.
flags.DEFINE_string("architecture", "resnet18", "resnet10 (tiny), resnet18, resnet34, "
                    "resnet50, resnet101 or resnet152 (pre-activation, v2).")
flags.DEFINE_float("width", 1.0, "Filter-count multiplier of the ResNet (0.25 for CPU demos).")
flags.DEFINE_list("blocks_per_stage", None, "Override the architecture's blocks per stage, "
                  "e.g. 1,1,1 for a three-stage toy network.")
flags.DEFINE_boolean("small_inputs", False, "CIFAR-style stem (3x3 conv, no pooling) for "
                     "28-32 px images.")
flags.DEFINE_integer("embedding_dim", 128, "D: size of the L2-normalised embedding.")
flags.DEFINE_boolean("sync_batch_norm", False, "Batch-norm statistics over all replicas "
                     "(needed for results identical to one replica).")
flags.DEFINE_float("batch_norm_momentum", 0.997, "Decay of the batch-norm moving statistics "
                   "(the release's 0.997 suits long runs; short runs need ~0.9, or evaluation "
                   "sees statistics that lag training).")
# Optimisation.
flags.DEFINE_integer("global_batch_size", 128, "Examples per step over all replicas (the "
                     "protocol's 128); more replicas split it.")
flags.DEFINE_float("base_learning_rate", 0.03, "Learning rate at a global batch of 128; "
                   "scaled linearly with the global batch size.")
flags.DEFINE_float("momentum", 0.9, "SGD momentum.")
flags.DEFINE_float("weight_decay", 1e-4, "lambda of the L2 penalty on all weights except "
                   "batch-norm parameters, added as the release trained it: lambda * "
                   "sum(tf.nn.l2_loss(w)) = lambda/2 * sum ||w||^2, whose gradient is lambda * w "
                   "(the paper's eq. 9 writes lambda * ||theta||^2, but its numbers come from "
                   "the release's convention).")
flags.DEFINE_integer("epochs", 300, "Total epochs, counting the warm-start epochs.")
flags.DEFINE_integer("warmup_epochs", 10, "Epochs of instance-recognition warm start before "
                     "LLP (ignored by --method=supervised).")
flags.DEFINE_list("lr_drop_epochs", [], "Epochs (counting the warm start) at which the "
                  "learning rate is multiplied by --lr_drop_factor.")
flags.DEFINE_float("lr_drop_factor", 0.1, "Factor of each learning-rate drop.")
flags.DEFINE_integer("plateau_patience", 0, "Also drop the learning rate after this many "
                     "evaluations without a new best validation top-1 (0: never).")
# Method.
flags.DEFINE_enum("method", "llp", ["llp", "supervised"], "llp, or supervised: "
                  "cross-entropy on the labelled examples only (the baseline).")
flags.DEFINE_enum("propagation", "local", ["local", "knn", "classifier"], "Pseudo labels "
                  "from the locally weighted kNN (LLP, eq. 7-8), the plain weighted kNN "
                  "(eq. 5-6), or the category head's argmax with its probability as confidence "
                  "(classifier: the variant the release intended; the release itself stored "
                  "that class without its label offset, so its pseudo labels fell among the "
                  "instance ids, never aggregated with their class and had no categorisation "
                  "loss, a slip that is not reproduced here).")
flags.DEFINE_integer("k", 10, "K: labelled neighbours that vote.")
flags.DEFINE_integer("t", 25, "T: neighbours in the local density estimate (the release "
                     "used 50).")
flags.DEFINE_float("temperature", 0.07, "tau of every softmax over the memory bank.")
flags.DEFINE_float("bank_momentum", 0.5, "m of the memory-bank row update.")
flags.DEFINE_boolean("weight_by_confidence", True, "Weight each example's loss by its "
                     "confidence (--noweight_by_confidence: the 'woc' ablation).")
flags.DEFINE_boolean("use_categorisation", True, "Include the category head's cross-entropy "
                     "in the LLP loss.")
flags.DEFINE_integer("density_chunk_size", 1024, "Labelled rows per chunk of the density "
                     "refresh; bounds its memory.")
flags.DEFINE_integer("cache_labeled_limit", 20000, "The supervised baseline trains on the "
                     "labelled set for many passes per epoch; with at most this many labelled "
                     "examples their encoded records are read once per epoch and held in "
                     "memory (ImageNet p1: 12,811 JPEGs, about 1.4 GB), otherwise every pass "
                     "reads the whole training split again. 0: never cache.")
# Loop.
flags.DEFINE_integer("seed", 0, "Seed of data order, augmentation and the bank's initial rows.")
flags.DEFINE_integer("steps_per_loop", 100, "Steps per call of the compiled training loop.")
flags.DEFINE_integer("checkpoint_every", 1000, "Write a checkpoint every this many steps (and "
                     "at every epoch end).")
flags.DEFINE_integer("keep_checkpoints", 3, "Checkpoints kept in --run_dir/checkpoints.")
flags.DEFINE_integer("eval_every", 1, "Evaluate every this many epochs (and after the last).")
flags.DEFINE_string("warm_start", None, "Run directory or checkpoint of an instance-"
                    "recognition run: start LLP from its model and bank.")
flags.DEFINE_integer("cpu_replicas", 0, "Split the CPU into this many logical devices and "
                     "mirror over them (multi-replica training without GPUs).")


def known_regimes():
    return sorted(name[:-len(".flags")] for name in os.listdir(FLAGS_DIR)
                  if name.endswith(".flags"))


def expand_regime(argv):
    """Replaces ``--regime=NAME`` by ``--flagfile=flags/NAME.flags`` (at its position)."""
    expanded = []
    for arg in argv:
        if arg.startswith("--regime="):
            name = arg.split("=", 1)[1]
            path = os.path.join(FLAGS_DIR, name + ".flags")
            if not os.path.exists(path):
                sys.stderr.write(f"Unknown regime {name!r}. Known regimes: "
                                 f"{', '.join(known_regimes())}.\n")
                sys.exit(2)
            expanded += [f"--flagfile={path}", arg]
        else:
            expanded.append(arg)
    return expanded


def config_from_flags():
    from llp_tf.config import TrainConfig
    run_dir = FLAGS.run_dir or (os.path.join("runs", FLAGS.regime) if FLAGS.regime else None)
    if run_dir is None:
        from llp_tf.errors import ConfigError
        raise ConfigError("Give --run_dir (or --regime, whose run directory is runs/REGIME).")
    return TrainConfig(
        run_dir=run_dir, dataset=FLAGS.dataset, data_dir=FLAGS.data_dir,
        image_size=FLAGS.image_size, label_percent=FLAGS.label_percent,
        data_percent=FLAGS.data_percent, split_seed=FLAGS.split_seed,
        split_file=FLAGS.split_file, label_subset=FLAGS.label_subset,
        augmentation=FLAGS.augmentation,
        min_crop_area=FLAGS.min_crop_area,
        architecture=FLAGS.architecture, width=FLAGS.width,
        blocks_per_stage=(tuple(int(b) for b in FLAGS.blocks_per_stage)
                          if FLAGS.blocks_per_stage else None),
        small_inputs=FLAGS.small_inputs, embedding_dim=FLAGS.embedding_dim,
        sync_batch_norm=FLAGS.sync_batch_norm,
        batch_norm_momentum=FLAGS.batch_norm_momentum, global_batch_size=FLAGS.global_batch_size,
        base_learning_rate=FLAGS.base_learning_rate, momentum=FLAGS.momentum,
        weight_decay=FLAGS.weight_decay, epochs=FLAGS.epochs,
        warmup_epochs=FLAGS.warmup_epochs,
        lr_drop_epochs=tuple(int(e) for e in FLAGS.lr_drop_epochs),
        lr_drop_factor=FLAGS.lr_drop_factor, plateau_patience=FLAGS.plateau_patience,
        method=FLAGS.method, propagation=FLAGS.propagation, k=FLAGS.k, t=FLAGS.t,
        temperature=FLAGS.temperature, bank_momentum=FLAGS.bank_momentum,
        weight_by_confidence=FLAGS.weight_by_confidence,
        use_categorisation=FLAGS.use_categorisation,
        density_chunk_size=FLAGS.density_chunk_size,
        cache_labeled_limit=FLAGS.cache_labeled_limit, seed=FLAGS.seed,
        steps_per_loop=FLAGS.steps_per_loop, checkpoint_every=FLAGS.checkpoint_every,
        keep_checkpoints=FLAGS.keep_checkpoints, eval_every=FLAGS.eval_every,
        warm_start=FLAGS.warm_start, cpu_replicas=FLAGS.cpu_replicas)


def train():
    config = config_from_flags()
    # Imported after the flags are read: logical CPUs (--cpu_replicas) must be
    # configured before TensorFlow touches a device.
    from llp_tf.training_loop import run_training  # noqa: PLC0415
    run_training(config)


def main(argv):
    return tool_cli.run_absl_tool(argv, FLAGS, train)


if __name__ == "__main__":
    app.run(main, argv=expand_regime(sys.argv))
