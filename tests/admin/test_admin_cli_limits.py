"""``horae-admin`` limit and rate policy commands (pulsar-admin's names and flags), end to end
against a broker: every trio at every level it exists at, set -> get -> REST -> remove."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli.admin.limits import POLICIES, TOPIC_GROUPS
from cli.admin.main import main

from .conftest import Api

NS = "public/default"
TOPIC = "persistent://public/default/limits"

# (level stem) -> (set flags, the value GET answers); one per command stem
CASES: dict[str, tuple[list[str], object]] = {
    "max-producers-per-topic": (["-p", "3"], 3),
    "max-producers": (["--max-producers", "3"], 3),
    "max-consumers-per-topic": (["-c", "4"], 4),
    "max-consumers": (["--max-consumers", "4"], 4),
    "max-consumers-per-subscription": (["-c", "2"], 2),
    "max-subscriptions-per-topic": (["-m", "5"], 5),
    "max-unacked-messages-per-consumer": (["--max-unacked-messages-per-topic", "6"], 6),
    "max-unacked-messages-on-consumer": (["-m", "6"], 6),
    "max-unacked-messages-per-subscription": (["-c", "7"], 7),
    "max-unacked-messages-on-subscription": (["--maxNum", "7"], 7),
    "max-topics-per-namespace": (["-t", "100"], 100),
    "max-message-size": (["-m", "1024"], 1024),
    "publish-rate": (["-m", "10", "--byte-publish-rate", "2048"],
                     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 2048}),
    "dispatch-rate": (["-md", "10", "-dt", "2"],
                      {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": -1,
                       "ratePeriodInSecond": 2, "relativeToPublishRate": False}),
    "subscription-dispatch-rate": (["--msg-dispatch-rate", "5", "-bd", "100"],
                                   {"dispatchThrottlingRateInMsg": 5,
                                    "dispatchThrottlingRateInByte": 100,
                                    "ratePeriodInSecond": 1, "relativeToPublishRate": False}),
    "subscribe-rate": (["-sr", "2", "-st", "10"],
                       {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 10}),
    "subscription-types-enabled": (["-t", "Shared,Key_Shared"], ["Shared", "Key_Shared"]),
    "subscription-expiration-time": (["-t", "30"], 30),
}


def _run(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> tuple[int, Any, str]:
    code = main(["--admin-url", broker.web_url, *argv])
    captured = capsys.readouterr()
    out = captured.out.strip()
    return code, (json.loads(out) if out else None), captured.err


def test_every_limit_command_sets_gets_and_removes_its_policy(
        broker: Any, client: Any, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    client.create_producer(TOPIC).close()
    checked = 0
    for policy in POLICIES:
        levels = [("namespaces", NS, policy.namespace, f"/admin/v2/namespaces/{NS}")]
        levels += [(group, TOPIC, policy.topic, "/admin/v2/persistent/public/default/limits")
                   for group in TOPIC_GROUPS]
        for group, target, level, rest in levels:
            if level is None:
                continue
            flags, expected = CASES[level.stem]
            assert _run(capsys, broker, group, f"set-{level.stem}", target, *flags)[:2] == \
                (0, None), (group, level.stem)
            assert _run(capsys, broker, group, f"get-{level.stem}", target)[:2] == \
                (0, expected), (group, level.stem)
            assert api("GET", f"{rest}/{level.suffix}").body == expected
            assert _run(capsys, broker, group, f"remove-{level.stem}", target)[:2] == (0, None)
            # removed: null, but as Pulsar: subscription types read an empty list (a topic's
            # are removed by storing one), a namespace's max topics 0
            unset = {"subscription-types-enabled": [], "max-topics-per-namespace": 0}.get(
                level.stem)
            assert _run(capsys, broker, group, f"get-{level.stem}", target)[1] == unset
            checked += 1
    assert checked == sum((p.namespace is not None) + 2 * (p.topic is not None)
                          for p in POLICIES)


def test_limit_commands_report_the_brokers_reason_and_check_types_locally(
        broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, broker, "namespaces", "set-max-consumers-per-topic", NS,
                        "-c", "-1")
    assert code == 1 and "maxConsumersPerTopic must be 0 or more (HTTP 412)" in err
    code, _, err = _run(capsys, broker, "namespaces", "set-subscription-expiration-time", NS,
                        "-t", "-5")
    assert code == 1 and "Invalid value for subscription expiration time (HTTP 412)" in err
    code, _, err = _run(capsys, broker, "namespaces", "set-subscription-types-enabled", NS,
                        "-t", "Shared,Fanout")
    assert code == 2 and "invalid subscription types" in err
    code, _, _ = _run(capsys, broker, "topicPolicies", "get-max-producers", TOPIC)
    assert code == 1   # the alias of topic-policies; the topic does not exist: 404
