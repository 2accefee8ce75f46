"""The broker's heartbeat namespace and health-check topic, named as Pulsar names them.

Theory of operation
-------------------
Pulsar's health check (``BrokersBase.healthCheck`` -> ``HealthChecker``) produces and consumes
one message on ``persistent://<heartbeat namespace>/healthcheck``, where the heartbeat namespace
is ``pulsar/<cluster>/<advertisedAddress>:<webServicePort>`` (topicVersion V1, the default) or
``pulsar/<advertisedAddress>:<webServicePort>`` (V2). The namespace is never registered in the
metadata store: the topic exists only for the health check, so it is a *system* namespace that
user listings (tenants, namespaces of a tenant, topics of a namespace) never show.

:class:`HeartbeatNames` is pure: built from the config and the bound web port, it answers the
two names and whether a namespace is one of this broker's heartbeat namespaces (only the
broker's own ones may have topics created in them: a client cannot use ``pulsar/x:1`` as a
back door around namespace creation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["HEALTH_CHECK_TOPIC_SUFFIX", "HEARTBEAT_TENANT", "HeartbeatNames", "TopicVersion",
           "is_heartbeat_namespace"]

HEALTH_CHECK_TOPIC_SUFFIX = "healthcheck"
HEARTBEAT_TENANT = "pulsar"
# Pulsar's NamespaceService.HEARTBEAT_NAMESPACE_PATTERN(_V2).
_V1 = re.compile(r"pulsar/[^/]+/([^:]+:\d+)")
_V2 = re.compile(r"pulsar/([^:/]+:\d+)")


class TopicVersion(Enum):
    """Pulsar's ``org.apache.pulsar.common.naming.TopicVersion`` (the ``topicVersion`` query
    parameter of ``/admin/v2/brokers/health``)."""

    V1 = "V1"
    V2 = "V2"


def is_heartbeat_namespace(namespace: str) -> bool:
    """True for any broker's heartbeat namespace, V1 or V2 (Pulsar's isHeartbeatNamespace)."""
    return _V1.fullmatch(namespace) is not None or _V2.fullmatch(namespace) is not None


@dataclass(frozen=True, slots=True)
class HeartbeatNames:
    cluster: str
    advertised_address: str
    web_port: int

    def namespace(self, version: TopicVersion) -> str:
        broker = f"{self.advertised_address}:{self.web_port}"
        if version is TopicVersion.V2:
            return f"{HEARTBEAT_TENANT}/{broker}"
        return f"{HEARTBEAT_TENANT}/{self.cluster}/{broker}"

    def topic(self, version: TopicVersion) -> str:
        return f"persistent://{self.namespace(version)}/{HEALTH_CHECK_TOPIC_SUFFIX}"

    def owns(self, namespace: str) -> bool:
        """Whether *namespace* is one of this broker's two heartbeat namespaces."""
        return namespace in (self.namespace(TopicVersion.V1), self.namespace(TopicVersion.V2))
