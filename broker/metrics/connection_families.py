"""Metric families of the listeners: binary connections not read because their output is full,
and the web port's connection guard.

Theory of operation
-------------------
The server owns the figures (:class:`broker.net.throttle.OutputPauses` for the binary port,
:class:`broker.admin.listener.WebConnectionGuard` for the web port) and hands them, as
:class:`ConnectionFigures`, to the metrics it composes (:class:`broker.metrics.BrokerMetrics`);
the collector reads them at scrape time through the protocols below (plain ints, no locks:
all on the broker loop). Names
are Horae's (``horae_*``): Pulsar exports no figure for either.

- ``horae_connection_output_paused_total{cluster}``: times a binary connection stopped being
  read because its unsent output passed ``pulsarChannelWriteBufferHighWaterMark``;
- ``horae_connections_output_paused{cluster}``: binary connections not read for it now;
- ``horae_http_connections{cluster}``: open web connections;
- ``horae_http_connections_refused_total{cluster}``: web connections closed at accept because
  ``maxHttpServerConnections`` were open;
- ``horae_http_request_header_timeouts_total{cluster}``: web connections closed because a
  request head did not arrive whole within ``httpServerRequestHeaderTimeoutMs``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["ConnectionFigures", "OutputPauseFigures", "WebConnectionFigures",
           "connection_families"]


class OutputPauseFigures(Protocol):
    """``broker.net.throttle.OutputPauses``."""

    @property
    def paused_times(self) -> int: ...

    @property
    def paused_connections(self) -> int: ...


class WebConnectionFigures(Protocol):
    """``broker.admin.listener.WebConnectionGuard``."""

    @property
    def open_connections(self) -> int: ...

    @property
    def refused_times(self) -> int: ...

    @property
    def header_timeouts(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ConnectionFigures:
    """The listeners' figures: the binary port's output pauses, the web port's guard."""

    output: OutputPauseFigures
    web: WebConnectionFigures | None = None


def connection_families(attached: ConnectionFigures | None, cluster: str) -> Iterator[Metric]:
    """The families above (none without figures)."""
    if attached is None:
        return
    labels = ["cluster"]
    paused_total = CounterMetricFamily(
        "horae_connection_output_paused", "Times a connection stopped being read because its "
        "unsent output passed pulsarChannelWriteBufferHighWaterMark", labels=labels)
    paused_total.add_metric([cluster], float(attached.output.paused_times))
    yield paused_total
    paused_now = GaugeMetricFamily(
        "horae_connections_output_paused", "Connections not read now because their unsent "
        "output passed pulsarChannelWriteBufferHighWaterMark", labels=labels)
    paused_now.add_metric([cluster], float(attached.output.paused_connections))
    yield paused_now
    web = attached.web
    if web is None:
        return
    open_now = GaugeMetricFamily("horae_http_connections", "Open connections of the web port",
                                 labels=labels)
    open_now.add_metric([cluster], float(web.open_connections))
    yield open_now
    refused = CounterMetricFamily(
        "horae_http_connections_refused", "Web connections closed at accept because "
        "maxHttpServerConnections were open", labels=labels)
    refused.add_metric([cluster], float(web.refused_times))
    yield refused
    header = CounterMetricFamily(
        "horae_http_request_header_timeouts", "Web connections closed because a request head "
        "did not arrive whole within httpServerRequestHeaderTimeoutMs", labels=labels)
    header.add_metric([cluster], float(web.header_timeouts))
    yield header
