"""Out-of-order sequence ids from the official client are each stored once, with their own id.

A batching producer of pulsar-client 3.13 sends a delayed message at once, outside the batch it
is accumulating, with a sequence id from the middle of that batch; the batch follows with its
first id and its message count. Every acknowledged message must be consumed exactly once, and
each receipt must carry the id the consumer sees for that payload -- also when the broker is
killed (-9) mid-run and the client reconnects and re-sends its pending queue.
"""

from __future__ import annotations

import datetime
import pathlib
import random
import threading
from typing import Any

import pulsar
import pytest
from conftest import find_free_port, make_client
from waiting import wait_until

#: Patterns of one round: p = plain (batched), d = delayed (sent at once, out of the batch).
PATTERNS = ("ppdp", "pdp", "pdpdp", "ppddp", "dpp", "pdddpp", "ppppdpd", "pd")
DELAY = datetime.timedelta(milliseconds=300)
MsgKey = tuple[int, int, int]


def _key(msg_id: Any) -> MsgKey:
    return (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())


class Sent:
    """Receipts of send_async, by payload (client callback threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[bytes, MsgKey] = {}
        self.failed: set[bytes] = set()
        self.answered = 0

    def callback(self, payload: bytes) -> Any:
        def done(result: Any, msg_id: Any) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.acked[payload] = _key(msg_id)
                else:
                    self.failed.add(payload)
                self.answered += 1
        return done


def _send_rounds(producer: Any, sent: Sent, rng: random.Random, first: int, rounds: int,
                 *, keys: bool = False) -> int:
    """Send *rounds* rounds of random patterns (with random partition keys when *keys*);
    returns the number of messages sent."""
    n = 0
    for r in range(first, first + rounds):
        pattern = rng.choice(PATTERNS)
        for i, kind in enumerate(pattern):
            payload = b"%d-%d-%s" % (r, i, kind.encode())
            extra: dict[str, Any] = {"partition_key": rng.choice("abc")} if keys else {}
            if kind == "d":
                extra["deliver_after"] = DELAY
            producer.send_async(payload, sent.callback(payload), **extra)
            n += 1
        if rng.random() < 0.8:  # else the batch timer sends it, while the next round begins
            producer.flush()
    producer.flush()
    return n


def _consume_all(consumer: Any, expected: set[bytes]) -> dict[bytes, list[MsgKey]]:
    """Receive (and ack) until every expected payload came and nothing more arrives for a
    while (duplicates of delayed messages come after their delay)."""
    seen: dict[bytes, list[MsgKey]] = {}
    missing = set(expected)
    quiet_ms = int(DELAY.total_seconds() * 1000) + 1500
    for _ in range(10 * len(expected) + 100):  # bounded: duplicates end it too
        try:
            msg = consumer.receive(15_000 if missing else quiet_ms)
        except pulsar.Timeout:
            break
        seen.setdefault(msg.data(), []).append(_key(msg.message_id()))
        missing.discard(msg.data())
        consumer.acknowledge(msg)
    return seen


def _check(sent: Sent, seen: dict[bytes, list[MsgKey]]) -> None:
    lost = sorted(p for p in sent.acked if p not in seen)
    duplicated = sorted(p for p, ids in seen.items() if len(ids) > 1)
    wrong_id = sorted(p for p, key in sent.acked.items() if p in seen and seen[p][0] != key)
    assert not lost, f"{len(lost)} acknowledged messages never delivered, e.g. {lost[:5]}"
    assert not duplicated, f"{len(duplicated)} messages delivered twice, e.g. {duplicated[:5]}"
    assert not wrong_id, f"{len(wrong_id)} receipts carry another id, e.g. {wrong_id[:5]}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("batching_type", ["Default", "KeyBased"])
def test_delayed_messages_inside_a_batch_range_are_each_stored_once_with_their_own_id(
        broker: Any, client: Any, batching_type: str) -> None:
    # Key-based batching sends one batch per key, each with its first id and its count:
    # their computed ranges overlap one another as well as the delayed messages' ids.
    topic = f"persistent://public/default/dedup-out-of-order-{batching_type}"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=True,
                                      batching_max_publish_delay_ms=5,
                                      batching_max_messages=1000,
                                      batching_type=getattr(pulsar.BatchingType, batching_type))
    sent = Sent()
    total = _send_rounds(producer, sent, random.Random(7), 0, 300,
                         keys=batching_type == "KeyBased")
    wait_until(lambda: sent.answered == total, message="every send answered", timeout_s=60)
    assert not sent.failed
    assert len(sent.acked) == total
    seen = _consume_all(consumer, set(sent.acked))
    producer.close()
    _check(sent, seen)


@pytest.mark.timeout(240)
def test_out_of_order_ids_survive_a_kill_9_and_the_clients_resends(
        run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    port = find_free_port()
    proc = run_broker_process(data, broker_port=port)
    topic = "persistent://public/default/dedup-out-of-order-crash"
    c = make_client(proc.service_url, operation_timeout_seconds=10,
                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared).close()
        producer = c.create_producer(topic, batching_enabled=True,
                                     batching_max_publish_delay_ms=5,
                                     batching_max_messages=1000, send_timeout_millis=60_000)
        sent = Sent()
        rng = random.Random(11)
        total = _send_rounds(producer, sent, rng, 0, 150)
        killed = threading.Event()

        def kill_and_restart() -> None:
            proc.kill()
            killed.set()
            run_broker_process(data, broker_port=port)

        # Kill while sends are pipelined: the client re-sends its pending queue (same ids,
        # same batches) to the restarted broker.
        restarter = threading.Thread(target=kill_and_restart)
        pending = 0
        for r in range(150, 300):
            pattern = rng.choice(PATTERNS)
            for i, kind in enumerate(pattern):
                payload = b"%d-%d-%s" % (r, i, kind.encode())
                extra = {"deliver_after": DELAY} if kind == "d" else {}
                producer.send_async(payload, sent.callback(payload), **extra)
                pending += 1
            if r == 200:
                restarter.start()
        total += pending
        killed.wait(30)
        restarter.join(60)
        producer.flush()
        wait_until(lambda: sent.answered == total, message="every send answered", timeout_s=90)
        assert killed.is_set() and len(sent.acked) > total // 2
        consumer = c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        seen = _consume_all(consumer, set(sent.acked))
        producer.close()
    finally:
        c.close()
    _check(sent, seen)
