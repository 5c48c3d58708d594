"""MegaMolBART end to end: embeddings, hidden states, greedy decoding against transformers, generation."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests

from support.service import RunningService
from bionemo_serving.preprocessing.smiles import SmilesTokenizer, canonical_smiles, tanimoto_similarity
from bionemo_serving.model_catalog import MODELS
from support.reference import TOLERANCE, TransformersReference, greedy_reference

pytestmark = pytest.mark.e2e

SMILES = ["CC(=O)Nc1ccc(O)cc1", "C", "c1ccccc1", "CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "F/C=C/F", "[C@@H](Cl)(Br)I"]


@pytest.fixture(scope="module")
def reference() -> TransformersReference:
    return TransformersReference("megamolbart")


def test_embed_and_hidden_match_transformers(service: RunningService, reference: TransformersReference) -> None:
    embedded = service.post("/embed", {"model": "megamolbart", "sequences": SMILES})
    hidden = service.post("/hidden", {"model": "megamolbart", "sequences": SMILES})
    assert embedded.status_code == hidden.status_code == 200, embedded.text + hidden.text
    hiddens, mask = np.asarray(hidden.json()["hiddens"]), np.asarray(hidden.json()["mask"])
    for row, (smiles, vector) in enumerate(zip(SMILES, embedded.json()["embeddings"])):
        expected = reference.hidden_states(smiles)
        assert np.abs(np.asarray(vector) - expected.mean(axis=0)).max() < TOLERANCE
        assert mask[row].sum() == len(expected)
        assert np.abs(hiddens[row, : len(expected)] - expected).max() < TOLERANCE


def test_truncate_cuts_a_long_smiles_to_its_first_tokens(service: RunningService, reference: TransformersReference) -> None:
    limit = MODELS["megamolbart"].max_length
    chain = "C" * (limit + 20)  # a valid SMILES (an alkane) of limit + 20 tokens
    refused = service.post("/embed", {"model": "megamolbart", "sequences": [chain]})
    assert refused.status_code == 422 and f"at most {limit}" in refused.text, refused.text
    assert '(or send "truncate": true)' in refused.json()["error"]["message"]  # the way out is named
    broken = service.post("/embed", {"model": "megamolbart", "sequences": [chain + "("]})
    assert broken.status_code == 422 and "not a valid SMILES" in broken.text, broken.text
    assert "truncate" not in broken.text  # truncating would not mend it
    embedded = service.post("/embed", {"model": "megamolbart", "sequences": [chain], "truncate": True})
    assert embedded.status_code == 200, embedded.text
    assert embedded.json()["truncated"] == [0]
    expected = reference.hidden_states(chain[:limit]).mean(axis=0)
    assert np.abs(np.asarray(embedded.json()["embeddings"][0]) - expected).max() < TOLERANCE


def test_decode_of_hidden_equals_transformers_generate(service: RunningService, reference: TransformersReference) -> None:
    hidden = service.post("/hidden", {"model": "megamolbart", "sequences": SMILES}).json()
    decoded = service.post("/decode", {"hiddens": hidden["hiddens"], "mask": hidden["mask"], "max_length": 24})
    assert decoded.status_code == 200, decoded.text
    hiddens, mask = np.asarray(hidden["hiddens"], dtype=np.float32), np.asarray(hidden["mask"])
    assert decoded.json()["smiles"] == greedy_reference(reference, hiddens, mask, 24)


def test_decode_follows_transformers_token_for_token(service: RunningService, reference: TransformersReference) -> None:
    """Latents far from the untrained model's comfort zone, so that each step picks a different token."""
    rng = np.random.default_rng(0)
    hiddens = (rng.standard_normal((4, 9, 256)) * 100).astype(np.float32)
    mask = np.ones((4, 9), dtype=np.int64)
    mask[1, 5:] = mask[3, 2:] = 0
    hiddens[mask == 0] = 0
    expected = greedy_reference(reference, hiddens, mask, 16)
    assert len(set(expected)) == 4 and all(len(s) > 8 for s in expected)  # the comparison has teeth
    answer = service.post("/decode", {"hiddens": hiddens.tolist(), "mask": mask.tolist(), "max_length": 16})
    assert answer.status_code == 200, answer.text
    assert answer.json()["smiles"] == expected
    as_array = service.post("/decode/ndarray", hiddens.tolist())  # all-zero vectors are padding there
    assert as_array.status_code == 200, as_array.text
    assert as_array.json()["smiles"] == greedy_reference(reference, hiddens, mask, 128)


