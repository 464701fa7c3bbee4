"""A training input of several streams: elements, labels, seeds, determinism
and resume over replicas, settings."""

import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import input_fns, streams
from llp_tf.data.pipeline.streams import Stream
from llp_tf.errors import ConfigError

SIZE = 8
SEED, EPOCH, STEPS = 3, 1, 3
LABELLED = np.array([1, 4, 9, 13, 20], np.int64)
USED = np.arange(2, 26, dtype=np.int64)  # 24 examples: three steps of 8


def _two_streams(second_view="weak"):
    """A labelled stream, and one over the used set with two views."""
    return {"labelled": Stream(LABELLED, 4, repeats=True),
            "unlabelled": Stream(USED, 8, views={"weak": "weak", "second": second_view})}


def _input_fn(source, spec=None, start_step=0, **kwargs):
    spec = _two_streams() if spec is None else spec
    return streams.make_streams_input_fn(source, spec, SIZE, SEED, EPOCH, start_step, STEPS,
                                         labelled_index=LABELLED, **kwargs)


def _global_steps(input_fn, strategy=None):
    """[step: {stream: {key: numpy}}], each step's per-replica batches concatenated."""
    steps = []
    with data_errors():
        if strategy is None:
            return list(input_fn(None).as_numpy_iterator())
        for element in strategy.distribute_datasets_from_function(input_fn):
            steps.append(tf.nest.map_structure(
                lambda value: np.concatenate(
                    [t.numpy() for t in strategy.experimental_local_results(value)]), element))
    return steps


@pytest.fixture(scope="module")
def epoch(folder_source):
    """`_global_steps` of `_input_fn`'s default streams on `folder_source`, read once for the
    tests that compare with it."""
    return _global_steps(_input_fn(folder_source))


def test_elements_hold_each_stream_with_its_views(folder_source):
    steps = _global_steps(_input_fn(folder_source, _two_streams("strong")))
    assert len(steps) == STEPS
    truth = folder_source.train_labels()
    for step in steps:
        assert set(step) == {"labelled", "unlabelled"}
        labelled, unlabelled = step["labelled"], step["unlabelled"]
        assert set(labelled) == {"image", "label", "index"}
        assert set(unlabelled) == {"weak", "second", "label", "index"}
        assert labelled["image"].shape == (4, SIZE, SIZE, 3)
        for key in ("weak", "second"):
            assert unlabelled[key].shape == (8, SIZE, SIZE, 3)
            assert unlabelled[key].dtype == np.float32
        for part, index in ((labelled, LABELLED), (unlabelled, USED)):
            # "index" is the position in the stream's index; only labelled examples
            # carry their label.
            assert part["index"].dtype == np.int64 and part["label"].dtype == np.int64
            original = index[part["index"]]
            np.testing.assert_array_equal(
                part["label"], np.where(np.isin(original, LABELLED), truth[original], -1))
        assert np.all(unlabelled["label"][~np.isin(USED[unlabelled["index"]], LABELLED)] == -1)
    # The unlabelled stream reads each used example once in the epoch.
    seen = np.concatenate([s["unlabelled"]["index"] for s in steps])
    assert sorted(seen.tolist()) == list(range(len(USED)))


def test_the_first_stream_is_the_one_stream_pipeline_and_others_salt_the_seed(folder_source,
                                                                            epoch):
    steps = epoch
    alone = input_fns.make_train_input_fn(folder_source, 4, SIZE, SEED, EPOCH, steps=STEPS,
                                         used_index=LABELLED, batches_cross_passes=True,
                                         labelled_index=LABELLED)
    with data_errors():
        for step, batch in zip(steps, alone(None).as_numpy_iterator()):
            for key in batch:
                np.testing.assert_array_equal(step["labelled"][key], batch[key])
    # The same set read by a stream of another name comes in another order.
    renamed = {"labelled": Stream(LABELLED, 4, repeats=True),
               "other": Stream(LABELLED, 4, repeats=True)}
    pairs = _global_steps(_input_fn(folder_source, renamed))
    assert not np.array_equal(np.concatenate([s["labelled"]["index"] for s in pairs]),
                              np.concatenate([s["other"]["index"] for s in pairs]))
    assert streams.stream_seed(SEED, "labelled", first=True) == SEED
    assert streams.stream_seed(SEED, "other", False) != streams.stream_seed(SEED, "x", False)


# make test keeps two replicas (one replica's resume: test_input_fns.py's test_resume_mid_epoch).
@pytest.mark.parametrize("replicas", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_resume_yields_the_rest_of_the_epoch_over_any_replicas(folder_source, replicas,
                                                               two_replica_strategy, epoch):
    strategy = two_replica_strategy if replicas == 2 else None
    full = epoch
    cached = ("labelled",)
    for start_step in (1, STEPS):
        resumed = _global_steps(_input_fn(folder_source, start_step=start_step, cached=cached),
                                strategy)
        assert len(resumed) == STEPS - start_step
        for got, want in zip(resumed, full[start_step:]):
            for stream in want:
                for key in want[stream]:
                    np.testing.assert_array_equal(got[stream][key], want[stream][key],
                                                  err_msg=f"{stream} {key}")


def test_stream_settings_are_checked(folder_source, two_replica_strategy):
    odd = {"labelled": Stream(LABELLED, 4, repeats=True), "unlabelled": Stream(USED, 3)}
    with pytest.raises(ConfigError, match="batch size 3 of the input stream 'unlabelled' does "
                                          "not split evenly over 2 replicas"):
        two_replica_strategy.distribute_datasets_from_function(_input_fn(folder_source, odd))
    with pytest.raises(ConfigError, match="batch size 3 of the input stream 'unlabelled'"):
        streams.check_batch_split(odd, 2)
    streams.check_batch_split(odd, 1)
    with pytest.raises(ConfigError, match="Input stream 'labelled': The global batch size 8 is "
                                          "larger than the 5 training examples"):
        _input_fn(folder_source, {"labelled": Stream(LABELLED, 8)})
    with pytest.raises(ConfigError, match="Input stream 'unlabelled': Unknown view policy"):
        _input_fn(folder_source, {"unlabelled": Stream(USED, 8, views={"image": "mild"})})
    with pytest.raises(ConfigError, match="at least one stream"):
        _input_fn(folder_source, {})
