"""A durable subscription's stats document (Pulsar's SubscriptionStats), built from outside it
as :mod:`broker.topics.stats` builds the topic's: rates from the subscription's meter, the
backlog from its cursor, per-consumer stats and the dispatcher's view (Key_Shared hash ranges,
the active consumer of Exclusive/Failover)."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.subscriptions.dispatchers import KeySharedDispatcher, SingleActiveDispatcher
from broker.subscriptions.subscription import Subscription
from protocol.sub_types import SubType

__all__ = ["subscription_stats"]


def subscription_stats(sub: Subscription) -> dict[str, Any]:
    """Pulsar's SubscriptionStats shape."""
    now = asyncio.get_running_loop().time()
    rate_out, thr_out, rate_redeliver = sub.rates(now)
    backlog = sub.cursor.backlog
    delayed = sub.msg_delayed
    dispatcher = sub.dispatcher
    consumers = []
    for c in sub.consumers:
        s = c.stats(now)
        if isinstance(dispatcher, KeySharedDispatcher):
            s["keyHashRanges"] = dispatcher.key_hash_ranges(c)
        consumers.append(s)
    active = dispatcher.active if isinstance(dispatcher, SingleActiveDispatcher) else None
    return {
        "msgRateOut": rate_out,
        "msgThroughputOut": thr_out,
        "bytesOutCounter": sub.bytes_out_counter,
        "msgOutCounter": sub.msg_out_counter,
        "msgRateRedeliver": rate_redeliver,
        "chunkedMessageRate": 0.0,
        "msgBacklog": backlog,
        "backlogSize": _backlog_bytes(sub, backlog),
        "msgBacklogNoDelayed": max(0, backlog - delayed),
        "blockedSubscriptionOnUnackedMsgs": sub.blocked_on_unacked,
        "msgDelayed": delayed,
        "unackedMessages": sum(c.unacked_messages for c in sub.consumers),
        "type": SubType(sub.sub_type).name if sub.sub_type is not None else "None",
        "activeConsumerName": active.name if active is not None else None,
        "msgRateExpired": sub.expiry.rate(),
        "totalMsgExpired": sub.expiry.total_expired,
        "lastExpireTimestamp": sub.expiry.last_expire_ms,
        "consumers": consumers,
        "isDurable": sub.durable,
        "isReplicated": False,
        "nonContiguousDeletedMessagesRanges": len(sub.cursor.individually_deleted),
        "delayedMessageIndexSizeInBytes": sub.delayed.memory_bytes,
        "subscriptionProperties": sub.properties.current(),
        # Pulsar 4 reports it empty: draining hashes (PIP-379) replaced recently joined consumers
        "consumersAfterMarkDeletePosition": {},
        "markDeletePosition": str(sub.cursor.mark_delete_position),
        "readPosition": str(sub.cursor.read_position),
        "cursorRevision": sub.cursor.revision,
    }


def _backlog_bytes(sub: Subscription, backlog: int) -> int:
    """Backlog in bytes, at the ledger's average entry size (as the topic's backlogSize)."""
    entries = sub.ledger.number_of_entries
    if not entries or not backlog:
        return 0
    return int(sub.ledger.total_size_bytes * min(1.0, backlog / entries))
