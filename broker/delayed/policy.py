"""Delayed-delivery policies: broker config, namespace and topic levels, resolved per field.

Theory of operation
-------------------
A policy body is Pulsar's ``DelayedDeliveryPolicies`` plus Horae's fixed delay (PIP-437):
``{"active": bool, "tickTime": ms, "maxDeliveryDelayInMillis": ms,
"fixedDeliveryDelayInMillis": ms}``. Namespace and topic bodies are stored as validated by
:func:`validate_policy_body`; a key that is absent (or null) is not set at that level and is
inherited. :func:`resolve_policy` resolves each field on its own: topic beats namespace beats
the broker config (as Pulsar's per-field topic-policy hierarchy does). The broker config has
no fixed delay, so fixed delay is topic > namespace > none.

Precedence of the two publish limits (PIP-437): a fixed delay in force (> 0) overrides the
client's deliver time and the max delay is not applied, so the resolved policy carries
``max_delay_ms = 0`` whenever ``fixed_delay_ms > 0``.

Broker config read (:class:`broker.config.BrokerConfig`): ``delayed_delivery_enabled``,
``delayed_delivery_tick_time_millis``, ``is_delayed_delivery_deliver_at_time_strict``,
``delayed_delivery_max_delay_in_millis``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig

ACTIVE = "active"
TICK_TIME = "tickTime"
MAX_DELAY = "maxDeliveryDelayInMillis"
FIXED_DELAY = "fixedDeliveryDelayInMillis"
POLICY_KEYS = (ACTIVE, TICK_TIME, MAX_DELAY, FIXED_DELAY)

#: Largest max or fixed delay a policy may set: 100 years. Pulsar sets no bound, but a delay
#: is added to the producer's publish time (epoch ms, < 2**42 until 2109) and stored in the
#: int64 ``deliver_at_time``; anything near 2**63 overflowed it and failed every SEND. A
#: century keeps ``publish_time + delay`` far inside int64 and refuses only typing mistakes.
MAX_POLICY_DELAY_MS = 100 * 365 * 86_400_000


class PolicyTypeError(ValueError):
    """A policy body or field of the wrong JSON type (the admin API answers 400 with it, as
    Pulsar's JSON binding does); other ValueErrors are values out of range (412)."""



@dataclass(frozen=True, slots=True)
class DelayPolicy:
    """The delayed-delivery rules in force for one topic.

    active: deliver_at_time is honoured (Shared/Key_Shared) and the publish guard runs.
    tick_time_ms: tracker tick: the early window and timer spacing when not strict.
    max_delay_ms: PIP-315 limit on ``deliver_at_time - publish_time``; 0 = none.
    fixed_delay_ms: PIP-437: every message gets ``publish_time + fixed``; 0 = none.
    strict: never deliver early (else up to one tick early); broker-wide.
    """

    active: bool
    tick_time_ms: int
    max_delay_ms: int
    fixed_delay_ms: int
    strict: bool

    @property
    def guards_publish(self) -> bool:
        """Does the publish guard have anything to do?"""
        return self.active and (self.fixed_delay_ms > 0 or self.max_delay_ms > 0)


def _pick(key: str, topic: Mapping[str, Any] | None, namespace: Mapping[str, Any] | None,
          default: Any) -> Any:
    for level in (topic, namespace):
        if level is not None and level.get(key) is not None:
            return level[key]
    return default


def resolve_policy(config: BrokerConfig, namespace_policy: Mapping[str, Any] | None,
                   topic_policy: Mapping[str, Any] | None) -> DelayPolicy:
    """Per-field resolution: topic > namespace > broker config; fixed beats max."""
    active = bool(_pick(ACTIVE, topic_policy, namespace_policy, config.delayed_delivery_enabled))
    tick = int(_pick(TICK_TIME, topic_policy, namespace_policy,
                     config.delayed_delivery_tick_time_millis))
    max_delay = int(_pick(MAX_DELAY, topic_policy, namespace_policy,
                          config.delayed_delivery_max_delay_in_millis))
    fixed = int(_pick(FIXED_DELAY, topic_policy, namespace_policy, 0))
    strict = config.is_delayed_delivery_deliver_at_time_strict
    if fixed > 0:
        max_delay = 0
    return DelayPolicy(active=active, tick_time_ms=min(max(tick, 1), MAX_POLICY_DELAY_MS),
                       max_delay_ms=min(max(max_delay, 0), MAX_POLICY_DELAY_MS),
                       fixed_delay_ms=min(max(fixed, 0), MAX_POLICY_DELAY_MS), strict=strict)


def _as_int(key: str, value: object) -> int:
    # JSON has one number type: accept 10 and 10.0, refuse 10.5, "10" and true.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyTypeError(f"{key} must be an integer number of milliseconds, not {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise PolicyTypeError(
                f"{key} must be an integer number of milliseconds, not {value!r}")
        value = int(value)
    return value


def validate_policy_body(body: object) -> dict[str, Any]:
    """Check a REST policy body; returns the normalized dict (only the keys that were set).

    Raises ValueError with the reason: PolicyTypeError for a wrongly typed body or field (the
    admin API answers 400 with it), else a value it refuses (412).
    """
    if not isinstance(body, Mapping):
        raise PolicyTypeError("Delayed delivery policy must be a JSON object with keys "
                         f"{', '.join(POLICY_KEYS)}")
    # Fields other than POLICY_KEYS are dropped, as Pulsar's JSON binding drops them.
    out: dict[str, Any] = {}
    for key in POLICY_KEYS:
        value = body.get(key)
        if value is None:
            continue
        if key == ACTIVE:
            if not isinstance(value, bool):
                raise PolicyTypeError(f"active must be true or false, not {value!r}")
            out[key] = value
            continue
        number = _as_int(key, value)
        if key == TICK_TIME and number <= 0:
            raise ValueError(f"tickTime must be > 0 milliseconds, not {number}")
        if key in (MAX_DELAY, FIXED_DELAY) and number < 0:
            raise ValueError(f"{key} must be >= 0 milliseconds (0 = no limit), not {number}")
        if key in (MAX_DELAY, FIXED_DELAY) and number > MAX_POLICY_DELAY_MS:
            raise ValueError(f"{key} must be at most {MAX_POLICY_DELAY_MS} milliseconds "
                             f"(100 years), not {number}")
        if key == TICK_TIME and number > MAX_POLICY_DELAY_MS:
            raise ValueError(f"tickTime must be at most {MAX_POLICY_DELAY_MS} milliseconds, "
                             f"not {number}")
        out[key] = number
    return out
