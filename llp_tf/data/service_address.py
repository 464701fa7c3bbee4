"""Addresses of tf.data service dispatchers (``--input_service``): their check and normal form."""

import re

from llp_tf.errors import ConfigError

#: The only transfer protocol the tf.data service speaks.
SCHEME = "grpc://"
# [grpc://]host:port; the host a name, an IPv4 address or a bracketed IPv6 address.
_ADDRESS = re.compile(r"(?:grpc://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]"
                      r"(?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?P<port>[0-9]{1,5})")


def address_problem(address: str) -> str | None:
    """What is wrong with a dispatcher address, or None (``[grpc://]host:port``)."""
    match = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if match is None:
        return (f"input_service must be a tf.data service dispatcher address, host:port or "
                f"grpc://host:port (e.g. grpc://127.0.0.1:5050), not {address!r}")
    if not 0 < int(match["port"]) < 65536:
        return f"the port of input_service {address!r} must lie in 1-65535"
    return None


def check_address(address: str) -> str:
    """The dispatcher address as ``grpc://host:port``; ConfigError if malformed."""
    problem = address_problem(address)
    if problem:
        raise ConfigError(f"Invalid setting: {problem}.")
    return address if address.startswith(SCHEME) else SCHEME + address
