"""Bad input on every route: a 4xx in the one error shape naming the field and the item, and why.

Each body takes the path a request takes in the service, in this process: the route's input descriptor, the endpoint,
the route's handler (the front's engine input, the Engine over the fake runner) and the output descriptor
(support/in_process.py). tests/e2e/test_bad_input_e2e.py keeps a few of these against the real stack.
"""

from __future__ import annotations

from typing import Any

import pytest

from bionemo_serving.model_catalog import MODELS
from support.fake_runner import checkpoint_sizes
from support.in_process import STATUS_OF_TYPE, InProcessService, assert_rejected

ESM2_LIMIT = MODELS["esm2nv"].max_length
ESM2_LAYERS = checkpoint_sizes(MODELS["esm2nv"])["hidden_layers"]
MOLECULE_LIMIT = MODELS["megamolbart"].max_length
HIDDEN = checkpoint_sizes(MODELS["megamolbart"])["hidden_size"]
WILD_TYPE = "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQVIVQDIAYLRSLGYNIV"
ADMIN_TOKEN = "a-token-of-twenty-four-chars"


@pytest.fixture(scope="module")
def routes() -> InProcessService:
    return InProcessService(admin_token=ADMIN_TOKEN)


# The rows tests/e2e/test_bad_input_e2e.py sent to the real service, for every route that takes `sequences`.
SEQUENCES_ROUTES = ["/embed", "/embed/ndarray", "/hidden", "/logits", "/contacts"]
ONE = {"sequences": ["MKT"]}
BAD_SEQUENCES = [
    pytest.param(b"{not json", 400, "body", "not valid JSON", id="not-json"),
    pytest.param({}, 422, "sequences", "Field required", id="missing-field"),
    pytest.param({"sequences": []}, 422, "sequences", "at least 1 item", id="empty-list"),
    pytest.param({"sequences": "MKT"}, 422, "sequences", "valid array", id="string-not-list"),
    pytest.param({"sequences": ["MKT", 5]}, 422, "sequences[1]", "valid string", id="number-in-list"),
    pytest.param({"sequences": ["MKT", ""]}, 422, "sequences[1]", "sequence is empty", id="empty-sequence"),
    pytest.param({"sequences": ["MKT", "MKJL"]}, 422, "sequences[1]", "character 'J' at position 2", id="bad-char"),
    pytest.param(
        {"sequences": ["A" * (ESM2_LIMIT + 1)]}, 422, "sequences[0]",
        f"has {ESM2_LIMIT + 1} residues; this model accepts at most {ESM2_LIMIT} (or send \"truncate\": true)",
        id="too-long",
    ),
    pytest.param({**ONE, "truncate": "yes"}, 422, "truncate", "valid boolean", id="bad-truncate"),
    pytest.param(
        {"sequences": ["A" * ESM2_LIMIT + "J"], "truncate": True}, 422, "sequences[0]", f"'J' at position {ESM2_LIMIT}",
        id="truncate-checks-the-whole-sequence",
    ),
    pytest.param({"sequences": ["A" * 511], "model": "esm1nv"}, 422, "sequences[0]", "at most 510", id="too-long-esm1"),
    pytest.param(
        {"sequences": ["MKT"] * 65}, 422, "sequences",
        "has 65 items; at most 64 in one request (BIONEMO_MAX_SEQUENCES_PER_REQUEST)", id="too-many",
    ),
    pytest.param({**ONE, "model": "esm9"}, 422, "model", "'esm9' is not served", id="unknown-model"),
    pytest.param({**ONE, "model": 3}, 422, "model", "valid string", id="model-not-string"),
    # Names and versions are looked up among the models Triton serves, never joined into a path.
    pytest.param({**ONE, "model": "../esm2nv"}, 422, "model", "is not served", id="model-path"),
    pytest.param({**ONE, "model_version": "../1"}, 422, "model_version", "valid integer", id="version-path"),
    pytest.param({**ONE, "model_version": 0}, 422, "model_version", "greater than or equal to 1", id="v0"),
    pytest.param({**ONE, "model_version": 2}, 422, "model_version", "2 is not served; versions: 1", id="v2"),
    pytest.param({**ONE, "colour": "red"}, 422, "colour", "Extra inputs", id="unknown-field"),
    pytest.param([["MKT"]], 422, "body", "should be an object", id="list-body"),
    pytest.param({**ONE, "encoding_format": "b85"}, 422, "encoding_format", "'float' or 'base64'", id="b85"),
    pytest.param({**ONE, "dtype": "float64"}, 422, "dtype", "'float32' or 'float16'", id="dtype"),
]  # fmt: skip


