"""`serve-grpc` end to end: BentoML's gRPC client, BioNeMo's GenerativeSampler stubs, raw grpcio health and reflection.

One service for the module: `python -m bionemo_serving.startup.launch --grpc service:svc` with the real tritonserver, an admin
token (the admin APIs over gRPC metadata), a small message limit (RESOURCE_EXHAUSTED) and esm2nv answering BioNeMo's
esm1nv package (BIONEMO_ESM1NV_GRPC_MODEL). Model outputs are checked against transformers, and the BioNeMo services
against BentoService's `hidden`, `embed` and `decode` on the same server, which run the HTTP APIs' own code.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType

import grpc
import numpy as np
import pytest
import requests
from bentoml.client import Client
from support.paths import ROOT
from support.service import RunningService, start_launcher, stop_service
from prometheus_client.parser import text_string_to_metric_families
from bionemo_serving.startup.readiness import free_loopback_port
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support.reference import TransformersReference

import bionemo_serving.fronts.bentoml.grpc_stubs  # noqa: F401  (before BentoML's client: its stubs for protobuf 6)
from bionemo_serving.preprocessing.smiles import SmilesTokenizer

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "grpc-admin-token-" + "0" * 32
MAX_MESSAGE_BYTES = 1_000_000
PROTEINS = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "MKT", "XBUZOACDEFGHIKLMNPQRSTVWYMKTAYIAKQRQISFVKSHFSRQ"]
SMILES = ["CC(=O)Nc1ccc(O)cc1", "C", "c1ccccc1O"]


@pytest.fixture(scope="module")
def metrics_port() -> int:
    """The gRPC server's Prometheus port, chosen as it starts."""
    return free_loopback_port()


@pytest.fixture(scope="module")
def grpc_service(metrics_port: int) -> Iterator[RunningService]:
    running = start_launcher(
        {
            "BIONEMO_GRPC_METRICS_PORT": str(metrics_port),
            "BIONEMO_ADMIN_TOKEN": ADMIN_TOKEN,
            "BIONEMO_MAX_REQUEST_BYTES": str(MAX_MESSAGE_BYTES),
            "BIONEMO_ESM1NV_GRPC_MODEL": "esm2nv",
            "BIONEMO_API_WORKERS": "1",
        },
        grpc=True,
    )
    yield running
    stop_service(running)


@pytest.fixture(scope="module")
def client(grpc_service: RunningService) -> Client:
    return Client.from_url(grpc_service.url, kind="grpc")


@pytest.fixture(scope="module")
def channel(grpc_service: RunningService) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(grpc_service.url) as channel:
        yield channel


def call_error(call: object, *args: object, **kwargs: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)  # type: ignore[operator]
    return raised.value


def test_bentoml_client_has_every_api_and_embeds_like_transformers(client: Client) -> None:
    apis = (
        "embed", "embed_ndarray", "hidden", "logits", "score", "contacts", "decode", "decode_ndarray", "generate",
        "models", "admin_load",
    )  # fmt: skip
    for api in apis:
        assert callable(getattr(client, api)), api
    answer = client.embed({"sequences": PROTEINS, "model": "esm2nv"})
    reference = TransformersReference("esm2nv")
    expected = np.stack([reference.mean_embedding(sequence) for sequence in PROTEINS])
    np.testing.assert_allclose(np.asarray(answer["embeddings"]), expected, rtol=0, atol=1e-4)
    assert (answer["model"], answer["dim"]) == ("esm2nv", expected.shape[1])
    as_array = client.embed_ndarray({"sequences": PROTEINS, "model": "esm2nv"})
    assert as_array.dtype == np.float32 and as_array.shape == expected.shape
    np.testing.assert_allclose(as_array, np.asarray(answer["embeddings"]), rtol=0, atol=1e-6)


def test_bentoml_client_hidden_states_match_transformers(client: Client) -> None:
    answer = client.hidden({"sequences": PROTEINS, "model": "prott5nv"})
    hiddens, mask = np.asarray(answer["hiddens"]), np.asarray(answer["mask"])
    reference = TransformersReference("prott5nv")
    for row, sequence in enumerate(PROTEINS):
        states = reference.hidden_states(sequence)
        np.testing.assert_allclose(hiddens[row, : len(states)], states, rtol=0, atol=1e-4)
        assert mask[row].sum() == len(states) and not hiddens[row, len(states) :].any()


