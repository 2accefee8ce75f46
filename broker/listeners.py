"""The URLs this broker advertises: LOOKUP answers by listener name, cluster records, HTTP lookup.

Theory of operation
-------------------
Pulsar's ``advertisedListeners`` is ``name:pulsar://host:port[,name:pulsar+ssl://host:port]...``
(a name may appear twice, once per scheme); ``internalListenerName`` picks the listener a
client without a listener name is sent to (default: the first one configured). With no
listener configured, the broker's own URL (``advertisedAddress`` and the bound port) is
answered, and a client asking for a named listener is refused, as Pulsar refuses an unknown
name: "the broker do not have <name> listener".

:class:`Listeners` is parsed once (the configuration validates with :func:`parse_listeners`;
the service keeps the parsed value) and answers :meth:`Listeners.lookup_url`.
:func:`service_urls` builds the broker's own URLs, the one place ``pulsar://``,
``pulsar+ssl://``, ``http://`` and ``https://`` URLs are spelled.

Host rule: the configured ``advertisedAddress`` is used unless it names a loopback host while
the client reached us on a non-loopback address (the default "localhost" would send a remote
client to itself); then the local address of the client's connection is advertised, which
the client demonstrably can reach. An explicitly configured non-loopback name always wins.

Pure functions and values: no IO.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.errors import ServiceNotReadyError

__all__ = ["Listeners", "ServiceUrls", "advertised_host", "is_loopback", "parse_listeners",
           "service_urls"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def parse_listeners(spec: str) -> dict[str, str]:
    """``{name: pulsar:// URL}`` from an advertisedListeners value; raises ValueError."""
    listeners: dict[str, str] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        if not sep or not name or "://" not in url:
            raise ValueError(f"advertisedListeners: invalid listener {item!r} "
                             "(expected name:pulsar://host:port)")
        if url.startswith("pulsar://"):
            listeners.setdefault(name, url)
        elif not url.startswith("pulsar+ssl://"):
            raise ValueError(f"advertisedListeners: unsupported scheme in {item!r}")
    return listeners


@dataclass(frozen=True, slots=True)
class Listeners:
    """The parsed ``advertisedListeners`` and ``internalListenerName``."""

    urls: Mapping[str, str]
    internal_name: str = ""

    @classmethod
    def parse(cls, spec: str, internal_name: str) -> Listeners:
        """Raises ValueError for a malformed *spec* (the configuration checked it already)."""
        return cls(parse_listeners(spec) if spec else {}, internal_name)

    def lookup_url(self, requested: str | None, default_url: str) -> str:
        """The URL a lookup answers; raises ServiceNotReadyError for an unknown listener name."""
        listeners = self.urls
        if requested:
            url = listeners.get(requested)
            if url is None:
                raise ServiceNotReadyError(f"the broker do not have {requested} listener")
            return url
        if listeners:
            if self.internal_name and self.internal_name in listeners:
                return listeners[self.internal_name]
            return next(iter(listeners.values()))
        return default_url


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


@dataclass(frozen=True, slots=True)
class BoundPorts:
    """The ports the broker's listeners bound (``0`` in the config means any free port);
    the TLS ones None without a TLS listener."""

    broker: int
    web: int
    broker_tls: int | None = None
    web_tls: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceUrls:
    """The broker's own URLs as one client sees them (TLS ones None without a TLS listener)."""

    broker_url: str
    broker_url_tls: str | None
    web_url: str
    web_url_tls: str | None


def service_urls(advertised_address: str, local_host: str | None, *, broker_port: int,
                 broker_port_tls: int | None, web_port: int,
                 web_port_tls: int | None) -> ServiceUrls:
    """The URLs advertised to a client that reached us on *local_host* (None: no client)."""
    host = advertised_host(advertised_address, local_host)
    return ServiceUrls(
        broker_url=f"pulsar://{host}:{broker_port}",
        broker_url_tls=f"pulsar+ssl://{host}:{broker_port_tls}"
        if broker_port_tls is not None else None,
        web_url=f"http://{host}:{web_port}",
        web_url_tls=f"https://{host}:{web_port_tls}" if web_port_tls is not None else None)
