"""Which of Pulsar's topic and namespace operations a REST request is, for authorization.

Theory of operation
-------------------
Pulsar checks most topic routes with ``validateTopicOperation(topic, TopicOperation.X, sub)``,
and its authorization provider (``allowTopicOperationAsync``) lets a role with the *consume*
permission (topic or namespace grant; on a subscription with subscription roles, one of them)
do the subscription operations, a role with *produce* or *consume* read a topic's stats, and
the tenant's admins everything. :func:`topic_operation` names the operation of a request on a
topic path, from its method and the path after the topic; :func:`namespace_operation` does the
same for the namespace operations a consume grant allows (listing topics, unsubscribing and
clearing backlogs namespace-wide). Routes not listed stay tenant-admin operations.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Operation", "namespace_operation", "topic_operation"]


@dataclass(frozen=True, slots=True)
class Operation:
    """Pulsar's operation name, the permission it needs (``lookup`` or ``consume``), and the
    subscription it acts on (checked against the namespace's subscription roles)."""

    name: str
    needs: str
    subscription: str | None = None


_PEEK = "PEEK_MESSAGES"


def topic_operation(method: str, tail: list[str]) -> Operation | None:
    """The operation of *method* on ``.../{topic}/<tail>`` (None: a tenant-admin operation)."""
    if method == "GET" and tail in (["stats"], ["internalStats"], ["partitioned-stats"],
                                    ["partitioned-internalStats"], ["internal-info"]):
        return Operation("GET_STATS", "lookup")
    if method == "GET" and tail == ["subscriptions"]:
        return Operation("GET_SUBSCRIPTIONS", "consume")
    if method == "GET" and (tail in (["examinemessage"], ["lastMessageId"])
                            or (len(tail) == 2 and tail[0] == "messageid")
                            or (len(tail) == 4 and tail[0] == "ledger" and tail[2] == "entry")):
        return Operation(_PEEK, "consume")
    if method == "PUT" and tail == ["backlogSize"]:
        return Operation("GET_BACKLOG_SIZE", "consume")
    if method == "POST" and len(tail) == 3 and tail[:2] == ["all_subscription", "expireMessages"]:
        return Operation("EXPIRE_MESSAGES", "consume")
    if len(tail) < 2 or tail[0] != "subscription":
        return None
    sub, rest = tail[1], tail[2:]
    name: str | None = None
    if not rest:
        name = {"PUT": "SUBSCRIBE", "DELETE": "UNSUBSCRIBE"}.get(method)
    elif method == "GET" and len(rest) == 2 and rest[0] == "position":
        name = _PEEK
    elif method == "POST" and (rest == ["skip_all"] or rest == ["skipByMessageIds"]
                               or (len(rest) == 2 and rest[0] == "skip")):
        name = "SKIP"
    elif method == "POST" and rest[0] == "expireMessages" and len(rest) <= 2:
        name = "EXPIRE_MESSAGES"
    elif method == "POST" and rest[0] == "resetcursor" and len(rest) <= 2:
        name = "RESET_CURSOR"
    elif (method in ("GET", "POST") and rest == ["analyzeBacklog"]) or \
            (method in ("GET", "PUT") and rest == ["properties"]):
        name = "CONSUME"
    return None if name is None else Operation(name, "consume", sub)


def namespace_operation(method: str, tail: list[str]) -> Operation | None:
    """The operation of *method* on ``/admin/v2/namespaces/{t}/{ns}/<tail>`` that a namespace
    grant allows (None: a tenant-admin operation): listing topics needs produce or consume,
    unsubscribing and clearing backlogs consume. Bundle forms included."""
    if method == "GET" and tail == ["topics"]:
        return Operation("GET_TOPICS", "lookup")
    if len(tail) >= 2 and tail[0] not in ("unsubscribe", "clearBacklog"):
        tail = tail[1:]          # .../{bundle}/unsubscribe/{sub}, .../{bundle}/clearBacklog
    if method == "POST" and len(tail) == 2 and tail[0] == "unsubscribe":
        return Operation("UNSUBSCRIBE", "consume")
    if method == "POST" and tail[:1] == ["clearBacklog"] and len(tail) <= 2:
        return Operation("CLEAR_BACKLOG", "consume")
    return None
