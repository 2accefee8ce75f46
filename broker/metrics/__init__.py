"""Broker metrics: the Prometheus collector and the registry /metrics serves.

``create_registry(service, lag_probe)`` builds a private CollectorRegistry holding
:class:`HoraeCollector` (topic, subscription and delayed-delivery figures read at scrape
time) plus prometheus_client's process, platform and GC collectors; /metrics serves it with
``prometheus_client.generate_latest`` (or, without blocking the loop at 10,000 topics,
``await exposition(registry)``: collected in slices, rendered in the executor). ``collect_families(service)`` returns the same
families for the snapshot exporter (``broker.metrics.snapshots``), so files on disk and
Prometheus see identical names and labels.
"""

from __future__ import annotations

from broker.metrics.auth_families import attach_authentication_counters
from broker.metrics.collector import (
    BrokerRegistry,
    HoraeCollector,
    attach_publish_buffer,
    collect_families,
    create_registry,
    exposition,
)
from broker.metrics.connection_families import attach_connection_figures
from broker.metrics.lag import LoopLagProbe

__all__ = ["BrokerRegistry", "HoraeCollector", "LoopLagProbe", "attach_authentication_counters",
           "attach_connection_figures",
           "attach_publish_buffer",
           "collect_families", "create_registry", "exposition"]
