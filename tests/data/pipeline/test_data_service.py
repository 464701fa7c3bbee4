"""Training input through tf.data service workers, on loopback in this process:
with one worker the local elements in the local order; with two the same
steps (examples and pixels), each exactly once; bad addresses refused."""


import numpy as np
import pytest
import tensorflow as tf

from llp_tf.data.decoding.decode import data_errors
from llp_tf.data.pipeline import data_service, input_fns, streams
from llp_tf.data.pipeline.streams import Stream
from llp_tf.errors import ConfigError
from tests.cli.tool_main import load_tool
from tests.data.helpers import all_labelled

SIZE = 8
HOST = "127.0.0.1"
service = tf.data.experimental.service


class _Cluster:
    """A dispatcher and ``workers`` workers in this process, on 127.0.0.1."""

    def __init__(self, workers):
        ports = load_tool("command_line.py").free_ports(workers + 1, HOST)
        addresses = [f"{HOST}:{port}" for port in ports[1:]]
        self.dispatcher = service.DispatchServer(service.DispatcherConfig(
            port=ports[0], worker_addresses=addresses))
        self.address = f"grpc://{HOST}:{ports[0]}"
        # Heartbeats every 0.5 s: a stopping worker waits for its next one.
        self.workers = [service.WorkerServer(service.WorkerConfig(
            dispatcher_address=f"{HOST}:{ports[0]}", worker_address=address, port=port,
            heartbeat_interval_ms=500))
            for address, port in zip(addresses, ports[1:])]

    def stop(self):
        for server in self.workers + [self.dispatcher]:
            server.stop()


@pytest.fixture(scope="module")
def one_worker():
    cluster = _Cluster(1)
    yield cluster.address
    cluster.stop()


@pytest.fixture(scope="module")
def two_workers():
    cluster = _Cluster(2)
    yield cluster.address
    cluster.stop()


def _elements(source, batch, context=None, **kwargs):
    """list of numpy element dicts of one training epoch."""
    input_fn = input_fns.make_train_input_fn(source, batch, SIZE, seed=3, epoch=1, **kwargs,
                                            labelled_index=all_labelled(source))
    with data_errors():
        return list(input_fn(context).as_numpy_iterator())


def _assert_same_elements(got, want):
    """Equal lists of (nested) element dicts: same keys, dtypes and values."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for key in w:
            if isinstance(w[key], dict):
                _assert_same_elements([g[key]], [w[key]])
                continue
            assert g[key].dtype == w[key].dtype
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)


def test_one_worker_yields_the_local_elements_in_order(tfrecord_source, one_worker):
    local = _elements(tfrecord_source, 4)
    served = _elements(tfrecord_source, 4, input_service=one_worker)
    assert len(local) == tfrecord_source.info.num_train // 4
    assert served[0]["image"].shape == (4, SIZE, SIZE, 3)
    _assert_same_elements(served, local)


def test_one_worker_keeps_replica_order_and_resume(folder_source, one_worker):
    # Two replicas of one pipeline: elements alternate replica 0, replica 1.
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    local = _elements(folder_source, 6, context, start_step=1)
    served = _elements(folder_source, 6, context, start_step=1, input_service=one_worker)
    assert served[0]["index"].shape == (3,)
    _assert_same_elements(served, local)


def _steps(elements, replicas):
    """tuple of each step's indices -> the step's elements concatenated."""
    steps = {}
    for first in range(0, len(elements), replicas):
        parts = elements[first:first + replicas]
        step = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        steps[tuple(step["index"].tolist())] = step
    return steps


# make test keeps two replicas (each step's replica batches kept together too).
@pytest.mark.parametrize("replicas", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_two_workers_keep_every_step_exactly_once(tfrecord_source, two_workers, replicas):
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=replicas)
    local = _elements(tfrecord_source, 4, context)
    served = _elements(tfrecord_source, 4, context, input_service=two_workers)
    assert len(served) == len(local) == (29 // 4) * replicas
    want, got = _steps(local, replicas), _steps(served, replicas)
    # No step lost or doubled, and no step's examples mixed with another's.
    assert len(got) == len(want) == 29 // 4
    assert sorted(got) == sorted(want)
    for key, step in want.items():
        for field in step:
            np.testing.assert_array_equal(got[key][field], step[field], err_msg=field)
    # Each worker's own steps (every other one of the epoch) keep their order.
    order = {key: position for position, key in enumerate(want)}
    arrived = [order[key] for key in got]
    for worker in range(2):
        own = [position for position in arrived if position % 2 == worker]
        assert own == sorted(own)


@pytest.mark.parametrize("address", ["localhost", "grpc://host", "http://h:5050", "h:port",
                                     "h:70000", "h:0", "a b:5050"])
def test_the_pipeline_refuses_a_bad_address(tfrecord_source, address):
    with pytest.raises(ConfigError, match="input_service"):
        input_fns.make_train_input_fn(tfrecord_source, 4, SIZE, seed=0, epoch=0,
                                     input_service=address,
                                     labelled_index=all_labelled(tfrecord_source))


# make test keeps the device side's elements (uint8 crops and their nested choices); the
# host side's, float32 views of the same streams (test_streams.py), are slow.
@pytest.mark.parametrize("augment_on", [pytest.param("host", marks=pytest.mark.slow), "device"])
def test_one_worker_serves_each_stream_of_a_two_stream_input(tfrecord_source, one_worker,
                                                            augment_on):
    labelled = np.array([1, 4, 9], np.int64)
    spec = {"labelled": Stream(labelled, 2, repeats=True),
            "unlabelled": Stream(np.arange(20, dtype=np.int64), 4,
                                 views={"weak": "weak", "other": "strong"})}

    def elements(**kwargs):
        input_fn = streams.make_streams_input_fn(tfrecord_source, spec, SIZE, 3, 1, 1, 5,
                                                 labelled_index=labelled,
                                                 augment_on=augment_on, **kwargs)
        with data_errors():
            return list(input_fn(None).as_numpy_iterator())

    local, served = elements(), elements(input_service=one_worker)
    assert len(local) == 4 and set(served[0]) == set(spec)
    assert served[0]["unlabelled"]["other"].dtype == (
        np.uint8 if augment_on == "device" else np.float32)
    for stream in spec:
        _assert_same_elements([s[stream] for s in served], [e[stream] for e in local])
