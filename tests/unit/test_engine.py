"""The engine over the fake runner: what it sends Triton (length buckets, batch splits, the chunks in flight, the
layers and positions asked) and what it makes of the answers (pooling, padding, truncation, order), which models and
versions it picks, and Triton away.

Expectations are computed here from the tokenizer's ids and the fake's graph functions (support/fake_runner.py), not
from the engine's code.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from bionemo_serving.model_catalog import EXPORTS_PARAMETER, MODELS, Capability, GraphRole
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from bionemo_serving.engine import graphs
from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import (
    DecodeInput,
    DecodingMethod,
    EmbedInput,
    GenerateInput,
    HiddenInput,
    Pooling,
    SequencesInput,
)
from bionemo_serving.errors import CapabilityNotSupported, InvalidRequest, ModelUnavailable, UnknownModel, http_status
from support.fake_runner import (
    DECODED_ATOM,
    FakeRunner,
    checkpoint_sizes,
    contact_map,
    layer_states,
    log_probs_at,
    token_states,
)
from support.in_process import InProcessService, engine_over

PROTEINS = ["MKTAYIAKQR", "M", "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "mktayi", "XBUZOACDEFGHIKLMNPQRSTVWY" * 3]
SMILES = ["CC(=O)Nc1ccc(O)cc1", "C", "c1ccccc1"]
BUCKETS = [16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896]
"""Four widths per doubling (docs/architecture.md), then the model's own limit."""


def run(engine: Engine, method: str, asked: object) -> object:
    return asyncio.run(getattr(engine, method)(asked))


def ids(model: str, sequence: str) -> np.ndarray:
    return tokenizer_for(MODELS[model]).encode(sequence)


SPECIAL_TOKENS = {"esm1nv": (1, 1), "esm2nv": (1, 1), "prott5nv": (0, 1), "megamolbart": (0, 0)}
"""Before and after the residues: ESM's <cls> and <eos>, ProtT5's </s>, none around SMILES."""


def residues(model: str) -> slice:
    """The content tokens of a row: between the model's special tokens."""
    before, after = SPECIAL_TOKENS[model]
    return slice(before, -after or None)


def hidden_size(model: str) -> int:
    return checkpoint_sizes(MODELS[model])["hidden_size"]


@pytest.mark.parametrize(("model", "inputs"), [("esm2nv", PROTEINS), ("prott5nv", PROTEINS), ("megamolbart", SMILES)])
def test_an_embedding_is_the_mean_of_its_residues_states_in_input_order(model: str, inputs: list[str]) -> None:
    embedded = run(engine_over(FakeRunner()), "embed", EmbedInput(inputs, model))
    expected = [token_states(ids(model, text), hidden_size(model))[residues(model)].mean(axis=0) for text in inputs]
    np.testing.assert_allclose(embedded.vectors, expected, rtol=1e-6)
    assert embedded.vectors.dtype == np.float32 and (embedded.model, embedded.model_version) == (model, 1)
    assert embedded.tokens == sum(len(ids(model, text)) for text in inputs)
    assert embedded.truncated == [] and embedded.layers is None


def test_cls_pooling_is_the_first_tokens_state_and_normalize_scales_to_unit_length() -> None:
    asked = EmbedInput(PROTEINS, "esm1nv", pooling=Pooling.CLS, normalize=True)
    vectors = run(engine_over(FakeRunner()), "embed", asked).vectors
    at_cls = np.stack([token_states(ids("esm1nv", protein), hidden_size("esm1nv"))[0] for protein in PROTEINS])
    np.testing.assert_allclose(vectors, at_cls / np.linalg.norm(at_cls, axis=1, keepdims=True), rtol=1e-6)


