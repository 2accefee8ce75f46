"""A topic's admin documents: Pulsar's TopicStats and PersistentTopicInternalStats shapes.

Theory of operation
-------------------
Pure reads, at request time, of what :class:`broker.topics.topic.Topic` keeps as plain counters, of
its producers' and subscriptions' own ``stats()``, and of its managed ledger and cursors;
nothing here is on the hot path and nothing is cached. Field names and value formats follow
Pulsar's REST documents (``ledgerId:entryId`` strings for positions, ``-1:-1`` for none; ISO
times as :func:`broker.metrics.rates.iso_ms` prints them) so Pulsar's tooling reads them unchanged.
Fields Horae has no counterpart for keep Pulsar's neutral values (0, false, empty):
``offloadedStorageSize`` (no tiered
storage), ``earliestMsgPublishTimeInBacklogs`` (Pulsar fills it only when asked with
``getEarliestTimeInBacklog=true``; it costs a read per subscription).

Called by :meth:`Topic.stats` and :meth:`Topic.internal_stats` (the admin REST API and tests).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.metrics.rates import iso_ms
from broker.subscriptions.stats import subscription_stats
from broker.subscriptions.subscription import LAST_ACTIVE_PROPERTY
from broker.topics.topic_state import TopicState
from storage.positions import Position

if TYPE_CHECKING:
    from broker.topics.topic import Topic

__all__ = ["internal_stats", "topic_stats"]

log = logging.getLogger("horae.topic")


def topic_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's TopicStats document."""
    rate_in, thr_in, rate_out, thr_out = topic.meters.rates()
    now = topic.loop.time()
    publishers = []
    for p in topic.producers.values():
        pr = topic.admission.producer_rates(p, now)
        publishers.append(p.stats(pr[0], pr[1]))
    subs: dict[str, Any] = {}
    delayed_index_bytes = 0
    for name, sub in topic.subscriptions.items():
        try:
            subs[name] = subscription_stats(sub)
        except Exception:
            log.exception("stats of subscription %s failed", name)
            subs[name] = {}
        tracker = sub.delayed_tracker
        if tracker is not None:
            delayed_index_bytes += tracker.memory_bytes
    msg_in = topic.meters.msg_in_counter
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": thr_in,
        "msgRateOut": rate_out,
        "msgThroughputOut": thr_out,
        "bytesInCounter": topic.meters.bytes_in_counter,
        "msgInCounter": msg_in,
        "bytesOutCounter": topic.meters.bytes_out_counter,
        "msgOutCounter": topic.meters.msg_out_counter,
        "averageMsgSize": (topic.meters.bytes_in_counter / msg_in) if msg_in else 0.0,
        "msgChunkPublished": False,
        "storageSize": topic.meters.storage_size,
        "backlogSize": topic.meters.backlog_size_bytes(),
        "publishRateLimitedTimes": topic.publish_rate.limited_times,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "waitingPublishers": topic.admission.waiting,
        "deduplicationStatus": "Enabled" if topic.dedup.ready and topic.dedup_enabled() else "Disabled",
        "topicEpoch": topic.access.topic_epoch or 0,
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": delayed_index_bytes,
        "delayedMessagesRejectedCounter": topic.meters.delayed_rejected_counter,
        "fixedDelayOverriddenCounter": topic.meters.fixed_delay_overridden_counter,
        "publishers": publishers,
        "subscriptions": subs,
        "replication": {},
    }


def _long_properties(properties: dict[str, str]) -> dict[str, int]:
    """A cursor's properties as Pulsar's ``CursorStats.properties`` (``Map<String, Long>``:
    the Java admin client fails on any other value). Numeric values as they are; the
    deduplication cursor's stored id ranges (``lo:hi,...``) as their highest id, which is
    what Pulsar keeps there; Horae's own text markers (a subscription's type) and the time the
    last consumer left (Pulsar keeps its lastActive outside these properties) left out."""
    shown: dict[str, int] = {}
    for key, value in properties.items():
        if key == LAST_ACTIVE_PROPERTY:
            continue
        last = value.rpartition(":")[2]
        if last.lstrip("-").isdigit():
            shown[key] = int(last)
    return shown


def internal_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats document."""
    ledger = topic.ledger
    infos = list(ledger.ledgers)
    current = infos[-1] if infos else None
    cursors: dict[str, Any] = {}
    for name, cursor in ledger.cursors.items():
        sub = topic.subscriptions.get(name)
        cursors[name] = {
            "markDeletePosition": _pos(cursor.mark_delete_position),
            "readPosition": _pos(cursor.read_position),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": sub.msg_out_counter if sub else 0,
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": str(len(cursor.individually_deleted)),
            "lastLedgerSwitchTimestamp": "",
            "state": "Open",
            "active": bool(sub is not None and sub.consumers),
            "numberOfEntriesSinceFirstNotAckedMessage": int(cursor.backlog),
            "totalNonContiguousDeletedMessagesRange": len(cursor.individually_deleted),
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": _long_properties(cursor.properties),
            "revision": cursor.revision,
            "isUnderRevision": bool(sub is not None and sub.revisions.under_revision),
            "persistedSizeBytes": cursor.persisted_size_bytes,
        }
    return {
        "entriesAddedCounter": topic.meters.entries_added_counter,
        "numberOfEntries": int(ledger.number_of_entries),
        "totalSize": int(ledger.total_size_bytes),
        "currentLedgerEntries": int(current.entries) if current else 0,
        "currentLedgerSize": int(current.size_bytes) if current else 0,
        "lastLedgerCreatedTimestamp": iso_ms(current.created_ms) if current else "",
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": sum(p.pending for p in topic.producers.values()),
        "lastConfirmedEntry": _pos(ledger.last_confirmed),
        "state": "Fenced" if topic.state is TopicState.FENCED else "LedgerOpened",
        "ledgers": [{"ledgerId": li.ledger_id, "entries": li.entries, "size": li.size_bytes,
                     "offloaded": False, "underReplicated": False} for li in infos],
        "cursors": cursors,
    }


def _pos(p: Position | None) -> str:
    if p is None:
        return "-1:-1"
    return f"{p.ledger_id}:{p.entry_id}"
