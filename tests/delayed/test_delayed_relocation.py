"""Ledgers held only by pending delayed messages are trimmed; the messages still arrive, once,
with their original ids, never early, after a restart; a cancel (ack by id) of a copied message
holds; a subscription created later at earliest sees only what is still pending.

Official client, in-process broker (the copy-forward run is started directly rather than
waiting for the topic's housekeeping interval). Crash states at each cut point of the copy are
tested on the store itself (tests/storage/test_storage_relocation.py).
"""

from __future__ import annotations

import contextlib
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest
from conftest import make_client
from waiting import wait_until

from storage.positions import Position

CONFIG = {
    "managedLedgerMaxEntriesPerLedger": 5,
    "delayedDeliveryTickTimeMillis": 10,
    "isDelayedDeliveryDeliverAtTimeStrict": True,
    "delayedDeliveryRelocationMinDelayMillis": 0,  # the messages here are due in seconds
}
BUCKET = {
    "delayedDeliveryTrackerFactoryClassName": "bucket",
    "delayedDeliveryMinIndexCountPerBucket": 4,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 4,
}
TOPIC = "persistent://public/default/relocated-delayed"
DUE_IN_MS = 8000     # publish, consume, copy forward and restart fit well before it


def _id(mid: Any) -> tuple[int, int]:
    return mid.ledger_id(), mid.entry_id()


