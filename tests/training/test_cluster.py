"""The cluster's description: TF_CONFIG checked, the chief found, a cluster that
does not form stopped with a message."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.training import cluster
from tests.cli.tool_main import ROOT


@pytest.mark.parametrize("text", [
    "not json", '{"cluster": {"worker": ["a:1"]}}', '{"task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}',
    '{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}',
])
def test_a_malformed_tf_config_is_one_clear_error(monkeypatch, text):
    monkeypatch.setenv("TF_CONFIG", text)
    with pytest.raises(ConfigError, match="TF_CONFIG is not a valid cluster description"):
        cluster.cluster_resolver("auto")


def test_auto_without_tf_config_and_none_are_one_process(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert cluster.cluster_resolver("auto") is None
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": '
                                    '{"type": "worker", "index": 0}}')
    assert cluster.cluster_resolver("none") is None
    assert cluster.is_chief(tf.distribute.get_strategy())
    assert cluster.describe_worker(tf.distribute.get_strategy()) == ""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FORM = """
import sys
from llp_tf.training import cluster
cluster.multi_worker_strategy(cluster.cluster_resolver("auto"), float(sys.argv[1]))
print("formed")
"""


def test_a_cluster_whose_peer_never_comes_stops_within_the_timeout(tmp_path):
    silent = f"127.0.0.1:{_free_port()}"
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{_free_port()}", silent]},
                 "task": {"type": "worker", "index": 0}}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", FORM, "3"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120,
                            env={**os.environ, "TF_CONFIG": json.dumps(tf_config)})
    assert result.returncode == -9 and "formed" not in result.stdout
    assert (f"error: the cluster did not form within 3 s (task worker 0); no answer from "
            f"{silent}.") in result.stderr
    assert time.monotonic() - started < 60


def test_a_global_batch_that_does_not_divide_over_the_replicas_is_refused(
        tmp_path, stripes, two_replica_strategy):
    # Two replicas (two workers of one device each count the same): 33 does not divide.
    from llp_tf.training import run_training
    from tests.runs import tiny_config
    config = tiny_config(tmp_path, stripes, cpu_replicas=2, global_batch_size=33)
    with pytest.raises(ConfigError, match="global batch size 33 does not split evenly over 2 "
                                          "replicas"):
        run_training(config, stream=open(os.devnull, "w"))
    assert not os.path.exists(config.run_dir)


class _Strategy:
    """What `cluster.workers_of` reads of a strategy: its resolver and local devices."""

    def __init__(self, resolver):
        self.cluster_resolver = resolver
        self.extended = type("Extended", (), {"worker_devices": ("/cpu:0",)})()


def test_the_workers_are_ranked_chief_first(monkeypatch):
    spec = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    for task, index in ((("chief", 0), 0), (("worker", 0), 1), (("worker", 1), 2)):
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": spec, "task": {"type": task[0], "index": task[1]}}))
        workers = cluster.workers_of(_Strategy(cluster.cluster_resolver("auto")))
        assert (workers.index, workers.count) == (index, 3)
    assert cluster.workers_of(tf.distribute.get_strategy()) is None


def test_cpu_replicas_on_a_worker_with_gpus_is_refused(monkeypatch):
    from llp_tf.training.distribution import make_strategy
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:1"]}, "task": '
                                    '{"type": "worker", "index": 0}}')
    listed = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: (
        [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")] if kind == "GPU"
        else listed(kind)))
    with pytest.raises(ConfigError, match="cpu_replicas splits a worker's CPU when it has no "
                                          "GPU"):
        make_strategy(2, "auto")