@pytest.mark.parametrize("path", SEQUENCES_ROUTES)
@pytest.mark.parametrize(("body", "status", "field", "message"), BAD_SEQUENCES)
def test_bad_sequences(routes: InProcessService, path: str, body: Any, status: int, field: str, message: str) -> None:
    assert_rejected(routes.post(path, body), status, field, message)


@pytest.mark.parametrize("path", SEQUENCES_ROUTES)
def test_every_bad_sequence_is_reported_at_once(routes: InProcessService, path: str) -> None:
    error = assert_rejected(routes.post(path, {"sequences": ["MKT", "", "MK1"]}), 422, "sequences[1]", "is empty")
    assert [detail["field"] for detail in error["details"]] == ["sequences[1]", "sequences[2]"]


@pytest.mark.parametrize("path", [*SEQUENCES_ROUTES, "/score", "/decode", "/decode/ndarray", "/generate"])
def test_a_body_not_sent_as_json_is_a_415_on_every_route(routes: InProcessService, path: str) -> None:
    answer = routes.post(path, b"sequences=MKT", {"content-type": "application/x-www-form-urlencoded"})
    assert_rejected(answer, 415, "content-type", "'application/x-www-form-urlencoded' is not accepted")


EMBED_ONLY = [
    pytest.param({**ONE, "pooling": "max"}, 422, "pooling", "'mean' or 'cls'", id="bad-pooling"),
    pytest.param({**ONE, "pooling": "cls", "model": "prott5nv"}, 422, "pooling", "no <cls>", id="no-cls"),
    pytest.param({**ONE, "normalize": "yes"}, 422, "normalize", "valid boolean", id="bad-normalize"),
]


@pytest.mark.parametrize("path", ["/embed", "/embed/ndarray"])
@pytest.mark.parametrize(("body", "status", "field", "message"), EMBED_ONLY)
def test_bad_embed_options(
    routes: InProcessService, path: str, body: Any, status: int, field: str, message: str
) -> None:
    assert_rejected(routes.post(path, body), status, field, message)


BAD_LAYERS = [
    pytest.param([], "layers", "at least 1 item", id="none"),
    pytest.param([1.5], "layers[0]", "valid integer", id="fraction"),
    pytest.param([True], "layers[0]", "valid integer", id="boolean"),
    pytest.param("-1", "layers", "valid array", id="string"),
    pytest.param(
        [1, ESM2_LAYERS, -ESM2_LAYERS - 1], "layers[1]",
        f"esm2nv has hidden states 0 (the embedding layer's output) to {ESM2_LAYERS - 1} (its last layer's), "
        f"or -{ESM2_LAYERS} to -1 counting from the end; not {ESM2_LAYERS}",
        id="out-of-range",
    ),
]  # fmt: skip


@pytest.mark.parametrize("path", ["/embed", "/embed/ndarray", "/hidden"])
@pytest.mark.parametrize(("layers", "field", "message"), BAD_LAYERS)
def test_bad_layers(routes: InProcessService, path: str, layers: Any, field: str, message: str) -> None:
    assert_rejected(routes.post(path, {"sequences": ["MKT"], "layers": layers}), 422, field, message)


def test_every_layer_out_of_range_is_named(routes: InProcessService) -> None:
    body = {"sequences": ["MKT"], "layers": [1, ESM2_LAYERS, -ESM2_LAYERS - 1, -ESM2_LAYERS]}
    error = assert_rejected(routes.post("/hidden", body), 422, "layers[2]", f"; not {-ESM2_LAYERS - 1}")
    assert [detail["field"] for detail in error["details"]] == ["layers[1]", "layers[2]"]


