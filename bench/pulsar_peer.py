"""Apache Pulsar 4.0 standalone as a benchmark peer: its runtime, its configuration, its process.

Theory of operation
-------------------
``bench/peers/pulsar/pom.xml`` names Pulsar's broker and its runtime; :func:`runtime_jars`
copies them once (``mvn -q dependency:copy-dependencies``) into ``bench/peers/pulsar/target/lib``
(ignored by git) and reuses them afterwards. :func:`start_pulsar_standalone` then runs one JVM,
``org.apache.pulsar.PulsarStandaloneStarter --no-functions-worker --no-stream-storage``: the
broker, one embedded bookie and the RocksDB metadata store (4.0's standalone default), with
everything under ``tmp/<name>/`` and a ``standalone.conf`` written there. The same file
configures the broker (``ServiceConfiguration``) and the bookie (BookKeeper's
``ServerConfiguration`` loads it too), so the journal settings below are the bookie's.

Ports: the broker's binary port (6650's equivalent), its web port (8080's) and the bookie's
port are free loopback ports picked here (``allowEphemeralPorts=true`` makes the bookie take
``--bookkeeper-port`` instead of scanning from 15000); TLS ports stay unset, ZooKeeper, stream
storage, the functions worker, the bookie's HTTP server and the WebSocket service are off, so
those three are the only ports it listens on (:func:`listening_ports` checks).

Durability (``sync=True``, the ``pulsar`` peer), equal to Horae's "fsync before every receipt":
the bookie writes each entry to its journal (``journalWriteData=true``) and fsyncs the journal
before it acknowledges the add (``journalSyncData=true``; Pulsar's shipped standalone.conf has
``false``), grouping concurrent adds into one fsync (``journalAdaptiveGroupWrites=true``,
``journalMaxGroupWaitMSec=1`` as shipped, ``journalFlushWhenQueueEmpty=true`` so a lone add is
synced at once rather than after the group wait, as Horae's group commit does); the broker
sends SEND_RECEIPT only after the bookie acknowledged (ensemble = write quorum = ack quorum =
1, one bookie). ``brokerDeduplicationEnabled=true`` because Horae deduplicates by default.
``sync=False`` (the ``pulsar-nosync`` peer) is Pulsar standalone as shipped on durability:
``journalSyncData=false`` (journal written, not fsynced), deduplication still on.

JVM: Java 17 (``$PULSAR_JAVA`` or ``java``), ``-Xmx2g -XX:MaxDirectMemorySize=2g``, the JVM's
default G1 collector and no ``-Xms``/pre-touch, so RSS shows what the broker uses rather than
what it reserved; the ``--add-opens`` and ``-D`` options are those ``bin/pulsar`` passes.

Ready means: ``GET /admin/v2/clusters`` lists ``standalone``, ``public/default`` exists, and a
topic lookup (``GET /lookup/v2/topic/persistent/public/default/...``) answers a broker URL.
Stop (:meth:`bench.brokers.Broker.stop`): SIGTERM (Pulsar's shutdown hook closes broker and
bookie), then SIGKILL after ``STOP_TIMEOUT_S``. :func:`relaunch` stops it (SIGKILL by default)
and starts the same command line again: a restart on the same data and ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

from bench.processes import Broker, free_port

PEER_DIR = pathlib.Path(__file__).resolve().parent / "peers" / "pulsar"
LIB_DIR = PEER_DIR / "target" / "lib"
PULSAR_VERSION = "4.0.7"
"""Must match ``pulsar.version`` in ``bench/peers/pulsar/pom.xml``."""
READY_TIMEOUT_S = 240.0
HEAP = ["-Xmx2g", "-XX:MaxDirectMemorySize=2g"]
JVM_OPTS = [
    "-Djava.net.preferIPv4Stack=true", "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "-Dlog4j.shutdownHookEnabled=false", "-Dlog4j2.is.webapp=false",
    "-Dbookkeeper.metadata.bookie.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
]

DURABLE = {
    "journalWriteData": "true",
    "journalSyncData": "true",
    "journalAdaptiveGroupWrites": "true",
    "journalMaxGroupWaitMSec": "1",
    "journalFlushWhenQueueEmpty": "true",
}
RELAXED = {**DURABLE, "journalSyncData": "false"}

LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders><Console name="out" target="SYSTEM_OUT">
    <PatternLayout pattern="%d{HH:mm:ss.SSS} %-5p %c{1} - %m%n"/></Console></Appenders>
  <Loggers>
    <Logger name="org.apache.pulsar.PulsarStandalone" level="info"/>
    <Root level="warn"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


def standalone_conf(*, broker_port: int, web_port: int, sync: bool,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings written to ``standalone.conf`` (Pulsar's names; the rest keep defaults);
    *extra* overrides them (e.g. ``transactionCoordinatorEnabled=true``)."""
    return {
        "clusterName": "standalone",
        "metadataStoreUrl": "",
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "brokerServicePort": str(broker_port),
        "webServicePort": str(web_port),
        "allowEphemeralPorts": "true",
        "allowLoopback": "true",
        "httpServerEnabled": "false",
        "webSocketServiceEnabled": "false",
        "functionsWorkerEnabled": "false",
        "transactionCoordinatorEnabled": "false",
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
        "loadBalancerEnabled": "false",
        "brokerDeduplicationEnabled": "true",
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "diskUsageThreshold": "0.99",
        "diskUsageWarnThreshold": "0.99",
        "brokerShutdownTimeoutMs": "10000",
        **(DURABLE if sync else RELAXED),
        **(extra or {}),
    }