def test_bentoml_client_log_probs_and_scores_match_transformers(client: Client) -> None:
    reference = TransformersReference("esm2nv")
    sequences = [PROTEINS[0][:5] + "<mask>" + PROTEINS[0][6:], PROTEINS[1]]
    answer = client.logits({"sequences": sequences, "model": "esm2nv"})
    for sequence, log_probs in zip(sequences, answer["log_probs"]):
        np.testing.assert_allclose(np.asarray(log_probs), reference.log_probs(sequence), rtol=0, atol=1e-4)
    wild_type = PROTEINS[0]
    variant = f"{wild_type[1]}2A:{wild_type[3]}4W"
    scored = client.score({"sequence": wild_type, "mutations": [variant], "model": "esm2nv"})
    expected = reference.masked_marginal(wild_type, [(1, wild_type[1], "A"), (3, wild_type[3], "W")])
    np.testing.assert_allclose(scored["scores"], [expected], rtol=0, atol=1e-4)


def test_bentoml_client_decodes_and_generates_like_transformers(client: Client) -> None:
    hidden = client.hidden({"sequences": SMILES, "model": "megamolbart"})
    hiddens, mask = np.asarray(hidden["hiddens"], dtype=np.float32), np.asarray(hidden["mask"], dtype=np.int64)
    reference = TransformersReference("megamolbart")
    detokenizer = SmilesTokenizer(max_tokens=510)
    expected = [detokenizer.decode(np.asarray(ids)) for ids in reference.greedy(hiddens, mask, 12)]
    decoded = client.decode({"hiddens": hiddens.tolist(), "mask": mask.tolist(), "max_length": 12})
    assert decoded["smiles"] == expected
    generated = client.generate(
        {"smiles": SMILES[:1], "num_samples": 1, "scaled_radius": 0.0, "seed": 1, "max_length": 12}
    )
    assert [sample["smiles"] for sample in generated["results"][0]["samples"]] == expected[:1]
    assert {model["name"] for model in client.models(None)["models"]} == {"esm1nv", "esm2nv", "prott5nv", "megamolbart"}


@pytest.mark.parametrize(
    ("api", "body", "field"),
    [
        ("embed", {"sequences": ["MKT", "MJX"]}, "sequences[1]: character 'J' at position 1"),
        ("embed", {"sequences": ["MKT"], "pooling": "max"}, "pooling:"),
        ("hidden", {"sequences": ["MKT"], "model": "nope"}, "model: 'nope' is not served"),
        ("decode", {"hiddens": [[[0.0] * 3]], "mask": [[1]]}, "hiddens[0]: every vector needs"),
        ("generate", {"smiles": ["C1CC"], "num_samples": 1}, "smiles[0]:"),
        ("score", {"sequence": "MKT", "mutations": ["M1A", "K3R"]}, "mutations[1]: 'K3R': position 3 is T"),
        ("logits", {"sequences": ["MKT"], "model": "prott5nv"}, "model: prott5nv cannot logits"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_item(client: Client, api: str, body: dict, field: str) -> None:
    error = call_error(client.call, api, body)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(field), error.details()


def test_oversized_message_is_resource_exhausted_and_the_service_answers_after(client: Client) -> None:
    sequences = ["M" * 1000] * (MAX_MESSAGE_BYTES // 1000 + 10)
    error = call_error(client.call, "embed", {"sequences": sequences})
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.embed({"sequences": ["MKT"]})["dim"] == 320


def test_admin_apis_need_the_token_in_metadata(client: Client) -> None:
    error = call_error(client.call, "admin_repository", None)
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED and error.details().startswith("authorization:")
    wrong = call_error(client.call, "admin_repository", None, metadata=(("authorization", "Bearer wrong"),))
    assert wrong.code() is grpc.StatusCode.UNAUTHENTICATED
    entries = client.call("admin_repository", None, metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),))["entries"]
    assert {entry["model"] for entry in entries} == {"esm1nv", "esm2nv", "prott5nv", "megamolbart"}


def test_health_check_answers_serving(channel: grpc.Channel) -> None:
    check = health_pb2_grpc.HealthStub(channel).Check
    for service in ("", "bentoml.grpc.v1.BentoService", "bionemo.model.molecule.megamolbart.grpc.GenerativeSampler"):
        assert (
            check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
            == health_pb2.HealthCheckResponse.SERVING
        )


def test_reflection_lists_bentoservice_and_bionemo_services(channel: grpc.Channel) -> None:
    requests = iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    (answer,) = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(requests, timeout=10)
    listed = {service.name for service in answer.list_services_response.service}
    assert {
        "bentoml.grpc.v1.BentoService",
        "grpc.health.v1.Health",
        "bionemo.model.molecule.megamolbart.grpc.GenerativeSampler",
        "bionemo.model.protein.esm1nv.grpc.GenerativeSampler",
        "bionemo.model.protein.prott5nv.grpc.GenerativeSampler",
    } <= listed


@pytest.fixture(scope="module")
def bionemo_stubs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ModuleType, ModuleType]]:
    """Client stubs generated from the .proto files alone, as a user of BioNeMo generates them from its own."""
    out = tmp_path_factory.mktemp("bionemo_stubs")
    protos = sorted((ROOT / "bionemo_serving" / "fronts" / "bionemo_grpc" / "protos").glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{protos[0].parent}", f"--python_out={out}", f"--grpc_python_out={out}",
         *(proto.name for proto in protos)],
        check=True,
    )  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        return {
            proto.stem: (
                importlib.import_module(f"{proto.stem}_pb2"),
                importlib.import_module(f"{proto.stem}_pb2_grpc"),
            )
            for proto in protos
        }
    finally:
        sys.path.remove(str(out))


