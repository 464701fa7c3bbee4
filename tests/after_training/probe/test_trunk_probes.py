"""llp_tf/after_training/probe/trunk_probes.py: the parts that need no trunk (the
probes themselves: tests/cli/test_linear_probe_tool.py)."""

import dataclasses
import re
import types

from llp_tf.after_training.probe import trunk_probes
from llp_tf.data.sources.base import SourceInfo


def test_a_dataset_name_becomes_a_file_name_part():
    assert trunk_probes.dataset_slug("tfds:places365_small") == "tfds_places365_small"
    assert trunk_probes.dataset_slug("folder:/data/scenes/") == "folder_scenes"
    assert trunk_probes.dataset_slug("digits") == "digits"
    assert trunk_probes.dataset_slug("list:/a b?train=x") == "list_a_b_train_x"
    assert trunk_probes.dataset_slug(":::") == "dataset"


def test_datasets_in_folders_of_one_name_get_their_own_cache_folders():
    first = SourceInfo("folder:/data/a/scenes", 2, ("x", "y"), 10, 4, None, 3)
    second = dataclasses.replace(first, name="folder:/data/b/scenes")
    names = trunk_probes.cache_folder_name(first), trunk_probes.cache_folder_name(second)
    assert all(re.fullmatch(r"folder_scenes-[0-9a-f]{12}", name) for name in names)
    assert names[0] != names[1]
    assert trunk_probes.cache_folder_name(dataclasses.replace(first)) == names[0]


def test_the_table_has_a_row_per_trunk():
    result = types.SimpleNamespace(val_top1=0.5, val_top5=0.875, best_val_top1=0.625,
                                   best_epoch=3, epochs=7, drops=2, seconds=1.25)
    lines = trunk_probes.format_table([("trained", result)]).splitlines()
    assert lines[0].split() == ["trunk", "val_top1", "val_top5", "best_val_top1", "at",
                                "epoch", "epochs", "drops", "train", "s"]
    assert lines[1].split() == ["trained", "0.5000", "0.8750", "0.6250", "3", "7", "2", "1.2"]
