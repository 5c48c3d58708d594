"""operations/deploy/: valid Kubernetes objects, ServiceMonitor and Grafana dashboard, checked offline, wired the way the service needs."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

from bionemo_serving.startup.settings import Settings
from support.dashboards import DASHBOARD, dashboard_queries, metric_names

MANIFEST = Path(__file__).resolve().parents[2] / "operations" / "deploy" / "kubernetes.yaml"
# The oldest and the newest release the manifest targets; kubernetes-validate ships their schemas.
KUBERNETES_VERSIONS = ["1.30", "1.37"]

Document = dict[str, Any]
DOCUMENTS: list[Document] = list(yaml.safe_load_all(MANIFEST.read_text()))
BY_KIND: dict[str, Document] = {document["kind"]: document for document in DOCUMENTS}
DEPLOYMENT = BY_KIND["Deployment"]
POD = DEPLOYMENT["spec"]["template"]
(CONTAINER,) = POD["spec"]["containers"]


def validate(document: Document, version: str) -> None:
    """Strict: a field the schema does not know fails, as `kubectl apply --validate=strict` would."""
    assert kubernetes_validate.validate(document, version, strict=True) == version  # no fallback to older schemas


def test_the_manifest_holds_each_kind_once() -> None:
    assert sorted(document["kind"] for document in DOCUMENTS) == [
        "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service",
    ]  # fmt: skip


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda document: document["kind"])
def test_document_matches_the_kubernetes_schema(document: Document, version: str) -> None:
    validate(document, version)


def misspell_replicas(deployment: Document) -> None:
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")


def replicas_as_text(deployment: Document) -> None:
    deployment["spec"]["replicas"] = "two"


def probe_port_as_list(deployment: Document) -> None:
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = ["http"]


@pytest.mark.parametrize("mistake", [misspell_replicas, replicas_as_text, probe_port_as_list])
def test_the_validator_rejects_a_broken_deployment(mistake: Callable[[Document], None]) -> None:
    """Proves the schemas are really applied: the same Deployment with one mistake must fail."""
    broken = copy.deepcopy(DEPLOYMENT)
    mistake(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken, KUBERNETES_VERSIONS[-1])


GPU_MARKER = re.compile(r"^(\s*)#gpu ", re.MULTILINE)
"""Lines of the manifest that only a gpu image's pod has: the marker deleted, they are the GPU variant."""


def gpu_variant() -> Document:
    (deployment,) = [
        document for document in yaml.safe_load_all(GPU_MARKER.sub(r"\1", MANIFEST.read_text()))
        if document["kind"] == "Deployment"
    ]  # fmt: skip
    return deployment


