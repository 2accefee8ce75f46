"""Message ids and order after seeks and redeliveries, against Pulsar 4.0 standalone.

Each scenario publishes through the official Python client, then seeks, redelivers or reads
from an id, and records what each consumer received as *positions*: the index of each
received id among the ids the scenario's sends were given (:func:`peers.positions`), with
the redelivery count where it matters. Ledger and entry numbers differ between the brokers;
order and count must not. The two records must be equal except where :data:`ALLOWED` says
why not. ``HORAE_ORACLE=full`` runs every scenario, otherwise the sample.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from clients import client_for
from peers import Peer, Peers, positions, unique_names
from waiting import wait_until

FULL = os.environ.get("HORAE_ORACLE") == "full"
QUIET_MS = 1500
"""A consumer that receives nothing for this long has been given everything it will get."""
MAX_MESSAGES = 100
Record = dict[str, Any]


def drain(consumer: Any, *, ack: bool = True, limit: int = MAX_MESSAGES) -> list[Any]:
    """Receive until the broker has nothing more for *QUIET_MS* (at most *limit*)."""
    import pulsar

    got = []
    while len(got) < limit:
        try:
            msg = consumer.receive(timeout_millis=QUIET_MS)
        except pulsar.Timeout:
            break
        got.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return got


def publish(client: Any, topic: str, n: int, *, batch: int = 0,
            distinct_ms: bool = False) -> list[Any]:
    """n messages m0..m(n-1); their ids in order. ``batch``: messages a batch (by count);
    ``distinct_ms``: each in a millisecond of its own (for seeks by publish time)."""
    if batch:
        producer = client.create_producer(topic, batching_enabled=True,
                                          batching_max_messages=batch,
                                          batching_max_publish_delay_ms=60_000)
        ids: list[Any] = [None] * n

        def keep(i: int) -> Callable[[Any, Any], None]:
            def done(result: Any, mid: Any) -> None:
                ids[i] = mid
            return done

        for i in range(n):
            producer.send_async(f"m{i}".encode(), keep(i))
        producer.flush()
    else:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = []
        for i in range(n):
            if distinct_ms:
                start = time.time_ns() // 1_000_000
                while time.time_ns() // 1_000_000 == start:
                    pass  # the next send gets a publish time of its own
            ids.append(producer.send(f"m{i}".encode()))
    producer.close()
    assert all(mid is not None for mid in ids)
    return ids


def _sub(client: Any, topic: str, kind: str = "Exclusive", **kw: Any) -> Any:
    import pulsar

    return client.subscribe(topic, "s", consumer_type=getattr(pulsar.ConsumerType, kind),
                            initial_position=pulsar.InitialPosition.Earliest, **kw)


def seek_to_id(client: Any, topic: str) -> Record:
    consumer = _sub(client, topic)
    ids = publish(client, topic, 10)
    out: Record = {"first read": positions([m.message_id() for m in drain(consumer)], ids)}
    consumer.seek(ids[3])
    out["after seek to 3"] = positions([m.message_id() for m in drain(consumer)], ids)
    consumer.seek(ids[9])
    out["after seek to the last"] = positions([m.message_id() for m in drain(consumer)], ids)
    return out


def seek_earliest_latest(client: Any, topic: str) -> Record:
    import pulsar

    consumer = _sub(client, topic)
    ids = publish(client, topic, 5)
    drain(consumer)
    consumer.seek(pulsar.MessageId.earliest)
    out: Record = {"after earliest": positions([m.message_id() for m in drain(consumer)], ids)}
    consumer.seek(pulsar.MessageId.latest)
    out["after latest"] = positions([m.message_id() for m in drain(consumer)], ids)
    ids += publish(client, topic, 1)
    out["after latest, one more"] = positions([m.message_id() for m in drain(consumer)], ids)
    return out


def seek_by_time(client: Any, topic: str) -> Record:
    consumer = _sub(client, topic)
    ids = publish(client, topic, 8, distinct_ms=True)
    got = drain(consumer)
    times = [m.publish_timestamp() for m in got]
    out: Record = {"first read": positions([m.message_id() for m in got], ids)}
    consumer.seek(times[4])
    out["after seek to 4's time"] = positions([m.message_id() for m in drain(consumer)], ids)
    consumer.seek(times[0] - 1)
    out["after seek before all"] = positions([m.message_id() for m in drain(consumer)], ids)
    consumer.seek(times[-1] + 60_000)
    out["after seek past all"] = positions([m.message_id() for m in drain(consumer)], ids)
    return out


def _unacked(peer: Peer, topic: str) -> int | None:
    path = "/admin/v2/" + topic.replace("://", "/", 1) + "/stats"
    answer = peer.http("GET", path)
    if answer.status != 200 or not isinstance(answer.body, dict):
        return None
    return int(answer.body.get("subscriptions", {}).get("s", {}).get("unackedMessages", -1))


def redeliver_unacked(client: Any, topic: str, peer: Peer) -> Record:
    consumer = _sub(client, topic, "Shared")
    ids = publish(client, topic, 6)
    got = drain(consumer, ack=False)
    for m in got[::2]:
        consumer.acknowledge(m)
    # The client groups acks for up to 100 ms: the redeliver request could overtake them, and
    # then either broker redelivers all six. Wait until both brokers have taken the acks.
    wait_until(lambda: _unacked(peer, topic) == len(got) - len(got[::2]), timeout_s=30,
               message="the acks to reach the broker")
    consumer.redeliver_unacknowledged_messages()
    again = drain(consumer)
    return {"first": positions([m.message_id() for m in got], ids),
            "redelivered": positions([m.message_id() for m in again], ids),
            "redelivery counts": [m.redelivery_count() for m in again]}


def negative_acks(client: Any, topic: str) -> Record:
    consumer = _sub(client, topic, "Shared", negative_ack_redelivery_delay_ms=100)
    ids = publish(client, topic, 5)
    got = drain(consumer, ack=False)
    for i, m in enumerate(got):
        if i in (1, 3):
            consumer.negative_acknowledge(m)
        else:
            consumer.acknowledge(m)
    again = drain(consumer)
    return {"first": positions([m.message_id() for m in got], ids),
            "redelivered": sorted(positions([m.message_id() for m in again], ids)),
            "redelivery counts": sorted(m.redelivery_count() for m in again)}


def redelivery_to_another_consumer(client: Any, topic: str) -> Record:
    first = _sub(client, topic, "Shared", receiver_queue_size=5)
    ids = publish(client, topic, 8)
    got = drain(first, ack=False, limit=3)
    for m in got[:1]:
        first.acknowledge(m)
    first.close()
    second = _sub(client, topic, "Shared")
    again = drain(second)
    return {"first": positions([m.message_id() for m in got], ids),
            "second consumer": positions([m.message_id() for m in again], ids)}


def batched_seek(client: Any, topic: str) -> Record:
    consumer = _sub(client, topic)
    ids = publish(client, topic, 10, batch=5)
    out: Record = {"batch indexes": [mid.batch_index() for mid in ids],
                   "first read": positions([m.message_id() for m in drain(consumer)], ids)}
    consumer.seek(ids[7])
    out["after seek to 7"] = positions([m.message_id() for m in drain(consumer)], ids)
    return out


def readers(client: Any, topic: str) -> Record:
    ids = publish(client, topic, 6)
    out: Record = {}
    for label, kw in (("exclusive start", {}), ("inclusive start", {
            "start_message_id_inclusive": True})):
        reader = client.create_reader(topic, ids[2], **kw)
        got = []
        while reader.has_message_available() and len(got) < MAX_MESSAGES:
            got.append(reader.read_next(timeout_millis=10_000))
        out[label] = positions([m.message_id() for m in got], ids)
        reader.close()
    return out


def last_message_id(client: Any, topic: str) -> Record:
    consumer = _sub(client, topic)
    out: Record = {"empty": _id_shape(consumer.get_last_message_id())}
    ids = publish(client, topic, 3)
    out["after 3"] = positions([consumer.get_last_message_id()], ids)
    return out


def ack_timeout(client: Any, topic: str) -> Record:
    """Messages left unacknowledged past the consumer's ack timeout come again, counted (the
    Python client's shortest timeout is 10 s)."""
    consumer = _sub(client, topic, "Shared", unacked_messages_timeout_ms=10_000)
    ids = publish(client, topic, 5)
    got = drain(consumer, ack=False, limit=5)
    for i, m in enumerate(got):
        if i % 2 == 0:
            consumer.acknowledge(m)
    again = []
    deadline = time.monotonic() + 45
    while len(again) < 2 and time.monotonic() < deadline:
        again += drain(consumer, limit=2 - len(again))
    return {"first": positions([m.message_id() for m in got], ids),
            "redelivered": sorted(positions([m.message_id() for m in again], ids)),
            "redelivery counts": sorted(m.redelivery_count() for m in again)}