def test_cls_pooling_on_a_model_without_cls_is_a_422_before_triton_is_asked_to_run() -> None:
    runner = FakeRunner()
    with pytest.raises(InvalidRequest, match="^pooling: prott5nv has no <cls> token; use 'mean'$"):
        run(engine_over(runner), "embed", EmbedInput(["MKT"], "prott5nv", pooling=Pooling.CLS))
    assert runner.calls == []


def test_dimensions_other_than_the_models_are_a_422_not_a_shortened_vector() -> None:
    engine = engine_over(FakeRunner())
    assert run(engine, "embed", EmbedInput(["MKT"], "esm2nv", dimensions=320)).vectors.shape == (1, 320)
    with pytest.raises(InvalidRequest, match="^dimensions: esm2nv embeddings have 320 dimensions, not 64;"):
        run(engine, "embed", EmbedInput(["MKT"], "esm2nv", dimensions=64))


def test_hidden_states_are_every_tokens_zero_padded_to_the_longest_input_with_its_mask() -> None:
    hidden = run(engine_over(FakeRunner()), "hidden", HiddenInput(PROTEINS, "esm2nv"))
    rows = [ids("esm2nv", protein) for protein in PROTEINS]
    width = max(map(len, rows))
    assert hidden.states.shape == (len(PROTEINS), width, hidden_size("esm2nv"))
    for row, tokens in enumerate(rows):
        np.testing.assert_allclose(hidden.states[row, : len(tokens)], token_states(tokens, hidden_size("esm2nv")))
        assert not hidden.states[row, len(tokens) :].any()  # the bucket's padding dropped, zeros instead
        assert hidden.mask[row].tolist() == [1] * len(tokens) + [0] * (width - len(tokens))


def bucket(tokens: int) -> int:
    """The width a row of `tokens` is padded to for esm2nv: the smallest bucket it fits, at most the model's limit."""
    return min([width for width in BUCKETS if width >= tokens] + [MODELS["esm2nv"].max_length + 2])


def test_rows_go_to_triton_in_chunks_of_one_length_bucket_each() -> None:
    """Little padding within a request, and shapes that concurrent requests share (Triton batches equal shapes)."""
    rng = np.random.default_rng(0)
    lengths = [1, 5, 14, 15, 20, 39, 60, 61, 100, 300, 700, 1022]
    proteins = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=length)) for length in lengths]
    runner = FakeRunner()
    embedded = run(engine_over(runner), "embed", EmbedInput(proteins, "esm2nv"))
    for call in runner.calls:
        width, tokens = call.inputs["input_ids"].shape[1], call.inputs["attention_mask"].sum(axis=1)
        assert {bucket(int(count)) for count in tokens} == {width}, (width, tokens)
    widths = sorted(call.inputs["input_ids"].shape[1] for call in runner.calls)
    assert widths == sorted({bucket(length + 2) for length in lengths})  # one chunk per bucket
    expected = [token_states(ids("esm2nv", protein), 320)[1:-1].mean(axis=0) for protein in proteins]
    np.testing.assert_allclose(embedded.vectors, expected, rtol=1e-6)


def test_a_chunk_larger_than_max_batch_size_is_split_and_comes_back_in_order() -> None:
    runner = FakeRunner()
    proteins = [f"M{'ACDEFGHIKL'[index % 10]}K{'MNPQRSTVWY'[index // 10]}" for index in range(70)]
    embedded = run(engine_over(runner, max_sequences=100), "embed", EmbedInput(proteins, "esm2nv"))
    assert sorted(len(call.inputs["input_ids"]) for call in runner.calls) == [6, 32, 32]
    expected = [token_states(ids("esm2nv", protein), 320)[1:-1].mean(axis=0) for protein in proteins]
    np.testing.assert_allclose(embedded.vectors, expected, rtol=1e-6)


