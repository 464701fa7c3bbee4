"""Runs a tf.data service for the training input: a dispatcher and/or workers.

  tools/input_service.py --workers=2
  tools/train.py --regime=demo --input_service=grpc://127.0.0.1:5050

With no --dispatcher_address, a dispatcher starts here on --dispatcher_port
with --workers workers beside it, and prints the --input_service=grpc://...
flag for tools/train.py. With workers on other machines the dispatcher must
list every worker (--worker_addresses):

  host0$ tools/input_service.py --host=host0 --worker_ports=5051 \\
             --worker_addresses=host0:5051,host1:5051
  host1$ tools/input_service.py --dispatcher_address=host0:5050 --host=host1 \\
             --worker_ports=5051

Workers read the dataset's files by the trainer's paths. Runs until SIGTERM,
SIGINT (Ctrl-C) or SIGHUP, then stops and exits 0; exit 1 after an error at
start. TensorFlow's servers listen on every interface. What stays
deterministic: docs/multi-worker.md, "Remote input workers".
"""

import signal
import sys
import threading

from llp_tf.cli import quiet_start  # noqa: E402 -- imports nothing heavy
quiet_start.import_tensorflow(sys.argv)  # before anything imports TensorFlow

from absl import flags  # noqa: E402

from llp_tf.cli import command_line  # noqa: E402

PROGRAM = "input_service"
# Seconds between two looks for a stop signal.
POLL_SECONDS = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def make_flags():
    """The tool's `flags.FlagValues`."""
    values = command_line.new_flag_values()
    flags.DEFINE_string("dispatcher_address", "", "host:port of a dispatcher running elsewhere "
                        "for this machine's workers to join; empty: start a dispatcher here.",
                        flag_values=values)
    flags.DEFINE_integer("dispatcher_port", 5050, "Port of the dispatcher started here (0: a "
                         "free port).", lower_bound=0, upper_bound=65535, flag_values=values)
    flags.DEFINE_integer("workers", 1, "Workers to start here (0: only the dispatcher, its "
                         "workers all elsewhere).", lower_bound=0, flag_values=values)
    flags.DEFINE_list("worker_ports", [], "Ports of the workers started here, one per worker; "
                      "empty: free ports.", flag_values=values)
    flags.DEFINE_string("host", "127.0.0.1", "Name or address by which the trainers and the "
                        "other machines reach this one; in the addresses announced and printed.",
                        flag_values=values)
    flags.DEFINE_list("worker_addresses", [], "The dispatcher's fixed list of all its workers, "
                      "host:port each, here and elsewhere; empty: the workers started here.",
                      flag_values=values)
    flags.DEFINE_string("work_dir", "", "Folder where the dispatcher journals its state, so "
                        "that a restarted dispatcher resumes its jobs (fault-tolerant mode); "
                        "empty: no journal.", flag_values=values)
    command_line.define_verbosity(values)
    return values


def plan(values):
    """(dispatcher address to join or None, worker ports, dispatcher's worker
    list or None) of the flags; raises ValueError naming a bad flag."""
    from llp_tf.counted_nouns import counted  # noqa: PLC0415
    from llp_tf.data import service_address  # noqa: PLC0415 -- after the quiet start
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
    ports = ports or command_line.free_ports(values.workers)
    here = [f"{values.host}:{port}" for port in ports]
    listed = values.worker_addresses or here
    missing = [address for address in here if address not in listed]
    if missing and not joining:
        raise ValueError(f"--worker_addresses must list the workers started here; it lacks "
                         f"{', '.join(missing)}.")
    if not joining and not listed:
        raise ValueError("A dispatcher without workers: give --workers or --worker_addresses.")
    return joining or None, ports, None if joining else listed


def start_servers(values, joining, ports, listed):
    """(dispatcher or None, workers, the address to train with)."""
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


def stop_servers(dispatcher, workers):
    """Stops the workers, then the dispatcher."""
    for server in workers + ([dispatcher] if dispatcher else []):
        server.stop()


class StopSignals:
    """Within: SIGINT, SIGTERM and SIGHUP set ``event`` instead of ending the
    process, so the servers are stopped in order. Only in the main thread,
    where Python handles signals."""

    def __init__(self, event):
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


def serve(values, stdout, stderr, stop=None):
    """Starts the servers, announces them and runs until ``stop`` (a
    `threading.Event`, set by a stop signal) is set; returns the exit code."""
    stop = stop or threading.Event()
    try:
        joining, ports, listed = plan(values)
    except ValueError as error:
        stderr.write(f"error: {error}\n")
        return 1
    with StopSignals(stop):
        try:
            dispatcher, workers, address = start_servers(values, joining, ports, listed)
        except Exception as error:  # noqa: BLE001 -- TensorFlow's bind and config errors
            stderr.write(f"error: cannot start the service: {error}\n")
            return 1
        where = "started here" if dispatcher else "joined"
        stdout.write(f"{PROGRAM}: dispatcher {address} ({where}); workers here: "
                     f"{', '.join(f'{values.host}:{port}' for port in ports) or 'none'}"
                     f"{'; dispatcher lists ' + ', '.join(listed) if listed else ''}\n"
                     f"train with --input_service={address}\n")
        stdout.flush()
        while not stop.wait(POLL_SECONDS):
            pass
        stop_servers(dispatcher, workers)
    stdout.write(f"{PROGRAM}: stopped.\n")
    stdout.flush()
    return 0


def main(argv=None, stdout=None, stderr=None):
    """Runs the tool on ``argv`` (sys.argv if None; argv[0] is the program name). Returns
    the exit code (0 after a stop signal, 1 after an error)."""
    argv = sys.argv if argv is None else argv
    return command_line.run(argv, stdout, stderr, make_flags(), __doc__,
                        lambda values, out, err: command_line.ExitCode(serve(values, out, err)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
