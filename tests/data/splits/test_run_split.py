"""llp_tf/data/splits/run_split.py: a run's split drawn, checked and saved once, then read back
on every rerun (the whole run's: tests/training/test_assembly.py)."""

import numpy as np
import pytest

from llp_tf.data.config import DataConfig
from llp_tf.data.splits import regime, run_split
from llp_tf.errors import ConfigError


def test_a_new_split_is_saved_by_the_chief_and_read_back_on_a_rerun(tmp_path, folder_source):
    data = DataConfig(dataset="folder", label_percent=40.0, data_percent=80.0)
    path, notes = str(tmp_path / "split.npz"), []
    worker = run_split.prepare(data, path, folder_source, 4, afresh=True, save=False,
                               log=notes.append)
    assert not (tmp_path / "split.npz").exists()
    chief = run_split.prepare(data, path, folder_source, 4, afresh=True, save=True,
                              log=notes.append)
    assert regime.read_made_from(path) == {"label_subset": None, "exclude_list": None}
    again = run_split.resolve(DataConfig(dataset="folder", label_percent=10.0), path,
                              folder_source, afresh=False, log=notes.append)
    for split in (worker, again):
        np.testing.assert_array_equal(split.labelled_index, chief.labelled_index)
        np.testing.assert_array_equal(split.used_index, chief.used_index)
    assert len(chief.train_labels) == 27 and chief.excluded_validation.size == 0
    assert notes == []


def test_a_split_of_less_than_one_global_batch_is_refused_before_it_is_saved(tmp_path,
                                                                             folder_source):
    data = DataConfig(dataset="folder", label_percent=40.0, data_percent=50.0)
    with pytest.raises(ConfigError, match=r"The run uses 14 training examples, fewer than one "
                       r"global batch \(--global_batch_size=16\).*"
                       r"Give --global_batch_size=14 or less"):
        run_split.prepare(data, str(tmp_path / "split.npz"), folder_source, 16, afresh=True,
                          save=True, log=print)
    assert not (tmp_path / "split.npz").exists()
    run_split.check_one_batch(14, 14)
