"""deploy/compose.yaml: parsed by a Compose-spec parser, and every reference it makes resolves.

``compose-spec`` (test extra; Python bindings of the Rust ``compose_spec`` parser) rejects
unknown keys, bad port syntax and bad enum values. What a parser cannot know is checked here:
bind-mounted files exist, the build points at the Containerfile, the Prometheus target is the
Horae service's published port, and Grafana's provisioned data source and dashboard paths meet
the mounts.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from deploy_testlib import DEPLOY, load_yaml

compose_spec = pytest.importorskip(
    "compose_spec", reason="compose-spec is not installed (test extra)")

COMPOSE = DEPLOY / "compose.yaml"


def _parsed(text: str) -> dict[str, Any]:
    compose = compose_spec.PyCompose.from_yaml(text)
    compose.validate()
    result: dict[str, Any] = compose.to_dict()
    return result


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """{container path: host source} of a service's short-syntax volumes."""
    out = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        out[target] = source
    return out


def test_compose_file_parses_under_the_compose_spec() -> None:
    doc = _parsed(COMPOSE.read_text())
    assert sorted(doc["services"]) == ["grafana", "horae", "prometheus"]


def test_compose_parser_rejects_a_misspelt_key_and_a_bad_port() -> None:
    text = COMPOSE.read_text()
    with pytest.raises(ValueError) as misspelt:
        _parsed(text.replace("stop_grace_period:", "stop_grace_perod:"))
    with pytest.raises(ValueError) as bad_port:
        _parsed(text.replace('"6650:6650"', '"66x50:6650"'))
    assert "stop_grace_perod" in str(misspelt.value)
    assert "66x50" in str(bad_port.value)


def test_compose_references_resolve() -> None:
    doc = load_yaml(COMPOSE)
    services = doc["services"]
    base = COMPOSE.parent
    build = services["horae"]["build"]
    assert (base / build["context"] / build["dockerfile"]).is_file()
    assert (base / build["context"] / "pyproject.toml").is_file()
    named = set(doc["volumes"])
    for name, service in services.items():
        for target, source in _mounts(service).items():
            if source.startswith("."):
                assert (base / source).exists(), f"{name}: {source} -> {target}"
            else:
                assert source in named, f"{name}: undefined volume {source}"
        for dependency in service.get("depends_on", []):
            assert dependency in services
    assert _mounts(services["horae"])["/data"] == "horae-data"
    assert {"6650:6650", "8080:8080"} <= set(services["horae"]["ports"])


def test_prometheus_in_compose_scrapes_the_horae_service_and_loads_the_alerts() -> None:
    doc = load_yaml(COMPOSE)
    mounts = _mounts(doc["services"]["prometheus"])
    config_path = COMPOSE.parent / mounts["/etc/prometheus/prometheus.yml"]
    config = load_yaml(config_path)
    [target] = config["scrape_configs"][0]["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host == "horae"
    assert f"{port}:{port}" in doc["services"]["horae"]["ports"]
    for rule_file in config["rule_files"]:
        assert f"/etc/prometheus/{rule_file}" in mounts


def test_grafana_provisioning_meets_the_mounts() -> None:
    doc = load_yaml(COMPOSE)
    grafana = doc["services"]["grafana"]
    mounts = _mounts(grafana)
    base = COMPOSE.parent
    datasources_dir = base / mounts["/etc/grafana/provisioning/datasources"]
    [datasource] = [d for f in sorted(datasources_dir.glob("*.yaml"))
                    for d in load_yaml(f)["datasources"]]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "9090:9090" in doc["services"]["prometheus"]["ports"]
    providers_dir = base / mounts["/etc/grafana/provisioning/dashboards"]
    [provider] = [p for f in sorted(providers_dir.glob("*.yaml"))
                  for p in load_yaml(f)["providers"]]
    dashboards_in = pathlib.PurePosixPath(provider["options"]["path"])
    dashboard_mounts = [t for t in mounts if pathlib.PurePosixPath(t).parent == dashboards_in]
    assert dashboard_mounts, "no dashboard mounted where the provider looks"
    for target in dashboard_mounts:
        dashboard = json.loads((base / mounts[target]).read_text())
        assert dashboard["uid"] == "horae-broker"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in dashboard_mounts