def test_concurrent_decodes_share_decoder_steps_and_keep_their_answers(
    service: RunningService, reference: TransformersReference
) -> None:
    """Requests in flight together are decoded in shared steps (continuous batching), even with sources of
    different widths, which Triton's batcher cannot merge; each still equals transformers token for token."""
    rng = np.random.default_rng(1)
    bodies = [
        {"hiddens": (rng.standard_normal((1, width, 256)) * 100).tolist(), "mask": [[1] * width], "max_length": 16}
        for width in range(3, 15)
    ]
    latents = [(np.asarray(b["hiddens"], dtype=np.float32), np.asarray(b["mask"])) for b in bodies]
    expected = [greedy_reference(reference, hiddens, mask, 16)[0] for hiddens, mask in latents]

    payloads = [json.dumps(body).encode() for body in bodies]

    def decode_all(concurrently: bool) -> tuple[list[str], int]:
        """The first SMILES of each answer, and the decoder's runs in Triton meanwhile. Concurrent requests leave
        together (encoded beforehand, released by a barrier), so that a busy machine does not stagger them."""
        _, runs = service.triton_counts("megamolbart_decoder")
        together = threading.Barrier(len(payloads) if concurrently else 1)

        def send(payload: bytes) -> requests.Response:
            together.wait()
            headers = {"content-type": "application/json"}
            return requests.post(f"{service.url}/decode", data=payload, headers=headers, timeout=300)

        with ThreadPoolExecutor(max_workers=len(payloads) if concurrently else 1) as pool:
            answers = list(pool.map(send, payloads))
        _, runs_after = service.triton_counts("megamolbart_decoder")
        return [answer.json()["smiles"][0] for answer in answers], runs_after - runs

    alone, runs_alone = decode_all(concurrently=False)
    together, runs_together = decode_all(concurrently=True)
    assert alone == together == expected
    assert runs_together < runs_alone / 2, "concurrent requests did not share decoder steps"


