"""The once-a-second housekeeping of an idle topic does no work that cannot change anything:
no ledger listing when there is nothing to trim, no task when no quota check or TTL applies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from pyroaring import BitMap

from broker.config import BrokerConfig
from broker.delayed.relocate import RELOCATE_INTERVAL_S, DelayedRelocator
from broker.topics.backlog_policies import BacklogPolicies
from broker.topics.inactive import InactiveTopicSweeper
from broker.topics.names import TopicName
from broker.topics.trim import RETENTION_CHECK_INTERVAL_S, LedgerTrimmer
from storage.ledger_state import LedgerInfo


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class _Ledger:
    """A ledger whose listing is counted."""

    def __init__(self, count: int) -> None:
        self.ledger_count = count
        self.listed = 0
        self.closed = False
        self.cursors: dict[str, Any] = {}
        # nothing copied forward by the delayed-delivery relocation
        self.relocated = SimpleNamespace(is_relocated=lambda ledger_id: False, ghosts=set())

    @property
    def ledgers(self) -> list[LedgerInfo]:
        self.listed += 1
        return [LedgerInfo(i, 1, 10, 0, i < self.ledger_count - 1)
                for i in range(self.ledger_count)]


def _trimmed_topic(loop: asyncio.AbstractEventLoop, ledgers: int,
                   retention: tuple[int, int]) -> Any:
    subs = SimpleNamespace(values=lambda: [], creating_subscription=False)
    return SimpleNamespace(full="persistent://t/n/x", serving=True, ledger=_Ledger(ledgers),
                           loop=loop, subscriptions=subs, retention=lambda: retention)


@pytest.mark.parametrize("retention", [(0, 0), (-1, -1), (10, 100)])
def test_one_ledger_is_never_listed_by_the_retention_check(
        loop: asyncio.AbstractEventLoop, retention: tuple[int, int]) -> None:
    topic = _trimmed_topic(loop, 1, retention)
    trimmer = LedgerTrimmer(topic)
    now = loop.time()
    for k in range(1, 4):
        trimmer.tick(now + k * (RETENTION_CHECK_INTERVAL_S + 1))
    assert topic.ledger.listed == 0
    assert trimmer.task is None


def test_sealed_ledgers_are_still_looked_at(loop: asyncio.AbstractEventLoop) -> None:
    topic = _trimmed_topic(loop, 3, (-1, -1))  # unlimited retention: nothing may go
    trimmer = LedgerTrimmer(topic)
    trimmer.tick(loop.time() + RETENTION_CHECK_INTERVAL_S + 1)
    assert topic.ledger.listed >= 1
    assert trimmer.task is None


def _policed_topic(loop: asyncio.AbstractEventLoop, backlogs: list[int]) -> Any:
    subs = {f"s{i}": SimpleNamespace(cursor=SimpleNamespace(backlog=b))
            for i, b in enumerate(backlogs)}
    return SimpleNamespace(name="persistent://t/n/x", full="persistent://t/n/x", loop=loop,
                           subscriptions=subs, producers={},
                           meters=SimpleNamespace(backlog_size_bytes=lambda: 0))


def _policies(ttl_s: int, quotas: dict[str, Any]) -> Any:
    return SimpleNamespace(message_ttl_s=lambda name: ttl_s, backlog_quotas=lambda name: quotas)


def _finish(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))


def test_no_backlog_and_no_ttl_starts_no_task(loop: asyncio.AbstractEventLoop) -> None:
    config = BrokerConfig()
    checks = BacklogPolicies(_policed_topic(loop, [0, 0]), _policies(0, {}), config)
    assert checks.backlog_age_seconds() == -1   # never checked yet
    later = loop.time() + config.message_expiry_check_interval_in_minutes * 60 \
        + config.backlog_quota_check_interval_in_seconds + 1
    checks.tick(later)
    assert checks.task is None
    assert checks.backlog_age_seconds() == 0    # checked: no backlog
    assert checks.exceeded_policy() is None


@pytest.mark.parametrize(("backlogs", "ttl_s"), [([0, 4], 0), ([0], 60)])
def test_a_backlog_or_a_ttl_still_starts_the_check(
        loop: asyncio.AbstractEventLoop, backlogs: list[int], ttl_s: int) -> None:
    config = BrokerConfig()
    checks = BacklogPolicies(_policed_topic(loop, backlogs), _policies(ttl_s, {}), config)
    later = loop.time() + config.message_expiry_check_interval_in_minutes * 60 \
        + config.backlog_quota_check_interval_in_seconds + 1
    checks.tick(later)
    assert checks.task is not None
    _finish(loop, checks.task)


def test_an_exceeded_size_quota_still_starts_the_check(loop: asyncio.AbstractEventLoop) -> None:
    config = BrokerConfig()
    topic = _policed_topic(loop, [0])
    topic.meters = SimpleNamespace(backlog_size_bytes=lambda: 2048)
    quotas = {"destination_storage": {"limitSize": 1024, "policy": "producer_exception"}}
    checks = BacklogPolicies(topic, _policies(0, quotas), config)
    checks.tick(loop.time() + config.backlog_quota_check_interval_in_seconds + 1)
    assert checks.task is not None
    _finish(loop, checks.task)


def test_a_topic_with_a_producer_is_active_without_resolving_its_policy(
        loop: asyncio.AbstractEventLoop) -> None:
    resolved: list[object] = []
    deleted: list[str] = []

    def policy(name: object) -> dict[str, Any]:
        resolved.append(name)
        return {"deleteWhileInactive": True, "maxInactiveDurationSeconds": 0,
                "inactiveTopicDeleteMode": "delete_when_no_subscriptions"}

    async def delete(full: str) -> None:
        deleted.append(full)

    full = "persistent://t/n/x"
    topic = SimpleNamespace(name=TopicName.parse(full), full=full, producers={"p": object()},
                            subscriptions={})
    sweeper = InactiveTopicSweeper(SimpleNamespace(inactive_topic_policies=policy), 1.0, delete)
    loop.run_until_complete(sweeper.tick(10.0, {full: topic}))
    assert (resolved, deleted) == ([], [])
    topic.producers = {}   # the producer left: inactive at once (maximum 0 s)
    loop.run_until_complete(sweeper.tick(11.0, {full: topic}))
    assert deleted == [full] and len(resolved) == 1


def _relocated_topic(loop: asyncio.AbstractEventLoop, live: dict[int, Any]) -> Any:
    ledger = _Ledger(3)
    ledger.relocated = SimpleNamespace(live_ids=lambda: live)
    return SimpleNamespace(full="persistent://t/n/x", serving=True, ledger=ledger, loop=loop)


@pytest.mark.parametrize(("subscriptions", "live", "runs"), [
    ([], {}, False),                               # nothing held, nothing copied
    ([], {4: BitMap()}, False),                    # copies all released already
    ([], {4: BitMap([1, 2])}, True),               # copies no subscription needs: released
    ([SimpleNamespace(durable=True)], {}, True),   # a subscription may hold ledgers
])
def test_the_copy_forward_runs_only_when_it_may_release_or_copy(
        loop: asyncio.AbstractEventLoop, subscriptions: list[Any], live: dict[int, Any],
        runs: bool) -> None:
    topic = _relocated_topic(loop, live)

    async def trim_now() -> None:
        return None

    relocator = DelayedRelocator(topic, lambda: iter(subscriptions), lambda: None, trim_now)
    relocator.tick(loop.time() + RELOCATE_INTERVAL_S + 1)
    assert (relocator.task is not None) is runs
    if relocator.task is not None:
        relocator.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(relocator.task)
    assert topic.ledger.listed == 0 or runs
