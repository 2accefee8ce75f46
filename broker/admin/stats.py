"""Stats documents for the admin API: partitioned aggregation and an internal-stats fallback.

Theory of operation: Topic.stats() already returns Pulsar's TopicStats shape; a partitioned
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


def _pos(p: Any) -> str:
    if p is None:
        return "-1:-1"
    return f"{p.ledger_id}:{p.entry_id}"


def fallback_internal_stats(topic: Any) -> dict[str, Any]:
    """PersistentTopicInternalStats built from the ledger and cursors, for a Topic without
    its own ``internal_stats()``."""
    ledger = topic.ledger
    ledgers = list(getattr(ledger, "ledgers", ()))
    current = ledgers[-1] if ledgers else None
    cursors = {}
    for name, cursor in getattr(ledger, "cursors", {}).items():
        cursors[name] = {
            "markDeletePosition": _pos(cursor.mark_delete_position),
            "readPosition": _pos(cursor.read_position),
            "messagesConsumedCounter": 0,
            "individuallyDeletedMessages": f"{getattr(cursor, 'individually_deleted_count', 0)}",
            "numberOfEntriesSinceFirstNotAckedMessage": getattr(cursor, "backlog", 0),
            "totalNonContiguousDeletedMessagesRange":
                getattr(cursor, "individually_deleted_count", 0),
            "state": "Open",
            "properties": dict(getattr(cursor, "properties", {})),
            "revision": getattr(cursor, "revision", 0),
        }
    return {
        "entriesAddedCounter": getattr(ledger, "number_of_entries", 0),
        "numberOfEntries": getattr(ledger, "number_of_entries", 0),
        "totalSize": getattr(ledger, "total_size_bytes", 0),
        "currentLedgerEntries": getattr(current, "entries", 0),
        "currentLedgerSize": getattr(current, "size_bytes", 0),
        "lastLedgerCreatedTimestamp": str(getattr(current, "created_ms", "")),
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": _pos(getattr(ledger, "last_confirmed", None)),
        "state": "LedgerOpened",
        "ledgers": [{"ledgerId": li.ledger_id, "entries": li.entries, "size": li.size_bytes,
                     "offloaded": False} for li in ledgers],
        "cursors": cursors,
    }