def test_as_written_the_pod_is_the_cpu_images_and_asks_for_no_gpu() -> None:
    """`make image` builds the cpu target: a pod that requested a GPU would wait for a GPU node it never uses."""
    resources = CONTAINER["resources"]
    assert "nvidia.com/gpu" not in resources["requests"] and "nvidia.com/gpu" not in resources["limits"]
    assert "tolerations" not in POD["spec"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_gpu_variant_gets_one_gpu_per_pod_and_matches_the_schema(version: str) -> None:
    """The `#gpu ` lines, unmarked: for the gpu image (make image TARGET=gpu)."""
    deployment = gpu_variant()
    validate(deployment, version)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    unmarked = copy.deepcopy(deployment)
    for section in ("requests", "limits"):
        del unmarked["spec"]["template"]["spec"]["containers"][0]["resources"][section]["nvidia.com/gpu"]
    del unmarked["spec"]["template"]["spec"]["tolerations"]
    assert unmarked == DEPLOYMENT  # nothing else differs


def test_no_service_links_in_the_settings_namespace() -> None:
    """The Service `bionemo` would inject BIONEMO_PORT=tcp://..., clashing with the service's BIONEMO_PORT."""
    assert POD["spec"]["enableServiceLinks"] is False


def test_dev_shm_is_a_memory_backed_volume() -> None:
    """The python backend moves tensors through /dev/shm; the runtime's default 64 MB is too small."""
    (mount,) = [mount for mount in CONTAINER["volumeMounts"] if mount["mountPath"] == "/dev/shm"]
    (volume,) = [volume for volume in POD["spec"]["volumes"] if volume["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert volume["emptyDir"]["sizeLimit"]


@pytest.mark.parametrize(
    ("probe", "path"), [("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")]
)
def test_probes_ask_bentoml_on_the_container_port(probe: str, path: str) -> None:
    (port,) = CONTAINER["ports"]
    assert CONTAINER[probe]["httpGet"] == {"path": path, "port": port["name"]}
    assert port["containerPort"] == 3000  # bentoml serve's port in the bento image


def test_the_autoscaler_scales_the_deployment() -> None:
    target = BY_KIND["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert target == {"apiVersion": "apps/v1", "kind": "Deployment", "name": DEPLOYMENT["metadata"]["name"]}


def test_selectors_pick_the_pods_and_the_service_targets_their_port() -> None:
    labels = POD["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "bionemo"
    service = BY_KIND["Service"]["spec"]
    selectors = [
        DEPLOYMENT["spec"]["selector"]["matchLabels"],
        BY_KIND["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        service["selector"],
    ]
    assert all(selector.items() <= labels.items() for selector in selectors)
    assert {port["targetPort"] for port in service["ports"]} == {port["name"] for port in CONTAINER["ports"]}


def test_the_pod_settings_are_valid_service_settings() -> None:
    """The same check the container's entrypoint runs before it starts anything."""
    environment = {variable["name"]: variable["value"] for variable in CONTAINER["env"]}
    settings = Settings.from_environment({**environment, "BIONEMO_HOST": "0.0.0.0"})  # the image's BIONEMO_HOST
    assert settings.models == ("esm2nv", "megamolbart")
    assert "BIONEMO_TARGET" not in environment  # the image's own, set by its target: one manifest for either image
    assert settings.port == CONTAINER["ports"][0]["containerPort"]


def test_pods_tell_prometheus_to_scrape_the_service_port() -> None:
    annotations = POD["metadata"]["annotations"]
    (port,) = CONTAINER["ports"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port["containerPort"]), "prometheus.io/path": "/metrics"}


SERVICE_MONITOR_FILE = MANIFEST.parent / "servicemonitor.yaml"
SERVICE_MONITOR: Document = yaml.safe_load(SERVICE_MONITOR_FILE.read_text())


def strict(schema: Any) -> Any:
    """The schema with every object closed to fields it does not name, as the API server's structural schema is."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strict(item) for item in schema]
    return schema


def validate_service_monitor(document: Document) -> None:
    """Against the ServiceMonitor CRD of the Prometheus Operator (v0.80), as cloudcoil's models generate it from the
    CRD's OpenAPI schema; strict, as `test_document_matches_the_kubernetes_schema` is for the built-in kinds."""
    schema = strict(ServiceMonitor.model_json_schema(by_alias=True))
    jsonschema.validate(document, schema)


def test_the_service_monitor_matches_its_schema_and_the_validator_rejects_a_misspelling() -> None:
    validate_service_monitor(SERVICE_MONITOR)
    broken = copy.deepcopy(SERVICE_MONITOR)
    broken["spec"]["endpoints"][0]["scrape_timeout"] = broken["spec"]["endpoints"][0].pop("scrapeTimeout")
    with pytest.raises(jsonschema.ValidationError, match="scrape_timeout"):
        validate_service_monitor(broken)


def test_the_service_monitor_scrapes_the_service_port_of_the_pods() -> None:
    (endpoint,) = SERVICE_MONITOR["spec"]["endpoints"]
    service = BY_KIND["Service"]
    assert SERVICE_MONITOR["apiVersion"] == "monitoring.coreos.com/v1" and SERVICE_MONITOR["kind"] == "ServiceMonitor"
    assert SERVICE_MONITOR["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]} and endpoint["path"] == "/metrics"


def test_the_dashboard_panels_are_complete_and_every_query_is_promql() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["targets"], panel["title"]
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"]), panel["title"]
    for query in dashboard_queries():
        assert metric_names(query), query  # parses, and reads at least one metric
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (model) (rate(bionemo_requests_total[5m])")  # the parser does refuse bad PromQL
    titles = " ".join(panel["title"] for panel in panels).lower()
    for needed in ("throughput", "p99", "queue", "batch fill", "rows per step", "errors by status", "in flight"):
        assert needed in titles, needed
