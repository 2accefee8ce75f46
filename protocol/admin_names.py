"""Pulsar's names for the enumerated values of its admin API, shared by broker and clients.

Pulsar's REST bodies and query parameters carry these Java enum names as strings; the broker
validates against them (``broker.config`` for its defaults, ``broker.admin`` for requests) and
``horae-admin`` (:mod:`cli.admin`) offers them as choices, so a typo never leaves the command
line. Kept here, below both, so the two lists cannot drift apart: the command-line clients may
import :mod:`protocol` but nothing from :mod:`broker`. Pure data, in Pulsar's enum order.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BACKLOG_QUOTA_POLICIES", "BACKLOG_QUOTA_TYPES", "INACTIVE_TOPIC_DELETE_MODES",
    "SCHEMA_COMPATIBILITY_STRATEGIES",
]

#: SchemaCompatibilityStrategy (``UNDEFINED``: the broker's default applies).
SCHEMA_COMPATIBILITY_STRATEGIES: Final = (
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
)
#: BacklogQuota.RetentionPolicy: what a topic does once over its backlog quota.
BACKLOG_QUOTA_POLICIES: Final = (
    "producer_request_hold", "producer_exception", "consumer_backlog_eviction",
)
#: BacklogQuota.BacklogQuotaType: the ``backlogQuotaType`` query parameter.
BACKLOG_QUOTA_TYPES: Final = ("destination_storage", "message_age")
#: InactiveTopicDeleteMode.
INACTIVE_TOPIC_DELETE_MODES: Final = (
    "delete_when_no_subscriptions", "delete_when_subscriptions_caught_up",
)
