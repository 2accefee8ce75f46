"""Stats documents for the admin API: aggregation of partitioned topics' stats.

Theory of operation: :func:`broker.topics.stats.topic_stats` returns Pulsar's TopicStats shape; a partitioned
topic's stats are the per-partition documents merged the way Pulsar's PartitionedTopicStats
does: numbers summed, publisher lists concatenated, subscriptions merged by name (their
numbers summed, consumer lists concatenated), averages recomputed. Pure functions.
"""

from __future__ import annotations

from typing import Any

# Fields that are averages or identities, not additive.
_NOT_SUMMED = {"averageMsgSize", "type", "isDurable", "isReplicated", "lastLedgerCreatedTimestamp"}


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _merge(acc: dict[str, Any], doc: dict[str, Any]) -> None:
    for key, value in doc.items():
        if key not in acc:
            acc[key] = _copy(value)
            continue
        cur = acc[key]
        if key in _NOT_SUMMED:
            continue
        if _is_number(cur) and _is_number(value):
            acc[key] = cur + value
        elif isinstance(cur, list) and isinstance(value, list):
            cur.extend(_copy(value))
        elif isinstance(cur, dict) and isinstance(value, dict):
            _merge(cur, value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def aggregate_stats(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge per-partition TopicStats documents into one (Pulsar's partitioned-stats)."""
    acc: dict[str, Any] = {}
    for doc in docs:
        _merge(acc, doc)
    msgs, size = acc.get("msgInCounter"), acc.get("bytesInCounter")
    if _is_number(msgs) and _is_number(size):
        acc["averageMsgSize"] = (size / msgs) if msgs else 0.0
    return acc
