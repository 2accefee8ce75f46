"""Documents about a topic's managed ledger that the admin API answers with: Pulsar's
ManagedLedgerInfo (``internal-info``), AnalyzeSubscriptionBacklogResult (``analyzeBacklog``)
and the last message's position.

Theory of operation: pure reads of a loaded :class:`broker.topics.topic.Topic` -- its ledger
list, its cursors' positions and acknowledged entries, and (for the backlog analysis) the
metadata of the entries it reads, at most the given number. Nothing is changed. Called by
:class:`broker.admin.service.AdminEntries` only.
"""

from __future__ import annotations

from typing import Any

from broker.metrics.rates import iso_ms
from broker.subscriptions.dispatchers.cursors import entry_exists
from broker.subscriptions.subscription import Subscription
from broker.topics.topic import Topic
from protocol.metadata import parse_entry
from storage.positions import Position

__all__ = ["MAX_LISTED_DELETED", "analyze_backlog", "last_position", "managed_ledger_info"]

#: Most ranges of individually acknowledged entries listed per cursor by ``internal-info``.
MAX_LISTED_DELETED = 1000


def last_position(topic: Topic) -> Position:
    """The last stored entry; ``(current ledger, -1)`` when the topic holds none, as Pulsar's
    last message id of an empty topic."""
    last = topic.ledger.last_confirmed
    return last if last is not None else Position(topic.ledger.current_ledger_id, -1)


def managed_ledger_info(topic: Topic) -> dict[str, Any]:
    """Pulsar's ManagedLedgerInfo (``internal-info``): ledgers, cursors, termination."""
    ledger = topic.ledger
    infos = list(ledger.ledgers)
    created = iso_ms(infos[0].created_ms) if infos else ""
    modified = iso_ms(infos[-1].created_ms) if infos else ""
    # Pulsar writes what its metadata holds and leaves out what it does not: a ledger's
    # entries and size once it is closed (not for the current one), a cursor's acknowledged
    # ranges and properties when there are any
    cursors: dict[str, Any] = {}
    for name, cursor in ledger.cursors.items():
        mark = cursor.mark_delete_position
        ranges = _deleted_ranges(cursor.individually_deleted.copies())
        doc: dict[str, Any] = {
            "version": cursor.revision, "creationDate": created, "modificationDate": "",
            "cursorsLedgerId": -1,
            "markDelete": {"ledgerId": mark.ledger_id, "entryId": mark.entry_id}}
        if ranges:
            doc["individualDeletedMessages"] = ranges[:MAX_LISTED_DELETED]
        if cursor.properties:
            doc["properties"] = dict(cursor.properties)
        cursors[name] = doc
    ledgers: list[dict[str, Any]] = []
    for li in infos:
        closed = li.ledger_id != ledger.current_ledger_id
        ledgers.append({"ledgerId": li.ledger_id,
                        **({"entries": li.entries, "size": li.size_bytes} if closed else {}),
                        "timestamp": li.created_ms, "isOffloaded": False})
    info: dict[str, Any] = {
        "version": len(infos), "creationDate": created, "modificationDate": modified,
        "ledgers": ledgers, "cursors": cursors,
    }
    if topic.terminated:
        last = last_position(topic)
        info["terminatedPosition"] = {"ledgerId": last.ledger_id, "entryId": last.entry_id}
    return info



async def analyze_backlog(topic: Topic, sub: Subscription, start: Position | None,
                          max_entries: int) -> dict[str, Any]:
    """Pulsar's AnalyzeSubscriptionBacklogResult: the subscription's unacknowledged
    entries from *start* (default: after its mark-delete position) and the messages they
    hold, at most *max_entries* read (``aborted`` past it). No entry filters: every entry
    counts as accepted. From a *start* at or before the mark-delete position every entry
    counts but those acknowledged one by one, as Pulsar's copy of the cursor moved to
    *start* reads them; ``firstMessageId``/``lastMessageId`` (``"L:E"``) only when an entry
    was counted."""
    ledger, cursor = topic.ledger, sub.cursor
    tail = ledger.last_confirmed
    entries = messages = 0
    first: Position | None = None
    last: Position | None = None
    aborted = False
    current = start if start is not None else ledger.next_position(
        cursor.mark_delete_position)
    while tail is not None and current <= tail:
        if entries >= max_entries:
            aborted = True
            break
        acked = cursor.is_deleted(current) and (
            start is None or current > cursor.mark_delete_position)
        if not acked and entry_exists(ledger, current):
            entry = await ledger.read_entry(current)
            if entry is not None:
                try:
                    messages += parse_entry(entry.data).messages
                except Exception:
                    messages += 1
                entries += 1
                first = first or current
                last = current
        current = ledger.next_position(current)
    result: dict[str, Any] = {
        "entries": entries, "messages": messages,
        "filterRejectedEntries": 0, "filterAcceptedEntries": entries,
        "filterRescheduledEntries": 0, "filterRejectedMessages": 0,
        "filterAcceptedMessages": messages, "filterRescheduledMessages": 0,
        "aborted": aborted}
    if first is not None and last is not None:
        result["firstMessageId"] = _pos_text(first)
        result["lastMessageId"] = _pos_text(last)
    return result



def _deleted_ranges(deleted: dict[int, Any]) -> list[dict[str, Any]]:
    """Individually acknowledged entries as Pulsar's open-closed MessageRanges (lower bound
    excluded), consecutive ids joined, at most :data:`MAX_LISTED_DELETED` ranges."""
    ranges: list[dict[str, Any]] = []
    for lid, ids in sorted(deleted.items()):
        run_start = run_end = None
        for eid in [*list(ids), None]:
            if eid is not None and run_end is not None and eid == run_end + 1:
                run_end = eid
                continue
            if run_start is not None and run_end is not None:
                ranges.append({"lowerEndpoint": {"ledgerId": lid, "entryId": run_start - 1},
                               "upperEndpoint": {"ledgerId": lid, "entryId": run_end}})
                if len(ranges) >= MAX_LISTED_DELETED:
                    return ranges
            run_start = run_end = None if eid is None else int(eid)
    return ranges


def _pos_text(pos: Position) -> str:
    return f"{pos.ledger_id}:{pos.entry_id}"
