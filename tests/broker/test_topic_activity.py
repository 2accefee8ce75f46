"""The rate and housekeeping tick visits the topics that moved lately and sweeps the rest."""

from __future__ import annotations

import pytest

from broker.metrics.rates import RATE_WINDOW_S, RateMeter
from broker.topics.activity import QUIET_AFTER_S, TopicActivity


class _Topic:
    """Counts what the tick asks of it; its one counter is fed to a real RateMeter."""

    def __init__(self, full: str) -> None:
        self.full = full
        self.counter = 0
        self.meter = RateMeter()
        self.samples: list[float] = []
        self.housekept: list[float] = []
        self.resumed: list[float] = []

    @property
    def meters(self) -> _Topic:
        """The fake samples its one counter itself (a real topic's rates are its meters')."""
        return self

    def sample_rates(self, now: float) -> None:
        self.samples.append(now)
        self.meter.sample(now, (self.counter,))

    def resume_rates(self, since: float) -> None:
        self.resumed.append(since)
        self.meter.resume(since)

    def housekeeping(self, now: float) -> None:
        self.housekept.append(now)

    def rate(self, now: float) -> float:
        return self.meter.rates(now, (self.counter,))[0]


def test_idle_topics_are_swept_not_sampled() -> None:
    activity = TopicActivity(sweep_s=10.0)
    topics = [_Topic(f"t{i}") for i in range(100)]
    for second in range(20):
        activity.tick(float(second), topics)
    assert all(not t.samples for t in topics)
    # 100 topics over a 10 s sweep: 10 a tick, each one twice in 20 ticks.
    assert sorted({len(t.housekept) for t in topics}) == [2]


def test_touched_topic_is_sampled_until_its_window_is_flat() -> None:
    activity = TopicActivity(sweep_s=60.0)
    busy, idle = _Topic("busy"), _Topic("idle")
    loaded = [busy, idle]
    activity.tick(0.0, loaded)
    busy.counter += 50
    activity.touch(busy)
    now = 1.0
    while activity.is_active(busy):
        activity.tick(now, loaded)
        now += 1.0
    assert busy.samples[0] == 1.0 and now - 1.0 >= QUIET_AFTER_S
    assert busy.rate(now) == 0.0   # one flat window when it left the active set
    assert not idle.samples


def test_rates_after_a_pause_measure_the_last_second_not_the_pause() -> None:
    activity = TopicActivity(sweep_s=60.0)
    topic = _Topic("t")
    activity.touch(topic)
    for second in range(1, 20):
        activity.tick(float(second), [topic])
    assert not activity.is_active(topic)
    # A long pause, then 100 messages within one second.
    activity.tick(500.0, [topic])
    topic.counter += 100
    activity.touch(topic)
    assert topic.rate(500.8) == pytest.approx(125.0)   # read before the tick: since 500
    activity.tick(501.0, [topic])
    assert topic.resumed == [500.0]
    assert topic.rate(501.0) == pytest.approx(100.0)
    # The window slides on as usual: 100 over the last RATE_WINDOW_S once that has passed.
    second = 502.0
    while second <= 500.0 + RATE_WINDOW_S + 1:
        activity.tick(second, [topic])
        second += 1.0
    assert topic.rate(second - 1) < 100.0


def test_a_meter_never_sampled_resumes_from_zero() -> None:
    meter = RateMeter()
    meter.resume(10.0)
    meter.sample(11.0, (30.0, 3000.0))
    assert meter.rates(11.0, (30.0, 3000.0)) == pytest.approx((30.0, 3000.0))


def test_forgotten_topic_leaves_and_a_failing_topic_does_not_stop_the_tick() -> None:
    class _Broken(_Topic):
        def housekeeping(self, now: float) -> None:
            raise RuntimeError("boom")

    activity = TopicActivity(sweep_s=1.0)
    broken, fine, gone = _Broken("broken"), _Topic("fine"), _Topic("gone")
    for t in (broken, fine, gone):
        activity.touch(t)
    activity.forget(gone)
    activity.tick(1.0, [broken, fine])
    assert fine.samples == [1.0] and fine.housekept == [1.0]
    assert broken.samples == [1.0]
    assert not gone.samples and not activity.is_active(gone)
