"""Ground truth of unlabelled examples never reaches training: permuting it
leaves a short run of every method bit-identical."""

import io
import os

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.core import losses
from llp_tf.data.splits import regime
from llp_tf.training import assembly
from llp_tf.training.methods import METHODS, SupervisedMethod, method_class
from llp_tf.training.methods.base import InputSpec, StepOutput, Stream
from llp_tf.training.methods.supervised import SupervisedMetrics
from llp_tf.training.step_metrics import batch_mean, replica_value
from tests.runs import PATTERNS, checkpoint_state, tiny_config

SETTINGS = dict(warmup_epochs=1, epochs=2, label_percent=10.0, checkpoint_every=100)


def _list_datasets(root, stripes_root):
    """Two list datasets of the same images: "true" with their labels, and
    "permuted", whose unlabelled examples' labels are shuffled among them;
    each with a split file of the same labelled and used examples."""
    lines = [(os.path.join(stripes_root, "train", kind, name), label)
             for label, kind in enumerate(PATTERNS)
             for name in sorted(os.listdir(os.path.join(stripes_root, "train", kind)))]
    labels = np.array([label for _, label in lines], np.int64)
    labelled, used = regime.make_splits(labels, SETTINGS["label_percent"], 100.0)
    unlabelled = np.setdiff1d(np.arange(len(labels)), labelled)
    permuted = labels.copy()
    permuted[unlabelled] = np.random.default_rng(0).permutation(labels[unlabelled])
    assert np.any(permuted != labels) and np.array_equal(permuted[labelled], labels[labelled])
    validation = root / "validation.txt"
    validation.write_text("".join(
        f"{os.path.join(stripes_root, 'validation', kind, name)} {label}\n"
        for label, kind in enumerate(PATTERNS)
        for name in sorted(os.listdir(os.path.join(stripes_root, "validation", kind)))))
    datasets = {}
    for key, values in (("true", labels), ("permuted", permuted)):
        train = root / f"{key}.txt"
        train.write_text("".join(f"{path} {value}\n" for (path, _), value in zip(lines, values)))
        split_file = str(root / f"{key}_split.npz")
        regime.save_splits(split_file, labelled, used, values)
        datasets[key] = (f"list:/?train={train}&validation={validation}", split_file)
    return datasets


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, stripes):
    return _list_datasets(tmp_path_factory.mktemp("lists"), stripes.split(":", 1)[1])


def _final_state(tmp_path, datasets, key, method):
    dataset, split_file = datasets[key]
    config = tiny_config(tmp_path / key, dataset, split_file=split_file, method=method,
                         **SETTINGS)
    assembly.run_training(config, stream=io.StringIO())
    return checkpoint_state(config.run_dir)


def _assert_bit_identical(want, got):
    assert set(want) == set(got)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# Every whole run here is slow (two runs a test). make test keeps their parts: the input's -1
# labels of unlabelled examples, for the split's labelled set (data/pipeline/test_input_fns.py,
# test_streams.py), and each method's own steps, from the same initial state, on permuted
# unlabelled labels (test_methods.py's test_llp_never_reads_the_true_labels_of_unlabelled_
# examples; the permutation tests of methods/test_fixmatch.py, test_mean_teacher.py,
# test_pseudo_label.py).
@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
def test_permuting_unlabelled_ground_truth_changes_no_training_state(tmp_path, datasets, method):
    _assert_bit_identical(_final_state(tmp_path, datasets, "true", method),
                          _final_state(tmp_path, datasets, "permuted", method))


class _EveryLabelRead(SupervisedMethod):
    """A careless method: cross-entropy on every example of the used set whose
    batch label is a class. Only the input's -1 keeps it off unlabelled ones."""

    def input_spec(self, split):
        return InputSpec({"labelled": Stream(split.used_index, self.global_batch_size)})

    def _supervised_forward(self, batch):
        labels = tf.cast(batch["labelled"]["label"], tf.int64)
        known = labels >= 0
        outputs = self.model(batch["labelled"]["image"], training=True)
        cross_entropy = losses.categorisation_loss(outputs["logits"],
                                                   tf.where(known, labels, 0))
        categorisation = batch_mean(tf.where(known, cross_entropy, 0.0))
        decay = self.weight_decay_penalty()
        return StepOutput(categorisation.value + decay, SupervisedMetrics(
            categorisation=categorisation, weight_decay=replica_value(decay)))


@pytest.mark.slow
def test_a_method_that_reads_every_batch_label_still_sees_only_labelled_ones(
        tmp_path, datasets, monkeypatch):
    assert method_class("supervised") is SupervisedMethod
    monkeypatch.setattr(assembly, "method_class", lambda name: _EveryLabelRead)
    true = _final_state(tmp_path, datasets, "true", "supervised")
    _assert_bit_identical(true, _final_state(tmp_path, datasets, "permuted", "supervised"))
