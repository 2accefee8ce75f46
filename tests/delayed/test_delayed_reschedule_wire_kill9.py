"""Reschedules and cancels by key at load survive kill -9: thousands of keyed SENDs over the raw
wire (bench/reschedule_wire.py's driver, several producers with a window in flight, a Shared
consumer attached), the broker killed in the middle; after a restart the subscription holds
exactly one scheduled message per key still scheduled -- the one its last durable operation
sent -- and a backlog of just those: every replaced or cancelled version acknowledged, none
lost. Which operations in flight at the kill became durable is not known: each producer's
durable operations are a prefix of what it sent, at least what it had receipts for, and the
check accepts exactly those states."""

from __future__ import annotations

import asyncio
import pathlib
import random
import time
from collections.abc import Callable

from bench.brokers import Broker, start_horae
from bench.reschedule_wire import (
    HOUR_MS,
    Op,
    attach,
    build_frames,
    enable_replace_by_key,
    final_state,
    keyed_ops,
    publish,
    settle,
)
from bench.wire_clients import Publisher, open_producer
from protocol.frames import Frame

TOPIC = "persistent://public/default/resched-kill"
KEYS, OPS, PRODUCERS, WINDOW = 1_000, 8_000, 4, 64
TIMEOUT_S = 60.0


class _WatchedPublisher(Publisher):
    """A publisher that reports each read of receipts (the test kills the broker from there)."""

    on_receipts: Callable[[], None] | None = None

    def frames_received(self, frames: list[Frame]) -> None:
        super().frames_received(frames)
        if self.on_receipts is not None:
            self.on_receipts()


async def _publish_and_kill(broker: Broker, work: list[list[Op]]) -> list[tuple[int, int]]:
    """Publish ``work`` (one producer per list) and kill -9 the broker once half of it has
    receipts; returns each producer's (receipts, SENDs written) at the kill."""
    loop = asyncio.get_running_loop()
    conns = [await open_producer(broker, TOPIC, f"work-{p}") for p in range(len(work))]
    killed = loop.create_future()
    pubs: list[_WatchedPublisher] = []

    def maybe_kill() -> None:
        if not killed.done() and sum(p.acked for p in pubs) >= OPS // 2:
            broker.proc.kill()          # SIGKILL, with SENDs in flight on every producer
            killed.set_result([(p.acked, p.sent) for p in pubs])

    for conn, ops in zip(conns, work, strict=True):
        pub = _WatchedPublisher(conn, build_frames(f"work-{len(pubs)}", ops, 64),
                                list(range(len(ops))), WINDOW, loop.create_future())
        pub.on_receipts = maybe_kill
        pub.done.add_done_callback(lambda f: f.exception())   # lost connections: expected
        pubs.append(pub)
    for pub in pubs:
        pub.start()
    counts: list[tuple[int, int]] = await asyncio.wait_for(killed, TIMEOUT_S)
    broker.proc.wait(TIMEOUT_S)
    for conn in conns:
        conn.on_lost = None
        conn.close()
    return counts


def test_reschedules_and_cancels_at_load_survive_kill_9(tmp_path: pathlib.Path) -> None:
    rnd = random.Random(11)
    seed, work = keyed_ops(KEYS, OPS, PRODUCERS, rnd, int(time.time() * 1000) + HOUR_MS)

    async def before_kill(broker: Broker) -> list[tuple[int, int]]:
        enable_replace_by_key(broker)
        consumer = await attach(broker, TOPIC, 500)
        try:
            await publish(broker, TOPIC, "seed",
                          [build_frames(f"seed-{p}", ops, 64) for p, ops in enumerate(seed)],
                          WINDOW, TIMEOUT_S)
            return await _publish_and_kill(broker, work)
        finally:
            consumer.close()

    with start_horae(tmp_path, name="horae") as first:
        counts = asyncio.run(before_kill(first))
    assert first.proc.returncode == -9
    # each producer's keys (K % PRODUCERS) may be in any state between its receipts and its SENDs
    allowed: list[list[dict[int, int]]] = []
    for p, (acked, sent) in enumerate(counts):
        assert acked < sent or acked == len(work[p])
        state = final_state(work[p][:acked], final_state(seed[p]))
        states = [state]
        for op in work[p][acked:sent]:
            state = final_state((op,), state)
            states.append(state)
        allowed.append(states)

    def acceptable(state: dict[int, int]) -> bool:
        return all({k: v for k, v in state.items() if k % PRODUCERS == p} in allowed[p]
                   for p in range(PRODUCERS))

    async def after_restart(broker: Broker) -> tuple[bool, str]:
        consumer = await attach(broker, TOPIC, 500)     # the dispatcher reads the backlog
        try:
            return await settle(broker, TOPIC, acceptable, TIMEOUT_S)
        finally:
            consumer.close()

    with start_horae(tmp_path, name="horae") as second:
        ok, details = asyncio.run(after_restart(second))
    assert ok, f"after kill -9 and restart: {details}; receipts/SENDs per producer {counts}"
