"""The ``horae`` command: ``horae serve`` runs a broker, ``horae rollup`` the metrics job.

``horae serve [--config broker.conf|broker.toml] [--data-dir DIR] [--broker-port 6650]
[--web-port 8080] [--advertised-address HOST] [--bind-address ADDR] [--log-format text|json]``
loads the settings (defaults < the config file, TOML or Pulsar's broker.conf format <
``PULSAR_PREFIX_<key>`` / ``HORAE_<key>`` environment variables < these flags; see
:mod:`broker.config`), sets up logging (:mod:`broker.logs`), runs the broker on uvloop and logs
one line with the service and web URLs. SIGTERM, SIGINT or ``POST /admin/v2/brokers/shutdown``
(pulsar-admin ``brokers shutdown``) shut it down gracefully (stop
accepting, answer in-flight publishes, flush cursors, close the store) and the process exits 0;
a shutdown that takes longer than ``brokerShutdownTimeoutMs`` is abandoned with exit code 1.

``horae tokens ...`` is ``pulsar tokens`` (broker/security/tokens_cli.py).

``horae rollup ...`` hands its arguments to ``jobs.metrics_rollup.main`` (needs the optional
``jobs`` extra: pyspark).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig

__all__ = ["build_parser", "main"]

log = logging.getLogger("horae")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horae",
        description="Horae: a single-node broker speaking Apache Pulsar's binary protocol, "
                    "with delayed delivery done right.")
    parser.add_argument("--version", action="version", version=f"horae {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the broker",
                           description="Run the broker (binary protocol + admin HTTP API).")
    serve.add_argument("--config", metavar="FILE",
                       help="Pulsar broker.conf (key=value) or TOML file with broker.conf keys; "
                            "HORAE_<key> / PULSAR_PREFIX_<key> environment variables override it")
    serve.add_argument("--data-dir", metavar="DIR", help="data directory (default ./data)")
    serve.add_argument("--broker-port", type=int, metavar="PORT",
                       help="binary protocol port (default 6650; 0 = any free port)")
    serve.add_argument("--web-port", type=int, metavar="PORT",
                       help="HTTP admin/metrics port (default 8080; 0 = any free port)")
    serve.add_argument("--advertised-address", metavar="HOST",
                       help="host name given to clients in lookups (default localhost)")
    serve.add_argument("--bind-address", metavar="ADDR",
                       help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    serve.add_argument("--log-format", choices=["text", "json"],
                       help="log lines as text (default) or one JSON object per line "
                            "(config key logFormat)")

    rollup = sub.add_parser("rollup", help="roll up exported metric snapshots with PySpark",
                            add_help=False)
    rollup.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("tokens", help="create and inspect JWT keys and tokens (as `pulsar tokens`)",
                   add_help=False).add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "rollup":
        return _rollup(argv[1:])
    if argv and argv[0] == "tokens":
        from broker.security.tokens_cli import main as tokens_main

        return tokens_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    parser.print_help()
    return 2


#: Top-level modules of the 'jobs' extra (pyproject.toml) that `horae rollup` needs.
_JOBS_EXTRA_MODULES = frozenset({"pyspark", "matplotlib"})


def _rollup(argv: list[str]) -> int:
    try:
        from jobs.metrics_rollup import main as rollup_main
    except ModuleNotFoundError as exc:
        # Only the optional third-party dependencies of the 'jobs' extra are reported this
        # way; a missing module of Horae itself is a broken install and crashes.
        if (exc.name or "").split(".")[0] not in _JOBS_EXTRA_MODULES:
            raise
        print(f"horae rollup needs the 'jobs' extra (pip install 'horae[jobs]'): {exc}",
              file=sys.stderr)
        return 2
    result = rollup_main(argv)
    return int(result or 0)


def _serve(args: argparse.Namespace) -> int:
    from broker.web_import import import_aiohttp

    import_aiohttp()   # first, before any thread starts: see web_import.py
    from broker.config import ConfigError
    from broker.config_loading import load_settings, log_ignored
    from broker.logs import configure_logging

    overrides: dict[str, object] = {}
    for flag, key in (("data_dir", "dataDir"), ("broker_port", "brokerServicePort"),
                      ("web_port", "webServicePort"), ("advertised_address", "advertisedAddress"),
                      ("bind_address", "bindAddress"), ("log_format", "logFormat")):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    try:
        loaded = load_settings(args.config, overrides, environ=os.environ)
    except ConfigError as exc:
        print(f"horae: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, loaded.config.log_format)
    log_ignored(loaded.ignored)
    from broker.heap import limit_malloc_arenas

    limit_malloc_arenas()   # before any thread starts: see heap.py
    import uvloop

    try:
        return uvloop.run(_run(loaded.config))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130


async def _run(config: BrokerConfig) -> int:
    from broker.server import BrokerServer
    from storage.errors import StorageError

    server = BrokerServer(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server.shutdown_request.on_request(stop.set)   # POST /admin/v2/brokers/shutdown
    try:
        await server.start()
    except (OSError, StorageError) as exc:  # a busy port, a data dir held by another broker
        log.error("cannot start: %s", exc)
        await server.stop()
        return 1
    log.info("%s", server.started_line())
    from broker.heap import HeapFreezer

    freezer = loop.create_task(HeapFreezer().run())   # this process's collector: see heap.py
    await stop.wait()
    freezer.cancel()
    timeout_s = config.broker_shutdown_timeout_ms / 1000
    log.info("shutting down (at most %.1f s)", timeout_s)
    try:
        await asyncio.wait_for(server.stop(), timeout_s)
    except TimeoutError:
        log.error("graceful shutdown did not finish within brokerShutdownTimeoutMs=%d; exiting",
                  config.broker_shutdown_timeout_ms)
        return 1
    log.info("stopped")
    return 0
