"""Where this broker is reached: its bound ports, advertised URLs, listeners and heartbeat names.

Theory of operation
-------------------
One :class:`BrokerAddresses` per broker (``BrokerService.addresses``). It holds the configured
ports until the server hands over the ports its listeners bound, once, before they serve
(:meth:`serve_on`); from then on lookups (:mod:`broker.net.lookup`), the admin API's broker
and cluster records and the health check read the bound ones. ``advertisedListeners`` are
parsed once (:class:`broker.listeners.Listeners`). The heartbeat namespaces
(:mod:`broker.topics.heartbeat`) are named after the advertised address and the web port.
"""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.listeners import BoundPorts, Listeners, ServiceUrls, service_urls
from broker.topics.heartbeat import HeartbeatNames

__all__ = ["BrokerAddresses"]


class BrokerAddresses:
    """The broker's ports and URLs (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # The configured ports until the server hands over the bound ones (serve_on).
        self._ports = BoundPorts(config.broker_service_port, config.web_service_port)
        self._ports_bound = False
        self.listeners = Listeners.parse(config.advertised_listeners, config.internal_listener_name)

    def serve_on(self, ports: BoundPorts) -> None:
        """The ports the server's listeners bound, handed over once before they serve."""
        if self._ports_bound:
            raise RuntimeError("the bound ports were already handed over")
        self._ports, self._ports_bound = ports, True

    @property
    def broker_port(self) -> int:
        return self._ports.broker

    @property
    def web_port(self) -> int:
        return self._ports.web

    @property
    def broker_port_tls(self) -> int | None:
        return self._ports.broker_tls

    @property
    def web_port_tls(self) -> int | None:
        return self._ports.web_tls

    def urls(self, local_host: str | None = None) -> ServiceUrls:
        """This broker's URLs as advertised to a client that reached it on *local_host*
        (None: the configured ``advertisedAddress``), with the bound ports."""
        return service_urls(self.config.advertised_address, local_host,
                            broker_port=self.broker_port, broker_port_tls=self.broker_port_tls,
                            web_port=self.web_port, web_port_tls=self.web_port_tls)

    def lookup_url(self, listener: str | None, local_host: str | None) -> str:
        """The ``pulsar://`` URL a lookup answers (by listener name when one is asked for or
        configured); raises ServiceNotReadyError for an unknown listener name."""
        return self.listeners.lookup_url(listener, self.urls(local_host).broker_url)

    @property
    def heartbeat(self) -> HeartbeatNames:
        """This broker's heartbeat namespaces (broker/topics/heartbeat.py): topics may be
        created there although the namespaces are never registered, so no listing shows them."""
        return HeartbeatNames(self.config.cluster_name, self.config.advertised_address,
                              self.web_port)
