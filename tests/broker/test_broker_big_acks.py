"""Big ACK / REDELIVER frames are applied in slices: other connections are served meanwhile,
and each connection's acks, their answers and its redeliveries keep their order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry

from broker.net import consumers as consumers_module
from broker.net.sliced import SLICE_IDS
from broker.subscriptions.subscription import Subscription
from protocol import commands as C
from protocol import pulsar_pb as pb

T = pb.BaseCommand
TOPIC = "persistent://public/default/big-acks"
BIG_ACK_IDS = 600_000
"""About 4.6 MiB of ids: under the 5 MiB frame limit, over a second of work to apply."""


def attach_consumer(client: RawClient, entries: int = 3) -> int:
    """Publish *entries*, subscribe (Shared) consumer 1; the ledger id of the entries."""
    assert client.create_producer(TOPIC, 1).type == T.PRODUCER_SUCCESS
    ledger = 0
    for seq in range(entries):
        client.send(C.encode_send(1, seq, make_entry(b"x", sequence_id=seq)))
        ledger = client.recv_command().send_receipt.message_id.ledgerId
    assert client.request(C.encode_subscribe(TOPIC, "sub", 1, 1, 100, initial_position=1)).type == T.SUCCESS
    return int(ledger)


@pytest.fixture
def attacker(broker: Any) -> Iterator[RawClient]:
    with RawClient(broker.service_url, timeout=30.0) as client:
        client.handshake()
        yield client


def test_other_connections_are_answered_while_a_big_ack_is_applied(
        broker: Any, attacker: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = attach_consumer(attacker)
    applying = threading.Event()
    ponged = threading.Event()
    answered: list[int] = []  # ACK_RESPONSEs written, in the broker's thread
    acknowledge = Subscription.acknowledge
    encode_ack_response = consumers_module.encode_ack_response

    def watched_acknowledge(self: Subscription, *args: Any, **kw: Any) -> None:
        applying.set()
        # Each slice stands for heavy work until the other connection has its PONG: however
        # late this test's thread is scheduled on a loaded machine, the ACK is still being
        # applied when the PING arrives (bounded: the wait gives up after 60 s in all).
        if not ponged.is_set() and time.monotonic() < give_up:
            ponged.wait(0.005)
        acknowledge(self, *args, **kw)

    def watched_response(consumer_id: int, request_id: int, **kw: Any) -> bytes:
        answered.append(request_id)
        return encode_ack_response(consumer_id, request_id, **kw)

    monkeypatch.setattr(Subscription, "acknowledge", watched_acknowledge)
    monkeypatch.setattr(consumers_module, "encode_ack_response", watched_response)
    # an ACK read in C goes to acknowledge_entries; this one is far past that path's bound
    assert BIG_ACK_IDS > consumers_module.ENTRY_POSITIONS_MAX
    # ids of entries that exist, so every one is applied (none skipped as beyond the last)
    give_up = time.monotonic() + 60.0
    big = C.encode_ack(1, [(ledger, entry % 3) for entry in range(BIG_ACK_IDS)], request_id=7)
    with RawClient(broker.service_url, timeout=120.0) as healthy:
        healthy.handshake()
        attacker.send(big)
        assert applying.wait(60.0)
        healthy.send(C.encode_ping())
        assert healthy.recv_command(skip_pings=False).type == T.PONG
        ponged.set()
        # Answered while the ACK was being applied: applied at once, it would hold the loop
        # until its ACK_RESPONSE was written, and the PING would come after it.
        assert answered == []
    answer = attacker.recv_command(timeout=120.0)
    assert answer.type == T.ACK_RESPONSE and answer.ackResponse.request_id == 7
    assert answered == [7]


def test_acks_after_a_big_ack_are_answered_in_order(attacker: RawClient) -> None:
    ledger = attach_consumer(attacker)
    frames = [C.encode_ack(1, [(ledger + 1, entry) for entry in range(5_000)], request_id=1),
              C.encode_ack(1, [(ledger, 0)], request_id=2),
              C.encode_ack(1, [(ledger + 1, entry) for entry in range(2_500)], request_id=3),
              C.encode_ack(1, [(ledger, 1)], request_id=4)]
    attacker.send(b"".join(frames))
    answers = [attacker.recv_command() for _ in frames]
    assert [a.type for a in answers] == [T.ACK_RESPONSE] * 4
    assert [a.ackResponse.request_id for a in answers] == [1, 2, 3, 4]
    assert all(not a.ackResponse.HasField("error") for a in answers)


@pytest.mark.parametrize(("others", "in_c"), [(3_000, True), (500, True), (500, False)],
                         ids=["ids-one-by-one", "ids-read-in-c", "without-the-c-twin"])
def test_a_redeliver_after_a_big_ack_redelivers_only_what_stayed_unacked(
        broker: Any, attacker: RawClient, monkeypatch: pytest.MonkeyPatch, others: int,
        in_c: bool) -> None:
    if not in_c:
        monkeypatch.setattr(consumers_module, "ack_positions", None)
    ledger = attach_consumer(attacker, entries=3)
    attacker.send(C.encode_flow(1, 10))
    delivered = [attacker.recv_command() for _ in range(3)]
    assert [d.type for d in delivered] == [T.MESSAGE] * 3
    # an ACK that acknowledges entries 0 and 1 among many ids of no entry, then REDELIVER all
    ids = [(ledger + 1, entry) for entry in range(others)] + [(ledger, 0), (ledger, 1)]
    attacker.send(C.encode_ack(1, ids, request_id=5) + C.encode_redeliver(1))
    answer = attacker.recv_command()
    assert answer.type == T.ACK_RESPONSE and answer.ackResponse.request_id == 5
    again = attacker.recv_command()
    assert again.type == T.MESSAGE
    assert (again.message.message_id.ledgerId, again.message.message_id.entryId) == (ledger, 2)


def _watch_slices(monkeypatch: pytest.MonkeyPatch, arm: Any) -> list[object]:
    """Record the number of ids of each slice applied, whether its ids were read one by one
    (``acknowledge``) or in C (``acknowledge_entries``); *arm(loop, events)* runs at the
    first."""
    events: list[object] = []

    def watched(applied: Any) -> Any:
        def watched_applied(self: Subscription, consumer: Any, ids: Any, **kw: Any) -> None:
            if not events:
                arm(asyncio.get_running_loop(), events)
            events.append(len(ids))
            applied(self, consumer, ids, **kw)
        return watched_applied

    monkeypatch.setattr(Subscription, "acknowledge", watched(Subscription.acknowledge))
    monkeypatch.setattr(Subscription, "acknowledge_entries",
                        watched(Subscription.acknowledge_entries))
    return events


def test_a_full_client_ack_is_applied_in_slices_with_the_loop_turning_between(
        attacker: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = attach_consumer(attacker)
    events = _watch_slices(
        monkeypatch, lambda loop, events: loop.call_soon(events.append, "other"))
    # what a client's ack grouping sends at most (ackGroupingMaxSize): 1000 ids
    attacker.send(C.encode_ack(1, [(ledger, entry % 3) for entry in range(1000)], request_id=3))
    answer = attacker.recv_command()
    assert answer.type == T.ACK_RESPONSE and answer.ackResponse.request_id == 3
    # several turns of the loop (about 3 ms of work at once otherwise): what was scheduled
    # meanwhile ran after the first slice
    assert SLICE_IDS < 1000
    assert events == [SLICE_IDS, "other"] + [SLICE_IDS] * (1000 // SLICE_IDS - 1)


def test_a_timer_falling_due_during_a_big_ack_fires_before_the_ack_is_applied(
        attacker: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = attach_consumer(attacker)
    events = _watch_slices(
        monkeypatch, lambda loop, events: loop.call_later(0.001, events.append, "timer"))
    ids = 100_000
    attacker.send(C.encode_ack(1, [(ledger, entry % 3) for entry in range(ids)], request_id=4))
    answer = attacker.recv_command(timeout=120.0)
    assert answer.type == T.ACK_RESPONSE and answer.ackResponse.request_id == 4
    slices = [e for e in events if e != "timer"]
    assert slices == [SLICE_IDS] * (ids // SLICE_IDS)
    # due 1 ms after the first slice, it fired between two slices, not after the last one
    assert "timer" in events and events.index("timer") < len(events) - 1
