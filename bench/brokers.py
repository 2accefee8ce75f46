"""Start the brokers a benchmark compares: Horae, the pulsar-lite binary and Apache Pulsar.

Theory of operation
-------------------
Each starter is a context manager that picks free loopback ports, puts the broker's data in a
directory under the caller's temporary directory, starts the broker as a child process, waits
(bounded) until it is ready, yields a :class:`Broker`, and terminates (then kills) the child on
exit. Horae runs as ``python -m broker serve`` with its defaults (fsync before every receipt),
so benchmarks import nothing under ``broker/``, and starts as installed: its ``.pyc`` files are
written first (:func:`bench.processes.compile_sources`). The child's pid is the broker process itself
(for Pulsar: the JVM), so :func:`cpu_seconds` and :func:`rss_mib` on it read the broker's CPU
(all threads) and memory.

Apache Pulsar runs as one standalone JVM (:mod:`bench.pulsar_peer`: broker, embedded bookie,
RocksDB metadata store), from the jars ``bench/peers/pulsar/pom.xml`` resolves.

:data:`STARTERS` names every peer a benchmark can run (``--peers``): ``horae``, ``pulsar-lite``,
``pulsar`` (bookie journal fsynced before each receipt, deduplication on: the same promises as
Horae's defaults), and the relaxed ``horae-nofsync`` and ``pulsar-nosync`` (Pulsar standalone's
shipped ``journalSyncData=false``).

Used by ``bench/compare_peer.py`` (official client), ``bench/wire_load.py`` (raw wire) and
``bench/scale.py``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from bench.processes import Broker, compile_sources, cpu_seconds, free_port, rss_mib, wait_port

# What the benchmarks take from here besides the starters (bench.processes holds them).
__all__ = ["DEFAULT_PEERS", "ROOT", "STARTERS", "Broker", "cpu_seconds", "free_port",
           "parse_peers", "rss_mib", "start_horae", "start_pulsar", "start_pulsar_lite",
           "started"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@contextlib.contextmanager
def _running(broker: Broker) -> Iterator[Broker]:
    try:
        wait_port(broker.port, broker.proc, broker.log)
        yield broker
    finally:
        broker.stop()


@contextlib.contextmanager
def start_horae(tmp: pathlib.Path, *, fsync: bool = True, name: str | None = None,
                config: str = "", env: dict[str, str] | None = None) -> Iterator[Broker]:
    """A Horae broker; *config* is extra TOML lines for its config file, *env* variables
    added to its environment."""
    name = name or ("horae" if fsync else "horae-nofsync")
    port, web = free_port(), free_port()
    data = tmp / name
    log = tmp / f"{name}.log"
    args = [sys.executable, "-m", "broker", "serve", "--data-dir", str(data), "--broker-port",
            str(port), "--web-port", str(web), "--bind-address", "127.0.0.1",
            "--advertised-address", "127.0.0.1", "--log-level", "WARNING"]
    if not fsync:
        config = f"journalSyncData = false\n{config}"
    if config:
        conf = tmp / f"{name}.toml"
        conf.write_text(config)
        args += ["--config", str(conf)]
    compile_sources(ROOT)   # started as installed: .pyc present
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **env} if env else None)
    with _running(Broker(name, "127.0.0.1", port, proc, data, log, web,
                         version=_version("horae"))) as broker:
        yield broker


def pulsar_lite_binary() -> str:
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    return str(find_pulsar_lite_binary())


@contextlib.contextmanager
def start_pulsar_lite(tmp: pathlib.Path) -> Iterator[Broker]:
    """pulsar-lite 0.2.0: ``pulsar-lite --addr HOST:PORT --db-path DIR`` (no HTTP port)."""
    port = free_port()
    data = tmp / "pulsar-lite" / "db"
    data.parent.mkdir(parents=True, exist_ok=True)
    log = tmp / "pulsar-lite.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [pulsar_lite_binary(), "--addr", f"127.0.0.1:{port}", "--db-path", str(data),
             "--log-level", "warn"],
            cwd=data.parent, stdout=fh, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": "warn"})
    with _running(Broker("pulsar-lite", "127.0.0.1", port, proc, data, log,
                         version=_version("pulsar-lite"))) as broker:
        yield broker


def start_pulsar(tmp: pathlib.Path, *, sync: bool = True,
                 name: str | None = None) -> AbstractContextManager[Broker]:
    """Apache Pulsar standalone (see :mod:`bench.pulsar_peer`); ``sync=False`` is its shipped
    ``journalSyncData=false``."""
    from bench.pulsar_peer import start_pulsar_standalone

    return start_pulsar_standalone(tmp, sync=sync, name=name or ("pulsar" if sync else
                                                                   "pulsar-nosync"))


Starter = Callable[[pathlib.Path], AbstractContextManager[Broker]]

STARTERS: dict[str, Starter] = {
    "horae": start_horae,
    "pulsar-lite": start_pulsar_lite,
    "pulsar": start_pulsar,
    "horae-nofsync": lambda tmp: start_horae(tmp, fsync=False),
    "pulsar-nosync": lambda tmp: start_pulsar(tmp, sync=False),
}
DEFAULT_PEERS = ("horae", "pulsar-lite", "pulsar")


def parse_peers(text: str) -> list[str]:
    """``"horae,pulsar"`` -> the names, checked against :data:`STARTERS` (order kept)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STARTERS]
    if unknown or not names:
        raise ValueError(f"unknown peer(s) {unknown or text!r}; choose from {', '.join(STARTERS)}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def started(tmp: pathlib.Path, names: list[str]) -> Iterator[list[Broker]]:
    """Every peer in *names*, all running at once (stopped in reverse order)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(STARTERS[n](tmp)) for n in names]