def test_arrays_larger_than_max_batch_size_go_as_several_calls_answered_in_order() -> None:
    """What a graph call does with more rows than the config's max_batch_size (32) however it was handed them."""
    runner = FakeRunner()
    engine = engine_over(runner)
    model = asyncio.run(engine.encoder.registry.model("esm2nv", Capability.EMBED))
    rows = np.arange(70)[:, None] % 30 + np.array([[0, 5, 6]])  # 70 rows of 3 tokens, each its own ids
    arrays = {"input_ids": rows, "attention_mask": np.ones_like(rows), "pooling_mask": np.ones_like(rows)}
    embedded = asyncio.run(engine.encoder.graphs.infer(model, GraphRole.ENCODER, arrays, "embeddings"))
    assert [len(call.inputs["input_ids"]) for call in runner.calls] == [32, 32, 6]
    np.testing.assert_allclose(embedded, token_states(rows, 320).mean(axis=1), rtol=1e-6)


@pytest.mark.parametrize("bound", [1, 2, graphs.CHUNKS_IN_FLIGHT])
def test_a_request_keeps_at_most_chunks_in_flight_calls_at_once(monkeypatch: pytest.MonkeyPatch, bound: int) -> None:
    monkeypatch.setattr(graphs, "CHUNKS_IN_FLIGHT", bound)
    proteins = ["M" * length for length in (10, 20, 30, 50, 70, 90, 120, 200)]  # eight buckets
    runner = FakeRunner()
    run(engine_over(runner), "embed", EmbedInput(proteins, "esm2nv"))
    assert len(runner.calls) == 8 and runner.most_in_flight == bound


def test_truncation_embeds_the_first_residues_and_says_which_inputs_were_cut() -> None:
    limit = MODELS["esm2nv"].max_length
    over = ("MKTAYIAKQR" * 110)[: limit + 37]
    engine = engine_over(FakeRunner())
    embedded = run(engine, "embed", EmbedInput(["MKT", over, "A" * limit], "esm2nv", truncate=True))
    assert embedded.truncated == [1]
    np.testing.assert_allclose(embedded.vectors[1], token_states(ids("esm2nv", over[:limit]), 320)[1:-1].mean(axis=0))
    hidden = run(engine, "hidden", HiddenInput([over], "esm2nv", truncate=True))
    assert hidden.truncated == [0] and hidden.mask.sum() == limit + 2
    assert run(engine, "embed", EmbedInput(["MKT"], "esm2nv", truncate=True)).truncated == []


def test_a_mask_counts_as_one_residue_towards_the_limit_and_truncation() -> None:
    limit = MODELS["esm2nv"].max_length
    at_limit, over = "<mask>" * limit, "MK" + "<mask>" * (limit - 1)
    logits = run(engine_over(FakeRunner()), "logits", SequencesInput([at_limit, over], "esm2nv", truncate=True))
    assert logits.truncated == [1] and [len(log_probs) for log_probs in logits.log_probs] == [limit, limit]


def test_layers_are_resolved_from_the_end_and_each_is_that_layers_states() -> None:
    count = checkpoint_sizes(MODELS["esm2nv"])["hidden_layers"]
    runner = FakeRunner()
    engine = engine_over(runner)
    embedded = run(engine, "embed", EmbedInput(PROTEINS[:3], "esm2nv", layers=[-1, 0, 3, -count]))
    assert embedded.layers == [count - 1, 0, 3, 0]
    assert embedded.vectors.shape == (3, 4, 320)
    for row, protein in enumerate(PROTEINS[:3]):
        for index, layer in enumerate(embedded.layers):
            expected = layer_states(ids("esm2nv", protein), 320, layer, count)[1:-1].mean(axis=0)
            np.testing.assert_allclose(embedded.vectors[row, index], expected, rtol=1e-6)
    assert {call.model for call in runner.calls} == {"esm2nv_layers"}
    for call in runner.calls:  # every row asks for the same layers
        assert call.inputs["layers"].tolist() == [[count - 1, 0, 3, 0]] * len(call.inputs["layers"])
    hidden = run(engine, "hidden", HiddenInput(["MKT", "M"], "esm2nv", layers=[2]))
    assert hidden.states.shape == (2, 1, 5, 320) and hidden.layers == [2]
    np.testing.assert_allclose(hidden.states[1, 0, :3], layer_states(ids("esm2nv", "M"), 320, 2, count))
    assert not hidden.states[1, 0, 3:].any()
    plain = run(engine, "embed", EmbedInput(PROTEINS[:3], "esm2nv")).vectors  # the last layer is what /embed answers
    np.testing.assert_allclose(embedded.vectors[:, 0], plain, rtol=1e-6)


