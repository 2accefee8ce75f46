"""Soak: random cursor resets while the official client consumes (PIP-269).

Rounds cycle the subscription through Exclusive, Failover, Shared and Key_Shared (each change
of type is a type switch on the broker), with a tenth of the messages delayed. In each round
the consumers take part of the backlog (leaving frames in flight and in receiver queues), then
one reset is made at random: a client seek by message id, a client seek by publish time, an
admin reset-cursor by time, an admin skip of N, or clear-backlog. Then every consumer drains
until idle and the round checks:

- after a seek by id/time from consumer 0: consumer 0 receives nothing published before the
  target, and the consumers together receive every message from the target on (nothing lost,
  nothing stuck);
- after skip / clear-backlog: new messages published afterwards all arrive, and the backlog
  ends at 0 once everything is acknowledged.

Bounded: ``HORAE_REVISION_SOAK_S`` seconds of rounds (10 in the suite, 20 in a full run:
tests/sampling.py).
"""

from __future__ import annotations

import datetime
import os
import random
import time
from typing import Any

import pulsar
from sampling import amount
from waiting import wait_until

from tests.admin.conftest import http

from ._helpers import topic_name

SOAK_S = amount("HORAE_REVISION_SOAK_S", full=20, sample=10)
TYPES = [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover,
         pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared]
DELAY = datetime.timedelta(milliseconds=150)


def _drain(consumers: list[Any], idle_ms: int = 900) -> list[tuple[int, int]]:
    """(consumer index, message number) of everything received (and acked) until idle."""
    got: list[tuple[int, int]] = []
    idle_since = time.monotonic()
    for _ in range(100_000):
        progressed = False
        for i, c in enumerate(consumers):
            try:
                msg = c.receive(20)
            except pulsar.Timeout:
                continue
            progressed = True
            got.append((i, int(msg.data())))
            c.acknowledge(msg)
        if progressed:
            idle_since = time.monotonic()
        elif (time.monotonic() - idle_since) * 1000 > idle_ms:
            break
    return got


def test_random_resets_while_consuming_lose_nothing_and_replay_nothing_stale(
        broker_factory: Any) -> None:
    # Failover consumers are fed at once: the switch delay (activeConsumerFailoverDelayTimeMillis)
    # is longer than a drain's idle window and is not what this soak is about
    broker = broker_factory(config_overrides={"activeConsumerFailoverDelayTimeMillis": 0})
    rng = random.Random(int(os.environ.get("HORAE_REVISION_SOAK_SEED", "12")))
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = topic_name("revision-soak")
    rest = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/subscription/soak"
    producer = client.create_producer(topic, batching_enabled=False)
    ids: dict[int, Any] = {}
    stamps: dict[int, int] = {}
    counter = 0

    def publish(n: int) -> list[int]:
        nonlocal counter
        out = []
        for _ in range(n):
            num = counter
            counter += 1
            kw: dict[str, Any] = {"partition_key": f"k{num % 7}"}
            if num % 10 == 3:
                kw["deliver_after"] = DELAY
            stamps[num] = int(time.time() * 1000)
            ids[num] = producer.send(str(num).encode(), **kw)
            out.append(num)
        return out

    publish(60)
    deadline = time.monotonic() + SOAK_S
    rounds = 0
    checked = {"seek": 0, "skip": 0}
    try:
        while time.monotonic() < deadline or rounds < 4:
            kind = TYPES[rounds % len(TYPES)]
            n = 1 if kind == pulsar.ConsumerType.Exclusive else 2
            consumers = [client.subscribe(
                topic, "soak", consumer_type=kind, consumer_name=f"c{rounds}-{i}",
                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=10)
                for i in range(n)]
            for _ in range(rng.randrange(0, 15)):  # part of the backlog, frames left in flight
                try:
                    msg = consumers[0].receive(200)
                except pulsar.Timeout:
                    break
                consumers[0].acknowledge(msg)
            op = rng.choice(["seek-id", "seek-time", "reset-time", "skip", "clear"])
            if op in ("seek-id", "seek-time", "reset-time"):
                target = rng.randrange(0, counter)
                if op == "seek-id":
                    consumers[0].seek(ids[target])
                    first = target + 1   # the client drops the seek id itself (not inclusive)
                elif op == "seek-time":
                    consumers[0].seek(stamps[target])
                    first = min(k for k in stamps if stamps[k] >= stamps[target])
                    # A stamp is taken just before its send and the client sets publish_time
                    # inside it: message k's publish time lies in [stamps[k], stamps[k + 1]], so
                    # the one before *first* may share the target's millisecond and be due too.
                    lowest = min(k for k in stamps
                                 if stamps.get(k + 1, stamps[k]) >= stamps[target])
                else:
                    status = http(broker.web_url, "POST",
                                  f"{rest}/resetcursor/{stamps[target]}").status
                    assert status == 204
                    first = min(k for k in stamps if stamps[k] >= stamps[target])
                got = _drain(consumers)
                numbers = {m for _, m in got}
                allowed = lowest if op == "seek-time" else first
                stale = [m for i, m in got if i == 0 and m < allowed] if op != "reset-time" else []
                assert stale == [], (op, kind, first, stale)
                missing = set(range(first, counter)) - numbers
                assert missing == set(), (op, kind, first, sorted(missing)[:10])
                checked["seek"] += 1
            else:
                path = f"{rest}/skip/{rng.randrange(1, 20)}" if op == "skip" else \
                    f"{rest}/skip_all"
                assert http(broker.web_url, "POST", path).status == 204
                fresh = publish(rng.randrange(5, 15))
                got = _drain(consumers)
                missing = set(fresh) - {m for _, m in got}
                assert missing == set(), (op, kind, sorted(missing))
                checked["skip"] += 1
            for c in consumers:
                c.close()
            rounds += 1
        # Nothing is stuck in the backlog or the tracker: a last consumer receives whatever a
        # round's idle window left (on a loaded machine a drain may stop before a redelivery
        # or a delayed message arrives), and the backlog reaches 0.
        last = client.subscribe(topic, "soak", consumer_type=pulsar.ConsumerType.Shared,
                                consumer_name="last", receiver_queue_size=10)
        stats_path = rest.rsplit("/subscription", 1)[0] + "/stats"

        def drained() -> bool:
            try:
                msg = last.receive(50)
                last.acknowledge(msg)
            except pulsar.Timeout:
                pass
            subscription = http(broker.web_url, "GET", stats_path).body["subscriptions"]["soak"]
            return bool(subscription["msgBacklog"] == 0)

        wait_until(drained, timeout_s=60, message="the soak subscription's backlog drains to 0")
        last.close()
        assert checked["seek"] > 0 and checked["skip"] > 0
    finally:
        producer.close()
        client.close()
