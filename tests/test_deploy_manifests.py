"""deploy/kubernetes.yaml: valid Kubernetes objects, checked offline, wired the way the service needs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from model_catalog import Target
from serving.settings import Settings

MANIFEST = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes.yaml"
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


def test_each_pod_gets_a_gpu() -> None:
    resources = CONTAINER["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 1


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
    assert settings.target is Target.GPU and settings.models == ("esm2nv", "megamolbart")
    assert settings.port == CONTAINER["ports"][0]["containerPort"]