def noisy_latents(
    reference: TransformersReference, seeds: list[str], samples: int, seed: int, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """What /generate decodes: every seed's encoder states, padded to the longest seed and repeated per sample, plus
    numpy's `default_rng(seed)` Gaussian noise times `scaled_radius`; and the mask."""
    states = [reference.hidden_states(smiles) for smiles in seeds]
    width = max(len(state) for state in states)
    padded = np.zeros((len(seeds), width, states[0].shape[1]), dtype=np.float32)
    mask = np.zeros((len(seeds), width), dtype=np.int64)
    for row, state in enumerate(states):
        padded[row, : len(state)], mask[row, : len(state)] = state, 1
    padded, mask = np.repeat(padded, samples, axis=0), np.repeat(mask, samples, axis=0)
    noise = np.random.default_rng(seed).standard_normal(padded.shape).astype(np.float32) * np.float32(radius)
    return ((padded + noise) * mask[:, :, None]).astype(np.float32), mask


def test_generate_decodes_seeded_noisy_latents_like_transformers(
    service: RunningService, reference: TransformersReference
) -> None:
    """Greedy /generate equals transformers' `generate` from the same noisy latents."""
    seeds, samples, radius, steps = [SMILES[0], SMILES[2]], 3, 100.0, 20
    body = {"smiles": seeds, "num_samples": samples, "seed": 5, "scaled_radius": radius, "max_length": steps}
    answer = service.post("/generate", body)
    assert answer.status_code == 200, answer.text
    expected = greedy_reference(reference, *noisy_latents(reference, seeds, samples, 5, radius), steps)
    generated = [sample["smiles"] for result in answer.json()["results"] for sample in result["samples"]]
    assert len(set(expected)) == len(expected)  # the comparison has teeth
    assert generated == expected


def test_beam_search_forks_cached_rows_like_decoding_whole_prefixes(
    service: RunningService, reference: TransformersReference
) -> None:
    """Beam search over the key-value-incremental decoder (hypotheses fork their parents' caches) gives what the same
    search gives over transformers' logits of whole prefixes, recomputed at every step."""
    seeds, samples, radius, steps, beams = [SMILES[0], SMILES[3]], 2, 100.0, 16, 3
    body = {"smiles": seeds, "num_samples": samples, "seed": 9, "scaled_radius": radius, "max_length": steps,
            "method": "beam", "beam_size": beams}  # fmt: skip
    answer = service.post("/generate", body)
    assert answer.status_code == 200, answer.text
    hiddens, mask = noisy_latents(reference, seeds, samples, 9, radius)
    detokenizer = SmilesTokenizer(max_tokens=510)
    expected = [detokenizer.decode(np.asarray(ids)) for ids in reference.beam_search(hiddens, mask, beams, steps)]
    greedy = greedy_reference(reference, hiddens, mask, steps)
    assert expected != greedy  # the comparison has teeth: the beams changed some answer
    assert [sample["smiles"] for result in answer.json()["results"] for sample in result["samples"]] == expected


@pytest.mark.parametrize("method", ["greedy", "topkp", "beam"])
def test_generate_is_reproducible_and_reports_validity(service: RunningService, method: str) -> None:
    body = {"smiles": SMILES[:2], "num_samples": 3, "seed": 7, "method": method, "max_length": 12,
            "top_k": 10, "top_p": 0.9, "beam_size": 2, "scaled_radius": 0.5}  # fmt: skip
    first, second = service.post("/generate", body), service.post("/generate", body)
    assert first.status_code == 200, first.text
    assert first.json() == second.json() and first.json()["seed"] == 7
    results = first.json()["results"]
    assert [result["seed_smiles"] for result in results] == SMILES[:2]
    for result in results:
        assert len(result["samples"]) == 3
        for sample in result["samples"]:
            assert sample["valid"] == (canonical_smiles(sample["smiles"]) is not None)
            assert sample["canonical"] == canonical_smiles(sample["smiles"])
            if sample["valid"]:
                assert sample["tanimoto"] == pytest.approx(tanimoto_similarity(sample["smiles"], result["seed_smiles"]))


def test_generate_without_seed_reports_the_one_it_used(service: RunningService) -> None:
    body = {"smiles": ["CCO"], "num_samples": 2, "method": "topkp", "max_length": 8}
    first = service.post("/generate", body).json()
    again = service.post("/generate", {**body, "seed": first["seed"]}).json()
    assert again == first


BAD = [
    ("/generate", {"smiles": ["CCO", "C1CC"]}, "smiles[1]", "not a valid SMILES"),
    ("/decode", {"model": "esm2nv", "hiddens": [[[0.5]]], "mask": [[1]]}, "model", "models that can: megamolbart"),
    ("/decode", {"hiddens": [[[0.5] * 256]], "mask": [[1], [1]]}, "mask", "has 2 rows"),
    ("/decode/ndarray", [[[0.0] * 256]], "body[0]", "all zeros"),
]
"""One of each kind through the real stack (RDKit, the catalog, the shapes, the bare array); every bad body of every
route runs in-process in tests/unit/test_validation.py."""


@pytest.mark.parametrize(("path", "body", "field", "message"), BAD, ids=[f"{p}-{f}" for p, _, f, _ in BAD])
def test_bad_molecule_input_is_a_422_naming_the_field(
    service: RunningService, path: str, body: Any, field: str, message: str
) -> None:
    response = service.post(path, body)
    assert response.status_code == 422, response.text
    assert any(d["field"] == field and message in d["message"] for d in response.json()["error"]["details"]), response.text


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/decode", b'{"hiddens": [[[NaN, 0.5]]], "mask": [[1]]}', "finite number"),
        ("/decode/ndarray", b"[[[Infinity, 0.5]]]", "NaN or infinite"),
    ],
)
def test_non_finite_hidden_states_are_rejected(service: RunningService, path: str, body: bytes, message: str) -> None:
    response = requests.post(f"{service.url}{path}", data=body, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 422, response.text
    assert message in response.text
