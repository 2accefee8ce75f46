"""Advertised listeners: which service URL a LOOKUP answers, by the client's listener name.

Theory of operation
-------------------
Pulsar's ``advertisedListeners`` is ``name:pulsar://host:port[,name:pulsar+ssl://host:port]...``
(a name may appear twice, once per scheme); ``internalListenerName`` picks the listener a
client without a listener name is sent to (default: the first one configured). With no
listener configured, the broker's own URL (``advertisedAddress`` and the bound port) is
answered, and a client asking for a named listener is refused, as Pulsar refuses an unknown
name: "the broker do not have <name> listener".

Pure functions over the configuration strings: the configuration validates with
:func:`parse_listeners`, the connection (LOOKUP) calls :func:`lookup_url`.
"""

from __future__ import annotations

from protocol.errors import ServiceNotReadyError

__all__ = ["lookup_url", "parse_listeners"]


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


def lookup_url(listeners_spec: str, internal_name: str, requested: str | None,
               default_url: str) -> str:
    """The URL a LOOKUP answers; raises ServiceNotReadyError for an unknown listener name."""
    listeners = parse_listeners(listeners_spec) if listeners_spec else {}
    if requested:
        url = listeners.get(requested)
        if url is None:
            raise ServiceNotReadyError(f"the broker do not have {requested} listener")
        return url
    if listeners:
        if internal_name and internal_name in listeners:
            return listeners[internal_name]
        return next(iter(listeners.values()))
    return default_url