def test_bionemo_smiles_to_hidden_to_smiles_equals_hidden_then_decode(
    channel: grpc.Channel, client: Client, bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]]
) -> None:
    """BioNeMo's InferenceWrapper flow: smis_to_hidden, then hidden_to_smis."""
    messages, services = bionemo_stubs["megamolbart"]
    sampler = services.GenerativeSamplerStub(channel)
    hidden = sampler.SmilesToHidden(messages.InputSpec(smis=SMILES), timeout=60)
    batch, length, width = hidden.dim
    states = np.asarray(hidden.hidden_states, dtype=np.float32).reshape(batch, length, width)
    masks = np.asarray(hidden.masks).reshape(batch, length)
    expected = client.hidden({"sequences": SMILES, "model": "megamolbart"})
    np.testing.assert_allclose(states, np.asarray(expected["hiddens"]), rtol=0, atol=1e-5)
    assert (masks == np.asarray(expected["mask"], dtype=bool)).all()
    decoded = sampler.HiddenToSmis(
        messages.InputSpec(hidden_states=hidden.hidden_states, dim=hidden.dim, masks=hidden.masks), timeout=60
    )
    assert list(decoded.smis) == client.decode({"hiddens": expected["hiddens"], "mask": expected["mask"]})["smiles"]


def test_bionemo_smiles_to_embedding_equals_embed(
    channel: grpc.Channel, client: Client, bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]]
) -> None:
    messages, services = bionemo_stubs["megamolbart"]
    answer = services.GenerativeSamplerStub(channel).SmilesToEmbedding(messages.InputSpec(smis=SMILES), timeout=60)
    embeddings = np.asarray(answer.embeddings).reshape(tuple(answer.dim))
    expected = np.asarray(client.embed({"sequences": SMILES, "model": "megamolbart"})["embeddings"])
    np.testing.assert_allclose(embeddings, expected, rtol=0, atol=1e-5)
    reference = TransformersReference("megamolbart")
    np.testing.assert_allclose(embeddings[0], reference.mean_embedding(SMILES[0]), rtol=0, atol=1e-4)


@pytest.mark.parametrize(("package", "model"), [("esm1nv", "esm2nv"), ("prott5nv", "prott5nv")])
def test_bionemo_seq_to_embedding_is_the_per_token_hidden_states(
    channel: grpc.Channel,
    client: Client,
    bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]],
    package: str,
    model: str,
) -> None:
    """esm1nv's package answers with BIONEMO_ESM1NV_GRPC_MODEL (esm2nv here); zero past each sequence's tokens."""
    messages, services = bionemo_stubs[package]
    answer = services.GenerativeSamplerStub(channel).SeqToEmbedding(messages.InputSpec(seqs=PROTEINS), timeout=60)
    embeddings = np.asarray(answer.embeddings).reshape(tuple(answer.dim))
    expected = client.hidden({"sequences": PROTEINS, "model": model})
    np.testing.assert_allclose(embeddings, np.asarray(expected["hiddens"]), rtol=0, atol=1e-5)
    tokens = np.asarray(expected["mask"], dtype=np.int64).sum(axis=1)
    assert (
        all(not embeddings[row, count:].any() for row, count in enumerate(tokens))
        and tokens.min() < embeddings.shape[1]
    )
    states = TransformersReference(model).hidden_states(PROTEINS[0])
    np.testing.assert_allclose(embeddings[0, : len(states)], states, rtol=0, atol=1e-4)


