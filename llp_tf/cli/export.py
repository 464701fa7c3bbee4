"""Export a trained run as a TensorFlow SavedModel for inference and fine-tuning.

  tools/export.py --run_dir=runs/demo
  tools/export.py --run_dir=runs/demo --knn --output_dir=/models/demo --overwrite
  tools/export.py --run_dir=runs/demo --checkpoint=1829
  tools/export.py --run_dir=runs/demo --onnx
  tools/export.py --run_dir=runs/demo --keras

Writes --output_dir (default RUN_DIR/export): a SavedModel that loads without llp_tf, whose
signatures embed, classify (also serving_default) and, with --knn, knn take raw uint8
images of any size, and export_info.json describing them. With --onnx, also model.onnx,
which takes images preprocessed as llp_tf's onnx_model.preprocess_for_onnx does; with
--keras, also model.keras, a native Keras model that fine-tunes with fit.
"""

import os
import sys
from typing import Sequence, TextIO

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402

EXPORT_SUBDIR = "export"


def make_flags() -> flags.FlagValues:
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    command_line.define_run_dir(values, "(LLP or supervised) to export")
    command_line.define_checkpoint(values)
    flags.DEFINE_string("output_dir", None, "SavedModel directory to write; default "
                        "RUN_DIR/export.", flag_values=values)
    flags.DEFINE_boolean("knn", False, "Also store the memory bank (embeddings and the class "
                         "of each row) and add the knn signature (LLP runs only).",
                         flag_values=values)
    flags.DEFINE_boolean("onnx", False, "Also write model.onnx into --output_dir: the network "
                         "(converted with tf2onnx) for ONNX Runtime, taking preprocessed "
                         "float32 images [B, S, S, 3] (NHWC, S the run's image size) and "
                         "returning probabilities [B, C] and embedding [B, D]; the caller "
                         "does the preprocessing.", flag_values=values)
    flags.DEFINE_boolean("keras", False, "Also write model.keras into --output_dir: the "
                         "trunk and both heads as a native Keras 3 model, taking preprocessed "
                         "float32 images [B, S, S, 3] as model.onnx does and returning "
                         "features, embedding and logits. keras.saving.load_model opens it "
                         "without safe_mode=False or custom_objects once a line `import "
                         "llp_tf.models.embedding_classifier` has run, and model.fit trains "
                         "every weight, batch norm included.",
                         flag_values=values)
    flags.DEFINE_boolean("overwrite", False, "Replace an earlier export in --output_dir (only "
                         "once the new export is complete): a folder holding saved_model.pb, "
                         "export_info.json and nothing an export does not write, or an empty "
                         "one. Any other folder (a training run among them) is refused.",
                         flag_values=values)
    return values


def export(values: flags.FlagValues, stdout: TextIO,
           stderr: TextIO) -> command_line.ExitCode | None:
    """Exports --run_dir as the flags say; `ExitCode` 1 after a bad input."""
    output_dir = os.path.abspath(values.output_dir or os.path.join(values.run_dir,
                                                                   EXPORT_SUBDIR))
    if os.path.lexists(output_dir) and not values.overwrite:
        stderr.write(f"error: {output_dir} already exists; pass --overwrite to replace it, "
                     "or choose another --output_dir.\n")
        return command_line.ExitCode(1)

    from llp_tf.after_training import run_loader
    from llp_tf.after_training.export import export_summary, onnx_model, saved_model
    from llp_tf.training import run_directory

    def report(line):
        stdout.write(line + "\n")
        stdout.flush()

    try:
        saved_model.check_output_dir(output_dir, values.overwrite)
        if values.onnx:
            onnx_model.require_converter()
        config = run_loader.read_config(values.run_dir)
        checkpoint = run_directory.resolve_checkpoint(values.run_dir, values.checkpoint)
        # The bank is read only for knn: the other signatures need the model alone.
        run, source = run_loader.load_run_with_data(values.run_dir, checkpoint,
                                                    with_bank=values.knn)
        info = source.info
        module = saved_model.build_inference_module(run, info.class_names, include_knn=values.knn)
        report(f"Exporting {values.run_dir}: {os.path.basename(run.checkpoint)} (step "
               f"{run.step}), {config.method.name} {config.model.architecture}, "
               f"{info.num_classes} classes of {config.data.dataset}, "
               f"{config.data.image_size} px"
               + (", with the memory bank for knn" if values.knn else ""))
        extras = [name for name, wanted in (("model.onnx", values.onnx),
                                            ("model.keras", values.keras)) if wanted]
        report("Tracing the signatures and writing the SavedModel"
               + "".join(f" and {name}" for name in extras) + " ...")
        written = saved_model.save_module(run, module, output_dir, overwrite=values.overwrite,
                                          include_onnx=values.onnx, include_keras=values.keras)
    except OSError as error:
        stderr.write(f"error: cannot write the export: {error}\n")
        return command_line.ExitCode(1)
    for line in export_summary.written_lines(written, output_dir, values.onnx):
        report(line)
    return None


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Runs the tool on ``argv`` (default sys.argv); returns the exit code."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__, export, origins=None,
                            run_dir_of="a training run")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
