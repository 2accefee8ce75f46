"""deploy/k8s: every manifest validated offline against the Kubernetes JSON schemas.

``kubernetes-validate`` (test extra) ships the OpenAPI-derived JSON schemas of each Kubernetes
release and validates without a cluster; ``strict`` rejects unknown fields. The ServiceMonitor is
a Prometheus Operator CRD that no schema package ships: it is checked against the Service it
selects (labels and port name), which is what makes it scrape anything.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from deploy_testlib import DEPLOY, load_yaml_documents

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (test extra)")

K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.30.0"
PORTS = {"pulsar": 6650, "http": 8080, "pulsar-tls": 6651, "https": 8443}


def _resources() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in load_yaml_documents(path)]


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [r for r in _resources() if r["kind"] == kind]


def _validate(resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_builtin_manifests_match_the_kubernetes_schemas() -> None:
    kinds = []
    for resource in _resources():
        if resource["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        _validate(resource)
        kinds.append(resource["kind"])
    assert sorted(kinds) == ["ConfigMap", "PodDisruptionBudget", "Service", "Service",
                             "StatefulSet"]


def test_schema_validation_rejects_a_wrong_type_and_an_unknown_field() -> None:
    [sts] = _by_kind("StatefulSet")
    bad_type = copy.deepcopy(sts)
    bad_type["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError) as wrong_type:
        _validate(bad_type)
    unknown = copy.deepcopy(sts)
    unknown["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError) as unknown_field:
        _validate(unknown)
    assert "one" in str(wrong_type.value)
    assert "livenesProbe" in str(unknown_field.value)


def test_statefulset_keeps_data_on_a_claim_and_probes_the_health_endpoints() -> None:
    [sts] = _by_kind("StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] == 1
    [claim] = spec["volumeClaimTemplates"]
    [container] = spec["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/data"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HORAE_dataDir"] == "/data"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == PORTS
    assert container["readinessProbe"]["httpGet"]["path"] == "/admin/v2/brokers/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/status.html"
    assert container["startupProbe"]["httpGet"]["path"] == "/status.html"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "http"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert spec["serviceName"] in {s["metadata"]["name"] for s in _by_kind("Service")}
    [configmap] = _by_kind("ConfigMap")
    assert container["envFrom"][0]["configMapRef"]["name"] == configmap["metadata"]["name"]


def test_services_pdb_and_servicemonitor_select_the_broker_pod() -> None:
    [sts] = _by_kind("StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    services = {s["metadata"]["name"]: s for s in _by_kind("Service")}
    client = services["horae"]
    assert {p["name"]: p["port"] for p in client["spec"]["ports"]} == PORTS
    for service in services.values():
        assert service["spec"]["selector"].items() <= pod_labels.items()
    [pdb] = _by_kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    [monitor] = _by_kind("ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    selected = [s for s in services.values() if wanted <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in selected] == ["horae"]   # not scraped twice
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in client["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True


def test_configmap_settings_load_as_a_valid_broker_config() -> None:
    from broker.config import load_config

    [configmap] = _by_kind("ConfigMap")
    config = load_config(None, environ=configmap["data"])
    assert config.log_format == "json"
    assert config.broker_shutdown_timeout_ms == 60000
