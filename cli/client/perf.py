"""``horae-client perf produce|consume``: a load generator that reports as ``pulsar-perf`` does.

Theory of operation
-------------------
The flags are ``pulsar-perf``'s (``PerformanceProducer``, ``PerformanceConsumer``): topics as
arguments, ``-r`` rate, ``-s`` size, ``-n`` producers or consumers per topic, ``-m`` messages
in all and ``-time`` seconds (0: until Ctrl-C), batching, ``-d``/``-dr`` delivery delay,
subscription name, type and position. Every ``--report-interval`` seconds (pulsar-perf's fixed
10 s by default) one line gives the interval's figures with pulsar-perf's column names, plus
``MB/s`` (``Mbit/s`` is pulsar-perf's own unit: bytes / 1024 / 1024 * 8)::

    Throughput produced: 2001 msg --- 200.0 msg/s --- 1.6 Mbit/s --- 0.195 MB/s --- failure 0.0 msg/s
    --- Latency: mean: 2.1 ms - med: 1.9 - 95pct: 3.2 - 99pct: 5.0 - 99.9pct: ... - Max: 7.9

and at the end ``Aggregated throughput stats --- N records sent --- ... msg/s --- ... Mbit/s
--- ... MB/s`` and ``Aggregated latency stats --- Latency: mean: ... - 99.999pct: ... - Max:``.

Producer latency is the time from ``send_async`` to its receipt (the client's callback thread
records it); consumer latency is the time from the message's publish time to its arrival in the
listener. Both go to HdrHistogram recorders (microseconds, 3 significant digits, clamped at one
hour as pulsar-perf does): one per interval, one for the whole run. The first
``--warmup-time`` seconds of sends are not recorded, as pulsar-perf.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

from hdrh.histogram import HdrHistogram

from cli.client.commands import Pacer, consumer_type_of, initial_position_of
from cli.client.connect import ClientOptions, UsageError, make_client

__all__ = ["LatencyRecorder", "PerfConsumeArgs", "PerfProduceArgs", "perf_consume",
           "perf_produce"]

MAX_LATENCY_US: Final = 3_600_000_000
_MBIT: Final = 1024 * 1024 / 8
_MB: Final = 1024 * 1024


class LatencyRecorder:
    """Counts, bytes and latencies of one run, per interval and in all (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._interval = HdrHistogram(1, MAX_LATENCY_US, 3)
        self._total = HdrHistogram(1, MAX_LATENCY_US, 3)
        self.messages = self.bytes = self.failures = 0
        self._interval_messages = self._interval_bytes = self._interval_failures = 0
        self.started = self._interval_start = clock()

    def record(self, size: int, latency_us: int | None) -> None:
        with self._lock:
            self.messages += 1
            self.bytes += size
            self._interval_messages += 1
            self._interval_bytes += size
            if latency_us is not None:
                value = min(max(latency_us, 1), MAX_LATENCY_US)
                self._interval.record_value(value)
                self._total.record_value(value)

    def fail(self) -> None:
        with self._lock:
            self.failures += 1
            self._interval_failures += 1

    def interval_line(self, verb: str) -> str:
        with self._lock:
            now = self._clock()
            elapsed = max(now - self._interval_start, 1e-9)
            rate = self._interval_messages / elapsed
            throughput = self._interval_bytes / elapsed
            failures = self._interval_failures / elapsed
            latency = _latency(self._interval, (50, 95, 99, 99.9, 99.99))
            total = self.messages
            self._interval.reset()
            self._interval_messages = self._interval_bytes = self._interval_failures = 0
            self._interval_start = now
        failure = f" --- failure {failures:8.1f} msg/s" if verb == "produced" else ""
        return (f"Throughput {verb}: {total:7d} msg --- {rate:8.1f} msg/s --- "
                f"{throughput / _MBIT:8.1f} Mbit/s --- {throughput / _MB:8.3f} MB/s{failure} --- "
                f"Latency: mean: {latency[0]:7.3f} ms - med: {latency[1]:7.3f} - 95pct: "
                f"{latency[2]:7.3f} - 99pct: {latency[3]:7.3f} - 99.9pct: {latency[4]:7.3f} - "
                f"99.99pct: {latency[5]:7.3f} - Max: {latency[6]:7.3f}")

    def summary_lines(self, verb: str) -> list[str]:
        with self._lock:
            elapsed = max(self._clock() - self.started, 1e-9)
            rate = self.messages / elapsed
            throughput = self.bytes / elapsed
            latency = _latency(self._total, (50, 95, 99, 99.9, 99.99, 99.999))
            total = self.messages
        return [
            f"Aggregated throughput stats --- {total} records {verb} --- {rate:.3f} msg/s --- "
            f"{throughput / _MBIT:.3f} Mbit/s --- {throughput / _MB:.3f} MB/s",
            f"Aggregated latency stats --- Latency: mean: {latency[0]:7.3f} ms - med: "
            f"{latency[1]:7.3f} - 95pct: {latency[2]:7.3f} - 99pct: {latency[3]:7.3f} - "
            f"99.9pct: {latency[4]:7.3f} - 99.99pct: {latency[5]:7.3f} - 99.999pct: "
            f"{latency[6]:7.3f} - Max: {latency[7]:7.3f}",
        ]


def _latency(histogram: HdrHistogram, percentiles: Sequence[float]) -> list[float]:
    """Mean, the percentiles and max, in milliseconds (0 when nothing was recorded)."""
    if histogram.get_total_count() == 0:
        return [0.0] * (len(percentiles) + 2)
    values = [histogram.get_mean_value()]
    values += [float(histogram.get_value_at_percentile(p)) for p in percentiles]
    values.append(float(histogram.get_max_value()))
    return [v / 1000.0 for v in values]


def _stamp() -> str:
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def _say(out: TextIO, line: str) -> None:
    print(f"{_stamp()} INFO  {line}", file=out, flush=True)


@dataclass(frozen=True, slots=True)
class _RunLimits:
    num_messages: int
    test_duration_s: float
    report_interval_s: float


class _Run:
    """The main thread's loop: end conditions and the periodic report."""

    def __init__(self, limits: _RunLimits, recorder: LatencyRecorder, verb: str,
                 out: TextIO) -> None:
        self.limits, self.recorder, self.verb, self.out = limits, recorder, verb, out
        self.started = time.monotonic()
        self._next_report = self.started + limits.report_interval_s

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_report:
            _say(self.out, self.recorder.interval_line(self.verb))
            self._next_report = now + self.limits.report_interval_s

    def out_of_time(self) -> bool:
        return (self.limits.test_duration_s > 0
                and time.monotonic() - self.started >= self.limits.test_duration_s)

    def finish(self) -> None:
        for line in self.recorder.summary_lines(self.verb):
            _say(self.out, line)


@dataclass(frozen=True, slots=True)
class PerfProduceArgs:
    topics: Sequence[str]
    rate: int = 100
    size: int = 1024
    num_producers: int = 1
    num_messages: int = 0
    test_duration: float = 0.0
    batch_time_window_ms: float = 1.0
    batch_max_messages: int = 1000
    disable_batching: bool = False
    max_outstanding: int = 1000
    producer_name: str | None = None
    delay_s: int = 0
    delay_range: str | None = None
    warmup_time_s: float = 1.0
    report_interval_s: float = 10.0


def _delay_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    low, sep, high = text.partition(",")
    try:
        if not sep:
            raise ValueError
        lo, hi = int(low), int(high)
    except ValueError:
        raise UsageError(f'Unknown delay range interval, the format should be "<origin>,<bound>". '
                         f"error message: {text}") from None
    if not 0 <= lo < hi:
        raise UsageError(f"delay range {text!r}: need 0 <= origin < bound")
    return lo, hi


def _check_common(num_messages: int, duration: float, interval: float) -> None:
    if num_messages < 0 or duration < 0:
        raise UsageError("--num-messages and --test-duration must not be negative")
    if interval <= 0:
        raise UsageError("--report-interval must be positive")


def perf_produce(options: ClientOptions, args: PerfProduceArgs, out: TextIO) -> int:
    """``pulsar-perf produce``; returns the exit code."""
    import datetime

    if not args.topics:
        raise UsageError("give at least one topic")
    if args.size <= 0 or args.num_producers <= 0 or args.rate < 0 or args.max_outstanding <= 0:
        raise UsageError("--size, --num-producers and --max-outstanding must be positive, "
                         "--rate not negative")
    _check_common(args.num_messages, args.test_duration, args.report_interval_s)
    delay_range = _delay_range(args.delay_range)
    rng = random.Random(0)
    payload = bytes(rng.randrange(65, 91) for _ in range(args.size))  # pulsar-perf's A..Z
    recorder = LatencyRecorder()
    client = make_client(options)
    run = _Run(_RunLimits(args.num_messages, args.test_duration, args.report_interval_s),
               recorder, "produced", out)
    producers: list[Any] = []
    try:
        for topic in args.topics:
            for index in range(args.num_producers):
                kw: dict[str, Any] = {
                    "block_if_queue_full": True, "max_pending_messages": args.max_outstanding,
                    "batching_enabled": not args.disable_batching, "send_timeout_millis": 0,
                }
                if not args.disable_batching:
                    kw["batching_max_publish_delay_ms"] = max(1, int(args.batch_time_window_ms))
                    kw["batching_max_messages"] = args.batch_max_messages
                if args.producer_name:
                    kw["producer_name"] = f"{args.producer_name}-{index}"
                producers.append(client.create_producer(topic, **kw))
        _say(out, f"Created {len(producers)} producers")
        warmup_end = time.monotonic() + args.warmup_time_s
        pacer = Pacer(float(args.rate))
        sent = 0
        try:
            while args.num_messages == 0 or sent < args.num_messages:
                if run.out_of_time():
                    break
                for producer in producers:
                    pacer.acquire()
                    send_kw: dict[str, Any] = {}
                    if args.delay_s > 0:
                        send_kw["deliver_after"] = datetime.timedelta(seconds=args.delay_s)
                    elif delay_range is not None:
                        send_kw["deliver_after"] = datetime.timedelta(
                            seconds=rng.randrange(*delay_range))
                    start = time.monotonic()
                    record = start > warmup_end
                    producer.send_async(payload, _on_receipt(recorder, start, record, len(payload)),
                                        **send_kw)
                    sent += 1
                    run.tick()
                    if args.num_messages and sent >= args.num_messages:
                        break
        except KeyboardInterrupt:
            pass
        for producer in producers:
            producer.flush()
    finally:
        for producer in producers:
            producer.close()
        client.close()
    run.finish()
    return 0 if recorder.failures == 0 else 1


def _on_receipt(recorder: LatencyRecorder, start: float, record: bool,
                size: int) -> Callable[[Any, Any], None]:
    """The send callback (a client thread): count the receipt and its latency, or a failure."""
    import pulsar

    def done(result: Any, _msg_id: Any) -> None:
        if result == pulsar.Result.Ok:
            recorder.record(size, int((time.monotonic() - start) * 1_000_000) if record else None)
        elif result != pulsar.Result.AlreadyClosed:
            recorder.fail()

    return done


@dataclass(frozen=True, slots=True)
class PerfConsumeArgs:
    topics: Sequence[str]
    num_consumers: int = 1
    subscriber_name: str = "sub"
    subscription_type: str = "Exclusive"
    subscription_position: str = "Latest"
    receiver_queue_size: int = 1000
    num_messages: int = 0
    test_duration: float = 0.0
    report_interval_s: float = 10.0


def perf_consume(options: ClientOptions, args: PerfConsumeArgs, out: TextIO) -> int:
    """``pulsar-perf consume``; returns the exit code."""
    if not args.topics:
        raise UsageError("give at least one topic")
    if args.num_consumers <= 0 or args.receiver_queue_size <= 0:
        raise UsageError("--num-consumers and --receiver-queue-size must be positive")
    _check_common(args.num_messages, args.test_duration, args.report_interval_s)
    consumer_type = consumer_type_of(args.subscription_type)
    position = initial_position_of(args.subscription_position)
    recorder = LatencyRecorder()
    enough = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        latency_ms = time.time() * 1000 - msg.publish_timestamp()
        recorder.record(len(msg.data()), int(max(latency_ms, 0) * 1000))
        consumer.acknowledge(msg)
        if args.num_messages and recorder.messages >= args.num_messages:
            enough.set()

    client = make_client(options)
    run = _Run(_RunLimits(args.num_messages, args.test_duration, args.report_interval_s),
               recorder, "received", out)
    consumers: list[Any] = []
    try:
        for topic in args.topics:
            for _ in range(args.num_consumers):
                consumers.append(client.subscribe(
                    topic, args.subscriber_name, consumer_type=consumer_type,
                    initial_position=position, receiver_queue_size=args.receiver_queue_size,
                    message_listener=listener))
        _say(out, f"Created {len(consumers)} consumers")
        try:
            while not enough.wait(0.2) and not run.out_of_time():
                run.tick()
        except KeyboardInterrupt:
            pass
    finally:
        for consumer in consumers:
            consumer.close()
        client.close()
    run.finish()
    return 0
