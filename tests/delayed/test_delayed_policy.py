"""Delayed-delivery policies: validation of REST bodies and per-field resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.delayed.policy import (
    MAX_POLICY_DELAY_MS,
    DelayPolicy,
    resolve_policy,
    validate_policy_body,
)
from broker.topics.names import TopicName
from broker.topics.policies import PolicyStore
from storage.metadata import MetadataStore


def test_broker_defaults_are_pulsars_but_never_early() -> None:
    policy = resolve_policy(BrokerConfig(), None, None)
    assert policy == DelayPolicy(active=True, tick_time_ms=1000, max_delay_ms=0,
                                 fixed_delay_ms=0, strict=True)
    assert not policy.guards_publish


def test_topic_beats_namespace_beats_broker_per_field() -> None:
    config = BrokerConfig(delayed_delivery_max_delay_in_millis=1000,
                          delayed_delivery_tick_time_millis=500,
                          is_delayed_delivery_deliver_at_time_strict=True)
    ns = {"maxDeliveryDelayInMillis": 2000, "tickTime": 50}
    topic = {"maxDeliveryDelayInMillis": 3000}
    assert resolve_policy(config, None, None).max_delay_ms == 1000
    assert resolve_policy(config, ns, None).max_delay_ms == 2000
    resolved = resolve_policy(config, ns, topic)
    assert resolved.max_delay_ms == 3000
    assert resolved.tick_time_ms == 50          # inherited from the namespace
    assert resolved.strict is True               # broker-wide only
    assert resolve_policy(config, {"active": False}, {"active": True}).active is True
    assert resolve_policy(config, {"active": False}, {}).active is False


def test_fixed_delay_beats_max_delay() -> None:
    config = BrokerConfig(delayed_delivery_max_delay_in_millis=1000)
    policy = resolve_policy(config, {"fixedDeliveryDelayInMillis": 5000}, None)
    assert policy.fixed_delay_ms == 5000
    assert policy.max_delay_ms == 0
    topic_off = resolve_policy(config, {"fixedDeliveryDelayInMillis": 5000},
                               {"fixedDeliveryDelayInMillis": 0})
    assert (topic_off.fixed_delay_ms, topic_off.max_delay_ms) == (0, 1000)


def test_validate_accepts_full_and_partial_bodies() -> None:
    body = {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0,
            "fixedDeliveryDelayInMillis": 10.0}
    assert validate_policy_body(body) == {"active": True, "tickTime": 1000,
                                          "maxDeliveryDelayInMillis": 0,
                                          "fixedDeliveryDelayInMillis": 10}
    assert validate_policy_body({"tickTime": 5, "maxDeliveryDelayInMillis": None}) == \
        {"tickTime": 5}
    assert validate_policy_body({}) == {}


@pytest.mark.parametrize(("body", "reason"), [
    ([], "JSON object"),
    ("x", "JSON object"),
    ({"tickTime": 0}, "tickTime must be > 0"),
    ({"tickTime": -5}, "tickTime must be > 0"),
    ({"maxDeliveryDelayInMillis": -1}, "maxDeliveryDelayInMillis must be >= 0"),
    ({"fixedDeliveryDelayInMillis": -1}, "fixedDeliveryDelayInMillis must be >= 0"),
    ({"active": "yes"}, "active must be true or false"),
    ({"active": 1}, "active must be true or false"),
    ({"tickTime": True}, "tickTime must be an integer"),
    ({"tickTime": "100"}, "tickTime must be an integer"),
    ({"tickTime": 1.5}, "tickTime must be an integer"),
])
def test_validate_rejects_with_a_reason(body: object, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_policy_body(body)
    assert reason in str(info.value)


def test_validate_drops_unknown_fields_as_pulsar_does() -> None:
    assert validate_policy_body({"tickTime": 10, "maxDelayInMillis": 5}) == {"tickTime": 10}


def test_validate_bounds_max_and_fixed_delay_to_a_century() -> None:
    assert validate_policy_body({"fixedDeliveryDelayInMillis": MAX_POLICY_DELAY_MS}) == {
        "fixedDeliveryDelayInMillis": MAX_POLICY_DELAY_MS}
    for key in ("fixedDeliveryDelayInMillis", "maxDeliveryDelayInMillis"):
        with pytest.raises(ValueError) as raised:
            validate_policy_body({key: 2**63})
        assert f"{key} must be at most {MAX_POLICY_DELAY_MS}" in str(raised.value)


def test_resolve_clamps_stored_delays_to_the_bound() -> None:
    policy = resolve_policy(BrokerConfig(), None, {"fixedDeliveryDelayInMillis": 2**63})
    assert policy.fixed_delay_ms == MAX_POLICY_DELAY_MS


def test_broker_config_accepts_the_designs_max_delay_key_and_refuses_negatives() -> None:
    from broker.config import ConfigError
    from broker.config_loading import load_config

    config = load_config(overrides={"delayedDeliveryMaxDeliveryDelayInMillis": 5000})
    assert config.delayed_delivery_max_delay_in_millis == 5000
    assert load_config(overrides={"delayedDeliveryMaxDelayInMillis": 7}
                       ).delayed_delivery_max_delay_in_millis == 7
    with pytest.raises(ConfigError) as negative:
        load_config(overrides={"delayedDeliveryMaxDelayInMillis": -1})
    assert "delayedDeliveryMaxDelayInMillis must be >= 0" in str(negative.value)
    with pytest.raises(ConfigError) as both:
        load_config(overrides={"delayedDeliveryMaxDelayInMillis": 1,
                               "delayedDeliveryMaxDeliveryDelayInMillis": 2})
    assert "disagree" in str(both.value)


async def test_policy_store_moves_legacy_delayed_kinds_into_its_fields(tmp_path: Path) -> None:
    md = await MetadataStore.open(tmp_path / "m.db")
    ns, parent = "public/default", "persistent://public/default/t"
    await md.put("namespace_policy", ns, {"tickTime": 50})
    await md.put("topic_policy", parent, {"maxDeliveryDelayInMillis": 3000})
    await md.put("ns_policies", ns, {"deduplicationEnabled": True})
    store = PolicyStore(BrokerConfig(), md)
    await store.load()
    assert await md.list("namespace_policy") == []
    assert await md.list("topic_policy") == []
    assert store.records.namespace(ns) == {"deduplicationEnabled": True,
                                   "delayed_delivery_policies": {"tickTime": 50}}
    assert store.delayed_body("topic", parent) == {"maxDeliveryDelayInMillis": 3000}
    partition = TopicName.parse(parent).partition(1)
    resolved = store.delay_policy(partition)
    assert (resolved.tick_time_ms, resolved.max_delay_ms) == (50, 3000)
    await md.close()
    md = await MetadataStore.open(tmp_path / "m.db")
    reloaded = PolicyStore(BrokerConfig(), md)
    await reloaded.load()
    assert reloaded.delay_policy(partition) == resolved
    await md.close()
