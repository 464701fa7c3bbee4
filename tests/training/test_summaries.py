"""The run's TensorBoard record, read with TensorBoard's own reader and its
HParams plugin's data format."""

import pytest
from tensorboard.backend.event_processing import event_multiplexer
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from llp_tf.training import summaries
from llp_tf.training.run_directory import RunDirectory


@pytest.fixture(scope="module")
def record(tiny_llp_run):
    multiplexer = event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(RunDirectory(tiny_llp_run).tensorboard_dir)
    multiplexer.Reload()
    return multiplexer


def _scalars(record, run, tag):
    return [(event.step, float(tensor_util.make_ndarray(event.tensor_proto)))
            for event in record.Tensors(run, tag)]


def test_train_and_validation_are_two_runs_with_shared_names(record, tiny_llp_run):
    tags = {run: set(kinds["tensors"]) for run, kinds in record.Runs().items()}
    # A metric's name without val_, in the run val_ names (Keras's TensorBoard callback).
    assert {"loss", "aggregation", "categorisation", "confidence", "learning_rate",
            "aggregation_score", "pseudo_label_accuracy"} <= tags["train"]
    assert tags["validation"] == {"top1", "top5", "nn_top1", "categorisation", "examples"}
    rows = RunDirectory(tiny_llp_run).read_metrics()  # 3 epochs of 5 steps
    assert _scalars(record, "validation", "top1") == [
        (row["step"], pytest.approx(row["val_top1"])) for row in rows]
    # The bank's statistics at each evaluation; the pseudo labels' once propagated.
    assert _scalars(record, "train", "aggregation_score") == [
        (row["step"], pytest.approx(row["aggregation_score"])) for row in rows]
    assert [step for step, _ in _scalars(record, "train", "pseudo_label_accuracy")] == [10, 15]
    # Loops of 2 steps, cut at checkpoints (every 3 steps) and epoch ends.
    assert [step for step, _ in _scalars(record, "train", "loss")] == [2, 3, 5, 6, 8, 9, 10, 12,
                                                                       14, 15]


def test_the_settings_are_recorded_for_the_hparams_dashboard(record, tiny_llp_training):
    config, _ = tiny_llp_training
    content = record.PluginRunToTagToContent(hparams_metadata.PLUGIN_NAME)
    assert list(content) == ["."]  # the run's directory: train/ and validation/ are its own
    data = plugin_data_pb2.HParamsPluginData.FromString(
        content["."][hparams_metadata.SESSION_START_INFO_TAG])
    values = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
              for name, value in data.session_start_info.hparams.items()}
    assert values["k"] == 3 and values["architecture"] == "resnet10"
    assert values["label_percent"] == 10.0 and values["small_inputs"] is True
    assert values["lr_drop_epochs"] == "" and "run_dir" not in values
    assert set(values) == set(summaries.hparam_values(config.settings())) - {"run_dir"}


def test_a_name_picks_its_run_and_tag():
    assert summaries.run_and_tag("val_top1") == ("validation", "top1")
    assert summaries.run_and_tag("val_student_top1") == ("validation", "student_top1")
    assert summaries.run_and_tag("categorisation") == ("train", "categorisation")
    assert summaries.run_and_tag("aggregation_score") == ("train", "aggregation_score")


def test_hparam_values_join_lists_and_leave_out_unset_settings():
    assert summaries.hparam_values({"lr_drop_epochs": (194, 239), "split_seed": None,
                                    "k": 10, "method": "llp"}) == {
        "lr_drop_epochs": "194,239", "k": 10, "method": "llp"}
