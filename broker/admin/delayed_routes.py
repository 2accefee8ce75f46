"""Cancel a scheduled message (PIP-423, first form) and the V1 paths of the delayed/skip API.

Theory of operation
-------------------
``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/cancelDelayedMessage`` with the query
``ledgerId``, ``entryId``, an optional ``deliverAt`` (epoch ms, the message's real deliver time;
without it the broker reads it from the stored entry) and an optional ``subscriptionNames``
(repeated or comma-separated; none = every subscription that delays messages: Shared,
Key_Shared, or not typed yet since the broker started).

1. Parameters: a missing, non-numeric or negative ``ledgerId``/``entryId``, or a
   ``deliverAt`` given but not a positive number, is 412 (the design's "invalid parameters").
2. The topic (404 when absent). A partitioned topic fans out to its partitions, but a message
   lives in exactly one of them (ledger ids are unique in a broker): the partition whose
   ledger holds it is the one acted on.
3. The message must exist and be delayed; a ``deliverAt`` given must be its deliver time (as
   stored: after a fixed delay's rewrite): otherwise 412, "nothing to cancel". Named subscriptions must exist (404).
4. Each chosen subscription: :func:`broker.subscriptions.cancel.cancel_on_subscription`
   (tracker cancel, made durable, then the message is acknowledged and the cursor flushed).
   Named subscriptions must all accept; without names at least one must. Otherwise 412 with
   every subscription's reason. Success is 204.

``/admin/v2/non-persistent/...`` answers 405 (no tracker there). V1 paths
(``/admin/persistent/{tenant}/{cluster}/{namespace}/{topic}/...``, Pulsar's v1 resources):
Horae keeps no cluster-scoped (V1) namespaces, so a V1 path naming this broker's cluster
addresses the same topic as the V2 path; another cluster is 404 "Namespace does not exist".
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from broker.admin import errors as E
from broker.admin import topics
from broker.admin.responses import admin_of, no_content
from broker.admin.service import AdminEntries, topic_name
from broker.subscriptions.cancel import SubscriptionCancel, cancel_on_subscription, delays_messages
from broker.topics.topic import Topic
from protocol.errors import NotAllowedError
from protocol.metadata import parse_entry
from storage.positions import Position

V2_TOPIC = topics.TOPIC
V2_NON_PERSISTENT_TOPIC = "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}"
V1_TOPIC = "/admin/persistent/{tenant}/{cluster}/{namespace}/{topic}"
V1_NON_PERSISTENT_TOPIC = "/admin/non-persistent/{tenant}/{cluster}/{namespace}/{topic}"
CANCEL = "/cancelDelayedMessage"

INVALID_PARAMETERS = "ledgerId, entryId must be non-negative, and deliverAt must be positive."
NON_PERSISTENT = "Cancel delayed message is not allowed on a non-persistent topic"


def _query_long(request: web.Request, key: str, *, minimum: int) -> int:
    raw = request.query.get(key)
    try:
        value = int(raw) if raw is not None else None
    except ValueError:
        value = None
    if value is None or value < minimum or value >= 2**63:
        raise E.precondition_failed(INVALID_PARAMETERS)
    return value


def subscription_names(request: web.Request) -> list[str]:
    """``subscriptionNames``: repeated and/or comma-separated; empty = all."""
    names: dict[str, None] = {}
    for value in request.query.getall("subscriptionNames", ()):
        names.update(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    return list(names)


async def _locate(topic_list: list[Topic], position: Position) -> tuple[Topic, int | None] | None:
    """(topic, stored deliver_at_time) of the topic (partition) holding ``position``."""
    for topic in topic_list:
        data = await AdminEntries.read(topic, position)
        if data is not None:
            return topic, parse_entry(data).deliver_at_time
    return None


async def cancel_delayed_message(request: web.Request) -> web.Response:
    admin, m = admin_of(request), request.match_info
    tn = topic_name(m["tenant"], m["namespace"], m["topic"])
    ledger_id = _query_long(request, "ledgerId", minimum=0)
    entry_id = _query_long(request, "entryId", minimum=0)
    deliver_at = (_query_long(request, "deliverAt", minimum=1)
                  if "deliverAt" in request.query else None)
    names = subscription_names(request)
    position = Position(ledger_id, entry_id)
    found = await _locate(await admin.topics.targets(tn), position)
    if found is None:
        raise E.precondition_failed(
            f"Failed to cancel delayed message: message {ledger_id}:{entry_id} not found "
            f"in {tn}")
    topic, stored_at = found
    try:
        topic.check_not_in_open_transaction(position, "cancel")
    except NotAllowedError as exc:
        raise E.precondition_failed(f"Failed to cancel delayed message: {exc.message}") from None
    if stored_at is None:
        raise E.precondition_failed(
            f"Failed to cancel delayed message: message {ledger_id}:{entry_id} is not a "
            "delayed message")
    if deliver_at is None:
        deliver_at = stored_at
    elif stored_at != deliver_at:
        raise E.precondition_failed(
            f"Failed to cancel delayed message: deliverAt {deliver_at} does not match message "
            f"{ledger_id}:{entry_id}, which is due at {stored_at}")
    if names:
        subs = [admin.topics.subscription(topic, n) for n in names]
    else:
        subs = [s for s in topic.subscriptions.values() if delays_messages(s)]
    outcomes: list[SubscriptionCancel] = []
    for sub in subs:
        outcomes.append(await cancel_on_subscription(sub, position, deliver_at))
    accepted = [o for o in outcomes if o.accepted]
    refused = [o for o in outcomes if not o.accepted]
    if not outcomes:
        raise E.precondition_failed(
            f"Failed to cancel delayed message: {topic.name.full} has no Shared or Key_Shared "
            "subscription")
    if (names and refused) or not accepted:
        raise E.precondition_failed("Failed to cancel delayed message: "
                                    + "; ".join(o.reason for o in refused))
    return no_content()


async def non_persistent(request: web.Request) -> web.Response:
    raise E.not_allowed(NON_PERSISTENT)


def v1(handler: Handler) -> Handler:
    """A V1 route over a V2 handler (module docstring): the cluster must be this broker's."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        cluster = admin_of(request).broker.cluster_name
        if request.match_info["cluster"] != cluster:
            raise E.not_found(E.NAMESPACE_NOT_FOUND)
        return await handler(request)

    return wrapped


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post(V2_TOPIC + CANCEL, cancel_delayed_message)
    r.add_post(V1_TOPIC + CANCEL, v1(cancel_delayed_message))
    r.add_post(V2_NON_PERSISTENT_TOPIC + CANCEL, non_persistent)
    r.add_post(V1_NON_PERSISTENT_TOPIC + CANCEL, non_persistent)
    r.add_post(V1_TOPIC + "/subscription/{sub}/skipByMessageIds",
               v1(topics.skip_by_message_ids))
