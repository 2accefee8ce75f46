"""Shared fixtures: in-process brokers, broker subprocesses, official clients, free ports.

- ``broker``: a fresh in-process broker (``broker.embed.start_broker``) with its data in
  ``tmp_path``, stopped after the test.
- ``broker_factory(**kw)``: start more brokers (kw as ``start_broker``; pass
  ``data_dir=old.data_dir`` to restart on the same data). Every broker is stopped at teardown.
- ``client``: ``pulsar.Client(broker.service_url, operation_timeout_seconds=10)``, closed at
  teardown. Client logging is limited to warnings so test output stays readable.
- ``free_port()``: a TCP port on 127.0.0.1 that was free a moment ago.
- ``run_broker_process(data_dir, ...)``: ``python -m broker serve`` as a subprocess (for
  kill -9 and restart tests, or under ``open_files_limit``); returns a :class:`BrokerProcess`.
  All are killed at teardown.
- ``pulsar_standalone``: one Apache Pulsar 4.0 standalone for the whole session
  (``bench.pulsar_peer``, free loopback ports, a temporary directory; 30-90 s to start), for
  the differential tests and every comparison with Pulsar. Skipped with the reason when Java
  17+ or Maven is missing or Pulsar's runtime cannot be resolved.
  ``HORAE_ORACLE_PULSAR=pulsar://host:port,http://host:port`` uses one already running. The
  tests that use it run last, so the JVM lives only for them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from waiting import WaitTimeout, wait_until

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROCESS_START_TIMEOUT_S = 90.0
PROCESS_STOP_TIMEOUT_S = 30.0
_STARTED = re.compile(r"service (pulsar://\S+) web (http://\S+)")


def find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> Callable[[], int]:
    return find_free_port


def make_client(service_url: str, **kw: Any) -> Any:
    """An official client with quiet logging (warnings and errors only)."""
    import pulsar

    kw.setdefault("operation_timeout_seconds", 10)
    kw.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    return pulsar.Client(service_url, **kw)


@pytest.fixture
def broker_factory(tmp_path: pathlib.Path) -> Iterator[Callable[..., Any]]:
    from broker.embed import start_broker

    handles: list[Any] = []
    counter = itertools.count()

    def factory(**kw: Any) -> Any:
        kw.setdefault("data_dir", tmp_path / f"broker-{next(counter)}")
        handle = start_broker(**kw)
        handles.append(handle)
        return handle

    yield factory
    for handle in reversed(handles):
        handle.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory()


@pytest.fixture
def client(broker: Any) -> Iterator[Any]:
    c = make_client(broker.service_url)
    yield c
    c.close()


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"cannot write {value!r} as TOML")


class BrokerProcess:
    """A ``python -m broker serve`` subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: pathlib.Path,
                 service_url: str, web_url: str, data_dir: pathlib.Path) -> None:
        self.proc = proc
        self.log_path = log_path
        self.service_url = service_url
        self.web_url = web_url
        self.data_dir = data_dir
        self.broker_port = int(service_url.rsplit(":", 1)[1])
        self.web_port = int(web_url.rsplit(":", 1)[1])

    def stop(self, timeout: float = PROCESS_STOP_TIMEOUT_S) -> int:
        """SIGTERM (graceful shutdown) and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL: no flush, no cleanup (crash tests)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _open_files_limit(limit: int | None) -> Callable[[], None] | None:
    """A preexec_fn setting the child's soft and hard RLIMIT_NOFILE to *limit* (None: as is)."""
    if limit is None:
        return None

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


@pytest.fixture
def run_broker_process(tmp_path: pathlib.Path) -> Iterator[Callable[..., BrokerProcess]]:
    procs: list[BrokerProcess] = []
    counter = itertools.count()

    def start(data_dir: pathlib.Path | str, *, broker_port: int = 0, web_port: int = 0,
              config_overrides: Mapping[str, object] | None = None,
              extra_args: tuple[str, ...] = (),
              open_files_limit: int | None = None) -> BrokerProcess:
        n = next(counter)
        data_path = pathlib.Path(data_dir)
        args = [sys.executable, "-m", "broker", "serve", "--data-dir", str(data_path),
                "--broker-port", str(broker_port), "--web-port", str(web_port),
                "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1"]
        if config_overrides:
            conf = tmp_path / f"broker-process-{n}.toml"
            conf.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in config_overrides.items()))
            args += ["--config", str(conf)]
        args += list(extra_args)
        log_path = tmp_path / f"broker-process-{n}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                    preexec_fn=_open_files_limit(open_files_limit))
        # The started line is in a subprocess's log file: there is no event to wait on.
        with contextlib.suppress(WaitTimeout):  # reported below, with the broker's log
            wait_until(
                lambda: _STARTED.search(log_path.read_text(errors="replace")) or proc.poll() is not None,
                timeout_s=PROCESS_START_TIMEOUT_S, interval_s=0.05,
            )
        match = _STARTED.search(log_path.read_text(errors="replace"))
        if match is None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise RuntimeError(f"broker process did not start:\n{log_path.read_text(errors='replace')}")
        bp = BrokerProcess(proc, log_path, match.group(1), match.group(2), data_path)
        procs.append(bp)
        return bp

    yield start
    for bp in procs:
        bp.kill()