def partitioned_seek(client: Any, topic: str, peer: Peer) -> Record:
    """A consumer of a partitioned topic seeks every partition by publish time; the order
    across partitions is not the point, which messages come is."""
    created = peer.http("PUT", "/admin/v2/" + topic.replace("://", "/", 1) + "/partitions", 3)
    assert created.status == 204, created
    consumer = _sub(client, topic)
    ids = publish(client, topic, 9, distinct_ms=True)
    got = drain(consumer)
    times = sorted(m.publish_timestamp() for m in got)
    out: Record = {"first read": sorted(positions([m.message_id() for m in got], ids)),
                   "partitions": sorted({mid.partition() for mid in ids})}
    consumer.seek(times[5])
    out["after seek to 5's time"] = sorted(
        positions([m.message_id() for m in drain(consumer)], ids))
    consumer.seek(times[0] - 1)
    out["after seek before all"] = sorted(
        positions([m.message_id() for m in drain(consumer)], ids))
    return out


def _id_shape(mid: Any) -> tuple[int, int]:
    """-1 stays -1, any other number is 0: what an empty topic's last id looks like."""
    return (-1 if mid.ledger_id() in (-1, 2**64 - 1) else 0,
            -1 if mid.entry_id() in (-1, 2**64 - 1) else 0)


