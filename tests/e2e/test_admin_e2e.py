"""The admin endpoints: absent without BIONEMO_ADMIN_TOKEN, 401 without the token, and real loads and unloads in
Triton with it; the public API can change nothing, and neither can anyone at Triton's own port without them."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bentoml
import numpy as np
import pyarrow.parquet as pq
import pytest
import requests

from bionemo_serving.model_catalog import MODELS
from support.client_cli import run
from support.reference import TransformersReference
from support.repositories import build_repository, models_in
from support.service import RunningService, start_launcher, stop_service

pytestmark = pytest.mark.e2e

TOKEN = secrets.token_hex(32)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SEQUENCE = "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"
BROKEN = "esm1nv"
"""Its graph files in the test's repository are not models: Triton cannot load it."""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default models, linked, and a copy of esm1nv whose graph files are garbage."""
    healthy = [model for model in models_in() if model != BROKEN]
    return build_repository(tmp_path_factory.mktemp("repository"), linked=healthy, broken=[BROKEN])


@pytest.fixture(scope="module")
def admin_service(repository: Path) -> Iterator[RunningService]:
    """Two API workers (an admin change made through one must reach the other); only esm2nv loaded at start; at most
    8 sequences a request (what the client reads from GET /models)."""
    running = start_launcher(
        {
            "BIONEMO_MODEL_REPOSITORY": str(repository),
            "BIONEMO_MODELS": "esm2nv",
            "BIONEMO_ADMIN_TOKEN": TOKEN,
            "BIONEMO_API_WORKERS": "2",
            "BIONEMO_MAX_SEQUENCES_PER_REQUEST": "8",
        }
    )
    yield running
    stop_service(running)


def served(service: RunningService) -> set[str]:
    return {model["name"] for model in service.served_models()}


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/admin/repository", None),
        ("/admin/unload", None),
        ("/admin/load", {"Authorization": "Bearer wrong"}),
        ("/admin/load", {"Authorization": f"Basic {TOKEN}"}),
    ],
    ids=["repository-no header", "unload-no header", "load-wrong token", "load-other scheme"],
)  # every route with every header: tests/unit/test_validation.py
def test_admin_endpoints_need_the_token(admin_service: RunningService, path: str, headers: dict[str, str] | None) -> None:
    response = admin_service.post(path, {"model": "prott5nv"}, headers)
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    (detail,) = response.json()["error"]["details"]
    assert detail["field"] == "authorization"
    assert TOKEN not in response.text
    assert served(admin_service) == {"esm2nv"}


def test_repository_lists_loaded_and_unloaded_models(admin_service: RunningService) -> None:
    response = requests.get(f"{admin_service.url}/admin/repository", headers=ADMIN, timeout=30)
    assert response.status_code == 200, response.text
    states = {entry["triton_model"]: entry for entry in response.json()["entries"]}
    catalogued = {description.triton_name(graph.role) for description in MODELS.values() for graph in description.graphs}
    assert set(states) == catalogued
    assert states["esm2nv_language_model"]["state"] == "READY"  # BIONEMO_MODELS loads the model's heads too
    assert states["esm2nv"]["state"] == "READY" and states["esm2nv"]["version"] == 1
    assert states["prott5nv"]["state"] != "READY" and states["prott5nv"]["model"] == "prott5nv"


def embed_concurrently(service: RunningService, model: str, requests_sent: int = 12) -> list[requests.Response]:
    """Concurrent /embed calls, so that both API workers take some (each keeps its own list of served models)."""
    with ThreadPoolExecutor(max_workers=requests_sent) as pool:
        body = {"model": model, "sequences": [SEQUENCE]}
        return list(pool.map(lambda _: service.post("/embed", body), range(requests_sent)))