def test_layers_of_a_model_whose_layers_graph_is_not_loaded_are_a_422_saying_so() -> None:
    runner = FakeRunner()
    runner.loaded["esm2nv_layers"] = set()
    with pytest.raises(CapabilityNotSupported) as raised:
        run(engine_over(runner), "embed", EmbedInput(["MKT"], "esm2nv", layers=[0]))
    assert str(raised.value) == (
        "model: esm2nv cannot layers: esm2nv_layers is not loaded (Triton: UNAVAILABLE: unloaded); "
        "models that can: esm1nv, megamolbart, prott5nv"
    )


def test_log_probs_are_every_residues_with_masks_at_each_rows_own_length() -> None:
    sequences = ["MKTAYIAKQR", "MK<mask>AY", "M", "<mask><mask>"]
    runner = FakeRunner()
    logits = run(engine_over(runner), "logits", SequencesInput(sequences, "esm1nv"))
    for sequence, log_probs in zip(sequences, logits.log_probs):
        tokens = tokenizer_for(MODELS["esm1nv"]).encode(sequence, masks=True)
        expected = [log_probs_at(tokens, position) for position in range(1, len(tokens) - 1)]
        np.testing.assert_allclose(log_probs, expected, rtol=1e-6)
    for call in runner.calls:  # no padding: each chunk is rows of one length
        assert call.inputs["attention_mask"].all()


def test_contact_maps_are_residues_by_residues() -> None:
    sequences = ["MKTAYIAKQR", "MK", "MSLKRKNIALIPAAGIGVRF"]
    contacts = run(engine_over(FakeRunner()), "contacts", SequencesInput(sequences, "esm2nv"))
    for sequence, contact in zip(sequences, contacts.contacts):
        np.testing.assert_allclose(contact, contact_map(ids("esm2nv", sequence)[1:-1]))


def test_decoding_writes_each_latent_back_in_order_within_max_length() -> None:
    """The fake decoder writes one atom per real position of its source, then ends."""
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    hiddens = np.ones((3, 4, 256), dtype=np.float32) * mask[:, :, None]
    engine = engine_over(FakeRunner())
    decoded = run(engine, "decode", DecodeInput(hiddens, mask))
    assert decoded.smiles == [DECODED_ATOM * 3, DECODED_ATOM, DECODED_ATOM * 4]
    cut = run(engine, "decode", DecodeInput(hiddens, mask, max_length=2)).smiles
    assert cut == [DECODED_ATOM * 2, DECODED_ATOM, DECODED_ATOM * 2]
    assert asyncio.run(engine.decode_array(hiddens)).smiles == decoded.smiles  # the mask from the non-zero vectors


def test_generation_gives_each_seed_its_samples_with_rdkits_checks_by_every_method() -> None:
    """Each seed's latent, repeated per sample, decoded by the method asked; the fake decoder writes one atom per
    token of the seed, whatever the noise (the noise and the methods are held to transformers end to end)."""
    engine = engine_over(FakeRunner())
    for method in DecodingMethod:
        asked = GenerateInput(SMILES, "megamolbart", None, 2, 0.5, method, 1.0, 0, 1.0, 2, 7, 32)
        generated = run(engine, "generate", asked)
        assert generated.seed == 7 and [result.seed_smiles for result in generated.results] == SMILES
        for seed_smiles, result in zip(SMILES, generated.results):
            smiles = DECODED_ATOM * len(tokenizer_for(MODELS["megamolbart"]).encode(seed_smiles))
            for sample in result.samples:
                assert (sample.smiles, sample.valid, sample.canonical) == (smiles, True, canonical_smiles(smiles))
                assert sample.tanimoto == pytest.approx(tanimoto_similarity(smiles, seed_smiles))
            assert len(result.samples) == 2


