"""Which ``pulsar://`` URL a LOOKUP answer carries.

Horae is a single node, so every lookup answers Connect to itself. What matters is the
string: the C++ client keys its connection pool on the URL, so answering with exactly the
string the client already used lets it reuse the same TCP connection, and answering with a
name the client cannot resolve breaks it.

Rule: the configured ``advertisedAddress`` is used unless it names a loopback host while the
client reached us on a non-loopback address (the default "localhost" would send a remote
client to itself); then the local address of the client's connection is advertised, which
the client demonstrably can reach. An explicitly configured non-loopback name always wins.
"""

from __future__ import annotations

import ipaddress

__all__ = ["advertised_host", "is_loopback", "service_url"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def advertised_host(advertised_address: str, local_host: str | None) -> str:
    """The host to advertise to a client whose connection arrived on *local_host*."""
    if local_host and is_loopback(advertised_address) and not is_loopback(local_host):
        try:
            ip = ipaddress.ip_address(local_host.split("%", 1)[0])
        except ValueError:
            return local_host
        if ip.version == 4:
            return local_host
        mapped = ip.ipv4_mapped  # a dual-stack socket reports ::ffff:a.b.c.d
        return str(mapped) if mapped is not None else f"[{local_host}]"
    return advertised_address


def service_url(advertised_address: str, port: int, local_host: str | None = None) -> str:
    return f"pulsar://{advertised_host(advertised_address, local_host)}:{port}"
