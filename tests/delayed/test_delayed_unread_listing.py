"""Seeing what is scheduled before any consumer read it: the listing and the histogram of a
subscription whose consumers left, across kill -9, and once a consumer attaches again. Official
client, broker subprocesses."""

from __future__ import annotations

import json
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from conftest import make_client
from rest import unsaved_ack_age
from waiting import wait_until

T = "persistent://public/default"
P = "/admin/v2/persistent/public/default"
HOUR_MS = 3_600_000


def _call(method: str, url: str) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _listing(web_url: str, sub: str) -> dict[str, Any]:
    status, body = _call("GET", f"{web_url}{P}/unread/subscription/{sub}/delayedMessages?limit=50")
    assert status == 200, body
    return dict(body)


def _stats(web_url: str) -> dict[str, Any]:
    return dict(_call("GET", f"{web_url}{P}/unread/stats")[1]["subscriptions"]["shared"])


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
def test_scheduled_messages_nobody_read_are_listed_across_kill_9(
        run_broker_process: Any, tmp_path: pathlib.Path, tracker: str) -> None:
    config = {"delayedDeliveryTickTimeMillis": 10,
              "delayedDeliveryTrackerFactoryClassName": tracker}
    data = tmp_path / "data"
    first = run_broker_process(data, config_overrides=config)
    client = make_client(first.service_url)
    try:
        client.subscribe(f"{T}/unread", "shared", consumer_type=pulsar.ConsumerType.Shared).close()
        client.subscribe(f"{T}/unread", "excl").close()     # Exclusive: nothing is held back
        producer = client.create_producer(f"{T}/unread", batching_enabled=False)
        now = int(time.time() * 1000)
        scheduled = []
        for i in range(6, 0, -1):
            at = now + i * HOUR_MS
            mid = producer.send(b"x" * i, deliver_at=at, partition_key=f"k{i}")
            scheduled.append({"messageId": f"{mid.ledger_id()}:{mid.entry_id()}",
                              "ledgerId": mid.ledger_id(), "entryId": mid.entry_id(),
                              "deliverAt": at, "key": f"k{i}", "size": i})
        producer.send(b"plain")
        producer.send(b"past", deliver_at=now - 1000)
        scheduled.sort(key=lambda m: m["deliverAt"])

        listed = _listing(first.web_url, "shared")
        assert listed["messages"] == scheduled
        assert (listed["pending"], listed["next"], listed["notRead"]) == (6, None, 0)
        assert _listing(first.web_url, "excl")["pending"] == 0
        status, hist = _call("GET", f"{first.web_url}{P}/unread/subscription/shared/"
                             f"delayedMessages/histogram?boundsMs={int(3.5 * HOUR_MS)}")
        assert status == 200 and [b["count"] for b in hist["bins"]] == [3, 3]

        # a REST cancel, without deliverAt, of a message nobody read
        cancelled = scheduled.pop(2)
        status, body = _call("POST", f"{first.web_url}{P}/unread/cancelDelayedMessage?ledgerId="
                             f"{cancelled['ledgerId']}&entryId={cancelled['entryId']}")
        assert status == 204, body
        assert _listing(first.web_url, "shared")["messages"] == scheduled
        wait_until(lambda: unsaved_ack_age(first.web_url) == 0, timeout_s=30,
                   message="the cancel's acknowledgement saved")
    finally:
        client.close()
    first.kill()

    second = run_broker_process(data, config_overrides=config)
    listed = _listing(second.web_url, "shared")
    assert listed["messages"] == scheduled and listed["pending"] == 5
    client = make_client(second.service_url)
    try:
        consumer = client.subscribe(f"{T}/unread", "shared",
                                    consumer_type=pulsar.ConsumerType.Shared)
        got = set()
        for _ in range(2):
            msg = consumer.receive(10_000)
            got.add(msg.data())
            consumer.acknowledge(msg)
        assert got == {b"plain", b"past"}
        # the dispatcher read the rest into its tracker: listed the same, nothing twice
        wait_until(lambda: _stats(second.web_url)["msgDelayed"] == 5, timeout_s=10,
                   message="the five tracked")
        listed = _listing(second.web_url, "shared")
        assert listed["messages"] == scheduled and listed["pending"] == 5
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)
    finally:
        client.close()


def test_replaced_and_cancelled_by_key_are_not_listed_before_anyone_read_them(
        run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    config = {"delayedDeliveryTickTimeMillis": 10}
    data = tmp_path / "data"
    first = run_broker_process(data, config_overrides=config)
    req = urllib.request.Request(
        f"{first.web_url}/admin/v2/namespaces/public/default/delayedDeliveryReplaceByKey",
        data=b"true", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 204
    client = make_client(first.service_url)
    try:
        client.subscribe(f"{T}/unread", "shared", consumer_type=pulsar.ConsumerType.Shared).close()
        producer = client.create_producer(f"{T}/unread", batching_enabled=False)
        now = int(time.time() * 1000)
        producer.send(b"k1 first", deliver_at=now + HOUR_MS, partition_key="k1")
        producer.send(b"k2", deliver_at=now + 2 * HOUR_MS, partition_key="k2")
        moved = producer.send(b"k1 moved", deliver_at=now + 3 * HOUR_MS, partition_key="k1")
        producer.send(b"", partition_key="k2")            # a tombstone: k2 cancelled
        want = [{"messageId": f"{moved.ledger_id()}:{moved.entry_id()}",
                 "ledgerId": moved.ledger_id(), "entryId": moved.entry_id(),
                 "deliverAt": now + 3 * HOUR_MS, "key": "k1", "size": 8}]
        assert _listing(first.web_url, "shared")["messages"] == want
    finally:
        client.close()
    first.kill()
    second = run_broker_process(data, config_overrides=config)
    listed = _listing(second.web_url, "shared")
    assert listed["messages"] == want and listed["pending"] == 1
