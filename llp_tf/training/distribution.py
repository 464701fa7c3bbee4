"""Choice of the `tf.distribute` strategy of a run. One `MirroredStrategy` per device set and
process: a second one's all-reduces would collide with the first's."""

from typing import Optional, Sequence

import tensorflow as tf

from llp_tf.errors import ConfigError
from llp_tf.training import cluster as cluster_lib

_MIRRORED = {}
#: Collective keys set apart for each device set's strategy.
_KEYS_PER_STRATEGY = 1_000_000


def mirrored_strategy(devices: Optional[Sequence[str]] = None
                      ) -> tf.distribute.MirroredStrategy:
    """The process's `MirroredStrategy` over ``devices`` (all GPUs when None); strategies over
    other device sets run their collectives apart."""
    key = tuple(devices) if devices is not None else None
    if key not in _MIRRORED:
        # Each device set's collectives get keys of their own: a group's key is otherwise
        # taken by the first set's size.
        base = tf.distribute.MirroredStrategy._collective_key_base
        tf.distribute.MirroredStrategy._collective_key_base = base + _KEYS_PER_STRATEGY * len(
            _MIRRORED)
        try:
            _MIRRORED[key] = tf.distribute.MirroredStrategy(list(devices) if devices else None)
        finally:
            tf.distribute.MirroredStrategy._collective_key_base = base
    return _MIRRORED[key]


def first_device(strategy: tf.distribute.Strategy) -> str:
    """The first device ``strategy`` computes on here; "" for the default strategy."""
    if isinstance(strategy, (tf.distribute.MirroredStrategy,
                             tf.distribute.MultiWorkerMirroredStrategy)):
        return strategy.extended.worker_devices[0]
    return ""


def _split_cpu(cpu_replicas: int) -> list[str]:
    """The names of ``cpu_replicas`` logical CPUs this process's CPU is split into."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_replicas)
    except RuntimeError:
        pass  # TensorFlow is initialised already: use the devices it has
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) < cpu_replicas:
        raise ConfigError(
            f"cpu_replicas={cpu_replicas} asks for {cpu_replicas} logical CPUs, but "
            f"TensorFlow was initialised with {len(devices)}; set it before any "
            "TensorFlow work.")
    return devices[:cpu_replicas]


def make_strategy(cpu_replicas: int = 0, cluster: str = "none",
                  cluster_timeout: float = 300.0) -> tf.distribute.Strategy:
    """The strategy of a run: `MultiWorkerMirroredStrategy` for a ``cluster`` (each worker's
    replicas its GPUs, or ``cpu_replicas`` logical CPUs); else a mirror over ``cpu_replicas``
    (>= 2) logical CPUs, or over several GPUs; else the default strategy."""
    resolver = cluster_lib.cluster_resolver(cluster)
    if resolver is not None:
        if cpu_replicas >= 2:
            if tf.config.list_physical_devices("GPU"):
                raise ConfigError("cpu_replicas splits a worker's CPU when it has no GPU; "
                                  "this worker mirrors its GPUs: leave cpu_replicas out.")
            # Not `_split_cpu`: listing the devices would start TensorFlow before the cluster.
            tf.config.set_logical_device_configuration(
                tf.config.list_physical_devices("CPU")[0],
                [tf.config.LogicalDeviceConfiguration()] * cpu_replicas)
        return cluster_lib.multi_worker_strategy(resolver, cluster_timeout,
                                                 cpu_replicas=max(cpu_replicas, 1))
    if cpu_replicas >= 2:
        return mirrored_strategy(_split_cpu(cpu_replicas))
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return mirrored_strategy()
    return tf.distribute.get_strategy()
