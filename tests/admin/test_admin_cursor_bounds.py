"""Cursor positions from the admin API are bounded: skipByMessageIds of a message that does not
exist is 412 and skips nothing (a later message with that id is delivered), reset-cursor past
the end lands on the end (Pulsar's "latest") without dropping new messages, ids beyond Java's
long/int are 400, and negative skip counts are refused by the REST API and the CLI."""

from __future__ import annotations

from typing import Any

import pulsar
from waiting import wait_until

from .conftest import Api, Cli

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"


def _sub(api: Api, topic: str) -> None:
    assert api("PUT", f"{P}/{topic}/subscription/s", {"ledgerId": -1, "entryId": -1}
               ).status == 204


def _send(client: Any, topic: str, *payloads: bytes) -> list[Any]:
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    ids = [producer.send(p) for p in payloads]
    producer.close()
    return ids


def _drain(consumer: Any, n: int) -> list[bytes]:
    got = []
    for _ in range(n):
        msg = consumer.receive(5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    return got


def _backlog(api: Api, topic: str) -> int:
    return int(api("GET", f"{P}/{topic}/stats").body["subscriptions"]["s"]["msgBacklog"])


def test_skip_by_id_of_a_future_message_is_412_and_it_is_delivered(
        api: Api, client: Any) -> None:
    _sub(api, "fut")
    [m0] = _send(client, "fut", b"m0")
    body = {"type": "messageId",
            "messageIds": [{"ledgerId": m0.ledger_id(), "entryId": m0.entry_id() + 2}]}
    reply = api("POST", f"{P}/fut/subscription/s/skipByMessageIds", body)
    assert reply.status == 412
    assert "Invalid mark deleted position" in str(reply.reason)
    other_ledger = {str(m0.ledger_id() + 12): "3"}
    assert api("POST", f"{P}/fut/subscription/s/skipByMessageIds", other_ledger).status == 412
    _send(client, "fut", b"m1", b"m2", b"m3")
    consumer = client.subscribe(f"{T}/fut", "s", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer, 4) == [b"m0", b"m1", b"m2", b"m3"]


def test_skip_by_id_bounds_are_400(api: Api, client: Any) -> None:
    _sub(api, "big")
    _send(client, "big", b"m0")
    for item in ({"ledgerId": 1 << 63, "entryId": 0},
                 {"ledgerId": 0, "entryId": 0, "batchIndex": 1 << 40}):
        reply = api("POST", f"{P}/big/subscription/s/skipByMessageIds",
                    {"type": "messageId", "messageIds": [item]})
        assert reply.status == 400, item
    assert _backlog(api, "big") == 1


def test_reset_cursor_past_the_end_lands_on_the_end_and_keeps_new_messages(
        api: Api, client: Any, broker: Any) -> None:
    _sub(api, "past")
    _send(client, "past", b"old0", b"old1")
    reply = api("POST", f"{P}/past/subscription/s/resetcursor", {"ledgerId": 99999, "entryId": 0})
    assert reply.status == 204
    assert _backlog(api, "past") == 0
    internal = api("GET", f"{P}/past/internalStats").body
    assert not str(internal["cursors"]["s"]["markDeletePosition"]).startswith("99999")
    _send(client, "past", b"new0", b"new1")
    wait_until(lambda: _backlog(api, "past") == 2, timeout_s=10)
    consumer = client.subscribe(f"{T}/past", "s", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer, 2) == [b"new0", b"new1"]
    bad = api("POST", f"{P}/past/subscription/s/resetcursor", {"ledgerId": 1 << 64,
                                                              "entryId": 0})
    assert bad.status == 400


def test_negative_skip_count_is_400_over_rest_and_a_usage_error_in_the_cli(
        api: Api, client: Any, cli: Cli) -> None:
    _sub(api, "neg")
    _send(client, "neg", b"a", b"b")
    reply = api("POST", f"{P}/neg/subscription/s/skip/-5")
    assert reply.status == 400
    assert "numMessages" in str(reply.reason)
    proc = cli.run("topics", "skip", "neg", "-s", "s", "-n", "-5")
    assert proc.returncode == 2
    assert "must be >= 0" in proc.stderr
    assert _backlog(api, "neg") == 2


def test_message_id_triplet_needs_three_parts(api: Api, client: Any, cli: Cli) -> None:
    _sub(api, "tri")
    [m0, _] = _send(client, "tri", b"a", b"b")
    two = cli.run("topics", "skip-messages", "tri", "-s", "s", "--messageId-triplet",
                  f"{m0.ledger_id()}:{m0.entry_id()}")
    assert two.returncode == 2
    assert "ledgerId:entryId:batchIndex" in two.stderr
    cli.ok("topics", "skip-messages", "tri", "-s", "s", "--messageId-triplet",
           f"{m0.ledger_id()}:{m0.entry_id()}:-1")
    assert _backlog(api, "tri") == 1
    missing = cli.run("topics", "skip-messages", "tri", "-s", "s", "-m", "12=3")
    assert missing.returncode != 0


def test_get_delayed_delivery_without_a_policy_prints_null(api: Api, client: Any,
                                                          cli: Cli) -> None:
    _send(client, "nopolicy", b"a")
    proc = cli.run("topics", "get-delayed-delivery", "nopolicy")
    assert (proc.returncode, proc.stdout) == (0, "null\n")
    proc = cli.run("namespaces", "get-delayed-delivery", "public/default")
    assert (proc.returncode, proc.stdout) == (0, "null\n")


def test_set_delayed_delivery_without_options_is_a_usage_error(api: Api, client: Any,
                                                               cli: Cli) -> None:
    _send(client, "noopts", b"a")
    for group, target in (("topics", "noopts"), ("namespaces", "public/default")):
        proc = cli.run(group, "set-delayed-delivery", target)
        assert proc.returncode == 2
        assert "nothing to set" in proc.stderr
    assert api("GET", f"{P}/noopts/delayedDelivery").body is None
