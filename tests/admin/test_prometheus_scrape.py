"""A real Prometheus scrapes a test broker: proof that /metrics is valid exposition.

Needs the ``prometheus`` binary (``.ci/run`` installs it with apt-get); skipped with a reason
when it is absent. Prometheus runs on a free loopback port with its TSDB in ``tmp_path``,
scrapes every second, and is killed at teardown. The broker checks backlog quotas every second
(``backlogQuotaCheckIntervalInSeconds=1``) so the backlog age is known within the test.
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

import pulsar
import pytest
from waiting import WaitTimeout, wait_until

from .conftest import http

PROMETHEUS = shutil.which("prometheus")
START_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 45.0
POLL_S = 0.25   # polling another process's HTTP API: there is no event to wait on
TOPIC = "persistent://public/default/prom-scraped"
MESSAGES = 13

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run does)")


@pytest.fixture
def broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides={"backlogQuotaCheckIntervalInSeconds": 1})


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


SERIES_TOPIC = "persistent://public/default/prom-series"
SUBSCRIPTION = "prom-sub"
SMALL, LARGE = 6, 2            # entries of ~50 bytes (le_128) and ~3 KB (le_4_kb)
UNACKED = 3                    # left unacknowledged: the backlog
QUOTA_BYTES, QUOTA_SECONDS = 10 * 1024 * 1024, 3600
RECEIVE_MS = 10_000


def _query(prometheus: str, expr: str) -> list[Any]:
    query = urllib.parse.urlencode({"query": expr})
    answer = _get_json(f"{prometheus}/api/v1/query?{query}")
    assert answer["status"] == "success", answer
    result: list[Any] = answer["data"]["result"]
    return result


def test_prometheus_scrapes_pulsar_storage_entry_size_and_subscription_series(
        prometheus: str, broker: Any, client: Any) -> None:
    ns = "/admin/v2/namespaces/public/default/backlogQuota"
    assert http(broker.web_url, "POST", ns, {
        "limitSize": QUOTA_BYTES, "policy": "producer_request_hold"}).status == 204
    assert http(broker.web_url, "POST", ns + "?backlogQuotaType=message_age", {
        "limitTime": QUOTA_SECONDS, "policy": "producer_request_hold"}).status == 204
    consumer = client.subscribe(SERIES_TOPIC, SUBSCRIPTION,
                                consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(SERIES_TOPIC, batching_enabled=False)
    for i in range(SMALL):
        producer.send(f"m{i}".encode())
    for _ in range(LARGE):
        producer.send(b"x" * 3000)
    producer.close()
    received = [consumer.receive(RECEIVE_MS) for _ in range(SMALL + LARGE)]
    for msg in received[UNACKED:]:
        consumer.acknowledge(msg)
    consumer.redeliver_unacknowledged_messages()    # the unacked ones come again
    redelivered = [consumer.receive(RECEIVE_MS) for _ in range(UNACKED)]
    assert sorted(m.data() for m in redelivered) == sorted(m.data() for m in received[:UNACKED])
    assert all(m.redelivery_count() >= 1 for m in redelivered)

    topic = f'topic="{SERIES_TOPIC}"'
    sub = f'{topic},subscription="{SUBSCRIPTION}"'
    # expression -> what its value must satisfy. Windowed gauges and rates through
    # max_over_time: they may fall back once the activity is over.
    window = "[5m]"
    checks: dict[str, Callable[[float], bool]] = {
        f"pulsar_storage_backlog_size{{{topic}}}": lambda v: v > 0,
        f"pulsar_storage_logical_size{{{topic}}}": lambda v: v > 3000 * LARGE,
        f"max_over_time(pulsar_storage_write_rate{{{topic}}}{window})": lambda v: v > 0,
        f"max_over_time(pulsar_storage_read_rate{{{topic}}}{window})": lambda v: v > 0,
        f"max_over_time(pulsar_entry_size_le_128{{{topic}}}{window})": lambda v: v == SMALL,
        f"max_over_time(pulsar_entry_size_le_4_kb{{{topic}}}{window})": lambda v: v == LARGE,
        f"max_over_time(pulsar_entry_size_le_overflow{{{topic}}}{window})": lambda v: v == 0,
        f"max_over_time(pulsar_entry_size_count{{{topic}}}{window})":
            lambda v: v == SMALL + LARGE,
        f"max_over_time(pulsar_entry_size_sum{{{topic}}}{window})":
            lambda v: 3000 * LARGE < v < 4096 * LARGE + 128 * SMALL,
        f"max_over_time(pulsar_subscription_msg_rate_redeliver{{{sub}}}{window})":
            lambda v: v > 0,
        f"pulsar_subscription_blocked_on_unacked_messages{{{sub}}}": lambda v: v == 0,
        f"pulsar_storage_backlog_quota_limit{{{topic}}}": lambda v: v == QUOTA_BYTES,
        f"pulsar_storage_backlog_quota_limit_time{{{topic}}}": lambda v: v == QUOTA_SECONDS,
        f"pulsar_storage_backlog_age_seconds{{{topic}}}": lambda v: 0 <= v < QUOTA_SECONDS,
    }
    pending = dict(checks)
    last: dict[str, Any] = {}

    def all_seen() -> bool:
        for expr, ok in list(pending.items()):
            result = _query(prometheus, expr)
            last[expr] = result
            if len(result) == 1 and ok(float(result[0]["value"][1])):
                del pending[expr]
        return not pending

    try:
        wait_until(all_seen, timeout_s=RESULT_TIMEOUT_S, interval_s=POLL_S)
    except WaitTimeout:
        pytest.fail("series missing or implausible: "
                    + json.dumps({e: last.get(e) for e in pending}, indent=1))
    for expr in checks:
        if expr.startswith("max_over_time"):
            continue
        labels = _query(prometheus, expr)[0]["metric"]
        name = labels.pop("__name__")
        assert labels.pop("job") == "horae" and labels.pop("instance"), name
        expected = {"cluster": "standalone", "namespace": "public/default",
                    "topic": SERIES_TOPIC}
        if name.startswith("pulsar_subscription_"):
            expected["subscription"] = SUBSCRIPTION
        assert labels == expected, (name, labels)
    for m in redelivered:
        consumer.acknowledge(m)
    consumer.close()