def _get_by_id(web_url: str, ledger_id: int, entry_id: int) -> tuple[int, bytes]:
    url = (f"{web_url}/admin/v2/persistent/public/default/relocated-delayed/ledger/"
           f"{ledger_id}/entry/{entry_id}")
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _receive(consumer: Any, count: int, deadline_s: float) -> list[tuple[Any, float]]:
    """(message, receipt time in ms) until *count* came, then 1 s more for strays; acked."""
    got: list[tuple[Any, float]] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            msg = consumer.receive(1000)
        except pulsar.Timeout:
            if len(got) >= count:
                break
            continue
        got.append((msg, time.time() * 1000))
        consumer.acknowledge(msg)
    return got


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
def test_copied_forward_delayed_messages_arrive_once_with_original_ids(
        broker_factory: Any, tmp_path: pathlib.Path, tracker: str) -> None:
    data = tmp_path / "data"
    config = {**CONFIG, **(BUCKET if tracker == "bucket" else {})}
    handle = broker_factory(data_dir=data, config_overrides=config)
    client = make_client(handle.service_url)
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    due_at = int(time.time() * 1000) + DUE_IN_MS
    delayed: dict[tuple[int, int], bytes] = {}
    for i in range(40):
        payload = b"m-%02d" % i
        if i % 5 == 0:
            delayed[_id(producer.send(payload, deliver_at=due_at))] = payload
        else:
            producer.send(payload)
    ordinary = _receive(consumer, 32, 10)
    assert sorted(m.data() for m, _ in ordinary) == sorted(
        b"m-%02d" % i for i in range(40) if i % 5)
    cancelled = sorted(delayed)[2]

    def topic() -> Any:
        return handle.service.topics[TOPIC]

    def all_ordinary_acked() -> bool:
        cursor = topic().ledger.cursors["sub"]
        return sum(not cursor.is_deleted(Position(*p)) for p in
                   [_id(m.message_id()) for m, _ in ordinary]) == 0

    wait_until(lambda: handle.call(all_ordinary_acked), message="ordinary messages acked")
    for _ in range(3):                             # at most 4 ledgers a run
        handle.call(lambda: topic().relocator.run())
    ghosts = handle.call(lambda: sorted(topic().ledger.relocated.ghosts))
    assert len(ghosts) >= 5, ghosts               # 8 full ledgers, all held by delayed ones
    assert {p[0] for p in delayed} & set(ghosts)
    kept = handle.call(lambda: topic().ledger.total_size_bytes)
    assert kept < 40 * 60                          # the ordinary messages' bytes are gone
    # get-message-by-id: a copied message by its original id; a consumed one of a trimmed
    # ledger is gone, as after any trim.
    copied = sorted(p for p in delayed if p[0] in ghosts)[0]
    assert _get_by_id(handle.web_url, *copied) == (200, delayed[copied])
    consumed = next(_id(m.message_id()) for m, _ in ordinary
                    if m.message_id().ledger_id() in ghosts)
    assert _get_by_id(handle.web_url, *consumed)[0] == 404
    # A cancel: the application acknowledges a copied message by its id before it is due.
    mid = pulsar.MessageId(-1, cancelled[0], cancelled[1], -1)
    consumer.acknowledge(mid)
    wait_until(lambda: handle.call(
        lambda: topic().ledger.cursors["sub"].is_deleted(Position(*cancelled))),
        message="cancel acknowledged")
    # The next run releases the cancelled message's copy (acknowledged by every subscription).
    handle.call(lambda: topic().relocator.run())
    assert not handle.call(lambda: Position(*cancelled) in topic().ledger.relocated)
    client.close()
    handle.stop()

    handle = broker_factory(data_dir=data, config_overrides=config)
    client = make_client(handle.service_url)
    try:
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        late = client.subscribe(TOPIC, "late", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
        # The ghosts came back from the relocation index (their segments are gone).
        assert handle.call(lambda: sorted(topic().ledger.relocated.ghosts)) == ghosts
        expect = {p: d for p, d in delayed.items() if p != cancelled}
        got = _receive(consumer, len(expect), DUE_IN_MS / 1000 + 20)
        ids = [_id(m.message_id()) for m, _ in got]
        assert sorted(ids) == sorted(expect), (ids, sorted(expect))     # once each, by id
        assert all(m.data() == expect[_id(m.message_id())] for m, _ in got)
        assert all(at >= due_at for _, at in got), "delivered early"
        # The later subscription: what is still stored, i.e. the pending delayed messages of
        # the trimmed ledgers (on time) and whatever the ledgers not trimmed still hold.
        stored = dict(expect)
        stored.update({_id(m.message_id()): m.data() for m, _ in ordinary
                       if m.message_id().ledger_id() not in ghosts})
        got = _receive(late, len(stored), 10)
        ids = [_id(m.message_id()) for m, _ in got]
        assert sorted(ids) == sorted(stored), (ids, sorted(stored))
        assert all(m.data() == stored[_id(m.message_id())] for m, _ in got)
        assert all(at >= due_at for m, at in got if _id(m.message_id()) in expect)
    finally:
        client.close()


@pytest.mark.slow
def test_kill_9_after_the_trim_loses_nothing_pending(run_broker_process: Any,
                                                      tmp_path: pathlib.Path) -> None:
    """The topic's own housekeeping copies forward and trims; the broker is then
    killed with SIGKILL: every pending message arrives once after the restart, on time, with
    its original id."""
    data = tmp_path / "data"
    # housekeeping copies forward every second here instead of every 30 s
    config = {**CONFIG, "delayedDeliveryRelocationIntervalSeconds": 1}
    first = run_broker_process(data, config_overrides=config)
    client = make_client(first.service_url)
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    due_at = int(time.time() * 1000) + 30_000   # after the first run (1 s) and the restart
    delayed: dict[tuple[int, int], bytes] = {}
    for i in range(40):
        payload = b"k-%02d" % i
        if i % 5 == 0:
            delayed[_id(producer.send(payload, deliver_at=due_at))] = payload
        else:
            producer.send(payload)
    assert len(_receive(consumer, 32, 10)) == 32
    wait_until(lambda: "trimmed ledgers" in first.log_path.read_text(errors="replace")
               and "copied forward" in first.log_path.read_text(errors="replace"),
               timeout_s=80, message="copy-forward and trim by housekeeping")
    with contextlib.suppress(Exception):
        client.close()
    first.kill()

    second = run_broker_process(data, config_overrides=config)
    client = make_client(second.service_url)
    try:
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        got = _receive(consumer, len(delayed), (due_at - time.time() * 1000) / 1000 + 20)
        ids = [_id(m.message_id()) for m, _ in got]
        assert sorted(ids) == sorted(delayed), (ids, sorted(delayed))
        assert all(m.data() == delayed[_id(m.message_id())] for m, _ in got)
        assert all(at >= due_at for _, at in got), "delivered early"
    finally:
        client.close()
