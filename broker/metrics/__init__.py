"""Broker metrics: the Prometheus collector, the registry /metrics serves, the snapshot files.

The server composes one :class:`BrokerMetrics` (the collector over the service, with the
loop-lag probe, the publish buffer and the listeners' figures, in a private registry holding
prometheus_client's process, platform and GC collectors too) and passes it to the web app,
which serves ``await metrics.exposition()`` (collected in slices, rendered in the executor),
and to the snapshot exporter (``broker.metrics.snapshots``), which writes
``await metrics.snapshot_families()``: files on disk and Prometheus see identical names and
labels (idle topics' series kept as rendered text in both).
"""

from __future__ import annotations

from broker.metrics.auth_families import AuthenticationFigures
from broker.metrics.collector import BrokerMetrics, BrokerRegistry, HoraeCollector, exposition
from broker.metrics.connection_families import ConnectionFigures
from broker.metrics.lag import LoopLagProbe

__all__ = ["AuthenticationFigures", "BrokerMetrics", "BrokerRegistry", "ConnectionFigures", "HoraeCollector",
           "LoopLagProbe", "exposition"]