def test_a_request_names_a_version_or_gets_the_newest() -> None:
    runner = FakeRunner(versions=(1, 2))
    engine = engine_over(runner)
    assert run(engine, "embed", EmbedInput(["MKT"], "esm2nv")).model_version == 2
    assert run(engine, "embed", EmbedInput(["MKT"], "esm2nv", model_version=1)).model_version == 1
    assert [call.version for call in runner.calls] == [2, 1]
    with pytest.raises(UnknownModel) as raised:
        run(engine, "embed", EmbedInput(["MKT"], "esm2nv", model_version=3))
    assert str(raised.value) == "model_version: esm2nv version 3 is not served; versions: 1, 2"
    assert http_status(raised.value) == 422


def test_every_answer_and_the_model_list_carry_the_precision_of_the_graph_at_the_version_used() -> None:
    """Version 2 of esm2nv's encoder and language model passed the INT8 gate, its layers graph is FP32 (never
    quantized), and version 1 is all FP32: each answer says what computed it, and GET /models what each graph runs."""
    runner = FakeRunner(models=["esm2nv"], versions=(1, 2))
    for graph, newest in (("esm2nv", "INT8"), ("esm2nv_language_model", "INT8"), ("esm2nv_layers", "FP32")):
        records = {"1": {"checkpoint": "mine", "precision": "FP32"}, "2": {"checkpoint": "mine", "precision": newest}}
        runner.configs[graph].parameters[EXPORTS_PARAMETER].string_value = json.dumps(records)
    routes = InProcessService(runner)
    answers = {
        "embed": routes.post("/embed", {"sequences": ["MKT"]}),
        "embed at version 1": routes.post("/embed", {"sequences": ["MKT"], "model_version": 1}),
        "embed of a layer": routes.post("/embed", {"sequences": ["MKT"], "layers": [1]}),
        "logits": routes.post("/logits", {"sequences": ["MKT"]}),
        "score": routes.post("/score", {"sequence": "MKT", "mutations": ["M1A"]}),
        "contacts": routes.post("/contacts", {"sequences": ["MKT"]}),
    }
    assert {asked: (answer.status, answer.json()["precision"]) for asked, answer in answers.items()} == {
        "embed": (200, "INT8"), "embed at version 1": (200, "FP32"), "embed of a layer": (200, "FP32"),
        "logits": (200, "INT8"), "score": (200, "INT8"), "contacts": (200, "FP32"),
    }  # fmt: skip
    (listed,) = routes.post("/models", b"").json()["models"]
    assert {graph["triton_model"]: graph["precision"] for graph in listed["runtimes"]} == {
        "esm2nv": "INT8", "esm2nv_language_model": "INT8", "esm2nv_layers": "FP32", "esm2nv_contacts": "FP32",
    }  # fmt: skip


def test_a_model_not_served_is_a_422_naming_those_that_are() -> None:
    engine = engine_over(FakeRunner(models=["esm2nv", "prott5nv"]))
    with pytest.raises(UnknownModel, match="^model: 'megamolbart' is not served; served models: esm2nv, prott5nv$"):
        run(engine, "embed", EmbedInput(["CCO"], "megamolbart"))
    with pytest.raises(CapabilityNotSupported, match="^model: esm2nv cannot decode; models that can: none served$"):
        run(engine, "decode", DecodeInput(np.ones((1, 1, 256)), np.ones((1, 1)), "esm2nv"))


