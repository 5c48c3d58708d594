"""The variant scorers of /score through the Engine, over the fake runner: each method's scores are its formula applied
to the language model's log-probabilities (here the fake's, computed again below from the rows each method should
send), in the passes it says, within BIONEMO_MAX_SCORE_PASSES; a scan is the [residues, 20] matrix of them."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from bionemo_serving.model_catalog import MODELS, SCORED_AMINO_ACIDS
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import ScoreInput, ScoringMethod
from bionemo_serving.engine.results import Scores
from bionemo_serving.errors import CapabilityNotSupported, InvalidRequest
from support.fake_runner import FakeRunner, log_probs_at
from support.in_process import engine_over

WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQ"
MODEL = "esm2nv"
TOKENIZER = tokenizer_for(MODELS[MODEL])
MASK, FIRST = TOKENIZER.mask_id, len(TOKENIZER.prefix_ids)
"""ESM rows are <cls> residues <eos>: residue i is token FIRST + i."""
LANGUAGE_MODEL = f"{MODEL}_language_model"


def score(
    mutations: list[str] | None,
    method: ScoringMethod = ScoringMethod.MASKED_MARGINAL,
    sequence: str = WILD_TYPE,
    engine: Engine | None = None,
    scan_positions: tuple[int, int] | None = None,
) -> Scores:
    asked = ScoreInput(sequence, MODEL, None, mutations, mutations is None, method, scan_positions)
    return asyncio.run((engine or engine_over(FakeRunner())).score(asked))


def masked(sequence: str, positions: list[int]) -> np.ndarray:
    """The token row of `sequence` with the residues at `positions` (0-based) masked."""
    ids = TOKENIZER.encode(sequence)
    ids[[FIRST + position for position in positions]] = MASK
    return ids


def log_probs(sequence: str, position: int, masked_at: list[int]) -> np.ndarray:
    """The language model's [20] log-probabilities at residue `position` of `sequence` with `masked_at` masked."""
    return log_probs_at(masked(sequence, masked_at), FIRST + position)


def column(amino_acid: str) -> int:
    return SCORED_AMINO_ACIDS.index(amino_acid)


def parts(variant: str) -> list[tuple[int, str, str]]:
    """`K2R:T3W` as (0-based position, wild type, mutant) triples, read here without the service's parser."""
    return [(int(part[1:-1]) - 1, part[0], part[-1]) for part in variant.split(":")]


def mutant(sequence: str, variant: str) -> str:
    residues = list(sequence)
    for position, _, substitute in parts(variant):
        residues[position] = substitute
    return "".join(residues)


def pseudo_log_likelihood(sequence: str) -> float:
    return sum(float(log_probs(sequence, i, [i])[column(residue)]) for i, residue in enumerate(sequence))


def rows_sent(runner: FakeRunner) -> int:
    return sum(len(call.inputs["input_ids"]) for call in runner.calls if call.model == LANGUAGE_MODEL)


VARIANTS = ["K2R", "T3W", "K2A", "K2R:T3W", "Y5F:A4G:Q11E", "Q22K", "M1M"]


def test_masked_marginal_masks_each_variants_positions_in_one_pass() -> None:
    """Meier et al. 2021: the sum over the mutated positions of log p(mutant) - log p(wild type), all of them masked."""
    expected = []
    for variant in VARIANTS:
        positions = [position for position, _, _ in parts(variant)]
        expected.append(
            sum(
                log_probs(WILD_TYPE, p, positions)[column(m)] - log_probs(WILD_TYPE, p, positions)[column(w)]
                for p, w, m in parts(variant)
            )
        )
    runner = FakeRunner()
    scores = score(VARIANTS, engine=engine_over(runner))
    np.testing.assert_allclose(scores.scores, expected, rtol=0, atol=1e-5)
    distinct_position_sets = {tuple(sorted(p for p, _, _ in parts(variant))) for variant in VARIANTS}
    assert scores.passes == len(distinct_position_sets) == rows_sent(runner) == 6
    assert scores.method is ScoringMethod.MASKED_MARGINAL and (scores.model, scores.model_version) == (MODEL, 1)


