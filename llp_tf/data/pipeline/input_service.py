"""A tf.data service for the training input (`data_service` reads from it): `serve` starts
a dispatcher and/or workers, announces ``--input_service=grpc://...`` and runs until
SIGTERM, SIGINT or SIGHUP. Imports TensorFlow only when the servers start."""

import dataclasses
import signal
import threading
from typing import Any, Callable, Optional, TextIO

from llp_tf.counted_nouns import counted
from llp_tf.data import service_address

PROGRAM = "input_service"
POLL_SECONDS = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """What to start: the flags of tools/input_service.py."""

    dispatcher_address: str = ""
    dispatcher_port: int = 5050
    workers: int = 1
    worker_ports: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    worker_addresses: tuple[str, ...] = ()
    work_dir: str = ""


def plan(values: ServiceSettings, free_ports: Callable[[int], list[int]]
         ) -> tuple[Optional[str], list[int], Optional[list[str]]]:
    """(dispatcher address to join or None, worker ports, dispatcher's worker list or None);
    ``free_ports(count)`` when no ports are given. ValueError names a bad flag."""
    joining = values.dispatcher_address
    if joining:
        problem = service_address.address_problem(joining)
        if problem:
            raise ValueError(f"--dispatcher_address: {problem}.")
        if values.workers == 0:
            raise ValueError("--dispatcher_address joins workers to a dispatcher; give "
                             "--workers of 1 or more.")
        if values.worker_addresses or values.work_dir:
            raise ValueError("--worker_addresses and --work_dir configure the dispatcher "
                             "started here; not with --dispatcher_address.")
    try:
        ports = [int(port) for port in values.worker_ports]
    except ValueError:
        raise ValueError(f"--worker_ports must be integers, not {values.worker_ports}.") from None
    if ports and len(ports) != values.workers:
        raise ValueError(f"--worker_ports names {counted(len(ports), 'port')} for --workers="
                         f"{values.workers}.")
    ports = ports or free_ports(values.workers)
    here = [f"{values.host}:{port}" for port in ports]
    listed = list(values.worker_addresses) or here
    missing = [address for address in here if address not in listed]
    if missing and not joining:
        raise ValueError(f"--worker_addresses must list the workers started here; it lacks "
                         f"{', '.join(missing)}.")
    if not joining and not listed:
        raise ValueError("A dispatcher without workers: give --workers or --worker_addresses.")
    return joining or None, ports, None if joining else listed


def start_servers(values: ServiceSettings, joining: Optional[str], ports: list[int],
                  listed: Optional[list[str]]) -> tuple[Any, list[Any], str]:
    """(dispatcher or None, workers, the address to train with) of a `plan`."""
    import tensorflow as tf  # noqa: PLC0415
    service = tf.data.experimental.service
    dispatcher = None
    if joining is None:
        dispatcher = service.DispatchServer(service.DispatcherConfig(
            port=values.dispatcher_port, worker_addresses=listed,
            work_dir=values.work_dir or None, fault_tolerant_mode=bool(values.work_dir)))
        port = int(dispatcher.target.rsplit(":", 1)[1])
        joining = f"{values.host}:{port}"
    joining = joining.split("://")[-1]
    workers = []
    try:
        for port in ports:
            workers.append(service.WorkerServer(service.WorkerConfig(
                dispatcher_address=joining, worker_address=f"{values.host}:{port}", port=port)))
    except Exception:
        stop_servers(dispatcher, workers)
        raise
    return dispatcher, workers, "grpc://" + joining


def stop_servers(dispatcher: Any, workers: list[Any]) -> None:
    """Stops the workers, then the dispatcher."""
    for server in workers + ([dispatcher] if dispatcher else []):
        server.stop()


class StopSignals:
    """Within (main thread only): SIGINT, SIGTERM and SIGHUP set ``event`` instead of ending
    the process."""

    def __init__(self, event: threading.Event) -> None:
        self.event, self.previous = event, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self.previous[signum] = signal.signal(
                    signum, lambda number, frame: self.event.set())
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def open_ports_warning(dispatcher: Optional[str], host: str, ports: list[int]) -> str:
    """The warning printed at start: TensorFlow's servers bind every interface (its gRPC
    servers take no bind address) and accept anyone (only insecure "grpc" credentials are
    registered in TensorFlow's builds)."""
    listening = ([dispatcher.rsplit(":", 1)[1]] if dispatcher else []) + list(ports)
    return (f"warning: the tf.data service listens on every network interface of this machine "
            f"(port {', '.join(str(port) for port in listening)}), not only on --host={host}, "
            "and has no authentication: anyone who reaches these ports can read the training "
            "data or add workers. Run it only on a trusted network (or behind a firewall).\n")


def serve(values: ServiceSettings, free_ports: Callable[[int], list[int]], stdout: TextIO,
          stderr: TextIO, stop: Optional[threading.Event] = None) -> int:
    """Starts the servers, announces them on ``stdout`` and runs until ``stop`` is set (by
    a stop signal); returns 0, or 1 after an error at start on ``stderr``."""
    stop = stop or threading.Event()
    try:
        joining, ports, listed = plan(values, free_ports)
    except ValueError as error:
        stderr.write(f"error: {error}\n")
        return 1
    with StopSignals(stop):
        try:
            dispatcher, workers, address = start_servers(values, joining, ports, listed)
        except Exception as error:  # noqa: BLE001 -- TensorFlow's bind and config errors
            stderr.write(f"error: cannot start the service: {error}\n")
            return 1
        stderr.write(open_ports_warning(address if dispatcher else None, values.host, ports))
        where = "started here" if dispatcher else "joined"
        stdout.write(f"{PROGRAM}: dispatcher {address} ({where}); workers here: "
                     f"{', '.join(f'{values.host}:{port}' for port in ports) or 'none'}"
                     f"{'; dispatcher lists ' + ', '.join(listed) if listed else ''}\n"
                     f"train with --input_service={address}\n")
        stdout.flush()
        while not stop.wait(POLL_SECONDS):
            pass  # a timed wait lets the stop signals' handlers run
        stop_servers(dispatcher, workers)
    stdout.write(f"{PROGRAM}: stopped.\n")
    stdout.flush()
    return 0