def test_bionemo_bad_input_is_invalid_argument_naming_the_item(
    channel: grpc.Channel, client: Client, bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]]
) -> None:
    molecules, molecule_services = bionemo_stubs["megamolbart"]
    sampler = molecule_services.GenerativeSamplerStub(channel)
    cases = [
        (sampler.SmilesToHidden, molecules.InputSpec(smis=["CCO", "C1CC"]), "smis[1]:"),
        (sampler.SmilesToEmbedding, molecules.InputSpec(), "smis:"),
        (
            sampler.HiddenToSmis,
            molecules.InputSpec(hidden_states=[0.0] * 6, dim=[1, 2, 3], masks=[True, True]),
            "hidden_states[0]",
        ),
        (sampler.HiddenToSmis, molecules.InputSpec(hidden_states=[0.0] * 6, dim=[1, 2], masks=[True]), "dim:"),
        (
            sampler.HiddenToSmis,
            molecules.InputSpec(hidden_states=[0.0] * 5, dim=[1, 1, 6], masks=[True]),
            "hidden_states: has 5",
        ),
    ]
    for package in ("esm1nv", "prott5nv"):
        proteins, protein_services = bionemo_stubs[package]
        cases.append(
            (
                protein_services.GenerativeSamplerStub(channel).SeqToEmbedding,
                proteins.InputSpec(seqs=["MKT", "M1"]),
                "seqs[1]:",
            )
        )
    for method, message, field in cases:
        error = call_error(method, message, timeout=60)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, (field, error)
        assert error.details().startswith(field), (field, error.details())
    assert len(client.embed({"sequences": ["MKT"]})["embeddings"]) == 1  # still answering


def test_work_past_the_calls_deadline_is_unavailable_at_once_with_when_to_retry(
    channel: grpc.Channel, client: Client, bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]]
) -> None:
    """`x-request-timeout` is the request's deadline: work that cannot finish by it is refused at once, the wait in the
    trailers."""
    proteins, protein_services = bionemo_stubs["esm1nv"]
    heavy = proteins.InputSpec(seqs=[PROTEINS[0] * (1000 // len(PROTEINS[0]))] * 64)
    sampler = protein_services.GenerativeSamplerStub(channel)
    error = call_error(sampler.SeqToEmbedding, heavy, timeout=60, metadata=(("x-request-timeout", "0.5"),))
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error
    assert error.details().startswith("request:") and "by itself" in error.details()
    trailers = dict(error.trailing_metadata())
    assert int(trailers["retry-after"]) >= 1 and int(trailers["retry-after-ms"]) > 0
    assert len(client.embed({"sequences": ["MKT"]})["embeddings"]) == 1  # still answering


def requests_answered(metrics_port: int) -> dict[tuple[str, str, str], float]:
    """bionemo_requests_total of the gRPC server's metrics port (BentoML serves them at /): (endpoint, model, status
    class) -> count."""
    answer = requests.get(f"http://127.0.0.1:{metrics_port}/", timeout=10)
    assert answer.status_code == 200, answer.text
    text = answer.text
    (family,) = [family for family in text_string_to_metric_families(text) if family.name == "bionemo_requests"]
    return {
        (sample.labels["endpoint"], sample.labels["model"], sample.labels["status_class"]): sample.value
        for sample in family.samples
        if sample.name == "bionemo_requests_total"
    }


def test_every_grpc_front_is_counted_in_the_metrics(
    channel: grpc.Channel, client: Client, bionemo_stubs: dict[str, tuple[ModuleType, ModuleType]], metrics_port: int
) -> None:
    """BentoService's APIs under their routes, BioNeMo's methods under their gRPC paths, by model and status class."""
    messages, services = bionemo_stubs["megamolbart"]
    sampler = services.GenerativeSamplerStub(channel)
    embedding = "/bionemo.model.molecule.megamolbart.grpc.GenerativeSampler/SmilesToEmbedding"
    counted = [(embedding, "megamolbart", "2xx"), (embedding, "megamolbart", "4xx"), ("/embed", "esm2nv", "2xx")]
    before = requests_answered(metrics_port)
    for _ in range(2):
        sampler.SmilesToEmbedding(messages.InputSpec(smis=SMILES), timeout=60)
    call_error(sampler.SmilesToEmbedding, messages.InputSpec(smis=["C1CC"]), timeout=60)
    client.embed({"sequences": PROTEINS, "model": "esm2nv"})
    after = requests_answered(metrics_port)
    assert [after.get(key, 0) - before.get(key, 0) for key in counted] == [2, 1, 1]