def test_masked_marginal_sends_the_masked_rows_and_asks_for_their_masked_positions() -> None:
    runner = FakeRunner()
    score(["K2R", "K2A:T3W"], engine=engine_over(runner))
    (call,) = [call for call in runner.calls if call.model == LANGUAGE_MODEL]
    rows, positions = call.inputs["input_ids"].tolist(), call.inputs["positions"].tolist()
    sent = dict(zip(map(tuple, rows), positions))
    # Rows of one length ask for as many positions: the one asking for fewer repeats its last.
    assert sent == {
        tuple(masked(WILD_TYPE, [1]).tolist()): [FIRST + 1, FIRST + 1],
        tuple(masked(WILD_TYPE, [1, 2]).tolist()): [FIRST + 1, FIRST + 2],
    }


def test_wildtype_marginal_scores_every_variant_from_one_unmasked_pass() -> None:
    expected = [
        sum(log_probs(WILD_TYPE, p, [])[column(m)] - log_probs(WILD_TYPE, p, [])[column(w)] for p, w, m in parts(v))
        for v in VARIANTS
    ]
    runner = FakeRunner()
    scores = score(VARIANTS, ScoringMethod.WILDTYPE_MARGINAL, engine=engine_over(runner))
    np.testing.assert_allclose(scores.scores, expected, rtol=0, atol=1e-5)
    assert scores.passes == rows_sent(runner) == 1


def test_pseudo_likelihood_is_the_mutants_pseudo_log_likelihood_minus_the_wild_types() -> None:
    sequence, variants = WILD_TYPE[:8], ["K2R", "T3W:A4G", "K2R"]
    wild_type = pseudo_log_likelihood(sequence)
    expected = [pseudo_log_likelihood(mutant(sequence, variant)) - wild_type for variant in variants]
    runner = FakeRunner()
    scores = score(variants, ScoringMethod.PSEUDO_LIKELIHOOD, sequence, engine_over(runner))
    np.testing.assert_allclose(scores.scores, expected, rtol=0, atol=1e-5)
    distinct_sequences = 1 + len(set(variants))
    assert scores.passes == len(sequence) * distinct_sequences == rows_sent(runner)


def test_a_synonymous_variant_scores_zero_by_every_method() -> None:
    for method in ScoringMethod:
        assert score(["M1M", "K2K:T3T"], method, WILD_TYPE[:6]).scores.tolist() == [0.0, 0.0]


def test_the_sequence_is_read_in_either_case() -> None:
    lower = score(VARIANTS, sequence=WILD_TYPE.lower())
    np.testing.assert_array_equal(lower.scores, score(VARIANTS).scores)


@pytest.mark.parametrize(
    ("method", "passes"),
    [
        (ScoringMethod.MASKED_MARGINAL, len(WILD_TYPE)),
        (ScoringMethod.WILDTYPE_MARGINAL, 1),
    ],
)
def test_a_scan_is_the_residues_by_amino_acids_matrix_of_single_substitution_scores(
    method: ScoringMethod, passes: int
) -> None:
    runner = FakeRunner()
    scan = score(None, method, engine=engine_over(runner))
    assert scan.scores.shape == (len(WILD_TYPE), len(SCORED_AMINO_ACIDS))
    assert scan.passes == passes == rows_sent(runner)
    for position, wild_type in enumerate(WILD_TYPE):
        at = log_probs(WILD_TYPE, position, [position] if method is ScoringMethod.MASKED_MARGINAL else [])
        np.testing.assert_allclose(scan.scores[position], at - at[column(wild_type)], rtol=0, atol=1e-5)
        assert scan.scores[position, column(wild_type)] == 0  # the wild type's own column, not computed


