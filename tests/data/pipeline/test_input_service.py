"""llp_tf/data/pipeline/input_service.py: what is started, planned from its settings
(the servers themselves: tests/cli/test_input_service.py)."""

import io
import threading

import pytest

from llp_tf.cli import command_line
from llp_tf.data.pipeline import input_service
from llp_tf.data.pipeline.input_service import ServiceSettings, plan


def _free_ports(count):
    return list(range(6000, 6000 + count))


def test_a_dispatcher_here_lists_the_workers_started_beside_it():
    assert plan(ServiceSettings(workers=2), _free_ports) == (
        None, [6000, 6001], ["127.0.0.1:6000", "127.0.0.1:6001"])
    assert plan(ServiceSettings(worker_ports=("5051",), host="h0",
                                worker_addresses=("h0:5051", "h1:5051")), _free_ports) == (
        None, [5051], ["h0:5051", "h1:5051"])


def test_workers_joining_a_dispatcher_elsewhere_list_nothing():
    assert plan(ServiceSettings(dispatcher_address="h0:5050", workers=1, host="h1"),
                _free_ports) == ("h0:5050", [6000], None)


@pytest.mark.parametrize("settings,match", [
    (ServiceSettings(workers=2, worker_ports=("5051",)), "names 1 port"),
    (ServiceSettings(workers=0), "A dispatcher without workers"),
    (ServiceSettings(dispatcher_address="h0:5050", workers=0), "give --workers of 1 or more"),
])
def test_bad_settings_name_their_flag(settings, match):
    with pytest.raises(ValueError, match=match):
        plan(settings, _free_ports)


def test_the_servers_started_say_they_listen_on_every_interface_without_authentication():
    # TensorFlow binds its tf.data servers to every interface and registers only insecure
    # credentials, so the one thing the tool can do is say so.
    stdout, stderr, stop = io.StringIO(), io.StringIO(), threading.Event()
    stop.set()  # serve starts the servers, announces them and stops at once
    settings = input_service.ServiceSettings(dispatcher_port=0, workers=1)
    assert input_service.serve(settings, command_line.free_ports, stdout, stderr, stop) == 0
    dispatcher_port = stdout.getvalue().split("--input_service=")[1].splitlines()[0].split(":")[-1]
    worker_port = stdout.getvalue().split("workers here: 127.0.0.1:")[1].split(";")[0].strip()
    assert stderr.getvalue() == (
        f"warning: the tf.data service listens on every network interface of this machine "
        f"(port {dispatcher_port}, {worker_port}), not only on --host=127.0.0.1, and has no "
        "authentication: anyone who reaches these ports can read the training data or add "
        "workers. Run it only on a trusted network (or behind a firewall).\n")
