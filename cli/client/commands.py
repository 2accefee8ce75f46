"""``horae-client produce|consume|read``: ``pulsar-client``'s commands on the official client.

Theory of operation
-------------------
Each command takes the parsed flags (names and defaults of Pulsar's ``CmdProduce``,
``CmdConsume`` and ``CmdRead``), builds one ``pulsar.Client`` with
:func:`cli.client.connect.make_client` and closes it before returning an exit code.

- produce: every ``-m`` value is split on ``-s/--separator`` (a comma by default), ``-f`` files
  are sent whole; the bodies are sent ``-n`` times (at most 1000 messages in all, as Pulsar),
  paced by ``-r`` msg/s, each with ``-k`` key and ``-p`` properties. ``--deliver-after`` and
  ``--deliver-at`` (Horae's additions: ``pulsar-client`` has no delay flag) set the delivery
  time. Each send waits for its receipt; then "N messages successfully produced".
- consume: subscribes with ``-s`` name, ``-t`` type (Exclusive), ``-p`` initial position
  (Latest), receives ``-n`` messages (0: until interrupted) with a 5 s receive timeout per try,
  prints each as Pulsar does (``----- got message -----`` then ``publishTime:[..], eventTime:[..],
  key:[..], properties:[k=v, ..], content:..``) and acknowledges it.
- read: a reader from ``-m`` (``latest``, ``earliest`` or ``ledgerId:entryId``), ``-i`` to
  include that message; prints ``-n`` messages likewise.
Ctrl-C ends consume and read cleanly with the count so far.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from cli.client.connect import ClientOptions, UsageError, make_client

__all__ = [
    "MAX_MESSAGES",
    "MESSAGE_BOUNDARY",
    "ConsumeArgs",
    "Pacer",
    "ProduceArgs",
    "ReadArgs",
    "consume",
    "consumer_type_of",
    "format_message",
    "initial_position_of",
    "parse_duration_ms",
    "produce",
    "read",
]

MAX_MESSAGES: Final = 1000
MESSAGE_BOUNDARY: Final = "----- got message -----"
RECEIVE_TIMEOUT_MS: Final = 5000
_UNITS_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
                    "w": 604_800_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``10s``, ``5m``, ``2h``, ``1d``, ``1w``; a bare number is seconds."""
    value = text.strip().lower()
    for unit in sorted(_UNITS_MS, key=len, reverse=True):
        if value.endswith(unit):
            number, scale = value[: -len(unit)], _UNITS_MS[unit]
            break
    else:
        number, scale = value, 1000
    try:
        amount = float(number)
    except ValueError:
        raise UsageError(f"bad duration {text!r} (use 500ms, 10s, 5m, 2h, 1d)") from None
    if amount < 0 or amount != amount or amount > 10 * 365 * 86_400_000 / scale:
        raise UsageError(f"bad duration {text!r}")
    return int(amount * scale)


class Pacer:
    """Guava's RateLimiter as ``pulsar-client`` uses it: at most *rate* calls a second."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._clock, self._sleep = clock, sleep
        self._next = clock()

    def acquire(self) -> None:
        if self._interval == 0.0:
            return
        now = self._clock()
        if self._next > now:
            self._sleep(self._next - now)
        self._next = max(self._next, now) + self._interval


def _properties(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise UsageError(f"property {pair!r} is not key=value")
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class ProduceArgs:
    topic: str
    messages: Sequence[str] = ()
    files: Sequence[str] = ()
    num_produce: int = 1
    rate: float = 0.0
    disable_batching: bool = False
    chunking: bool = False
    separator: str = ","
    properties: Sequence[str] = ()
    key: str | None = None
    disable_replication: bool = False
    deliver_after: str | None = None
    deliver_at: int | None = None


def _bodies(args: ProduceArgs) -> list[bytes]:
    bodies = [part.encode() for message in args.messages
              for part in (message.split(args.separator) if args.separator else [message])]
    for name in args.files:
        for path in name.split(","):
            try:
                with open(path, "rb") as fh:
                    bodies.append(fh.read())
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return bodies


def produce(options: ClientOptions, args: ProduceArgs, out: TextIO) -> int:
    """``pulsar-client produce``; returns the exit code."""
    if args.num_produce <= 0:
        raise UsageError("Number of times need to be positive number.")
    if args.deliver_after is not None and args.deliver_at is not None:
        raise UsageError("use either --deliver-after or --deliver-at, not both")
    bodies = _bodies(args)
    if not bodies:
        raise UsageError("Please supply message content with either --messages or --files")
    total = len(bodies) * args.num_produce
    if total > MAX_MESSAGES:
        raise UsageError(f"Attempting to send {total} messages. Please do not send more than "
                         f"{MAX_MESSAGES} messages")
    properties = _properties(args.properties)
    send_kw: dict[str, Any] = {}
    if properties:
        send_kw["properties"] = properties
    if args.key:
        send_kw["partition_key"] = args.key
    if args.disable_replication:
        send_kw["disable_replication"] = True
    if args.deliver_after is not None:
        send_kw["deliver_after"] = datetime.timedelta(
            milliseconds=parse_duration_ms(args.deliver_after))
    if args.deliver_at is not None:
        send_kw["deliver_at"] = args.deliver_at
    client = make_client(options)
    sent = 0
    try:
        producer = client.create_producer(
            args.topic, batching_enabled=not (args.disable_batching or args.chunking),
            chunking_enabled=args.chunking)
        pacer = Pacer(args.rate)
        for _ in range(args.num_produce):
            for body in bodies:
                pacer.acquire()
                producer.send(body, **send_kw)
                sent += 1
        producer.close()
    finally:
        client.close()
        print(f"{sent} messages successfully produced", file=out, flush=True)
    return 0


def _hex_dump(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset:offset + 16]
        hexes = " ".join(f"{b:02X}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08X} {hexes:<47} {text}")
    return "\n".join(lines)


def format_message(msg: Any, hex_dump: bool = False) -> str:
    """Pulsar's ``interpretMessage``: one line (the content may span lines)."""
    data = msg.data()
    content = _hex_dump(data) if hex_dump else data.decode("utf-8", errors="replace")
    props = ", ".join(f"{k}={v}" for k, v in msg.properties().items())
    key = msg.partition_key() or "null"
    return (f"publishTime:[{msg.publish_timestamp()}], eventTime:[{msg.event_timestamp()}], "
            f"key:[{key}], properties:[{props}], content:{content}")


