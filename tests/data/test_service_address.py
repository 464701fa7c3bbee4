"""Dispatcher addresses of --input_service: checked, and given the grpc:// scheme."""

import pytest

from llp_tf.data import service_address
from llp_tf.errors import ConfigError


@pytest.mark.parametrize("address", ["", "localhost", "grpc://host", "http://h:5050",
                                     "h:port", "h:70000", "h:0", "a b:5050"])
def test_bad_addresses_are_refused(address):
    assert service_address.address_problem(address)
    with pytest.raises(ConfigError, match="input_service"):
        service_address.check_address(address)


@pytest.mark.parametrize("address", ["127.0.0.1:5050", "grpc://node-7.cluster:80",
                                     "[::1]:5050"])
def test_good_addresses_get_the_grpc_scheme(address):
    assert service_address.address_problem(address) is None
    checked = service_address.check_address(address)
    assert checked.startswith("grpc://") and checked.endswith(address.split("//")[-1])
