"""llp_tf/after_training/probe/trunk_probes.py: the parts that need no trunk (the
probes themselves: tests/cli/test_linear_probe_tool.py)."""

import types

from llp_tf.after_training.probe import trunk_probes


def test_a_dataset_name_becomes_a_file_name_part():
    assert trunk_probes.dataset_slug("tfds:places365_small") == "tfds_places365_small"
    assert trunk_probes.dataset_slug("folder:/data/scenes/") == "folder_scenes"
    assert trunk_probes.dataset_slug("digits") == "digits"
    assert trunk_probes.dataset_slug("list:/a b?train=x") == "list_a_b_train_x"
    assert trunk_probes.dataset_slug(":::") == "dataset"


def test_the_table_has_a_row_per_trunk():
    result = types.SimpleNamespace(val_top1=0.5, val_top5=0.875, best_val_top1=0.625,
                                   best_epoch=3, epochs=7, drops=2, seconds=1.25)
    lines = trunk_probes.format_table([("trained", result)]).splitlines()
    assert lines[0].split() == ["trunk", "val_top1", "val_top5", "best_val_top1", "at",
                                "epoch", "epochs", "drops", "train", "s"]
    assert lines[1].split() == ["trained", "0.5000", "0.8750", "0.6250", "3", "7", "2", "1.2"]