SCENARIOS: dict[str, Callable[[Any, str], Record]] = {
    "seek to id": seek_to_id,
    "seek earliest and latest": seek_earliest_latest,
    "seek by publish time": seek_by_time,
    "redeliver unacked": redeliver_unacked,  # type: ignore[dict-item]  # needs the peer too
    "negative acks": negative_acks,
    "redelivery to another consumer": redelivery_to_another_consumer,
    "batched seek": batched_seek,
    "readers": readers,
    "last message id": last_message_id,
    "ack timeout": ack_timeout,
    "partitioned seek by time": partitioned_seek,  # type: ignore[dict-item]  # needs the peer
}
#: Scenarios that also call the peer's admin API.
WITH_PEER = ("redeliver unacked", "partitioned seek by time")
SAMPLE = ("seek to id", "redeliver unacked", "batched seek")

#: (scenario, key) -> the pair (horae, pulsar) that stays, and why.
ALLOWED: dict[tuple[str, str], tuple[tuple[Any, Any], str]] = {}

RUN = list(SCENARIOS) if FULL else list(SAMPLE)


def run(peer: Peer, scenario: str) -> Record:
    topic = f"persistent://public/default/{unique_names(scenario)['topic']}"
    with client_for(peer) as client:
        if scenario in WITH_PEER:
            return SCENARIOS[scenario](client, topic, peer)  # type: ignore[call-arg]
        return SCENARIOS[scenario](client, topic)


@pytest.mark.parametrize("scenario", RUN)
def test_order_as_pulsar(peers: Peers, scenario: str) -> None:
    horae, pulsar = run(peers.horae, scenario), run(peers.pulsar, scenario)
    assert horae.keys() == pulsar.keys()
    unexplained, stale = [], []
    for key in horae:
        pair = (horae[key], pulsar[key])
        allowed = ALLOWED.get((scenario, key))
        if pair[0] != pair[1] and (allowed is None or allowed[0] != pair):
            unexplained.append(f"{key}: horae {pair[0]!r}, pulsar {pair[1]!r}")
        if allowed is not None and pair[0] == pair[1]:
            stale.append(f"{key}: both {pair[0]!r} ({allowed[1]})")
    assert not unexplained and not stale, (
        "differences from Pulsar:\n  " + "\n  ".join(unexplained)
        + ("\nallowed differences that no longer show:\n  " + "\n  ".join(stale) if stale else ""))
