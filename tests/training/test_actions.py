"""The controller's actions: an evaluation's record (metrics file, TensorBoard, log
line) and the plateau rule."""

import io

from tensorboard.backend.event_processing import event_multiplexer
from tensorboard.util import tensor_util

from llp_tf.training import summaries
from llp_tf.training.actions import EvaluationLog, PlateauRule
from llp_tf.training.controller import EvalOutput
from llp_tf.training.run_directory import RunDirectory
from llp_tf.training.schedule import PlateauTracker


def _evaluation(epoch, val_top1):
    evaluated = {"val_top1": val_top1, "val_categorisation": 1.25, "val_examples": 1000,
                 "pseudo_label_confidence": 1.0, "aggregation_score": 0.0001234}
    row = {"epoch": epoch, "step": 10 * epoch, "phase": "llp", "learning_rate": 0.00375,
           "loss": 2.5, "categorisation": 1.5, **evaluated}
    return EvalOutput(row, evaluated, "llp")


def test_an_evaluation_is_one_row_scalars_in_both_runs_and_one_line(tmp_path):
    tensorboard_dir = str(tmp_path / "tensorboard")
    writers = summaries.make_writers(tensorboard_dir, chief=True)
    stream = io.StringIO()
    log = EvaluationLog(RunDirectory(tmp_path), writers, stream)
    output = _evaluation(3, 0.5)
    log(output)
    assert RunDirectory(tmp_path).read_metrics() == [output.row]
    # Integers as integers (the constant count left out), floats to 4 digits.
    assert stream.getvalue() == ("epoch 3: val_top1 0.5000 val_categorisation 1.250 "
                                 "pseudo_label_confidence 1.000 aggregation_score 0.0001234\n")
    record = event_multiplexer.EventMultiplexer()
    record.AddRunsFromDirectory(tensorboard_dir)
    record.Reload()
    tags = {run: set(kinds["tensors"]) for run, kinds in record.Runs().items()}
    assert tags == {"validation": {"top1", "categorisation", "examples"},
                    "train": {"pseudo_label_confidence", "aggregation_score"}}
    [event] = record.Tensors("validation", "categorisation")
    assert (event.step, float(tensor_util.make_ndarray(event.tensor_proto))) == (30, 1.25)


def test_the_plateau_rule_reads_val_top1_of_the_phases_that_track_it():
    stream = io.StringIO()
    tracker = PlateauTracker(patience=2)
    rule = PlateauRule(tracker, lambda phase: phase == "llp", 0.1, stream)
    for epoch, top1 in enumerate((0.5, 0.5, 0.5), 1):
        rule(_evaluation(epoch, top1))
    assert int(tracker.drops.numpy()) == 1
    assert stream.getvalue() == ("Validation top-1 has plateaued: the learning rate drops x0.1 "
                                 "from the next epoch.\n")
    ignored = PlateauTracker(patience=1)
    PlateauRule(ignored, lambda phase: False, 0.1, stream)(_evaluation(4, 0.5))
    assert float(ignored.best.numpy()) == -float("inf")


def test_a_worker_other_than_the_chief_writes_no_events(tmp_path):
    writers = summaries.make_writers(str(tmp_path / "tensorboard"), chief=False)
    summaries.write_scalars(writers, {"val_top1": 0.5, "loss": 1.0}, 3)
    assert not (tmp_path / "tensorboard").exists()
