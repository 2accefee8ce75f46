"""Broker metrics: the Prometheus collector and the registry /metrics serves.

``create_registry(service, lag_probe)`` builds a private CollectorRegistry holding
:class:`HoraeCollector` (topic, subscription and delayed-delivery figures read at scrape
time) plus prometheus_client's process, platform and GC collectors. Serve it with
``prometheus_client.generate_latest(registry)``; the snapshot exporter
(``broker.metrics.snapshots``) can use ``registry.collect`` as its ``collect`` callable.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from broker.metrics.collector import HoraeCollector, LoopLagProbe


def create_registry(service: Any, lag_probe: LoopLagProbe | None = None) -> CollectorRegistry:
    """A fresh registry (never the global one: several brokers may share a process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HoraeCollector(service, lag_probe=lag_probe))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


__all__ = ["HoraeCollector", "LoopLagProbe", "create_registry"]
