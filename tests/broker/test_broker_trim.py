"""Ledger trimming driven by the topic's housekeeping tick: acknowledged sealed ledgers go
away (internal stats and disk), readers hold trimming back, and the topic keeps working and
restarts fine afterwards. Also: subscription rates are sampled by the same tick."""

from __future__ import annotations

import pathlib
from typing import Any

import pulsar
from conftest import make_client
from waiting import wait_until

from broker.topics.stats import internal_stats, topic_stats

PER_LEDGER = 5


def _ledger_ids(handle: Any, topic: str) -> list[int]:
    return handle.call(  # type: ignore[no-any-return]
        lambda: [li.ledger_id for li in handle.service.topics[topic].ledger.ledgers])


def _segments(data_dir: pathlib.Path) -> int:
    return len(list(data_dir.glob("**/ledgers/*/*.seg")))


def _wait_for(predicate: Any, timeout: float = 15.0) -> bool:
    """Poll a broker-side condition (the housekeeping tick runs once a second)."""
    return bool(wait_until(predicate, timeout_s=timeout, interval_s=0.1))


def _force_trim(handle: Any, topic: str) -> list[int]:
    """Run one housekeeping pass now, as if a trigger had fired; the ledger ids after it."""

    async def run() -> list[int]:
        t = handle.service.topics[topic]
        t.trimmer.last_trim = float("-inf")
        t.trimmer.marker = (object(), -1)
        t.housekeeping(t.loop.time())
        if t.trimmer.task is not None:
            await t.trimmer.task
        return [li.ledger_id for li in t.ledger.ledgers]

    return handle.call(run)  # type: ignore[no-any-return]


def _all_acked(handle: Any, topic: str, sub: str) -> bool:
    def check() -> bool:
        t = handle.service.topics[topic]
        return bool(t.ledger.cursors[sub].mark_delete_position == t.ledger.last_confirmed)

    return bool(handle.call(check))


def _consume(consumer: Any, n: int) -> list[bytes]:
    got = []
    for _ in range(n):
        msg = consumer.receive(5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    return got


def test_acknowledged_ledgers_are_trimmed_and_the_topic_survives_a_restart(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "trim"
    overrides = {"managedLedgerMaxEntriesPerLedger": PER_LEDGER}
    topic = "persistent://public/default/trim"
    handle = broker_factory(data_dir=data, config_overrides=overrides)
    c = make_client(handle.service_url)
    try:
        consumer = c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = c.create_producer(topic)
        for i in range(8 * PER_LEDGER):
            producer.send(b"%d" % i)
        before = _ledger_ids(handle, topic)
        assert len(before) >= 8
        assert _segments(data) == len(before)
        assert _consume(consumer, 8 * PER_LEDGER) == [b"%d" % i for i in range(8 * PER_LEDGER)]
        assert _wait_for(lambda: _all_acked(handle, topic, "s"))
        assert _wait_for(lambda: len(_ledger_ids(handle, topic)) == 1)
        internal = handle.call(lambda: internal_stats(handle.service.topics[topic]))
        assert [li["ledgerId"] for li in internal["ledgers"]] == [before[-1]]
        assert internal["numberOfEntries"] == PER_LEDGER
        assert _wait_for(lambda: _segments(data) == 1)  # unlinked by the writer thread
        # Still a working topic.
        for i in range(3):
            producer.send(b"after-%d" % i)
        assert _consume(consumer, 3) == [b"after-%d" % i for i in range(3)]
        assert _wait_for(lambda: _all_acked(handle, topic, "s"))
        consumer.close()
        producer.close()
    finally:
        c.close()
    handle.stop()

    again = broker_factory(data_dir=data, config_overrides=overrides)
    c2 = make_client(again.service_url)
    try:
        consumer = c2.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = c2.create_producer(topic)
        producer.send(b"after-restart")
        assert consumer.receive(5000).data() == b"after-restart"  # nothing acked comes back
    finally:
        c2.close()


def test_a_reader_holds_trimming_back_until_it_is_closed(broker_factory: Any) -> None:
    handle = broker_factory(config_overrides={"managedLedgerMaxEntriesPerLedger": PER_LEDGER})
    topic = "persistent://public/default/trim-reader"
    c = make_client(handle.service_url)
    try:
        consumer = c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = c.create_producer(topic)
        for i in range(4 * PER_LEDGER):
            producer.send(b"%d" % i)
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        _consume(consumer, 4 * PER_LEDGER)
        assert _wait_for(lambda: _all_acked(handle, topic, "s"))
        before = _ledger_ids(handle, topic)
        assert _force_trim(handle, topic) == before   # the reader still needs them
        assert reader.read_next(5000).data() == b"0"
        reader.close()
        assert _wait_for(lambda: not any(
            not s.durable for s in handle.call(
                lambda: list(handle.service.topics[topic].subscriptions.values()))))
        assert _force_trim(handle, topic) == before[-1:]
    finally:
        c.close()


def test_no_trim_happens_at_load(broker_factory: Any, tmp_path: pathlib.Path) -> None:
    """A subscriber that arrives right after a restart still reads what was published to a
    topic without subscriptions (Pulsar would drop it at its next retention check)."""
    data = tmp_path / "load"
    topic = "persistent://public/default/trim-load"
    handle = broker_factory(data_dir=data)
    c = make_client(handle.service_url)
    try:
        producer = c.create_producer(topic)
        for i in range(3):
            producer.send(b"%d" % i)
    finally:
        c.close()
    handle.stop()
    again = broker_factory(data_dir=data)
    c2 = make_client(again.service_url)
    try:
        consumer = c2.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)

        def ticks() -> int:  # the tick samples the subscription, then runs housekeeping
            return len(again.service.topics[topic].subscriptions["late"]._rates._samples)

        assert _wait_for(lambda: again.call(ticks) >= 2)
        assert [consumer.receive(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
    finally:
        c2.close()


def test_subscription_rates_are_sampled_by_the_tick(broker: Any, client: Any) -> None:
    topic = "persistent://public/default/sub-rates"
    consumer = client.subscribe(topic, "s")

    def samples() -> int:
        sub = broker.service.topics[topic].subscriptions["s"]
        return len(sub._rates._samples)

    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(b"%d" % i)
    _consume(consumer, 20)
    # The tick samples the topics that moved lately (an idle one is not sampled at all).
    assert _wait_for(lambda: broker.call(samples) >= 1)
    seen = broker.call(samples)
    assert _wait_for(lambda: broker.call(samples) >= seen + 1)
    # One stats() call (no earlier one) already has a rate.
    stats = broker.call(lambda: topic_stats(broker.service.topics[topic]))
    assert stats["subscriptions"]["s"]["msgRateOut"] > 0