def test_load_and_unload_change_what_every_worker_serves(admin_service: RunningService) -> None:
    assert {answer.status_code for answer in embed_concurrently(admin_service, "prott5nv")} == {422}

    loaded = admin_service.post("/admin/load", {"model": "prott5nv"}, ADMIN)
    assert loaded.status_code == 200, loaded.text
    assert {model["name"] for model in loaded.json()["models"]} == {"esm2nv", "prott5nv"}
    expected = TransformersReference("prott5nv").mean_embedding(SEQUENCE)
    for embedded in embed_concurrently(admin_service, "prott5nv"):
        assert embedded.status_code == 200, embedded.text
        assert np.abs(np.asarray(embedded.json()["embeddings"][0]) - expected).max() < 1e-4

    unloaded = admin_service.post("/admin/unload", {"model": "prott5nv"}, ADMIN)
    assert unloaded.status_code == 200, unloaded.text
    assert {model["name"] for model in unloaded.json()["models"]} == {"esm2nv"}
    # A worker that still lists the model learns from the failed Triton calls: 503s, then never again.
    first = [answer.status_code for answer in embed_concurrently(admin_service, "prott5nv")]
    assert set(first) <= {422, 503}, first
    then = embed_concurrently(admin_service, "prott5nv")
    assert {answer.status_code for answer in then} == {422}, [answer.text for answer in then]
    assert then[0].json()["error"]["details"][0]["field"] == "model"
    assert served(admin_service) == served(admin_service) == {"esm2nv"}
    assert admin_service.post("/embed", {"model": "esm2nv", "sequences": [SEQUENCE]}).status_code == 200


def test_a_model_triton_cannot_load_is_a_502_with_its_reason(admin_service: RunningService) -> None:
    response = admin_service.post("/admin/load", {"model": BROKEN}, ADMIN)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["type"] == "model_load_failed" and error["details"][0]["field"] == "model"
    assert BROKEN in error["message"]
    assert served(admin_service) == {"esm2nv"}
    assert admin_service.post("/embed", {"model": "esm2nv", "sequences": [SEQUENCE]}).status_code == 200


@pytest.mark.parametrize("body", [{"model": "esm9"}, {"model": "../esm2nv"}, {"model": "esm2nv/1"}, {}, {"model": 1}])
def test_admin_requests_name_only_catalogued_models(admin_service: RunningService, body: dict[str, Any]) -> None:
    response = admin_service.post("/admin/load", body, ADMIN)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "model"


def test_without_the_token_setting_there_is_no_admin_api(service: RunningService) -> None:
    for path in ("/admin/repository", "/admin/load", "/admin/unload"):
        assert service.post(path, {"model": "esm2nv"}, ADMIN).status_code == 404
    paths = requests.get(f"{service.url}/docs.json", timeout=30).json()["paths"]
    assert not [path for path in paths if "admin" in path or "load" in path or "repository" in path]


def test_without_the_admin_api_triton_itself_refuses_to_load_or_unload(service: RunningService) -> None:
    """Not even a process on this host that reaches Triton's loopback port can change the models."""
    for action in ("load", "unload"):
        response = requests.post(f"http://{service.triton_url}/v2/repository/models/esm2nv/{action}", timeout=30)
        assert response.status_code >= 400 and "not allowed" in response.text, response.text
    assert served(service) >= {"esm2nv"}


def test_the_admin_api_is_in_the_openapi_document_when_enabled(admin_service: RunningService) -> None:
    paths = requests.get(f"{admin_service.url}/docs.json", timeout=30).json()["paths"]
    assert {"/admin/repository", "/admin/load", "/admin/unload"} <= set(paths)


def test_bentoml_client_calls_the_admin_api_with_the_token_only(admin_service: RunningService) -> None:
    """BentoML's client builds the admin methods from /docs.json too; the token rides on its httpx client."""
    client = bentoml.client.Client.from_url(admin_service.url)
    with pytest.raises(bentoml.exceptions.BentoMLException, match="Error making request: 401"):
        client.admin_repository()
    client.client.headers["Authorization"] = ADMIN["Authorization"]
    expected = requests.get(f"{admin_service.url}/admin/repository", headers=ADMIN, timeout=30).json()
    assert client.admin_repository() == expected


def test_the_client_sizes_its_chunks_by_the_limits_the_service_publishes(
    admin_service: RunningService, tmp_path: Path
) -> None:
    """A service that takes 8 sequences a request: `bionemo-client` embeds a 100-record FASTA file whole, in order."""
    assert requests.get(f"{admin_service.url}/models", timeout=30).json()["limits"]["max_sequences"] == 8
    names = [f"p{index}" for index in range(100)]
    (tmp_path / "in.fasta").write_text("".join(f">{name}\n{SEQUENCE}\n" for name in names))
    done = run(admin_service, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "out.parquet"))
    assert "100 done, 0 failed" in done.stderr
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == names
