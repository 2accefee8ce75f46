"""Value parsers of the namespace and topic policies: a REST body to the value stored, or Pulsar's refusal.

Theory of operation: each parser takes a decoded JSON body and answers the value the policy
records keep, or raises the HTTP error Pulsar answers for it (400 for a wrongly typed value,
412 for a value out of range, with its reason). The policy routes
(:mod:`broker.admin.policies`, :mod:`broker.admin.policies_quota`,
:mod:`broker.admin.storage_policies`) and namespace creation with a Policies body
(:mod:`broker.admin.namespaces`) share them, so a value is checked the same way whichever
route sets it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.admin import errors as E
from broker.config import BACKLOG_QUOTA_POLICIES, INACTIVE_TOPIC_MODES
from protocol import admin_names
from protocol.sub_types import SubType

Parser = Callable[[object], object]

SCHEMA_STRATEGIES = admin_names.SCHEMA_COMPATIBILITY_STRATEGIES
#: broker.conf ``managedLedgerMaxEnsembleSize`` / ``...MaxWriteQuorum`` / ``...MaxAckQuorum``
MAX_QUORUM = 5


# --- policies ------------------------------------------------------------------------
def parse_bool(body: object) -> bool:
    if not isinstance(body, bool):
        raise E.bad_request("Invalid value: expected true or false")
    return body


def parse_enabled(body: object) -> bool:
    """Pulsar's ``dispatcherPauseOnAckStatePersistent`` POST takes no body: it enables."""
    return True


def parse_strategy(body: object) -> str:
    if not isinstance(body, str) or body not in SCHEMA_STRATEGIES:
        raise E.bad_request(f"Invalid schema compatibility strategy: {body!r}")
    return body


def count_parser(name: str, what: str, refusal: str = "") -> Parser:
    """A limit of *what* (0 or more; 0 is no limit), refused as Pulsar does (412 *refusal*,
    by default "*name* must be 0 or more")."""
    def parse(body: object) -> int:
        if isinstance(body, bool) or not isinstance(body, int):
            raise E.bad_request(f"Invalid value: expected a number of {what}")
        if body < 0:
            raise E.precondition_failed(refusal or f"{name} must be 0 or more")
        return body
    return parse


parse_producer_limit = count_parser("maxProducersPerTopic", "producers")
MAX_MESSAGE_SIZE_REFUSAL = ("topic-level maxMessageSize must be greater than or equal to 0 and "
                            "must be smaller than that in the broker-level")

_TOPIC_TYPES = ("partitioned", "non-partitioned")


def parse_dispatch_rate(body: object) -> dict[str, Any]:
    """A DispatchRate body; missing fields take Pulsar's defaults (-1, -1, false, 1)."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected a DispatchRate")
    out: dict[str, Any] = {}
    for name, default in (("dispatchThrottlingRateInMsg", -1),
                          ("dispatchThrottlingRateInByte", -1), ("ratePeriodInSecond", 1)):
        value = body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise E.bad_request(f"Invalid value: {name} must be a number")
        out[name] = value
    relative = body.get("relativeToPublishRate", False)
    if not isinstance(relative, bool):
        raise E.bad_request("Invalid value: relativeToPublishRate must be true or false")
    if out["ratePeriodInSecond"] < 1:
        raise E.precondition_failed("ratePeriodInSecond must be 1 or more")
    out["relativeToPublishRate"] = relative
    return out


def parse_publish_rate(body: object) -> dict[str, int]:
    """A PublishRate body; missing fields take Pulsar's default, -1 (no limit)."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected a PublishRate")
    out: dict[str, int] = {}
    for name in ("publishThrottlingRateInMsg", "publishThrottlingRateInByte"):
        value = body.get(name, -1)
        if isinstance(value, bool) or not isinstance(value, int):
            raise E.bad_request(f"Invalid value: {name} must be a number")
        out[name] = value
    return out


