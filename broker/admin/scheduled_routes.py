"""What a subscription has scheduled: the paged listing and the histogram of pending counts.

Theory of operation
-------------------
Beside the subscription's other delayed-delivery resources (``.../subscription/{sub}/
skipByMessageIds``; the topic's ``cancelDelayedMessage``), under
``/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}/``:

* ``GET delayedMessages?limit=N&after=DELIVER_AT:LEDGER:ENTRY``: the scheduled messages by due
  time, then message id: ``{"messages": [{"messageId", "ledgerId", "entryId", "deliverAt",
  "key", "size"}], "next": cursor or null, "pending", "notLoaded"}``. ``limit`` defaults to
  :data:`~broker.delayed.schedule_view.DEFAULT_PAGE_SIZE` and is capped at
  :data:`~broker.delayed.schedule_view.MAX_PAGE_SIZE`; ``next`` is the ``after`` of the next
  page (null: the listing is complete). A page can be shorter than ``limit`` with a ``next``
  (stale index slots were passed over). ``key`` is the partition key (null without one),
  ``size`` the payload bytes (read from the stored entry). ``notLoaded``: pending messages of a
  bucket tracker's sealed segments still on disk, listed once their segment is loaded.
  ``notRead``: backlog entries past the read position the listing's own scan has not reached
  (:mod:`broker.delayed.unread`: what no dispatcher has read yet is listed too).
* ``GET delayedMessages/histogram?boundsMs=B1,B2,...``: pending counts by due time, bins
  ``(-inf, now+B1], (now+B1, now+B2], ..., (now+Bn, +inf)`` (bounds in ms from now; default
  :data:`DEFAULT_BOUNDS_MS`; at most :data:`MAX_BOUNDS`): ``{"now", "bins": [{"upTo", "count"}],
  "staleIndexes", "notLoaded", "notRead"}``.

A partitioned topic merges its partitions (ledger ids are unique in a broker, so the cursor is
global). Errors: 404 topic or subscription, 412 for bad parameters, 405 on a non-persistent
topic (no tracker there).
"""

from __future__ import annotations

import time
from typing import Final

from aiohttp import web

from broker.admin import errors as E
from broker.admin import topics
from broker.admin.delayed_routes import V2_NON_PERSISTENT_TOPIC
from broker.admin.responses import admin_of, json_response
from broker.admin.service import AdminEntries, topic_name
from broker.delayed.schedule_view import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ScheduledKey,
    ScheduledPage,
    ScheduledSources,
    pending_histogram,
    scheduled_page,
)
from broker.subscriptions.cancel import delays_messages
from broker.subscriptions.subscription import Subscription
from broker.topics.topic import Topic
from protocol.metadata import parse_entry, split_entry
from storage.positions import Position

LIST = "/subscription/{sub}/delayedMessages"
HISTOGRAM = LIST + "/histogram"

#: Default histogram bounds, ms from now: 1 s, 10 s, 1 min, 10 min, 1 h, 6 h, 1 d, 7 d, 30 d.
DEFAULT_BOUNDS_MS: Final = (1_000, 10_000, 60_000, 600_000, 3_600_000, 21_600_000,
                            86_400_000, 604_800_000, 2_592_000_000)
MAX_BOUNDS: Final = 64
_MAX_LONG = 2**63

BAD_LIMIT = f"limit must be a number between 1 and {MAX_PAGE_SIZE}"
BAD_AFTER = "after must be deliverAt:ledgerId:entryId (non-negative numbers)"
BAD_BOUNDS = (f"boundsMs must be up to {MAX_BOUNDS} comma-separated non-negative numbers "
              "(milliseconds from now)")
NON_PERSISTENT = "Delayed messages are not tracked on a non-persistent topic"


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise E.precondition_failed(BAD_LIMIT) from None
    if value < 1:
        raise E.precondition_failed(BAD_LIMIT)
    return min(value, MAX_PAGE_SIZE)


def _after(request: web.Request) -> ScheduledKey | None:
    raw = request.query.get("after")
    if raw is None or raw == "":
        return None
    parts = raw.split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise E.precondition_failed(BAD_AFTER) from None
    if len(values) != 3 or any(v < 0 or v >= _MAX_LONG for v in values):
        raise E.precondition_failed(BAD_AFTER)
    return values[0], values[1], values[2]


