"""Resource groups' usage: Pulsar's ``pulsar_resource_group_messages_used`` and
``pulsar_resource_group_bytes_used`` counters, labelled ``ResourceGroup`` and ``MonitoringClass``
(``Publish``, ``Dispatch``): what the topics of each group's namespaces published and were
dispatched while attached (:mod:`broker.topics.resource_groups`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ResourceGroupCollector", "ResourceGroupFigures"]


class ResourceGroupFigures(Protocol):
    def usage_figures(self) -> list[tuple[str, str, int, int]]:
        """(group, monitoring class, messages, bytes) for each group and class."""
        ...


class ResourceGroupCollector(Collector):
    """The two counters over *groups* (registered on the broker's registry)."""

    def __init__(self, groups: ResourceGroupFigures) -> None:
        self._groups = groups

    def collect(self) -> Iterator[Metric]:
        labels = ["ResourceGroup", "MonitoringClass"]
        msgs = CounterMetricFamily("pulsar_resource_group_messages_used",
                                   "Messages a resource group's topics used", labels=labels)
        nbytes = CounterMetricFamily("pulsar_resource_group_bytes_used",
                                     "Bytes a resource group's topics used", labels=labels)
        for group, monitoring_class, m, b in self._groups.usage_figures():
            msgs.add_metric([group, monitoring_class], float(m))
            nbytes.add_metric([group, monitoring_class], float(b))
        yield msgs
        yield nbytes
