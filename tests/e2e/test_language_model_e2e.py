"""/logits and /score on the real stack, held to transformers' EsmForMaskedLM with the same weights.

The reference (tests/support/reference.py) runs one sequence at a time without padding,
masks with transformers' own tokenizer and computes each scoring method in a
loop of its own; nothing is shared with the service's code path.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest
import requests
from support.service import RunningService
from support.reference import AMINO_ACIDS, TOLERANCE, Substitution, TransformersReference, proteins

pytestmark = pytest.mark.e2e

WILD_TYPE = "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQVIVQDIAYLRSLGYNIV"


def with_masks(sequence: str, positions: list[int]) -> str:
    return "".join("<mask>" if position in positions else residue for position, residue in enumerate(sequence))


def substitutions(variant: str) -> list[Substitution]:
    """`A23G:K45R` as the reference takes it."""
    return [(int(part[1:-1]) - 1, part[0], part[-1]) for part in variant.split(":")]


@pytest.mark.parametrize("model", ["esm1nv", "esm2nv"])
def test_log_probs_equal_transformers_on_mixed_lengths_with_and_without_masks(
    service: RunningService, model: str
) -> None:
    rng = np.random.default_rng(29)
    plain = proteins(rng, [1, 7, 40, 131, 300])
    # ESM-2's token dropout rescales by the share of masks: one mask, several, and a sequence all masks.
    sequences = plain + [
        with_masks(plain[2], [0]),
        with_masks(plain[3], [5, 6, 60, 130]),
        with_masks(plain[4], list(range(0, 300, 7))),
        "<mask>" * 12,
    ]
    reply = service.answer("/logits", {"model": model, "sequences": sequences})
    assert reply["alphabet"] == AMINO_ACIDS and reply["model"] == model
    reference = TransformersReference(model)
    for sequence, log_probs in zip(sequences, reply["log_probs"]):
        expected = reference.log_probs(sequence)
        assert np.array(log_probs).shape == expected.shape
        np.testing.assert_allclose(log_probs, expected, rtol=0, atol=TOLERANCE)


def test_log_probs_come_as_base64_float16(service: RunningService) -> None:
    sequences = ["MKTV<mask>QERL", "ACDE"]
    reply = service.answer("/logits", {"sequences": sequences, "encoding_format": "base64", "dtype": "float16"})
    reference = TransformersReference("esm2nv")
    for sequence, encoded in zip(sequences, reply["log_probs"]):
        values = np.frombuffer(base64.b64decode(encoded), dtype="<f2").reshape(-1, len(AMINO_ACIDS))
        np.testing.assert_allclose(values, reference.log_probs(sequence), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("model", ["esm1nv", "esm2nv"])
def test_each_scoring_method_equals_transformers_on_single_and_multi_mutants(
    service: RunningService, model: str
) -> None:
    variants = ["M1A", "K2R", "T3W", "E7D", "L9P:K10E", "S11A:I12V:V13L", "V54G"]
    reference = TransformersReference(model)
    expected = {
        "masked-marginal": [reference.masked_marginal(WILD_TYPE, substitutions(v)) for v in variants],
        "wildtype-marginal": [reference.wildtype_marginal(WILD_TYPE, substitutions(v)) for v in variants],
    }
    short, short_variants = WILD_TYPE[:24], variants[:5]  # pseudo-likelihood: 24 passes per sequence
    mutant_pll = [
        reference.pseudo_log_likelihood(_applied(short, substitutions(v))) - reference.pseudo_log_likelihood(short)
        for v in short_variants
    ]
    for method, scores in expected.items():
        reply = service.answer(
            "/score", {"model": model, "sequence": WILD_TYPE, "mutations": variants, "method": method}
        )
        assert reply["method"] == method
        np.testing.assert_allclose(reply["scores"], scores, rtol=0, atol=TOLERANCE)
    body = {"model": model, "sequence": short, "mutations": short_variants, "method": "pseudo-likelihood"}
    reply = service.answer("/score", body)
    assert reply["passes"] == len(short) * (1 + len(short_variants))
    np.testing.assert_allclose(reply["scores"], mutant_pll, rtol=0, atol=TOLERANCE)


def _applied(sequence: str, variant: list[Substitution]) -> str:
    residues = list(sequence)
    for position, _, mutant in variant:
        residues[position] = mutant
    return "".join(residues)


def test_the_scan_matrix_equals_transformers_element_by_element(service: RunningService) -> None:
    sequence = WILD_TYPE[:30]
    reply = service.answer("/score", {"sequence": sequence, "scan": True})
    matrix = np.array(reply["scores"])
    assert matrix.shape == (len(sequence), len(AMINO_ACIDS)) and reply["passes"] == len(sequence)
    reference = TransformersReference("esm2nv")
    for position, wild_type in enumerate(sequence):
        log_probs = reference.log_probs(with_masks(sequence, [position]))[position]
        expected = log_probs - log_probs[AMINO_ACIDS.index(wild_type)]
        np.testing.assert_allclose(matrix[position], expected, rtol=0, atol=TOLERANCE)
        assert matrix[position, AMINO_ACIDS.index(wild_type)] == 0
    part = service.answer("/score", {"sequence": sequence, "scan": True, "scan_positions": [5, 12]})
    assert (part["scan_positions"], part["passes"], part["precision"]) == ([5, 12], 8, "FP32")
    np.testing.assert_allclose(part["scores"], matrix[4:12], rtol=0, atol=TOLERANCE)  # the same rows, alone
    unmasked = service.answer("/score", {"sequence": sequence, "scan": True, "method": "wildtype-marginal"})
    log_probs = reference.log_probs(sequence)
    own = log_probs[np.arange(len(sequence)), [AMINO_ACIDS.index(residue) for residue in sequence]]
    np.testing.assert_allclose(unmasked["scores"], log_probs - own[:, None], rtol=0, atol=TOLERANCE)
    assert unmasked["passes"] == 1


@pytest.mark.parametrize(
    ("mutation", "message"),
    [("A1G", "'A1G': position 1 is M in the sequence, not A")],  # every other refusal: tests/unit/test_validation.py
)
def test_a_bad_mutation_is_a_422_naming_it_and_why(service: RunningService, mutation: str, message: str) -> None:
    response = service.post("/score", {"sequence": WILD_TYPE, "mutations": ["K2R", mutation]})
    assert response.status_code == 422, response.text
    (detail,) = response.json()["error"]["details"]
    assert detail["field"] == "mutations[1]" and detail["message"].startswith(message), detail


def test_score_requests_the_service_cannot_take_are_422s_and_it_stays_healthy(service: RunningService) -> None:
    long = WILD_TYPE * 6  # 324 residues: a pseudo-likelihood scan is 324 x (1 + 19 x 324) passes
    refusals = {
        "body": {"sequence": WILD_TYPE},  # neither mutations nor scan
        "mutations": {"sequence": WILD_TYPE[:10], "mutations": ["K2R"], "scan": True},  # both
        "scan": {"sequence": long, "scan": True, "method": "pseudo-likelihood"},
        "sequence": {"sequence": "MKTXV", "scan": True},
    }
    for field, body in refusals.items():
        response = service.post("/score", body)
        assert response.status_code == 422, (field, response.text)
        details = response.json()["error"]["details"]
        assert details[0]["field"] in (field, "body"), details
    scan = service.post("/score", refusals["scan"]).json()["error"]["details"][0]["message"]
    assert "needs 1,994,868 model passes here; the limit is 1,024 per request (BIONEMO_MAX_SCORE_PASSES)" in scan
    assert "'X' at position 4 is not one of the 20 amino acids" in service.post("/score", refusals["sequence"]).text
    response = service.post("/logits", {"sequences": ["MK<mask>", "MK<mas>"]})
    assert response.status_code == 422 and response.json()["error"]["details"][0]["field"] == "sequences[1]"
    assert requests.get(f"{service.url}/readyz", timeout=10).status_code == 200


def test_models_list_logits_and_score_for_esm_only(service: RunningService) -> None:
    listed = {
        m["name"]: set(m["capabilities"]) for m in requests.get(f"{service.url}/models", timeout=30).json()["models"]
    }
    assert {"logits", "score"} <= listed["esm1nv"] and {"logits", "score"} <= listed["esm2nv"]
    assert not {"logits", "score"} & (listed["prott5nv"] | listed["megamolbart"])
    response = service.post("/logits", {"model": "prott5nv", "sequences": ["MKTV"]})
    assert response.status_code == 422
    assert (
        response.json()["error"]["details"][0]["message"] == "prott5nv cannot logits; models that can: esm1nv, esm2nv"
    )
