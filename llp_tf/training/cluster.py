"""Training over several processes (workers) with `MultiWorkerMirroredStrategy`, the cluster
described by ``TF_CONFIG`` or SLURM; the global batch is split over all replicas of all
workers. A watchdog stops a worker whose cluster has not formed within ``timeout_seconds``,
naming the peers that do not answer. Only the chief writes the run directory.
docs/multi-worker.md."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
# MultiWorkerMirroredStrategy's device list has no public option (`_local_cpus`).
from tensorflow.python.distribute import collective_all_reduce_strategy

from llp_tf.errors import ConfigError
from llp_tf.tensor_types import Array

# Run in its own process until its stdin closes; on timeout names the silent peers and
# kills the worker, whose Python cannot run while TensorFlow waits.
_WATCHDOG = r"""
import os, select, signal, socket, sys
pid, timeout, me, peers = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
if select.select([sys.stdin], [], [], timeout)[0]:
    sys.exit(0)
silent = []
for peer in peers:
    host, _, port = peer.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        silent.append(peer)
sys.stderr.write(
    f"error: the cluster did not form within {timeout:g} s ({me}); "
    + (f"no answer from {', '.join(silent)}. " if silent else "")
    + "Start every worker with the same cluster, check that they reach each other's "
    "addresses, or give them longer with --cluster_timeout.\n")
sys.stderr.flush()
os.kill(pid, signal.SIGKILL)
"""


def _tf_config_resolver() -> Optional[tf.distribute.cluster_resolver.ClusterResolver]:
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        spec = json.loads(text)
        cluster, task = spec["cluster"], spec["task"]
        addresses = [a for job in cluster.values() for a in job]
        if not addresses or task["type"] not in cluster or \
                not 0 <= int(task["index"]) < len(cluster[task["type"]]):
            raise ValueError("its task is not one of its cluster's")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"TF_CONFIG is not a valid cluster description ({error}): give JSON like "
            '{"cluster": {"worker": ["host0:port", "host1:port"]}, "task": {"type": '
            '"worker", "index": 0}}, the same cluster on every worker.') from None
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def cluster_resolver(cluster: str) -> Optional[tf.distribute.cluster_resolver.ClusterResolver]:
    """The resolver of a run's ``--cluster`` setting (one of `CLUSTERS`), None for one process;
    ConfigError for a malformed ``TF_CONFIG``."""
    if cluster == "slurm":
        return tf.distribute.cluster_resolver.SlurmClusterResolver()
    return _tf_config_resolver() if cluster == "auto" else None


def _addresses(resolver) -> tuple[str, list[str]]:
    """(this task's description, the other tasks' addresses)."""
    spec = resolver.cluster_spec().as_dict()
    me = (resolver.task_type, int(resolver.task_id))
    others = [address for job, tasks in spec.items()
              for index, address in (tasks.items() if isinstance(tasks, dict)
                                     else enumerate(tasks)) if (job, index) != me]
    return f"task {me[0]} {me[1]}", others


def multi_worker_strategy(resolver: tf.distribute.cluster_resolver.ClusterResolver,
                          timeout_seconds: float, cpu_replicas: int = 1
                          ) -> tf.distribute.Strategy:
    """A `MultiWorkerMirroredStrategy` over ``resolver``'s cluster, formed within
    ``timeout_seconds`` or the process is stopped; call it before other TensorFlow work.
    Without GPUs each worker's replicas are its first ``cpu_replicas`` logical CPUs (made
    beforehand)."""
    gpus = tf.config.list_physical_devices("GPU")
    implementation = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if gpus else implementation.RING)
    me, others = _addresses(resolver)
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(timeout_seconds), me, *others],
        stdin=subprocess.PIPE)
    try:
        with _local_cpus(cpu_replicas if not gpus else 1):
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=resolver, communication_options=options)
    finally:
        watchdog.stdin.close()
        watchdog.wait()
    return strategy


@contextlib.contextmanager
def _local_cpus(count: int) -> Iterator[None]:
    """MultiWorkerMirroredStrategy made inside mirrors ``count`` CPUs of each worker where it
    would mirror one (TensorFlow has no option for it: its device list is replaced)."""
    if count <= 1:
        yield
        return
    extended = collective_all_reduce_strategy.CollectiveAllReduceExtended

    def local_devices(self, resolver, worker_device):
        del self, resolver
        return tuple(f"{worker_device}/device:CPU:{i}" for i in range(count)), "CPU"

    original = extended._initialize_local_devices
    extended._initialize_local_devices = local_devices
    try:
        yield
    finally:
        extended._initialize_local_devices = original


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run directory: one process, or the ``chief`` task (worker 0
    where there is none)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    if resolver.task_type == "chief":
        return True
    return (resolver.task_type == "worker" and int(resolver.task_id) == 0
            and "chief" not in resolver.cluster_spec().as_dict())


def task_of(strategy: tf.distribute.Strategy) -> tuple[str, int]:
    """(task type, index) of this process in its cluster, e.g. ("worker", 1)."""
    resolver = strategy.cluster_resolver
    return resolver.task_type, int(resolver.task_id)


@functools.lru_cache(maxsize=None)
def process_sum(strategy: tf.distribute.Strategy
                ) -> Callable[[Sequence[Array]], list[np.ndarray]]:
    """A collective every process of ``strategy`` calls together: float64 arrays -> their
    sums over the processes (each process's counted once, whatever its replicas)."""
    local = len(strategy.extended.worker_devices)

    def replica(values):
        context = tf.distribute.get_replica_context()
        first = tf.get_static_value(context.replica_id_in_sync_group) % local == 0
        # On each replica's device (an identity) for the all-reduce.
        return context.all_reduce(
            "sum", [tf.identity(value) if first else tf.zeros_like(value) for value in values])

    totals = tf.function(lambda values: strategy.run(replica, args=(values,)))

    def total(arrays):
        sums = totals([tf.constant(array, tf.float64) for array in arrays])
        return [strategy.experimental_local_results(value)[0].numpy() for value in sums]
    return total


@dataclasses.dataclass(frozen=True)
class Workers:
    """This process's place in a cluster: ``index`` of ``count`` workers (the chief 0), and
    ``failing(ok)``, a collective every worker calls in turn: the indices of the workers
    whose ``ok`` is False (empty when all are)."""

    index: int
    count: int
    failing: Callable[[bool], list[int]]


def workers_of(strategy: tf.distribute.Strategy) -> Optional[Workers]:
    """The `Workers` of a multi-worker ``strategy``; None for one process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not spec:
        return None
    ranked = [("chief", 0)] * ("chief" in spec) + [("worker", i)
                                                  for i in range(len(spec.get("worker", [])))]
    index, total = ranked.index(task_of(strategy)), process_sum(strategy)

    def failing(ok: bool) -> list[int]:
        failed = np.zeros(len(ranked))
        failed[index] = not ok
        return [int(worker) for worker in np.flatnonzero(total([failed])[0])]

    return Workers(index, len(ranked), failing)


def describe_worker(strategy: tf.distribute.Strategy) -> str:
    """e.g. ``"worker 1 of 2"`` for a cluster, ``""`` for one process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not spec:
        return ""
    total = sum(len(tasks) for tasks in spec.values())
    return "{} {} of {}".format(*task_of(strategy), total)
