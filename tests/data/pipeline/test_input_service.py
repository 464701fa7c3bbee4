"""llp_tf/data/pipeline/input_service.py: what is started, planned from its settings
(the servers themselves: tests/cli/test_input_service.py)."""

import pytest

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
