"""``horae-client``: Pulsar's ``pulsar-client`` and ``pulsar-perf`` commands on the official
Python client, for Horae or any Pulsar service URL.

Usage::

    horae-client [--url pulsar://localhost:6650] [--auth-plugin P --auth-params X] \\
        produce|consume|read TOPIC [flags]
    horae-client [global flags] perf produce|consume TOPIC... [flags]

Theory of operation: argparse declares ``pulsar-client``'s global flags (``--url`` with
``--service-url`` and pulsar-perf's ``-u`` as aliases, the authentication and TLS flags) and each
command's flags with Pulsar's names and defaults; the values go to
:mod:`cli.client.commands` or :mod:`cli.client.perf` as frozen argument records. Exit codes: 0
done, 1 the broker refused or failed an operation (its reason on stderr), 2 usage errors, as
argparse does. Needs the ``client`` extra (``pip install 'horae[client]'``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from cli.client.connect import DEFAULT_SERVICE_URL, ClientOptions, ConnectRefused, UsageError

__all__ = ["build_parser", "main"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def _globals(parser: argparse.ArgumentParser, *, here: bool = True) -> None:
    """The global flags; with ``here=False`` (on each command, so that ``perf produce -u URL``
    works as in pulsar-perf) they only override what was given before the command."""

    def default(value: object) -> object:
        return value if here else argparse.SUPPRESS

    parser.add_argument("--url", "--service-url", "-u", dest="url",
                        default=default(DEFAULT_SERVICE_URL),
                        help="Broker URL to which to connect (pulsar://, pulsar+ssl://, "
                             f"http://; default {DEFAULT_SERVICE_URL})")
    parser.add_argument("--auth-plugin", default=default(None),
                        help="Authentication plugin class name "
                        "(org.apache.pulsar.client.impl.auth.AuthenticationToken, "
                        "AuthenticationBasic, AuthenticationTls, "
                        "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2)")
    parser.add_argument("--auth-params", default=default(None),
                        help="Authentication parameters: token:XXX or "
                        "file:///path for a token, '{\"userId\":..,\"password\":..}' for basic, "
                        "tlsCertFile:..,tlsKeyFile:.. for TLS")
    parser.add_argument("--tlsTrustCertsFilePath", "--trust-cert-file", dest="tls_trust",
                        default=default(None),
                        help="File path to the trusted TLS certificate file")
    parser.add_argument("--tlsAllowInsecureConnection", "--tls-allow-insecure",
                        dest="tls_insecure", action="store_true", default=default(False),
                        help="Allow TLS insecure connection")
    parser.add_argument("--tlsEnableHostnameVerification", dest="tls_hostname",
                        action="store_true", default=default(False),
                        help="Enable TLS hostname verification")
    parser.add_argument("--listener-name", default=default(None),
                        help="Listener name for the broker")
    parser.add_argument("--operation-timeout", type=int, default=default(30), metavar="SECONDS",
                        help="The client's operation timeout (default 30)")
    parser.add_argument("--no-connect-check", dest="connect_check", action="store_false",
                        default=default(True),
                        help="Skip the CONNECT check that fails at once when the broker refuses "
                             "the credentials or the port speaks TLS")


def _produce(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("produce", help="Produce messages to a specified topic")
    _globals(p, here=False)
    p.add_argument("topic")
    p.add_argument("-m", "--messages", action="append", default=[],
                   help="Messages to send, either -m or -f must be specified. Specify -m for "
                        "each message; each is split on --separator")
    p.add_argument("-f", "--files", action="append", default=[],
                   help="Comma separated file paths to send")
    p.add_argument("-n", "--num-produce", type=int, default=1,
                   help="Number of times to send message(s) (messages * n <= 1000)")
    p.add_argument("-r", "--rate", type=float, default=0.0,
                   help="Rate (in msg/sec) at which to produce, 0 means as fast as possible")
    p.add_argument("-db", "--disable-batching", action="store_true",
                   help="Disable batch sending of messages")
    p.add_argument("-c", "--chunking", action="store_true",
                   help="Split the message and publish in chunks if larger than the max size")
    p.add_argument("-s", "--separator", default=",",
                   help="Character to split messages string on, default is comma")
    p.add_argument("-p", "--properties", action="append", default=[],
                   help="Properties to add, comma separated key=value string, like k1=v1,k2=v2")
    p.add_argument("-k", "--key", help="Partitioning key to add to each message")
    p.add_argument("-dr", "--disable-replication", action="store_true",
                   help="Disable geo-replication for messages")
    p.add_argument("--deliver-after", metavar="DURATION",
                   help="Deliver each message after this delay (500ms, 10s, 5m, 2h, 1d)")
    p.add_argument("--deliver-at", type=int, metavar="EPOCH_MS",
                   help="Deliver each message at this time (milliseconds since the epoch)")


def _consume(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("consume", help="Consume messages from a specified topic")
    _globals(p, here=False)
    p.add_argument("topic")
    p.add_argument("-t", "--subscription-type", default="Exclusive",
                   help="Subscription type: Exclusive, Shared, Failover, Key_Shared")
    p.add_argument("-p", "--subscription-position", default="Latest",
                   help="Subscription position: Latest or Earliest")
    p.add_argument("-s", "--subscription-name", required=True, help="Subscription name")
    p.add_argument("-n", "--num-messages", type=int, default=1,
                   help="Number of messages to consume, 0 means to consume forever")
    _read_flags(p)
    p.add_argument("--regex", action="store_true",
                   help="Indicate the topic name is a regex pattern")


def _read_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hex", action="store_true", help="Display binary messages in hex")
    p.add_argument("--hide-content", action="store_true",
                   help="Do not write the message to console")
    p.add_argument("-r", "--rate", type=float, default=0.0,
                   help="Rate (in msg/sec) at which to consume, 0 means as fast as possible")
    p.add_argument("-q", "--queue-size", type=int, default=0, help="Receiver queue size")


def _read(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("read", help="Read messages from a specified topic")
    _globals(p, here=False)
    p.add_argument("topic")
    p.add_argument("-m", "--start-message-id", default="latest",
                   help="Initial reader position: latest, earliest or ledgerId:entryId")
    p.add_argument("-i", "--start-message-id-inclusive", action="store_true",
                   help="Whether to include the position specified by -m")
    p.add_argument("-n", "--num-messages", type=int, default=1,
                   help="Number of messages to read, 0 means to read forever")
    _read_flags(p)


def _perf(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = sub.add_parser("perf", help="pulsar-perf: produce or consume load and report rates "
                                       "and latency percentiles")
    kinds = perf.add_subparsers(dest="perf_command", required=True)
    pp = kinds.add_parser("produce", help="Test producer performance")
    _globals(pp, here=False)
    pp.add_argument("topics", nargs="+")
    pp.add_argument("-r", "--rate", type=int, default=100,
                    help="Publish rate msg/s across topics (0: as fast as possible)")
    pp.add_argument("-s", "--size", type=int, default=1024, help="Message size (bytes)")
    pp.add_argument("-n", "--num-producers", type=int, default=1,
                    help="Number of producers (per topic)")
    pp.add_argument("-m", "--num-messages", type=int, default=0,
                    help="Number of messages to publish in total. If <= 0, keep publishing")
    pp.add_argument("-time", "--test-duration", type=float, default=0.0,
                    help="Test duration in secs. If <= 0, keep publishing")
    pp.add_argument("-b", "--batch-time-window", type=float, default=1.0,
                    help="Batch messages in 'x' ms window (Default: 1ms)")
    pp.add_argument("-bm", "--batch-max-messages", type=int, default=1000,
                    help="Maximum number of messages per batch")
    pp.add_argument("-db", "--disable-batching", action="store_true", help="Disable batching")
    pp.add_argument("-o", "--max-outstanding", type=int, default=1000,
                    help="Max number of outstanding messages")
    pp.add_argument("-pn", "--producer-name", help="Producer Name")
    pp.add_argument("-d", "--delay", type=int, default=0,
                    help="Mark messages with a given delay in seconds")
    pp.add_argument("-dr", "--delay-range",
                    help="Mark messages with a random delay in seconds in [origin, bound), "
                         "e.g. 1,300")
    pp.add_argument("--warmup-time", type=float, default=1.0,
                    help="Warm-up time in seconds (Default: 1 sec)")
    pp.add_argument("--report-interval", type=float, default=10.0,
                    help="Seconds between two reports (pulsar-perf: 10)")
    pc = kinds.add_parser("consume", help="Test consumer performance")
    _globals(pc, here=False)
    pc.add_argument("topics", nargs="+")
    pc.add_argument("-n", "--num-consumers", type=int, default=1,
                    help="Number of consumers (per subscription)")
    pc.add_argument("-s", "--subscriber-name", default="sub", help="Subscriber name prefix")
    pc.add_argument("-st", "--subscription-type", default="Exclusive", help="Subscription type")
    pc.add_argument("-sp", "--subscription-position", default="Latest",
                    help="Subscription position")
    pc.add_argument("-q", "--receiver-queue-size", type=int, default=1000,
                    help="Size of the receiver queue")
    pc.add_argument("-m", "--num-messages", type=int, default=0,
                    help="Number of messages to consume in total. If <= 0, keep consuming")
    pc.add_argument("-time", "--test-duration", type=float, default=0.0,
                    help="Test duration in secs. If <= 0, keep consuming")
    pc.add_argument("--report-interval", type=float, default=10.0,
                    help="Seconds between two reports (pulsar-perf: 10)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horae-client",
        description="pulsar-client and pulsar-perf on the official Python client: produce, "
                    "consume and read messages, and measure rates and latencies, against Horae "
                    "or any Pulsar service URL.")
    _globals(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _produce(sub)
    _consume(sub)
    _read(sub)
    _perf(sub)
    return parser


def _options(ns: argparse.Namespace) -> ClientOptions:
    if ns.operation_timeout <= 0:
        raise UsageError("--operation-timeout must be positive")
    return ClientOptions(service_url=ns.url, auth_plugin=ns.auth_plugin,
                         auth_params=ns.auth_params, tls_trust_certs_file_path=ns.tls_trust,
                         tls_allow_insecure_connection=ns.tls_insecure,
                         tls_enable_hostname_verification=ns.tls_hostname,
                         listener_name=ns.listener_name,
                         operation_timeout_s=ns.operation_timeout,
                         connect_check=ns.connect_check)


def _run(ns: argparse.Namespace, out: TextIO) -> int:
    from cli.client import commands, perf

    options = _options(ns)
    if ns.command == "produce":
        return commands.produce(options, commands.ProduceArgs(
            topic=ns.topic, messages=ns.messages, files=ns.files, num_produce=ns.num_produce,
            rate=ns.rate, disable_batching=ns.disable_batching, chunking=ns.chunking,
            separator=ns.separator, properties=ns.properties, key=ns.key,
            disable_replication=ns.disable_replication, deliver_after=ns.deliver_after,
            deliver_at=ns.deliver_at), out)
    if ns.command == "consume":
        return commands.consume(options, commands.ConsumeArgs(
            topic=ns.topic, subscription_name=ns.subscription_name,
            subscription_type=ns.subscription_type,
            subscription_position=ns.subscription_position, num_messages=ns.num_messages,
            rate=ns.rate, hex=ns.hex, hide_content=ns.hide_content, regex=ns.regex,
            queue_size=ns.queue_size), out)
    if ns.command == "read":
        return commands.read(options, commands.ReadArgs(
            topic=ns.topic, start_message_id=ns.start_message_id,
            start_message_id_inclusive=ns.start_message_id_inclusive,
            num_messages=ns.num_messages, rate=ns.rate, hex=ns.hex,
            hide_content=ns.hide_content, queue_size=ns.queue_size), out)
    if ns.perf_command == "produce":
        return perf.perf_produce(options, perf.PerfProduceArgs(
            topics=ns.topics, rate=ns.rate, size=ns.size, num_producers=ns.num_producers,
            num_messages=ns.num_messages, test_duration=ns.test_duration,
            batch_time_window_ms=ns.batch_time_window, batch_max_messages=ns.batch_max_messages,
            disable_batching=ns.disable_batching, max_outstanding=ns.max_outstanding,
            producer_name=ns.producer_name, delay_s=ns.delay, delay_range=ns.delay_range,
            warmup_time_s=ns.warmup_time, report_interval_s=ns.report_interval), out)
    return perf.perf_consume(options, perf.PerfConsumeArgs(
        topics=ns.topics, num_consumers=ns.num_consumers, subscriber_name=ns.subscriber_name,
        subscription_type=ns.subscription_type,
        subscription_position=ns.subscription_position,
        receiver_queue_size=ns.receiver_queue_size, num_messages=ns.num_messages,
        test_duration=ns.test_duration, report_interval_s=ns.report_interval), out)


def _fail(code: int, message: str) -> NoReturn:
    print(f"horae-client: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        import hdrh  # noqa: F401
        import pulsar
    except ImportError as exc:
        _fail(EXIT_USAGE, f"{exc.name} is missing: install the client extra "
                          "(pip install 'horae[client]')")
    try:
        return _run(ns, out if out is not None else sys.stdout)
    except UsageError as exc:
        _fail(EXIT_USAGE, str(exc))
    except ConnectRefused as exc:
        _fail(EXIT_FAILED, str(exc))
    except Exception as exc:
        import pulsar

        if isinstance(exc, pulsar.PulsarException):
            _fail(EXIT_FAILED, f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    raise SystemExit(main())
