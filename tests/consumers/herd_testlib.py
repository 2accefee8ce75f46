"""A herd held by a Shared subscription of two in-process consumers (no sockets), for the herd
tests: the subscription opened at the earliest entry, both consumers with room for the whole
herd, returned once the dispatcher's tracker holds every message of it."""

from __future__ import annotations

import asyncio

from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from storage.ledger import ManagedLedger
from tests.consumers.test_dispatch_unit import FakeConnection, StubTopic


async def held_by_two_consumers(ledger: ManagedLedger, herd: int, wait_s: float
                                ) -> tuple[Subscription, list[FakeConnection]]:
    sub = await Subscription.open(StubTopic(ledger), "s", durable=True,
                                  initial_position="earliest")
    conns = []
    for cid in (1, 2):
        conn = FakeConnection()
        side = ConsumerSide(conn)
        consumer = Consumer(side, cid, name=f"c{cid}", sub_type=pb.CommandSubscribe.Shared)
        side.attach(consumer, sub)
        await sub.add_consumer(consumer)
        consumer.permits = herd
        conns.append(conn)
    dispatcher = sub.dispatcher
    dispatcher.schedule()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s   # a bound for a hung dispatcher, never reached when it works
    while (dispatcher.delayed is None or len(dispatcher.delayed) < herd) \
            and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert dispatcher.delayed is not None and len(dispatcher.delayed) == herd
    return sub, conns