def test_a_pseudo_likelihood_scan_scores_every_mutant_sequence() -> None:
    sequence = WILD_TYPE[:3]
    scan = score(None, ScoringMethod.PSEUDO_LIKELIHOOD, sequence)
    assert scan.passes == len(sequence) * (1 + 19 * len(sequence))
    wild_type = pseudo_log_likelihood(sequence)
    for position, residue in enumerate(sequence):
        for amino_acid in SCORED_AMINO_ACIDS:
            variant = f"{residue}{position + 1}{amino_acid}"
            expected = 0.0 if amino_acid == residue else pseudo_log_likelihood(mutant(sequence, variant)) - wild_type
            assert scan.scores[position, column(amino_acid)] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    ("mutations", "method", "passes"),
    [
        (["K2R", "T3W", "A4G"], ScoringMethod.MASKED_MARGINAL, 3),
        (None, ScoringMethod.MASKED_MARGINAL, len(WILD_TYPE)),
        (["K2R", "T3W"], ScoringMethod.PSEUDO_LIKELIHOOD, len(WILD_TYPE) * 3),
    ],
)
def test_a_request_over_the_pass_limit_is_a_422_before_any_pass(
    mutations: list[str] | None, method: ScoringMethod, passes: int
) -> None:
    runner = FakeRunner()
    with pytest.raises(InvalidRequest) as raised:
        score(mutations, method, engine=engine_over(runner, max_score_passes=passes - 1))
    (problem,) = raised.value.problems
    assert problem.field == ("scan" if mutations is None else "mutations")
    assert problem.message == (
        f"{method.value} needs {passes:,} model passes here; the limit is {passes - 1:,} per request "
        "(BIONEMO_MAX_SCORE_PASSES): send fewer variants or a cheaper method"
    )
    assert rows_sent(runner) == 0
    assert score(mutations, method, engine=engine_over(FakeRunner(), max_score_passes=passes)).passes == passes


def test_the_default_pass_limit_refuses_a_pseudo_likelihood_scan_of_a_modest_protein() -> None:
    """324 residues by pseudo-likelihood: 324 x (1 + 19 x 324) passes, against 1,024."""
    with pytest.raises(InvalidRequest, match="needs 1,994,868 model passes here; the limit is 1,024 per request"):
        score(None, ScoringMethod.PSEUDO_LIKELIHOOD, (WILD_TYPE * 15)[:324])


@pytest.mark.parametrize("method", [ScoringMethod.MASKED_MARGINAL, ScoringMethod.PSEUDO_LIKELIHOOD])
def test_a_residue_outside_the_20_amino_acids_cannot_be_scanned_nor_pseudo_likelihood_scored(
    method: ScoringMethod,
) -> None:
    """Every residue is compared with its substitutes (scan) or scored itself (pseudo-likelihood); the first such
    residue is named, 1-based."""
    sequence = "MKTXVBA"
    asked = [None, ["K2R"]] if method is ScoringMethod.PSEUDO_LIKELIHOOD else [None]
    for mutations in asked:
        with pytest.raises(InvalidRequest) as raised:
            score(mutations, method, sequence)
        assert [(p.field, p.message) for p in raised.value.problems] == [
            ("sequence", f"residue 'X' at position 4 is not one of the 20 amino acids {SCORED_AMINO_ACIDS}; "
                         "a scan cannot score it")
        ]  # fmt: skip


def test_masked_marginal_scores_a_variant_beside_a_residue_it_cannot_score() -> None:
    (value,) = score(["K2R"], sequence="MKTXV").scores
    at = log_probs("MKTXV", 1, [1])
    assert value == pytest.approx(at[column("R")] - at[column("K")], abs=1e-6)


def test_a_bad_variant_or_sequence_is_named_under_the_scores_fields() -> None:
    """`sequence` is one string: its errors name the field, not an item `sequence[0]` the request does not have."""
    with pytest.raises(InvalidRequest) as raised:
        score(["K2R", "A1G"])
    assert [p.field for p in raised.value.problems] == ["mutations[1]"]
    with pytest.raises(InvalidRequest) as raised:
        score(["M1A"], sequence="M" * (MODELS[MODEL].max_length + 1))
    (problem,) = raised.value.problems
    assert problem.field == "sequence" and f"at most {MODELS[MODEL].max_length}" in problem.message
    assert "truncate" not in problem.message  # /score has no truncate to suggest
    with pytest.raises(InvalidRequest) as raised:
        score(["M1A"], sequence="MKJ")
    (problem,) = raised.value.problems
    assert problem.field == "sequence" and problem.message.startswith("character 'J' at position 2 is not")


