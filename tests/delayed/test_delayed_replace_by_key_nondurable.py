"""Replace by key acknowledging replaced versions: with a non-durable Shared subscription
attached (its cursor lives in memory) reschedules and cancels are answered and that subscription
drops the replaced versions too; a tombstone and a replacement in one write are acknowledged
on a subscription without a consumer."""

from __future__ import annotations

import asyncio
import pathlib
import time

from waiting import wait_until

from bench.brokers import Broker, start_horae
from bench.reschedule_wire import (
    HOUR_MS,
    Holder,
    Op,
    backlog,
    build_frames,
    enable_replace_by_key,
    publish,
    rest,
)
from bench.wire_clients import connect, lookup
from protocol import commands as C
from protocol import pulsar_pb as pb

TOPIC = "persistent://public/default/rbk-nondurable"


def test_non_durable_shared_subscription_follows_replacements(tmp_path: pathlib.Path) -> None:
    at = int(time.time() * 1000) + HOUR_MS
    ops = [Op(1, at), Op(2, at + 1), Op(1, at + 2), Op(2, None), Op(3, at + 3), Op(1, at + 4)]

    async def run(broker: Broker) -> None:
        enable_replace_by_key(broker)
        durable = await connect(broker)
        await lookup(durable, TOPIC, 1)
        await durable.request(C.encode_subscribe(TOPIC, "sub", 1, 1, 2, initial_position=1),
                              pb.BaseCommand.SUCCESS)
        Holder(durable, 100)
        memory = await connect(broker)
        await lookup(memory, TOPIC, 1)
        await memory.request(C.encode_subscribe(TOPIC, "nd", 1, 1, 2, durable=False),
                             pb.BaseCommand.SUCCESS)
        Holder(memory, 100)
        try:
            result = await publish(broker, TOPIC, "p", [build_frames("p", ops, 16)], 8, 30.0)
            assert len(result.latencies_ms) == len(ops)     # every SEND has its receipt
            # keys 1 (its third version) and 3 are scheduled; the rest acknowledged on both
            def settled() -> bool:
                subs = rest(broker, "GET", "/admin/v2/persistent/public/default/"
                            "rbk-nondurable/stats")[1]["subscriptions"]
                return backlog(broker, TOPIC) == 2 and subs["nd"]["msgBacklog"] == 2

            await asyncio.to_thread(wait_until, settled, timeout_s=20,
                                    message="the replaced versions acknowledged on both")
        finally:
            durable.close()
            memory.close()

    with start_horae(tmp_path) as broker:
        asyncio.run(run(broker))
        assert broker.proc.poll() is None
        log = broker.log.read_text(errors="replace")
        assert "Traceback" not in log, log[-2000:]


def test_tombstone_and_replacement_in_one_run_without_a_consumer(tmp_path: pathlib.Path) -> None:
    """One write holding a tombstone and then a replacement of an already confirmed message:
    the tombstone and both replaced versions are acknowledged on a subscription with no
    consumer (no dispatcher reads them to catch up)."""
    at = int(time.time() * 1000) + HOUR_MS
    first = [Op(1, at), Op(2, at + 1)]
    second = [Op(1, None), Op(2, at + 2)]       # one write: one run, the tombstone first

    async def run(broker: Broker) -> None:
        enable_replace_by_key(broker)
        conn = await connect(broker)
        await lookup(conn, TOPIC, 1)
        await conn.request(C.encode_subscribe(TOPIC, "sub", 1, 1, 2, initial_position=1),
                           pb.BaseCommand.SUCCESS)
        conn.close()                            # the subscription stays, with no consumer
        frames = build_frames("p", first + second, 16)
        await publish(broker, TOPIC, "p", [frames[:2]], 8, 30.0)
        await publish(broker, TOPIC, "p2", [build_frames("p2", second, 16)], 8, 30.0)
        # key 2's second version is all that is scheduled: 4 entries acknowledged, 1 left
        await asyncio.to_thread(wait_until, lambda: backlog(broker, TOPIC) == 1, timeout_s=20,
                                message="the tombstone and both replaced versions acknowledged")

    with start_horae(tmp_path) as broker:
        asyncio.run(run(broker))