def _bounds(request: web.Request) -> list[int]:
    raw = request.query.get("boundsMs")
    if raw is None:
        return list(DEFAULT_BOUNDS_MS)
    try:
        values = [int(p) for p in raw.split(",") if p.strip()]
    except ValueError:
        raise E.precondition_failed(BAD_BOUNDS) from None
    if not values or len(values) > MAX_BOUNDS or any(v < 0 or v >= _MAX_LONG for v in values):
        raise E.precondition_failed(BAD_BOUNDS)
    return values


async def _subscriptions(request: web.Request) -> list[tuple[Topic, Subscription]]:
    m = request.match_info
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    return await admin_of(request).topics.subscriptions_of(tn, m["sub"])


def _merge(pages: list[ScheduledPage], limit: int) -> ScheduledPage:
    """One page from the partitions' pages (each exact up to its own ``next_after``)."""
    merged = sorted(k for page in pages for k in page.entries)
    bounds = [p.next_after for p in pages if p.next_after is not None]
    bound = min(bounds) if bounds else None
    if bound is not None:
        merged = [k for k in merged if k <= bound]
    if len(merged) > limit:
        return ScheduledPage(merged[:limit], merged[limit - 1])
    return ScheduledPage(merged, bound)


async def _describe(topic_by_ledger: dict[int, Topic], key: ScheduledKey) -> dict[str, object]:
    deliver_at, ledger_id, entry_id = key
    message_key: str | None = None
    size: int | None = None
    topic = topic_by_ledger.get(ledger_id)
    if topic is not None:
        data = await AdminEntries.read(topic, Position(ledger_id, entry_id))
        if data is not None:
            message_key = parse_entry(data).partition_key
            size = len(split_entry(data)[1])
    return {"messageId": f"{ledger_id}:{entry_id}", "ledgerId": ledger_id, "entryId": entry_id,
            "deliverAt": deliver_at, "key": message_key, "size": size}


async def _sources(sub: Subscription) -> tuple[ScheduledSources, int]:
    """The tracker's sources and, when a dispatcher of this subscription would hold delayed
    messages back, the scan of what it has not read yet; and how many are pending."""
    if not (sub.delayed.policy.active and delays_messages(sub)):
        return sub.delayed.scheduled_sources(), len(sub.delayed)
    src, unread = await AdminEntries.unread_scheduled(sub)
    return src, len(sub.delayed) + unread


async def list_delayed_messages(request: web.Request) -> web.Response:
    limit, after = _limit(request), _after(request)
    pairs = await _subscriptions(request)
    counted = [await _sources(sub) for _, sub in pairs]
    sources = [src for src, _ in counted]
    pages = [await scheduled_page(src, after, limit) for src in sources]
    page = _merge(pages, limit)
    topic_by_ledger = {ledger: topic for topic, _ in pairs
                       for ledger in AdminEntries.ledger_ids(topic)}
    messages = [await _describe(topic_by_ledger, key) for key in page.entries]
    nxt = page.next_after
    return json_response({
        "messages": messages,
        "next": None if nxt is None else f"{nxt[0]}:{nxt[1]}:{nxt[2]}",
        "pending": sum(pending for _, pending in counted),
        "notLoaded": sum(src.not_loaded for src in sources),
        "notRead": sum(src.not_read for src in sources),
    })


async def delayed_histogram(request: web.Request) -> web.Response:
    offsets = sorted(set(_bounds(request)))
    pairs = await _subscriptions(request)
    now = time.time_ns() // 1_000_000
    bounds = [now + b for b in offsets]
    counts = [0] * (len(bounds) + 1)
    stale = not_loaded = not_read = 0
    for _, sub in pairs:
        hist = pending_histogram((await _sources(sub))[0], bounds)
        for i, b in enumerate(hist.bins):
            counts[i] += b.count
        stale += hist.stale
        not_loaded += hist.not_loaded
        not_read += hist.not_read
    bins = [{"upTo": bound, "count": count}
            for bound, count in zip([*bounds, None], counts, strict=True)]
    return json_response({"now": now, "bins": bins, "staleIndexes": stale,
                          "notLoaded": not_loaded, "notRead": not_read})


async def non_persistent(request: web.Request) -> web.Response:
    raise E.not_allowed(NON_PERSISTENT)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(topics.TOPIC + LIST, list_delayed_messages)
    r.add_get(topics.TOPIC + HISTOGRAM, delayed_histogram)
    r.add_get(V2_NON_PERSISTENT_TOPIC + LIST, non_persistent)
    r.add_get(V2_NON_PERSISTENT_TOPIC + HISTOGRAM, non_persistent)
