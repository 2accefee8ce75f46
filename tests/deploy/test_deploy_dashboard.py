"""The Grafana dashboard and the alert rules against a real Prometheus scraping a real Horae.

A broker (in-process, loopback, free ports) gets traffic that should light every panel: publishes,
a Shared subscription with a consumer, a backlog, delayed messages, a message refused by a max
delay (PIP-315) and one overridden by a fixed delay (PIP-437). Prometheus runs from
deploy/prometheus/prometheus.yml (scrape target and interval swapped for the test broker) with
deploy/prometheus/alerts.yml. Every panel query and every template variable is then evaluated
through Prometheus's HTTP API with Grafana's variables expanded to "all"; none may come back
empty. The rules must load and evaluate without error.

Needs the ``prometheus`` binary (``.ci/run`` installs it); skipped with the reason otherwise.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from deploy_testlib import DEPLOY, find_tool

PROMETHEUS = find_tool("prometheus")
DASHBOARD = DEPLOY / "grafana" / "horae-dashboard.json"
START_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 60.0
POLL_S = 0.25   # polling another process's HTTP API: there is no event to wait on
RATE_WINDOW = "20s"   # stands for Grafana's $__rate_interval at a 1 s scrape interval
NS = "persistent://public/default"

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run does)")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _post_json(url: str, body: object) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return int(resp.status)


def _panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) with Grafana's variables expanded to match everything."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], _expand(target["expr"])))
    return out


def _expand(expr: str) -> str:
    expr = expr.replace("$__rate_interval", RATE_WINDOW)
    return re.sub(r"\$(\w+)", ".*", expr)


def _variable_queries() -> list[tuple[str, str, str]]:
    """(variable, label, series selector) of every label_values() template variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
        assert match, var["definition"]
        out.append((var["name"], match.group(2), _expand(match.group(1))))
    return out


@pytest.fixture
def prometheus(broker: Any, tmp_path: pathlib.Path,
               free_port: Callable[[], int]) -> Iterator[str]:
    assert PROMETHEUS is not None
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    [job] = config["scrape_configs"]
    job.update(scrape_interval="1s", scrape_timeout="1s")
    job["static_configs"][0]["targets"] = [broker.web_url.removeprefix("http://")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp_path / "alerts.yml")
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail("prometheus exited:\n" + log_path.read_text())
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready:\n" + log_path.read_text())
            time.sleep(POLL_S)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _traffic(broker: Any, client: Any) -> None:
    import pulsar

    topics = f"{broker.web_url}/admin/v2/persistent/public/default"
    consumer = client.subscribe(f"{NS}/dash-main", "dash-sub",
                                consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{NS}/dash-main", batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    for i in range(5):
        producer.send(f"later{i}".encode(), deliver_after=datetime.timedelta(hours=1))
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    assert client.create_producer(f"{NS}/dash-max").close() is None   # creates the topic
    assert _post_json(f"{topics}/dash-max/delayedDelivery",
                      {"maxDeliveryDelayInMillis": 1000}) == 204
    # The client fails the refused send (ChecksumError for the C++-based clients,
    # tests/delayed/test_delayed_max_delay_client.py): fire and forget.
    limited = client.create_producer(f"{NS}/dash-max", batching_enabled=False)
    limited.send_async(b"too late", lambda _result, _msg_id: None,
                       deliver_after=datetime.timedelta(hours=1))

    assert client.create_producer(f"{NS}/dash-fixed").close() is None
    assert _post_json(f"{topics}/dash-fixed/delayedDelivery",
                      {"fixedDeliveryDelayInMillis": 60_000}) == 204
    fixed = client.create_producer(f"{NS}/dash-fixed", batching_enabled=False)
    fixed.send(b"overridden", deliver_after=datetime.timedelta(seconds=5))


def _query(prometheus: str, expr: str) -> list[Any]:
    answer = _get_json(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert answer["status"] == "success", (expr, answer)
    result: list[Any] = answer["data"]["result"]
    return result


def test_every_dashboard_query_returns_data_from_a_real_horae(
        prometheus: str, broker: Any, client: Any) -> None:
    _traffic(broker, client)
    queries = _panel_queries()
    assert len(queries) >= 15
    empty: list[tuple[str, str]] = queries
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while empty and time.monotonic() < deadline:
        empty = [(title, expr) for title, expr in empty if not _query(prometheus, expr)]
        if empty:
            time.sleep(POLL_S)
    assert empty == [], "panels with no data"
    for name, label, selector in _variable_queries():
        values = _get_json(f"{prometheus}/api/v1/label/{label}/values?"
                           + urllib.parse.urlencode({"match[]": selector}))["data"]
        assert values, f"template variable {name} has no values"
    rejected = _query(prometheus, 'pulsar_broker_topic_messages_delayed_rejected_total'
                                  f'{{topic="{NS}/dash-max"}}')
    assert float(rejected[0]["value"][1]) >= 1
    overridden = _query(prometheus, 'pulsar_broker_topic_messages_fixed_delay_overridden_total'
                                    f'{{topic="{NS}/dash-fixed"}}')
    assert float(overridden[0]["value"][1]) == 1


def test_alert_rules_load_and_evaluate_against_a_real_horae(prometheus: str) -> None:
    rule_names: set[str] = set()
    groups: list[Any] = []
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while time.monotonic() < deadline:
        groups = _get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("2") and
                         not r["lastEvaluation"].startswith("0001") for r in rules):
            break
        time.sleep(POLL_S)
    rules = [r for g in groups for r in g["rules"]]
    rule_names = {r["name"] for r in rules}
    defined = {r["alert"] for g in yaml.safe_load(
        (DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"] for r in g["rules"]}
    assert rule_names == defined
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    firing = [r["name"] for r in rules if r["state"] == "firing"]
    assert firing == []   # a healthy broker under light load raises no alert