# -- Apache Pulsar standalone, the peer and oracle ------------------------------------------------


@dataclass(frozen=True)
class PulsarStandalone:
    service_url: str
    web_url: str


def _java_major(java: str) -> int | None:
    done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                          check=False)
    for token in done.stderr.split():
        token = token.strip('"')
        head = token.split(".", 1)[0]
        if head.isdigit() and "." in token:
            return int(token.split(".")[1]) if head == "1" else int(head)
    return None


def pulsar_standalone_missing() -> str | None:
    """Why Pulsar standalone cannot run here, or None."""
    java = shutil.which(os.environ.get("PULSAR_JAVA") or "java")
    if java is None:
        return "java (17+) is not installed: Pulsar standalone cannot run"
    major = _java_major(java)
    if major is None or major < 17:
        return f"Pulsar 4.0 needs Java 17+, found {major}"
    if shutil.which("mvn") is None:
        return "mvn is not installed: Pulsar's runtime cannot be resolved from Maven Central"
    return None


@pytest.fixture(scope="session")
def pulsar_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarStandalone]:
    given = os.environ.get("HORAE_ORACLE_PULSAR")
    if given:
        service_url, web_url = given.split(",", 1)
        yield PulsarStandalone(service_url, web_url)
        return
    reason = pulsar_standalone_missing()
    if reason is not None:
        pytest.skip(reason)
    from bench.pulsar_peer import runtime_jars, start_pulsar_standalone

    try:
        runtime_jars()
    except (subprocess.SubprocessError, RuntimeError) as exc:
        pytest.skip(f"Pulsar's runtime cannot be resolved from Maven Central: {exc}")
    # its WebSocket service on, as Horae's: the differential tests compare the /ws/v2 sessions
    with start_pulsar_standalone(tmp_path_factory.mktemp("pulsar"), sync=False,
                                 extra={"webSocketServiceEnabled": "true"}) as broker:
        yield PulsarStandalone(broker.url, f"http://{broker.host}:{broker.web_port}")


#: The tests that use Pulsar standalone (the session fixture above). Under pytest-xdist
#: (``bash .ci/run`` runs the suite on two workers) one worker takes them all, so one JVM
#: serves them; every other test file goes to a worker whole, so a module's or the session's
#: fixtures (a Spark session) start once.
PULSAR_STANDALONE_SCOPE = ("tests/compat/oracle/", "tests/cli/test_cli_perf.py")


def worker_scope(nodeid: str) -> str:
    """The unit of work a test worker takes: the test's file, or all of Pulsar standalone's."""
    path = nodeid.split("::", 1)[0]
    return "pulsar-standalone" if path.startswith(PULSAR_STANDALONE_SCOPE) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class TestScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

    return TestScopeScheduling(config, log)


#: The longest test files (a Maven build and the Java judges; a Spark job): they start first,
#: so that no worker is left running one of them alone at the end.
LONGEST_FIRST = ("tests/compat/test_java_client.py", "tests/jobs/test_metrics_rollup_job.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that need Pulsar standalone run last: its JVM then lives only while they run."""
    def needs_pulsar(item: pytest.Item) -> bool:
        return "pulsar_standalone" in getattr(item, "fixturenames", ())

    def order(item: pytest.Item) -> tuple[bool, bool]:
        return needs_pulsar(item), not item.nodeid.startswith(LONGEST_FIRST)

    items.sort(key=order)  # stable: the order within each group is kept
    strays = [item.nodeid for item in items
              if needs_pulsar(item) and worker_scope(item.nodeid) != "pulsar-standalone"]
    if strays:
        raise pytest.UsageError("tests needing Pulsar standalone outside PULSAR_STANDALONE_SCOPE "
                                f"(tests/conftest.py): {strays}")