def runtime_jars() -> pathlib.Path:
    """The directory of Pulsar's jars, copied by Maven on first use."""
    marker = LIB_DIR / f"pulsar-broker-{PULSAR_VERSION}.jar"
    if not marker.exists():
        subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies"], cwd=PEER_DIR,
                       check=True, timeout=3600)
    if not marker.exists():
        raise RuntimeError(f"{marker} missing after mvn dependency:copy-dependencies")
    return LIB_DIR


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # loopback only
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return 0, b""


def _ready(web: str) -> bool:
    status, body = _get(f"{web}/admin/v2/clusters")
    if status != 200 or "standalone" not in json.loads(body or b"[]"):
        return False
    status, body = _get(f"{web}/admin/v2/namespaces/public")
    if status != 200 or "public/default" not in json.loads(body or b"[]"):
        return False
    status, body = _get(f"{web}/lookup/v2/topic/persistent/public/default/ready-probe")
    return status == 200 and b"brokerUrl" in body


def wait_ready(broker: Broker, timeout_s: float = READY_TIMEOUT_S) -> None:
    web = f"http://{broker.host}:{broker.web_port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker.proc.poll() is not None:
            raise RuntimeError(
                f"pulsar exited: {broker.log.read_text(errors='replace')[-3000:]}")
        if _ready(web):
            return
        time.sleep(0.5)  # polling a starting JVM: nothing to wait on but its answers
    raise RuntimeError(f"pulsar not ready within {timeout_s} s: "
                       f"{broker.log.read_text(errors='replace')[-3000:]}")


def listening_ports(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on (``/proc/PID/net/tcp{,6}`` by its socket inodes)."""
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        path = pathlib.Path(f"/proc/{pid}/net/{table}")
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state 0A = LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@contextlib.contextmanager
def start_pulsar_standalone(tmp: pathlib.Path, *, sync: bool = True, name: str = "pulsar",
                            extra: Mapping[str, str] | None = None,
                            heap: str | None = None) -> Iterator[Broker]:
    """*heap*: ``-Xmx`` in the JVM's notation, e.g. ``"6g"`` (direct memory stays 2g); default
    :data:`HEAP`."""
    broker = launch_standalone(tmp, sync=sync, name=name, extra=extra, heap=heap)
    try:
        yield broker
    finally:
        broker.stop()


def launch_standalone(tmp: pathlib.Path, *, sync: bool = True, name: str = "pulsar",
                      extra: Mapping[str, str] | None = None,
                      heap: str | None = None) -> Broker:
    """:func:`start_pulsar_standalone` without the context: the caller stops the broker."""
    lib = runtime_jars()
    port, web, bookie = free_port(), free_port(), free_port()
    base = tmp / name
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "standalone.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in
                            standalone_conf(broker_port=port, web_port=web, sync=sync,
                                                            extra=extra).items()))
    (base / "log4j2.xml").write_text(LOG4J2)
    log = tmp / f"{name}.log"
    java = os.environ.get("PULSAR_JAVA", "java")
    jvm_heap = HEAP if heap is None else [f"-Xmx{heap}", *HEAP[1:]]
    args = [java, *jvm_heap, *JVM_OPTS, f"-Dlog4j.configurationFile={base / 'log4j2.xml'}",
            f"-Djava.io.tmpdir={base}", "-cp", f"{lib}/*",
            "org.apache.pulsar.PulsarStandaloneStarter", "--config", str(conf),
            "--no-functions-worker", "--no-stream-storage", "--advertised-address", "127.0.0.1",
            "--metadata-dir", str(base / "metadata"), "--bookkeeper-dir", str(base / "bookie"),
            "--zookeeper-dir", str(base / "zookeeper"), "--bookkeeper-port", str(bookie)]
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, cwd=base, stdout=fh, stderr=subprocess.STDOUT)
    broker = Broker(name, "127.0.0.1", port, proc, base, log, web, version=PULSAR_VERSION)
    try:
        wait_ready(broker)
        extra_ports = listening_ports(proc.pid) - {port, web, bookie}
        if extra_ports:
            raise RuntimeError(f"pulsar listens on ports it was not given: {sorted(extra_ports)}")
    except BaseException:
        broker.stop()
        raise
    return broker


def relaunch(broker: Broker, *, kill: bool = True) -> float:
    """Stop ``broker`` (SIGKILL with ``kill``: what a crash leaves; else its graceful stop) and
    start the same standalone again: the same command line, so its data, configuration and
    ports. ``broker.proc`` becomes the new process (not waited for: :func:`wait_ready`).
    Returns the ``perf_counter`` time just before the new ``Popen``."""
    old = broker.proc
    if kill and old.poll() is None:
        old.kill()
        old.wait()
    else:
        broker.stop()
    args = old.args
    assert isinstance(args, list)
    with broker.log.open("ab") as fh:
        t0 = time.perf_counter()
        broker.proc = subprocess.Popen(args, cwd=broker.data, stdout=fh,
                                       stderr=subprocess.STDOUT)
    return t0
