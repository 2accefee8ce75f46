"""A REST cancel (PIP-423) survives kill -9 of a bucket-tracker broker in the three cases
lists: the target still in the mutable bucket, a pending cancel with no later bucket sealed,
and the bucket sealed after the cancel finishing before its target's bucket. Official client,
broker subprocesses; each topic keeps every other message."""

from __future__ import annotations

import json
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
from conftest import make_client
from rest import unsaved_ack_age
from waiting import wait_until

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName": "bucket",
    "delayedDeliveryMinIndexCountPerBucket": 4,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 4,
    "managedLedgerMaxEntriesPerLedger": 4,
    "delayedDeliveryTickTimeMillis": 10,
    "isDelayedDeliveryDeliverAtTimeStrict": True,
}
T = "persistent://public/default"
P = "/admin/v2/persistent/public/default"
LATE_MS = 9000          # setup + kill + restart fit well before the late messages are due


def _request(method: str, web_url: str, path: str, body: bytes | None = None
             ) -> tuple[int, str]:
    req = urllib.request.Request(web_url + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _cancel(web_url: str, topic: str, mid: Any, deliver_at: int) -> None:
    status, body = _request("POST", web_url, f"{P}/{topic}/cancelDelayedMessage?ledgerId={mid.ledger_id()}"
                         f"&entryId={mid.entry_id()}&deliverAt={deliver_at}")
    assert status == 204, body


def _stats(web_url: str, topic: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{web_url}{P}/{topic}/stats", timeout=10) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


def _delayed(web_url: str, topic: str) -> int:
    return int(_stats(web_url, topic)["subscriptions"]["sub"]["msgDelayed"])


def _receive_all(consumer: Any, expect: set[bytes], deadline_s: float) -> list[bytes]:
    """Receive (and ack) until every expected payload came, then 1 s more for strays."""
    got: list[bytes] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            msg = consumer.receive(1000)
        except pulsar.Timeout:
            if not expect - set(got):
                break
            continue
        got.append(msg.data())
        consumer.acknowledge(msg)
    return got


def test_rest_cancel_survives_kill_9_in_every_bucket_case(
        run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    first = run_broker_process(data, config_overrides=CONFIG)
    client = make_client(first.service_url)
    late_at = int(time.time() * 1000) + LATE_MS
    try:
        producer = {t: client.create_producer(f"{T}/{t}", batching_enabled=False)
                    for t in ("mutable", "pending", "finished")}

        # 1. the target is indexed in the mutable bucket (3 messages: nothing sealed)
        mutable = client.subscribe(f"{T}/mutable", "sub", consumer_type=pulsar.ConsumerType.Shared)
        ids = [producer["mutable"].send(b"m%d" % i, deliver_at=late_at) for i in range(3)]
        wait_until(lambda: _delayed(first.web_url, "mutable") == 3, timeout_s=10,
                   message="three messages tracked")
        _cancel(first.web_url, "mutable", ids[1], late_at)

        # 2. no consumer has read the target: the cancel is pending, nothing sealed after it
        status, body = _request("PUT", first.web_url, f"{P}/pending/subscription/sub",
                             b'{"ledgerId": -1, "entryId": -1}')
        assert status == 204, body
        ids = [producer["pending"].send(b"p%d" % i, deliver_at=late_at) for i in range(6)]
        _cancel(first.web_url, "pending", ids[4], late_at)

        # 3. the target sits in a sealed bucket of late messages; a bucket sealed after the
        #    cancel holds early messages, which are delivered (that bucket finishes) first
        finished = client.subscribe(f"{T}/finished", "sub",
                                    consumer_type=pulsar.ConsumerType.Shared)
        ids = [producer["finished"].send(b"f%d" % i, deliver_at=late_at) for i in range(8)]
        wait_until(lambda: _delayed(first.web_url, "finished") == 8, timeout_s=10,
                   message="eight messages tracked")
        _cancel(first.web_url, "finished", ids[2], late_at)
        early_at = int(time.time() * 1000) + 1000
        for i in range(8):
            producer["finished"].send(b"e%d" % i, deliver_at=early_at)
        early = {b"e%d" % i for i in range(8)}
        assert set(_receive_all(finished, early, 15)) == early
        for consumer in (mutable, finished):
            consumer.close()        # flushes the client's grouped acks of the early messages
        # Acknowledgements are saved by the cursors' background flush: the kill comes once
        # every one is in a cursor file (on a busy machine the flush can lag behind the close).
        wait_until(lambda: unsaved_ack_age(first.web_url) == 0, timeout_s=30,
                   message="every acknowledgement saved")
    finally:
        client.close()
    first.kill()

    second = run_broker_process(data, config_overrides=CONFIG)
    client = make_client(second.service_url)
    try:
        consumers = {t: client.subscribe(f"{T}/{t}", "sub", consumer_type=pulsar.ConsumerType.Shared)
                     for t in ("mutable", "pending", "finished")}
        wanted = {"mutable": {b"m0", b"m2"},
                  "pending": {b"p%d" % i for i in range(6) if i != 4},
                  "finished": {b"f%d" % i for i in range(8) if i != 2}}
        # until the late ones are due, then time to hand them out (the set-up may have taken
        # longer than LATE_MS on a busy machine: they are then due at once)
        wait_s = max(0.0, (late_at - time.time() * 1000) / 1000) + 30
        for topic, consumer in consumers.items():
            got = _receive_all(consumer, wanted[topic], wait_s)
            assert sorted(got) == sorted(wanted[topic]), topic
            assert int(_stats(second.web_url, topic)["subscriptions"]["sub"]["msgBacklog"]) == 0
    finally:
        client.close()
    assert late_at <= time.time() * 1000          # the cancelled ones were due and never came
    assert second.stop() == 0
