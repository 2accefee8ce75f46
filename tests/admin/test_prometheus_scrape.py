"""A real Prometheus scrapes a test broker: proof that /metrics is valid exposition.

Needs the ``prometheus`` binary (``.ci/run`` installs it with apt-get); skipped with a reason
when it is absent. Prometheus runs on a free loopback port with its TSDB in ``tmp_path``,
scrapes every second, and is killed at teardown.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from waiting import WaitTimeout, wait_until

PROMETHEUS = shutil.which("prometheus")
START_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 45.0
POLL_S = 0.25   # polling another process's HTTP API: there is no event to wait on
TOPIC = "persistent://public/default/prom-scraped"
MESSAGES = 13

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run does)")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture
def prometheus(broker: Any, tmp_path: pathlib.Path,
               free_port: Callable[[], int]) -> Iterator[str]:
    assert PROMETHEUS is not None
    port = free_port()
    target = broker.web_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: horae\n"
        "    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail("prometheus exited:\n" + (tmp_path / "prometheus.log").read_text())
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    try:
        try:
            wait_until(ready, timeout_s=START_TIMEOUT_S, interval_s=POLL_S)
        except WaitTimeout:
            pytest.fail("prometheus did not become ready:\n"
                        + (tmp_path / "prometheus.log").read_text())
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_prometheus_scrapes_the_published_count(prometheus: str, client: Any,
                                                 tmp_path: pathlib.Path) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(MESSAGES):
        producer.send(f"m{i}".encode())
    producer.close()
    query = urllib.parse.urlencode({"query": f'pulsar_in_messages_total{{topic="{TOPIC}"}}'})

    def scraped_result() -> list[Any] | None:
        answer = _get_json(f"{prometheus}/api/v1/query?{query}")
        assert answer["status"] == "success"
        result: list[Any] = answer["data"]["result"]
        return result if result and float(result[0]["value"][1]) == MESSAGES else None

    result = wait_until(scraped_result, timeout_s=RESULT_TIMEOUT_S, interval_s=POLL_S,
                        message=f"prometheus reports pulsar_in_messages_total == {MESSAGES}")
    targets = _get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets
    assert result[0]["metric"]["namespace"] == "public/default"
    assert result[0]["metric"]["cluster"] == "standalone"