BAD_LOGITS = [
    pytest.param({"sequences": ["MK<mask>", "MK<mas>"]}, "sequences[1]", "character '<' at position 2", id="half-mask"),
    pytest.param({"sequences": ["MK<MASK>"]}, "sequences[0]", "character '<' at position 2", id="mask-in-capitals"),
    pytest.param(
        {"sequences": ["<mask>" * (ESM2_LIMIT + 1)]}, "sequences[0]",
        f"has {ESM2_LIMIT + 1} residues; this model accepts at most {ESM2_LIMIT}", id="masks-count-as-residues",
    ),
    pytest.param(
        {"sequences": ["MKT"], "model": "prott5nv"}, "model", "prott5nv cannot logits; models that can: esm1nv, esm2nv",
        id="no-language-model",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field", "message"), BAD_LOGITS)
def test_bad_logits(routes: InProcessService, body: Any, field: str, message: str) -> None:
    assert_rejected(routes.post("/logits", body), 422, field, message)


@pytest.mark.parametrize("model", ["prott5nv", "megamolbart"])
def test_contacts_of_a_model_without_a_contact_head(routes: InProcessService, model: str) -> None:
    answer = routes.post("/contacts", {"sequences": ["MKT"], "model": model})
    assert_rejected(answer, 422, "model", f"{model} cannot contacts; models that can: esm1nv, esm2nv")


BAD_MUTATIONS = [
    ("A1G", "'A1G': position 1 is M in the sequence, not A"),
    ("M0A", "'M0A': position 0 is outside the sequence (1 to 54)"),
    ("V55A", "'V55A': position 55 is outside the sequence (1 to 54)"),
    ("M1J", "'M1J': 'J' is not one of the 20 amino acids ACDEFGHIKLMNPQRSTVWY"),
    ("M1", "'M1': 'M1' is not a substitution like A23G"),
    ("M1A:M1C", "'M1A:M1C': position 1 is substituted twice"),
    ("M1A:", "'M1A:': '' is not a substitution like A23G"),
]


@pytest.mark.parametrize(("mutation", "message"), BAD_MUTATIONS, ids=[mutation for mutation, _ in BAD_MUTATIONS])
def test_a_bad_mutation_is_named_by_its_index(routes: InProcessService, mutation: str, message: str) -> None:
    answer = routes.post("/score", {"sequence": WILD_TYPE, "mutations": ["K2R", mutation]})
    error = assert_rejected(answer, 422, "mutations[1]", message)
    (detail,) = error["details"]
    assert detail["message"].startswith(message)


BAD_SCORES = [
    pytest.param({"sequence": WILD_TYPE}, "body", "send either `mutations` or `scan: true`", id="neither"),
    pytest.param(
        {"sequence": WILD_TYPE, "mutations": ["K2R"], "scan": True}, "body", "send either `mutations` or `scan: true`",
        id="both",
    ),
    pytest.param({"sequence": WILD_TYPE, "mutations": []}, "mutations", "at least 1 item", id="no-mutations"),
    pytest.param({"sequence": "", "scan": True}, "sequence", "at least 1 character", id="empty"),
    pytest.param({"sequences": [WILD_TYPE], "scan": True}, "sequences", "Extra inputs", id="sequences"),
    pytest.param({"sequence": WILD_TYPE, "scan": True, "method": "best"}, "method", "'masked-marginal',", id="method"),
    pytest.param(
        {"sequence": WILD_TYPE * 6, "scan": True, "method": "pseudo-likelihood"}, "scan",
        "needs 1,994,868 model passes here; the limit is 1,024 per request (BIONEMO_MAX_SCORE_PASSES)",
        id="over-the-pass-limit",
    ),
    pytest.param(
        {"sequence": "MKTXV", "scan": True}, "sequence", "residue 'X' at position 4 is not one of the 20 amino acids",
        id="scan-of-x",
    ),
    pytest.param({"sequence": "MKJ", "mutations": ["M1A"]}, "sequence", "character 'J' at position 2", id="bad-char"),
    pytest.param(
        {"sequence": "A" * (ESM2_LIMIT + 1), "mutations": ["A1G"]}, "sequence", f"at most {ESM2_LIMIT}", id="too-long"
    ),
    pytest.param(
        {"sequence": "MKT", "mutations": ["M1A"], "model": "prott5nv"}, "model",
        "prott5nv cannot score; models that can: esm1nv, esm2nv", id="no-language-model",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field", "message"), BAD_SCORES)
def test_score_requests_the_service_cannot_take(routes: InProcessService, body: Any, field: str, message: str) -> None:
    assert_rejected(routes.post("/score", body), 422, field, message)


VECTOR = [0.5] * HIDDEN
BAD_MOLECULES = [
    ("/generate", {"smiles": ["CCO", "C1CC"]}, "smiles[1]", "not a valid SMILES"),
    ("/generate", {"smiles": ["CCO", ""]}, "smiles[1]", "SMILES is empty"),
    ("/generate", {"smiles": ["CCO"], "method": "nucleus"}, "method", "'greedy', 'topkp' or 'beam'"),
    ("/generate", {"smiles": ["CCO"], "num_samples": 0}, "num_samples", "greater than or equal to 1"),
    ("/generate", {"smiles": ["CCO"], "num_samples": 65}, "num_samples", "less than or equal to 64"),
    ("/generate", {"smiles": ["CCO"], "temperature": 0}, "temperature", "greater than 0"),
    ("/generate", {"smiles": ["CCO"], "top_p": 1.5}, "top_p", "less than or equal to 1"),
    ("/generate", {"smiles": ["CCO"], "beam_size": 17}, "beam_size", "less than or equal to 16"),
    ("/generate", {"smiles": ["CCO"], "seed": -1}, "seed", "greater than or equal to 0"),
    ("/generate", {"smiles": ["CCO"], "max_length": 511}, "max_length", "less than or equal to 510"),
    ("/generate", {"smiles": ["CCO"], "model": "esm2nv"}, "model", "models that can: megamolbart"),
    ("/generate", {"smiles": ["CCO"] * 65}, "smiles", "has 65 items; at most 64 in one request"),
    ("/embed", {"sequences": ["CCO", "C(("], "model": "megamolbart"}, "sequences[1]", "not a valid SMILES"),
    ("/decode", {"model": "esm2nv", "hiddens": [[[0.5]]], "mask": [[1]]}, "model", "models that can: megamolbart"),
    ("/decode", {"hiddens": [[VECTOR]], "mask": [[1, 0]]}, "mask[0]", "hiddens rows have 1"),
    ("/decode", {"hiddens": [[VECTOR]], "mask": [[0]]}, "mask[0]", "marks no position"),
    ("/decode", {"hiddens": [[[0.5] * 3]], "mask": [[1]]}, "hiddens[0]", f"needs {HIDDEN} values"),
    ("/decode", {"hiddens": [[VECTOR], [VECTOR] * 2], "mask": [[1], [1, 1]]}, "hiddens[0]", "every row needs 2"),
    ("/decode", {"hiddens": [[VECTOR]], "mask": [[1], [1]]}, "mask", "has 2 rows"),
    ("/decode", {"hiddens": [[VECTOR]], "mask": [[2]]}, "mask[0][0]", "Input should be 0 or 1"),
    ("/decode", {"hiddens": [[]], "mask": [[]]}, "hiddens[0]", "has 0 positions"),
    ("/decode", {"hiddens": [], "mask": []}, "hiddens", "at least 1 item"),
    ("/decode", {"hiddens": [[VECTOR]] * 65, "mask": [[1]] * 65}, "hiddens", "has 65 items; at most 64"),
    ("/decode/ndarray", [[VECTOR], [VECTOR] * 2], "body", "not a rectangular array"),
    ("/decode/ndarray", [VECTOR], "body", "has 2 dimensions; expected 3"),
    ("/decode/ndarray", [[[0.5] * 3]], "body", f"needs {HIDDEN}"),
    ("/decode/ndarray", [[[0.0] * HIDDEN]], "body[0]", "all zeros"),
    ("/decode/ndarray", [[VECTOR], [[0.0] * HIDDEN]], "body[1]", "all zeros"),
    ("/decode/ndarray", [[VECTOR]] * 65, "body", "has 65 items; at most 64 in one request"),
    ("/decode/ndarray", [], "body", "has 1 dimensions; expected 3"),
]


@pytest.mark.parametrize(
    ("path", "body", "field", "message"), BAD_MOLECULES, ids=[f"{path}-{field}" for path, _, field, _ in BAD_MOLECULES]
)
def test_bad_molecule_input(routes: InProcessService, path: str, body: Any, field: str, message: str) -> None:
    assert_rejected(routes.post(path, body), 422, field, message)


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/decode", b'{"hiddens": [[[NaN, 0.5]]], "mask": [[1]]}', "hiddens[0][0][0]", "finite number"),
        ("/decode", b'{"hiddens": [[[Infinity, 0.5]]], "mask": [[1]]}', "hiddens[0][0][0]", "finite number"),
        ("/decode/ndarray", b"[[[Infinity, 0.5]]]", "body", "NaN or infinite"),
        ("/generate", b'{"smiles": ["CCO"], "scaled_radius": NaN}', "scaled_radius", "finite number"),
    ],
)
def test_non_finite_numbers_are_refused(
    routes: InProcessService, path: str, body: bytes, field: str, message: str
) -> None:
    assert_rejected(routes.post(path, body), 422, field, message)


def test_a_smiles_over_the_limit_is_refused_with_the_way_out_and_a_broken_one_without(routes: InProcessService) -> None:
    """Truncating mends a SMILES that is too long, not one RDKit cannot parse: only the first suggests it."""
    chain = "C" * (MOLECULE_LIMIT + 20)
    refused = routes.post("/embed", {"model": "megamolbart", "sequences": [chain]})
    error = assert_rejected(refused, 422, "sequences[0]", f"at most {MOLECULE_LIMIT}")
    assert error["message"].endswith('(or send "truncate": true)')
    broken = routes.post("/embed", {"model": "megamolbart", "sequences": [chain + "("]})
    assert "truncate" not in assert_rejected(broken, 422, "sequences[0]", "not a valid SMILES")["message"]


OPENAI_BAD = [
    ({"model": "esm9", "input": ["MKT"]}, "model", "'esm9' is not served"),
    ({"model": "esm2nv", "input": ["MKT", "MJT"]}, "input[1]", "character 'J' at position 1 is not an amino acid"),
    ({"model": "esm2nv", "input": ["MKT"], "dimensions": 256}, "dimensions", "have 320 dimensions, not 256"),
    ({"model": "esm2nv", "input": [[5, 6, 7]]}, "input", "token ids are not accepted"),
    ({"model": "esm2nv", "input": [5, 6, 7]}, "input", "token ids are not accepted"),
    ({"model": "esm2nv", "input": 5}, "input", "should be a string or a list of strings"),
    ({"model": "esm2nv", "input": [["MKT"]]}, "input[0]", "should be a valid string"),
    ({"model": "esm2nv", "input": []}, "input", "at least 1 item"),
    ({"model": "esm2nv", "input": ""}, "input", "sequence is empty"),
    ({"model": "esm2nv", "input": ["MKT", "A", ""]}, "input[2]", "sequence is empty"),
    ({"model": "esm2nv", "input": ["A" * 1023]}, "input[0]", "at most 1022"),
    ({"model": "megamolbart", "input": ["CCO", "C(("]}, "input[1]", "not a valid SMILES"),
    ({"model": "megamolbart", "input": ["C" * (MOLECULE_LIMIT + 1)]}, "input[0]", f"at most {MOLECULE_LIMIT}"),
    ({"model": "esm2nv", "input": ["MKT"] * 65}, "input", "has 65 items; at most 64 in one request"),
    ({"model": "esm2nv", "input": "MKT", "truncate": True}, "truncate", "Extra inputs"),
    ({"input": "MKT"}, "model", "Field required"),
]


@pytest.mark.parametrize(
    ("body", "param", "message"), OPENAI_BAD, ids=[f"{param}-{index}" for index, (_, param, _) in enumerate(OPENAI_BAD)]
)
def test_bad_openai_input_is_named_in_openais_error_shape(
    routes: InProcessService, body: dict[str, Any], param: str, message: str
) -> None:
    answer = routes.post("/v1/embeddings", body)
    assert answer.status == 422, answer.body
    error = answer.error
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert STATUS_OF_TYPE[error["code"]] == 422  # the service's own error type
    assert message in error["message"] and f"{param}: " in error["message"], error["message"]
    assert "truncate" not in error["message"] or param == "truncate"  # this API has no field to ask for it


@pytest.mark.parametrize(
    ("headers", "body", "status", "param"),
    [
        ({"content-type": "application/json"}, b"{not json", 400, "body"),
        ({"content-type": "text/plain"}, b"MKT", 415, "content-type"),
    ],
)
def test_openais_front_answers_unreadable_bodies_in_its_shape(
    routes: InProcessService, headers: dict[str, str], body: bytes, status: int, param: str
) -> None:
    answer = routes.post("/v1/embeddings", body, headers)
    assert answer.status == status
    assert answer.error["param"] == param and answer.error["type"] == "invalid_request_error"


ADMIN_ROUTES = ["/admin/repository", "/admin/load", "/admin/unload"]


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {ADMIN_TOKEN}", ADMIN_TOKEN],
    ids=["no header", "wrong token", "other scheme", "no scheme"],
)
@pytest.mark.parametrize("path", ADMIN_ROUTES)
def test_admin_routes_need_the_token(routes: InProcessService, path: str, authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    answer = routes.post(path, {"model": "prott5nv"}, headers)
    assert_rejected(answer, 401, "authorization", "Authorization: Bearer <BIONEMO_ADMIN_TOKEN>")
    assert answer.headers["www-authenticate"].startswith("Bearer") and ADMIN_TOKEN not in answer.body.decode()


@pytest.mark.parametrize("body", [{"model": "esm9"}, {"model": "../esm2nv"}, {"model": "esm2nv/1"}, {}, {"model": 1}])
@pytest.mark.parametrize("path", ADMIN_ROUTES[1:])
def test_admin_requests_name_only_catalogued_models(routes: InProcessService, path: str, body: dict[str, Any]) -> None:
    answer = routes.post(path, body, {"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert_rejected(answer, 422, "model", "")