def test_triton_away_is_a_503_to_retry_and_the_next_request_asks_triton_again() -> None:
    runner = FakeRunner()
    routes = InProcessService(runner)
    assert routes.post("/embed", {"sequences": ["MKT"]}).status == 200
    runner.away = True
    answer = routes.post("/embed", {"sequences": ["MKT"]})
    assert answer.status == 503 and answer.headers["retry-after"] == "5"
    assert answer.error["type"] == "model_unavailable" and answer.error["details"][0]["field"] == "model"
    assert answer.error["details"][0]["message"].startswith("esm2nv version 1 is not available right now: ")
    runner.away = False
    index_calls = runner.index_calls
    assert routes.post("/embed", {"sequences": ["MKT"]}).status == 200
    assert runner.index_calls == index_calls + 1  # rediscovered: the model may have been unloaded meanwhile


def test_a_model_unloaded_through_another_worker_is_a_503_then_a_422() -> None:
    runner = FakeRunner()
    engine = engine_over(runner)
    run(engine, "embed", EmbedInput(["MKT"], "prott5nv"))
    runner.loaded["prott5nv"] = set()  # this worker still lists it
    with pytest.raises(ModelUnavailable, match="prott5nv version 1 is not available right now"):
        run(engine, "embed", EmbedInput(["MKT"], "prott5nv"))
    with pytest.raises(UnknownModel, match="'prott5nv' is not served"):
        run(engine, "embed", EmbedInput(["MKT"], "prott5nv"))


def test_a_decoder_that_lost_its_caches_fails_the_request_with_a_503() -> None:
    """After a Triton restart the decoder no longer has the rows a step extends."""
    runner = FakeRunner()
    engine = engine_over(runner)
    original = runner._decode_step

    def forgetful(arrays: dict[str, np.ndarray]) -> np.ndarray:
        runner._decoder_rows.clear()
        return original(arrays)

    runner._decode_step = forgetful  # type: ignore[method-assign]
    with pytest.raises(ModelUnavailable, match="megamolbart_decoder version 1 is not available right now: .*no cache"):
        run(engine, "decode", DecodeInput(np.ones((1, 3, 256)), np.ones((1, 3))))


def test_models_lists_what_each_served_model_can_do_now() -> None:
    """Capabilities come from the graphs loaded: a head unloaded takes its capabilities off the list at once."""
    runner = FakeRunner(versions=(1, 2))
    routes = InProcessService(runner)
    listed = {model["name"]: model for model in routes.post("/models", b"").json()["models"]}
    assert set(listed) == set(MODELS)
    for name, model in listed.items():
        description = MODELS[name]
        assert model["capabilities"] == sorted(capability.value for capability in description.capabilities)
        assert (model["version"], model["versions"]) == (2, [1, 2])
        assert (model["max_length"], model["hidden_size"]) == (description.max_length, hidden_size(name))
        assert model["tokenizer"] == description.tokenizer.value
    assert {"logits", "score", "contacts"} <= set(listed["esm2nv"]["capabilities"])
    for name in ("prott5nv", "megamolbart"):
        assert not {"logits", "score", "contacts"} & set(listed[name]["capabilities"])
    runner.loaded["esm2nv_contacts"] = set()
    capabilities = {model["name"]: model["capabilities"] for model in routes.post("/models", b"").json()["models"]}
    assert "contacts" not in capabilities["esm2nv"] and "contacts" in capabilities["esm1nv"]
    openai = routes.post("/v1/models", b"").json()
    assert sorted(model["id"] for model in openai["data"]) == sorted(MODELS)


def test_models_publishes_the_request_limits_a_client_sizes_its_chunks_by() -> None:
    routes = InProcessService(max_sequences=8, max_score_passes=100, max_request_bytes=4096)
    assert routes.post("/models", b"").json()["limits"] == {
        "max_sequences": 8, "max_score_passes": 100, "max_request_bytes": 4096, "request_timeout_s": None,
    }