@dataclass(frozen=True, slots=True)
class ConsumeArgs:
    topic: str
    subscription_name: str
    subscription_type: str = "Exclusive"
    subscription_position: str = "Latest"
    num_messages: int = 1
    rate: float = 0.0
    hex: bool = False
    hide_content: bool = False
    regex: bool = False
    queue_size: int = 0


@dataclass(frozen=True, slots=True)
class ReadArgs:
    topic: str
    start_message_id: str = "latest"
    start_message_id_inclusive: bool = False
    num_messages: int = 1
    rate: float = 0.0
    hex: bool = False
    hide_content: bool = False
    queue_size: int = 0


@dataclass
class _Printer:
    out: TextIO
    hex: bool
    hide_content: bool
    count: int = field(default=0)

    def show(self, msg: Any) -> None:
        self.count += 1
        if not self.hide_content:
            print(MESSAGE_BOUNDARY, file=self.out)
            print(format_message(msg, self.hex), file=self.out, flush=True)
        elif self.count % 1000 == 0:
            print(f"Received {self.count} messages", file=self.out, flush=True)


def _receive_loop(receive: Callable[[int], Any], after: Callable[[Any], None], wanted: int,
                  rate: float, printer: _Printer) -> None:
    import pulsar

    pacer = Pacer(rate)
    while wanted == 0 or printer.count < wanted:
        pacer.acquire()
        try:
            msg = receive(RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            continue
        printer.show(msg)
        after(msg)


def consumer_type_of(name: str) -> Any:
    import pulsar

    types = {"exclusive": pulsar.ConsumerType.Exclusive, "shared": pulsar.ConsumerType.Shared,
             "failover": pulsar.ConsumerType.Failover,
             "key_shared": pulsar.ConsumerType.KeyShared}
    try:
        return types[name.lower()]
    except KeyError:
        raise UsageError(f"subscription type {name!r}: use Exclusive, Shared, Failover or "
                         "Key_Shared") from None


def initial_position_of(name: str) -> Any:
    import pulsar

    positions = {"latest": pulsar.InitialPosition.Latest,
                 "earliest": pulsar.InitialPosition.Earliest}
    try:
        return positions[name.lower()]
    except KeyError:
        raise UsageError(f"subscription position {name!r}: use Latest or Earliest") from None


def consume(options: ClientOptions, args: ConsumeArgs, out: TextIO) -> int:
    """``pulsar-client consume``; returns the exit code."""
    import re

    if not args.subscription_name:
        raise UsageError("Subscription name is not provided.")
    if args.num_messages < 0:
        raise UsageError("Number of messages should be zero or positive.")
    kw: dict[str, Any] = {"consumer_type": consumer_type_of(args.subscription_type),
                          "initial_position": initial_position_of(args.subscription_position)}
    if args.queue_size > 0:
        kw["receiver_queue_size"] = args.queue_size
    topic: Any = args.topic
    if args.regex:
        try:
            topic = re.compile(args.topic)
        except re.error as exc:
            raise UsageError(f"--regex: bad pattern {args.topic!r}: {exc}") from None
    client = make_client(options)
    printer = _Printer(out, args.hex, args.hide_content)
    try:
        consumer = client.subscribe(topic, args.subscription_name, **kw)
        with contextlib.suppress(KeyboardInterrupt):
            _receive_loop(consumer.receive, consumer.acknowledge, args.num_messages, args.rate,
                          printer)
        consumer.close()
    finally:
        client.close()
        print(f"{printer.count} messages successfully consumed", file=out, flush=True)
    return 0


def _start_id(text: str) -> Any:
    import pulsar

    value = text.strip().lower()
    if value == "latest":
        return pulsar.MessageId.latest
    if value == "earliest":
        return pulsar.MessageId.earliest
    ledger, sep, entry = value.partition(":")
    try:
        if not sep:
            raise ValueError
        return pulsar.MessageId(-1, int(ledger), int(entry), -1)
    except ValueError:
        raise UsageError(f"start message id {text!r}: use latest, earliest or "
                         "ledgerId:entryId") from None


def read(options: ClientOptions, args: ReadArgs, out: TextIO) -> int:
    """``pulsar-client read``; returns the exit code."""
    if args.num_messages < 0:
        raise UsageError("Number of messages should be zero or positive.")
    start = _start_id(args.start_message_id)
    kw: dict[str, Any] = {"start_message_id_inclusive": args.start_message_id_inclusive}
    if args.queue_size > 0:
        kw["receiver_queue_size"] = args.queue_size
    client = make_client(options)
    printer = _Printer(out, args.hex, args.hide_content)
    try:
        reader = client.create_reader(args.topic, start, **kw)
        with contextlib.suppress(KeyboardInterrupt):
            _receive_loop(reader.read_next, lambda _msg: None, args.num_messages, args.rate,
                          printer)
        reader.close()
    finally:
        client.close()
        print(f"{printer.count} messages successfully read", file=out, flush=True)
    return 0
