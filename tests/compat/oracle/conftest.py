"""Fixtures of the differential tests: one Horae and one Pulsar 4.0 standalone per session.

``peers`` is the pair both scenarios run against: a Horae started in this process
(:func:`broker.embed.start_broker`, free loopback ports, a temporary data directory) and Apache
Pulsar standalone from Maven Central (:func:`bench.pulsar_peer.start_pulsar_standalone`, free
ports, a temporary directory; 30-60 s to start, so it is shared by the whole session). Both are
stopped at the end of the session. Skipped, with the reason, when ``java`` (17+) or ``mvn`` is
missing or Pulsar's runtime cannot be resolved from Maven Central.

``HORAE_ORACLE=full`` runs every scenario; without it each module runs its sample (the
scenarios ``bash .ci/run`` can afford). ``HORAE_ORACLE_PULSAR=pulsar://host:port,http://host:port``
uses a Pulsar standalone already running (its ``standalone`` cluster and defaults) instead of
starting one.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for path in (ROOT, HERE, ROOT / "tests" / "broker"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from peers import Peer, Peers  # noqa: E402


def _java_major(java: str) -> int | None:
    done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                          check=False)
    for token in done.stderr.split():
        token = token.strip('"')
        head = token.split(".", 1)[0]
        if head.isdigit() and "." in token:
            return int(token.split(".")[1]) if head == "1" else int(head)
    return None


def _skip_reason() -> str | None:
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
def pulsar_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    given = os.environ.get("HORAE_ORACLE_PULSAR")
    if given:
        service_url, web_url = given.split(",", 1)
        yield Peer("pulsar", service_url, web_url)
        return
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from bench.pulsar_peer import runtime_jars, start_pulsar_standalone

    try:
        runtime_jars()
    except (subprocess.SubprocessError, RuntimeError) as exc:
        pytest.skip(f"Pulsar's runtime cannot be resolved from Maven Central: {exc}")
    with start_pulsar_standalone(tmp_path_factory.mktemp("pulsar"), sync=False) as broker:
        yield Peer("pulsar", broker.url, f"http://{broker.host}:{broker.web_port}")


@pytest.fixture(scope="session")
def horae_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    from broker.embed import start_broker

    with start_broker(data_dir=tmp_path_factory.mktemp("horae")) as handle:
        yield Peer("horae", handle.service_url, handle.web_url)


@pytest.fixture(scope="session")
def peers(pulsar_peer: Peer, horae_peer: Peer) -> Peers:
    return Peers(horae_peer, pulsar_peer)