def parse_subscribe_rate(body: object) -> dict[str, int]:
    """A SubscribeRate body; missing fields take Pulsar's defaults (-1, 30)."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected a SubscribeRate")
    out: dict[str, int] = {}
    for name, default in (("subscribeThrottlingRatePerConsumer", -1),
                          ("ratePeriodInSecond", 30)):
        value = body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise E.bad_request(f"Invalid value: {name} must be a number")
        out[name] = value
    if out["ratePeriodInSecond"] < 1:
        raise E.precondition_failed("ratePeriodInSecond must be 1 or more")
    return out


def parse_subscription_types(body: object) -> list[str]:
    """A set of SubscriptionType names (a JSON array; repeats dropped, Pulsar's order kept)."""
    if not isinstance(body, list) or not all(
            isinstance(name, str) and name in SubType.__members__ for name in body):
        raise E.bad_request("Invalid value: expected a list of subscription types, some of "
                            f"{list(SubType.__members__)}")
    return [name for name in SubType.__members__ if name in body]


def parse_auto_topic_creation(body: object) -> dict[str, Any]:
    """An AutoTopicCreationOverride, checked as Pulsar's ``validateOverride`` (412)."""
    if not isinstance(body, dict) or not isinstance(body.get("allowAutoTopicCreation"), bool):
        raise E.bad_request("Invalid value: expected an AutoTopicCreationOverride")
    allowed = body["allowAutoTopicCreation"]
    topic_type = body.get("topicType")
    partitions = body.get("defaultNumPartitions")
    detail = ""
    if allowed and topic_type not in _TOPIC_TYPES:
        detail = f"Unknown topic type [{'null' if topic_type is None else topic_type}]"
    elif allowed and topic_type == "partitioned":
        if partitions is None:
            detail = "[defaultNumPartitions] cannot be null when the type is partitioned."
        elif isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            detail = "[defaultNumPartitions] cannot be less than 1 for partition type."
    elif allowed and partitions is not None:
        detail = "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
    if detail:
        raise E.precondition_failed(
            f"Invalid configuration for autoTopicCreationOverride. the detail is {detail}")
    out: dict[str, Any] = {"allowAutoTopicCreation": allowed}
    if topic_type in _TOPIC_TYPES:
        out["topicType"] = topic_type
    if partitions is not None:
        out["defaultNumPartitions"] = partitions
    return out


def parse_auto_subscription_creation(body: object) -> dict[str, bool]:
    """An AutoSubscriptionCreationOverride ``{"allowAutoSubscriptionCreation": bool}``."""
    if not isinstance(body, dict) or \
            not isinstance(body.get("allowAutoSubscriptionCreation"), bool):
        raise E.bad_request("Invalid value: expected an AutoSubscriptionCreationOverride")
    return {"allowAutoSubscriptionCreation": body["allowAutoSubscriptionCreation"]}


def parse_expiration_minutes(body: object) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise E.bad_request("Invalid value: expected a number of minutes")
    if body < 0:
        raise E.precondition_failed("Invalid value for subscription expiration time")
    return body


def parse_threshold(body: object) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise E.bad_request("Invalid compaction threshold: expected a number of bytes")
    if body < 0:
        raise E.precondition_failed("compactionThreshold must be 0 or more")
    return body


# --- retention, TTL, backlog quota, inactive topics --------------------------------------
def _int(body: object, what: str) -> int:
    """A Long field as Pulsar's Jackson reads it: a JSON integer, or a string holding one
    (``{"limit": "10240"}`` is what the Go client's tests send)."""
    if isinstance(body, str):
        try:
            return int(body.strip())
        except ValueError:
            pass
    if isinstance(body, bool) or not isinstance(body, int):
        raise E.bad_request(f"Invalid {what}: expected an integer")
    return body


def parse_retention(body: object) -> dict[str, int]:
    if not isinstance(body, dict):
        raise E.bad_request("Invalid retention policies: expected "
                            '{"retentionTimeInMinutes": m, "retentionSizeInMB": s}')
    minutes = _int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
    size = _int(body.get("retentionSizeInMB", 0), "retentionSizeInMB")
    if minutes < -1 or size < -1:
        raise E.precondition_failed("Invalid retention policy: time and size must be >= -1")
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


def parse_ttl(value: object) -> int:
    ttl = _int(value, "message TTL")
    if ttl < 0:
        raise E.precondition_failed("Invalid value for message TTL, message TTL must >= 0")
    return ttl


def parse_topic_ttl(value: object) -> int:
    """A topic's message TTL: Pulsar's topic level words its refusal without the rule."""
    ttl = _int(value, "message TTL")
    if ttl < 0:
        raise E.precondition_failed("Invalid value for message TTL")
    return ttl


def parse_quota(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise E.bad_request('Invalid backlog quota: expected {"limitSize", "limitTime", "policy"}')
    size = _int(body.get("limitSize", body.get("limit", -1)), "limitSize")
    seconds = _int(body.get("limitTime", -1), "limitTime")
    policy = body.get("policy")
    if policy not in BACKLOG_QUOTA_POLICIES:  # Pulsar reads it as null and answers 400
        raise E.bad_request(f"Invalid backlog quota policy {policy!r}: one of "
                            + ", ".join(BACKLOG_QUOTA_POLICIES))
    if size < -1 or seconds < -1:
        raise E.precondition_failed("Invalid backlog quota: limits must be >= -1")
    return {"limitSize": size, "limitTime": seconds, "policy": policy}


def parse_inactive(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise E.bad_request("Invalid inactive topic policies: expected a JSON object")
    mode = body.get("inactiveTopicDeleteMode", "delete_when_no_subscriptions")
    if mode not in INACTIVE_TOPIC_MODES:
        raise E.precondition_failed(f"Invalid inactiveTopicDeleteMode {mode!r}: one of "
                                    + ", ".join(INACTIVE_TOPIC_MODES))
    seconds = _int(body.get("maxInactiveDurationSeconds", 60), "maxInactiveDurationSeconds")
    if seconds <= 0:
        raise E.precondition_failed("maxInactiveDurationSeconds must be greater than 0")
    delete = body.get("deleteWhileInactive", False)
    if not isinstance(delete, bool):
        raise E.bad_request("Invalid deleteWhileInactive: expected true or false")
    return {"inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": seconds,
            "deleteWhileInactive": delete}


# --- storage -------------------------------------------------------------------------------
def _number(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise E.bad_request(f"Invalid value: {name} must be a number")
    return value


def persistence_body(body: object) -> dict[str, Any]:
    """A PersistencePolicies, checked as Pulsar's ``validatePersistencePolicies`` (400);
    missing fields take its defaults (2, 2, 2, 0.0), unknown ones are dropped."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected a PersistencePolicies")
    ensemble = _number("bookkeeperEnsemble", body.get("bookkeeperEnsemble", 2))
    write = _number("bookkeeperWriteQuorum", body.get("bookkeeperWriteQuorum", 2))
    ack = _number("bookkeeperAckQuorum", body.get("bookkeeperAckQuorum", 2))
    rate = body.get("managedLedgerMaxMarkDeleteRate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise E.bad_request("Invalid value: managedLedgerMaxMarkDeleteRate must be a number")
    for name, value in (("Ensemble", ensemble), ("WriteQuorum", write), ("AckQuorum", ack)):
        if not 0 < value <= MAX_QUORUM:
            raise E.bad_request(f"Bookkeeper-{name} must be <= {MAX_QUORUM} and > 0.")
    if not ensemble >= write >= ack:
        raise E.bad_request(f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= "
                            f"AckQuorum ({ack})")
    return {"bookkeeperEnsemble": ensemble, "bookkeeperWriteQuorum": write,
            "bookkeeperAckQuorum": ack, "managedLedgerMaxMarkDeleteRate": float(rate)}


def snapshot_interval(refusal: str) -> Any:
    """A deduplication snapshot interval in seconds (412 *refusal* below 0); no body removes
    it (how Pulsar's namespace route, which has no DELETE, is cleared)."""
    def parse(body: object) -> int | None:
        if body is None:
            return None
        value = _number("interval", body)
        if value < 0:
            raise E.precondition_failed(refusal)
        return value
    return parse


def replicator_dispatch_rate(body: object) -> dict[str, Any]:
    """A DispatchRate as Pulsar stores a replicator's: missing fields are 0 / false."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected a DispatchRate")
    relative = body.get("relativeToPublishRate", False)
    if not isinstance(relative, bool):
        raise E.bad_request("Invalid value: relativeToPublishRate must be true or false")
    return {"dispatchThrottlingRateInMsg": _number("dispatchThrottlingRateInMsg",
                                                body.get("dispatchThrottlingRateInMsg", 0)),
            "dispatchThrottlingRateInByte": _number("dispatchThrottlingRateInByte",
                                                 body.get("dispatchThrottlingRateInByte", 0)),
            "relativeToPublishRate": relative,
            "ratePeriodInSecond": _number("ratePeriodInSecond", body.get("ratePeriodInSecond", 0))}
