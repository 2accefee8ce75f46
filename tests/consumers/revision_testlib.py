"""Fakes for the PIP-269 race reproductions: an in-process subscription on a real segment store,
consumers on fake connections, and an injectable storage read delay (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.policy import DelayPolicy
from broker.delayed.tracker import DelayedDeliveryTracker
from broker.net.consumers import ConsumerSide
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatch_rate import TopicDispatch
from broker.subscriptions.selectors import KeySharedSelector, new_selector
from broker.subscriptions.subscription import Subscription
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import encode_entry
from storage.positions import Position

POLICY = DelayPolicy(active=True, tick_time_ms=1, max_delay_ms=0, fixed_delay_ms=0, strict=False)


class FakeConnection:
    protocol_version = 20
    remote_address = "127.0.0.1:1"
    client_version = "test"
    writes_paused = False

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.commands: list[pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        while (frame := self.decoder.next_frame()) is not NEED_DATA:
            self.commands.append(frame.command)

    def writelines(self, parts: list[bytes]) -> None:
        self.write(b"".join(parts))

    def entry_ids(self) -> list[int]:
        return [c.message.message_id.entryId for c in self.commands
                if c.type == pb.BaseCommand.MESSAGE]


class StubTopic:
    """The TopicContext a subscription needs; ``close_gate`` delays the tracker's close()."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.partition_index = -1
        self.terminated = False
        self.close_gate: asyncio.Event | None = None
        self.closing = asyncio.Event()
        self.topic_dispatch = TopicDispatch(lambda: (0, 0))   # no dispatchRate

    @property
    def delivery(self) -> StubTopic:
        """The stub answers for what subscriptions are built with itself."""
        return self

    full = "persistent://public/default/stub"
    read_ahead_ms = 0     # no read-ahead timers in these unit tests

    def transaction_view(self, subscription: str) -> None:
        return None   # no transaction touched this topic

    def delay_policy(self) -> DelayPolicy:
        return POLICY

    def tracker_factory(self, cursor: Any | None
                        ) -> Callable[[DelayPolicy, Callable[[], None]], DelayedDeliveryTracker]:
        topic = self

        class _Tracker(InMemoryDelayedDeliveryTracker):
            async def close(self) -> None:
                topic.closing.set()
                if topic.close_gate is not None:
                    await topic.close_gate.wait()
                await super().close()

        def build(policy: DelayPolicy, on_due: Callable[[], None]) -> DelayedDeliveryTracker:
            return _Tracker(tick_time_ms=policy.tick_time_ms, strict=policy.strict,
                            on_due=on_due, loop=asyncio.get_running_loop())

        return build

    failover_delay_s = 0.0

    def new_key_shared_selector(self, sticky: bool) -> KeySharedSelector:
        return new_selector(sticky, consistent_hashing=True)

    touches = 0

    def touch(self) -> None:
        self.touches += 1   # the rate tick's activity signal

    @property
    def subscriptions(self) -> StubTopic:
        """No sibling subscriptions: the stub answers for them itself."""
        return self

    def remove_subscription(self, sub: Any) -> None:
        return None

    def consumer_count(self) -> int:
        return 0

    def update_caching(self) -> None:
        return None

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        return None


class ReadGate:
    """Injectable storage read delay: while armed, a read whose first position matches ``when``
    sets ``started`` and waits for ``release``."""

    def __init__(self, ledger: Any, when: Callable[[Position], bool]) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.armed = True
        real_entries, real_entry = ledger.read_entries, ledger.read_entry

        async def read_entries(start: Position, n: int, *a: Any, **kw: Any) -> Any:
            await self._maybe_wait(start)
            return await real_entries(start, n, *a, **kw)

        async def read_entry(pos: Position, *a: Any, **kw: Any) -> Any:
            await self._maybe_wait(pos)
            return await real_entry(pos, *a, **kw)

        real_positions = ledger.read_positions

        async def read_positions(positions: Any, *a: Any, **kw: Any) -> Any:
            for pos in positions:   # the gate holds a scattered read holding its position
                await self._maybe_wait(pos)
            return await real_positions(positions, *a, **kw)

        real_cached = ledger.cached_entry

        def cached_entry(pos: Position) -> Any:
            # a gated position is read the async way, so the gate can hold it
            return None if self.armed and self._when(pos) else real_cached(pos)

        self._when = when
        ledger.read_entries = read_entries
        ledger.read_entry = read_entry
        ledger.read_positions = read_positions
        ledger.cached_entry = cached_entry

    async def _maybe_wait(self, pos: Position) -> None:
        if self.armed and self._when(pos):
            self.armed = False
            self.started.set()
            await self.release.wait()


def entry(i: int, key: str | None = None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1000 + i)
    if key is not None:
        md.partition_key = key
    return encode_entry(md, f"m{i}".encode())


async def append(ledger: Any, ids: range, key: Callable[[int], str] | None = None) -> None:
    for i in ids:
        await ledger.append(entry(i, key(i) if key else None))


async def open_sub(ledger: Any) -> tuple[Subscription, StubTopic]:
    topic = StubTopic(ledger)
    sub = await Subscription.open(topic, "s", durable=True, initial_position="earliest")
    return sub, topic


def new_consumer(sub_type: int, name: str, *, mode: int | None = None,
                 consumer_id: int = 1) -> tuple[Consumer, FakeConnection, ConsumerSide]:
    conn = FakeConnection()
    side = ConsumerSide(conn)  # type: ignore[arg-type]
    consumer = Consumer(side, consumer_id, name=name, sub_type=sub_type, key_shared_mode=mode)
    return consumer, conn, side


async def join(sub: Subscription, sub_type: int, name: str, *, permits: int = 1000,
               mode: int | None = None) -> tuple[Consumer, FakeConnection]:
    consumer, conn, side = new_consumer(sub_type, name, mode=mode)
    side.attach(consumer, sub)
    await sub.add_consumer(consumer)
    consumer.permits = permits
    sub.on_new_entries()
    return consumer, conn


async def settle(sub: Subscription) -> None:
    """Let the dispatch task run to quiescence (bounded)."""
    for _ in range(2000):
        await asyncio.sleep(0)
        d = sub.dispatcher
        if d is None or d._task is None:
            for _ in range(5):
                await asyncio.sleep(0)
            if d is None or d._task is None:
                return
    raise AssertionError("dispatcher did not settle")
