"""Start the brokers a benchmark compares: Horae (subprocess) and the pulsar-lite binary.

Theory of operation
-------------------
Each starter is a context manager that picks free loopback ports, puts the broker's data in a
directory under the caller's temporary directory, starts the broker as a child process, waits
(bounded) until its binary port accepts connections, yields a :class:`Broker`, and terminates
(then kills) the child on exit. Horae runs as ``python -m broker serve`` with its defaults (fsync
before every receipt), so benchmarks import nothing under ``broker/``. The child's pid is the
broker process itself, so :func:`cpu_seconds` on it reads the broker's CPU (all threads).

Used by ``bench/compare_peer.py`` (official client) and ``bench/wire_load.py`` (raw wire).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {START_TIMEOUT_S} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and all its threads (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    # fields after "(comm)": state is field 3, utime field 14, stime field 15 (proc(5))
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S


@dataclass
class Broker:
    name: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    data: pathlib.Path
    log: pathlib.Path
    web_port: int | None = None

    @property
    def url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def _running(broker: Broker) -> Iterator[Broker]:
    try:
        wait_port(broker.port, broker.proc, broker.log)
        yield broker
    finally:
        broker.stop()


@contextlib.contextmanager
def start_horae(tmp: pathlib.Path, *, fsync: bool = True, name: str | None = None,
                config: str = "") -> Iterator[Broker]:
    """A Horae broker; *config* is extra TOML lines for its config file."""
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
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    with _running(Broker(name, "127.0.0.1", port, proc, data, log, web)) as broker:
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
    with _running(Broker("pulsar-lite", "127.0.0.1", port, proc, data, log)) as broker:
        yield broker