def test_a_model_without_its_language_model_head_cannot_score_and_says_why() -> None:
    engine = engine_over(FakeRunner(absent=[LANGUAGE_MODEL]))
    with pytest.raises(CapabilityNotSupported) as raised:
        score(["K2R"], engine=engine)
    assert str(raised.value) == (
        f"model: {MODEL} cannot score: its checkpoint has no head for it (the model repository has no {LANGUAGE_MODEL})"
        "; models that can: esm1nv"
    )


def timed_at_start_up(runner: FakeRunner, milliseconds: dict[str, float]) -> FakeRunner:
    """`runner` with its language model's config recording start-up timings of `milliseconds` per batch shape."""
    timings = {"chosen_by": "measurement", "cpu": "a CPU", "threads": 1, "milliseconds": milliseconds}
    parameters = runner.configs[LANGUAGE_MODEL].parameters
    parameters["runtime"].string_value = "onnxruntime"
    parameters["runtime_timings"].string_value = json.dumps(timings)
    return runner


def test_a_scan_the_timings_say_outlasts_the_request_is_refused_at_once_with_ranges_that_fit() -> None:
    """8 rows of 64 tokens took 2 s at start-up: a row of 24 tokens (22 residues) 94 ms, 22 of them about 2.06 s,
    past a request's 0.5 s. The ranges suggested take 80 % of it at most, and are answered."""
    runner = timed_at_start_up(FakeRunner(), {"1x64": 300.0, "8x64": 2000.0})
    engine = engine_over(runner, request_seconds=0.5)
    with pytest.raises(InvalidRequest) as raised:
        score(None, engine=engine)
    (problem,) = raised.value.problems
    assert (problem.field, problem.message) == ("scan", (
        "22 model passes of 24 tokens take about 2 s here (esm2nv's language model as timed at start-up: 94 ms a "
        "pass); a request has 0.5 s (BIONEMO_REQUEST_TIMEOUT_S): scan part of the protein at a time with "
        "scan_positions, e.g. [1, 4], then [5, 8], or raise BIONEMO_REQUEST_TIMEOUT_S"
    ))  # fmt: skip
    assert rows_sent(runner) == 0
    whole = score(None)  # no time limit
    for first, last in ((1, 4), (5, 8), (9, 12), (13, 16), (17, 20), (21, 22)):
        part = score(None, engine=engine, scan_positions=(first, last))
        assert (part.scan_positions, part.passes) == ((first, last), last - first + 1)
        np.testing.assert_array_equal(part.scores, whole.scores[first - 1 : last])
    with pytest.raises(InvalidRequest, match=r"e\.g\. \[9, 12\], then \[13, 16\], or raise"):  # from its first residue
        score(None, engine=engine, scan_positions=(9, 22))
    with pytest.raises(InvalidRequest, match="^mutations: 3 model passes .* a request has 0.01 s .*: send fewer variants"):
        score(["K2R", "T3W", "A4G"], engine=engine_over(runner, request_seconds=0.01))


def test_an_untimed_language_model_is_never_refused_for_time() -> None:
    """A remote repository or a GPU target has no start-up timings: the request runs, within the timeout."""
    assert score(None, engine=engine_over(FakeRunner(), request_seconds=0.001)).passes == len(WILD_TYPE)


@pytest.mark.parametrize(
    ("mutations", "scan_positions", "message"),
    [
        (None, (0, 5), "[0, 5] is not within the sequence's 22 residues: 1 <= first <= last <= 22"),
        (None, (6, 5), "[6, 5] is not within the sequence's 22 residues: 1 <= first <= last <= 22"),
        (None, (1, 23), "[1, 23] is not within the sequence's 22 residues: 1 <= first <= last <= 22"),
        (["K2R"], (1, 5), "applies to a scan only: send it with `scan: true`"),
    ],
)
def test_scan_positions_outside_the_sequence_or_without_a_scan_are_named(
    mutations: list[str] | None, scan_positions: tuple[int, int], message: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        score(mutations, scan_positions=scan_positions)
    assert [(problem.field, problem.message) for problem in raised.value.problems] == [("scan_positions", message)]
