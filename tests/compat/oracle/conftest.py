"""Fixtures of the differential tests: one Horae and one Pulsar 4.0 standalone per session.

``peers`` is the pair both scenarios run against: a Horae started in this process
(:func:`broker.embed.start_broker`, free loopback ports, a temporary data directory) and the
session's Apache Pulsar standalone (``pulsar_standalone`` of ``tests/conftest.py``: from Maven
Central, free ports, a temporary directory, shared by every test that compares with Pulsar).
Both are stopped at the end of the session. Skipped, with the reason, when ``java`` (17+) or
``mvn`` is missing or Pulsar's runtime cannot be resolved from Maven Central.

``HORAE_ORACLE=full`` runs every scenario; without it each module runs its sample (the
scenarios ``bash .ci/run`` can afford). ``HORAE_ORACLE_PULSAR=pulsar://host:port,http://host:port``
uses a Pulsar standalone already running (its ``standalone`` cluster and defaults) instead of
starting one.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for path in (ROOT, HERE, ROOT / "tests" / "broker"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from peers import Peer, Peers  # noqa: E402


@pytest.fixture(scope="session")
def pulsar_peer(pulsar_standalone: Any) -> Peer:
    return Peer("pulsar", pulsar_standalone.service_url, pulsar_standalone.web_url)


@pytest.fixture(scope="session")
def horae_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    from broker.embed import start_broker

    with start_broker(data_dir=tmp_path_factory.mktemp("horae")) as handle:
        yield Peer("horae", handle.service_url, handle.web_url)


@pytest.fixture(scope="session")
def peers(pulsar_peer: Peer, horae_peer: Peer) -> Peers:
    return Peers(horae_peer, pulsar_peer)
