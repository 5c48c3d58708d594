"""/logits, /score and /contacts: a protein model's masked-LM log-probabilities, zero-shot variant-effect scores
from them, and contact maps.

Each runs one of the model's heads (`model_catalog.LANGUAGE_MODEL`, `CONTACTS`) with
the encoder's tokenizing and validation and the graph calls' batching. The masked
copies a score needs are ordinary rows of one length, sent without bucket
padding, and Triton's dynamic batcher merges them like any other work.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS, Capability, GraphRole
from bionemo_serving.engine.cost import Work, estimate
from bionemo_serving.engine.encoding import Encoder
from bionemo_serving.engine.graphs import GraphCalls
from bionemo_serving.engine.inputs import ScoreInput, ScoringMethod, SequencesInput
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.mutations import Variant, all_substitutions, apply, parse_variants
from bionemo_serving.engine.results import ContactMaps, LogProbs, Scores
from bionemo_serving.errors import FieldProblem, InvalidRequest
from bionemo_serving.triton.models import ServedModel
from bionemo_serving.triton.registry import ModelRegistry

COLUMN = {amino_acid: column for column, amino_acid in enumerate(SCORED_AMINO_ACIDS)}


class ProteinLanguageModel:
    """Log-probabilities, variant scores and contacts; one instance per API worker."""

    def __init__(self, registry: ModelRegistry, graphs: GraphCalls, encoder: Encoder, limits: RequestLimits) -> None:
        """`limits`: the most passes one score request may take, and the time a request has."""
        self.registry, self.graphs, self.encoder, self.limits = registry, graphs, encoder, limits

    async def logits(self, asked: SequencesInput) -> LogProbs:
        """Each input's log-probabilities of the 20 amino acids at every residue; `<mask>` may stand for any."""
        model = await self.registry.model(asked.model, Capability.LOGITS, asked.model_version)
        rows = self.encoder.tokenize(model, asked.sequences, truncate=asked.truncate, masks=True)
        tokenizer = self.encoder.tokenizers[model.name]
        first, after = len(tokenizer.prefix_ids), len(tokenizer.suffix_ids)
        work = Work(f"{model.name}/logits").on(model.graph(GraphRole.LANGUAGE_MODEL), map(len, rows))
        async with self.encoder.scheduler.admitted(work):
            log_probs = await self.log_probs(model, rows)
        residues = [each[first : len(row) - after] for row, each in zip(rows, log_probs)]
        return LogProbs(
            model.name, model.version, residues, self.encoder.truncated(model, asked, masks=True),
            precision=model.precision(GraphRole.LANGUAGE_MODEL),
        )  # fmt: skip

    async def contacts(self, asked: SequencesInput) -> ContactMaps:
        """Each input's contact probabilities between every pair of residues."""
        model = await self.registry.model(asked.model, Capability.CONTACTS, asked.model_version)
        rows = self.encoder.tokenize(model, asked.sequences, truncate=asked.truncate)
        work = Work(f"{model.name}/contacts").on(model.graph(GraphRole.CONTACTS), map(len, rows))
        async with self.encoder.scheduler.admitted(work):
            maps = await self.graphs.run_rows(model, rows, "contacts", role=GraphRole.CONTACTS)
        tokenizer = self.encoder.tokenizers[model.name]
        specials = len(tokenizer.prefix_ids) + len(tokenizer.suffix_ids)
        residues = [contacts[: len(row) - specials, : len(row) - specials] for row, contacts in zip(rows, maps)]
        return ContactMaps(
            model.name, model.version, residues, self.encoder.truncated(model, asked),
            precision=model.precision(GraphRole.CONTACTS),
        )  # fmt: skip

    async def score(self, asked: ScoreInput) -> Scores:
        """The variants' scores, or the scan's; a 422 where they need more passes than the limit, or more time than a
        request has by the start-up timings."""
        model = await self.registry.model(asked.model, Capability.SCORE, asked.model_version)
        try:
            (wild_type,) = self.encoder.tokenize(model, [asked.sequence], field="sequence")
        except InvalidRequest as error:  # one sequence, not a list: its errors name the field, not an item
            raise error.renamed(lambda _: "sequence") from None
        sequence = asked.sequence.upper()
        if asked.scan:
            _require_standard(sequence)
        positions = _scan_range(asked, len(sequence))
        variants = all_substitutions(sequence, positions) if asked.scan else parse_variants(asked.mutations or [], sequence)
        scorer = _SCORERS[asked.method](self, model, sequence, wild_type)
        passes = scorer.passes(variants)
        field = "scan" if asked.scan else "mutations"
        if passes > self.limits.max_score_passes:
            raise InvalidRequest.at(
                field,
                f"{asked.method.value} needs {passes:,} model passes here; the limit is {self.limits.max_score_passes:,} "
                "per request (BIONEMO_MAX_SCORE_PASSES): send fewer variants or a cheaper method",
            )
        self._refuse_past_the_timeout(model, field, passes, len(wild_type), positions if asked.scan else None)
        work = Work(f"{model.name}/score").on(model.graph(GraphRole.LANGUAGE_MODEL), [len(wild_type)], repeats=passes)
        async with self.encoder.scheduler.admitted(work):
            scores = await scorer.scores(variants)
        if asked.scan:
            matrix = np.zeros((len(positions), len(SCORED_AMINO_ACIDS)))
            for (substitution,), score in zip(variants, scores):
                matrix[substitution.position - positions.start, COLUMN[substitution.mutant]] = score
            scores = matrix
        return Scores(
            model.name, model.version, asked.method, scores, passes,
            (positions.start + 1, positions.stop) if asked.scan else None,
            precision=model.precision(GraphRole.LANGUAGE_MODEL),
        )  # fmt: skip

    def _refuse_past_the_timeout(
        self, model: ServedModel, field: str, passes: int, tokens: int, scanned: range | None
    ) -> None:
        """A 422 at once where the language model's start-up timings say the passes outlast the request's time,
        saying how to split the work (a scan of the residues `scanned`: `scan_positions` ranges that each fit)."""
        cost = estimate(model.graph(GraphRole.LANGUAGE_MODEL), passes, tokens)
        if cost is None or self.limits.request_seconds is None or cost.seconds <= self.limits.request_seconds:
            return
        how = "send fewer variants"
        if scanned is not None:
            fits = max(1, int(len(scanned) * self.limits.request_seconds / cost.seconds * FIT_MARGIN))
            first = scanned.start + 1
            ranges = f"[{first}, {first + fits - 1}], then [{first + fits}, {first + 2 * fits - 1}]"
            how = f"scan part of the protein at a time with scan_positions, e.g. {ranges}"
        raise InvalidRequest.at(
            field,
            f"{passes:,} model passes of {tokens} tokens take about {cost.seconds:,.0f} s here ({model.name}'s language "
            f"model as timed at start-up: {cost.per_row_ms:,.0f} ms a pass); a request has "
            f"{self.limits.request_seconds:g} s (BIONEMO_REQUEST_TIMEOUT_S): {how}, or raise BIONEMO_REQUEST_TIMEOUT_S",
        )

    async def log_probs(
        self, model: ServedModel, rows: list[np.ndarray], positions: list[list[int]] | None = None
    ) -> list[np.ndarray]:
        """Each row's [positions, 20] log-probabilities of the scored amino acids at its token `positions` (every
        token, where None), every row at its own length.

        The graph runs its last layer at the positions asked alone: a scan's masked copy asks for one. Rows of one
        length, which batch together, ask for as many: a row asking for fewer repeats its last.
        """
        asked = [list(range(len(row))) for row in rows] if positions is None else positions
        most: dict[int, int] = {}
        for row, row_asked in zip(rows, asked):
            most[len(row)] = max(most.get(len(row), 0), len(row_asked))
        row_positions = [
            np.array(row_asked + row_asked[-1:] * (most[len(row)] - len(row_asked)))
            for row, row_asked in zip(rows, asked)
        ]
        results = await self.graphs.run_rows(
            model, rows, "log_probs", role=GraphRole.LANGUAGE_MODEL, exact_widths=True,
            row_inputs={"positions": row_positions},
        )  # fmt: skip
        return [result[: len(row_asked)] for row_asked, result in zip(asked, results)]


def _require_standard(sequence: str) -> None:
    """A scan scores every residue against its substitutes: each must be one of the 20 amino acids."""
    problems = [
        FieldProblem("sequence", f"residue {residue!r} at position {position + 1} is not one of the 20 amino acids "
                     f"{SCORED_AMINO_ACIDS}; a scan cannot score it")
        for position, residue in enumerate(sequence)
        if residue not in COLUMN
    ]  # fmt: skip
    if problems:
        raise InvalidRequest(problems[:1])


FIT_MARGIN = 0.8
"""The share of the request's time the scan ranges a refusal suggests are sized to take, by the timings."""


def _scan_range(asked: ScoreInput, length: int) -> range:
    """The 0-based residues a scan covers: `scan_positions` (1-based, inclusive), else all; a 422 naming the field
    where the range is not within the sequence."""
    if asked.scan_positions is None:
        return range(length)
    if not asked.scan:
        raise InvalidRequest.at("scan_positions", "applies to a scan only: send it with `scan: true`")
    first, last = asked.scan_positions
    if not 1 <= first <= last <= length:
        raise InvalidRequest.at(
            "scan_positions", f"[{first}, {last}] is not within the sequence's {length} residues: 1 <= first <= last <= {length}"
        )
    return range(first - 1, last)


class _Scorer:
    """One scoring method for one wild type: how many passes a set of variants takes, and their scores."""

    def __init__(self, language_model: ProteinLanguageModel, model: ServedModel, sequence: str, wild_type: np.ndarray):
        self.language_model, self.model, self.sequence, self.wild_type = language_model, model, sequence, wild_type
        tokenizer = language_model.encoder.tokenizers[model.name]
        self.first, self.mask_id = len(tokenizer.prefix_ids), tokenizer.mask_id

    def passes(self, variants: list[Variant]) -> int:
        raise NotImplementedError

    async def scores(self, variants: list[Variant]) -> np.ndarray:
        raise NotImplementedError

    def masked(self, ids: np.ndarray, positions: Iterable[int]) -> np.ndarray:
        """`ids` with the residues at `positions` (0-based) masked."""
        copy = ids.copy()
        copy[self.tokens(positions)] = self.mask_id
        return copy

    def tokens(self, positions: Iterable[int]) -> list[int]:
        """The token positions of residue `positions` (0-based)."""
        return [self.first + position for position in positions]

    @staticmethod
    def marginal(log_probs: np.ndarray, variant: Variant) -> float:
        """The sum over the variant's positions of log p(mutant) - log p(wild type), from one pass's log-probs at
        those positions, in the variant's order."""
        return float(sum(row[COLUMN[s.mutant]] - row[COLUMN[s.wild_type]] for row, s in zip(log_probs, variant)))


class _MaskedMarginal(_Scorer):
    """Meier et al. 2021: one pass per distinct set of mutated positions, those positions masked."""

    def passes(self, variants: list[Variant]) -> int:
        return len(self._position_sets(variants))

    async def scores(self, variants: list[Variant]) -> np.ndarray:
        sets = self._position_sets(variants)
        rows = [self.masked(self.wild_type, positions) for positions in sets]
        asked = [self.tokens(positions) for positions in sets]
        by_set = dict(zip(sets, await self.language_model.log_probs(self.model, rows, asked)))
        return np.array([self.marginal(by_set[tuple(s.position for s in variant)], variant) for variant in variants])

    @staticmethod
    def _position_sets(variants: list[Variant]) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(tuple(s.position for s in variant) for variant in variants))


class _WildTypeMarginal(_Scorer):
    """One unmasked pass of the wild type scores every variant."""

    def passes(self, variants: list[Variant]) -> int:
        return 1

    async def scores(self, variants: list[Variant]) -> np.ndarray:
        (log_probs,) = await self.language_model.log_probs(self.model, [self.wild_type])
        return np.array(
            [self.marginal(log_probs[self.tokens(s.position for s in variant)], variant) for variant in variants]
        )


class _PseudoLikelihood(_Scorer):
    """The pseudo-log-likelihood (each position masked in turn) of each mutant minus the wild type's."""

    def passes(self, variants: list[Variant]) -> int:
        return len(self.sequence) * (1 + len(set(variants)))

    async def scores(self, variants: list[Variant]) -> np.ndarray:
        _require_standard(self.sequence)
        sequences = list(dict.fromkeys([self.sequence] + [apply(self.sequence, variant) for variant in variants]))
        encoded = self.language_model.encoder.tokenize(self.model, sequences, field="sequence")
        rows = [self.masked(ids, [position]) for ids in encoded for position in range(len(self.sequence))]
        asked = [self.tokens([position]) for _ in encoded for position in range(len(self.sequence))]
        log_probs = iter(await self.language_model.log_probs(self.model, rows, asked))
        pseudo = {}
        for sequence in sequences:
            pseudo[sequence] = sum(float(next(log_probs)[0, COLUMN[residue]]) for residue in sequence)
        return np.array([pseudo[apply(self.sequence, variant)] - pseudo[self.sequence] for variant in variants])


_SCORERS: dict[ScoringMethod, type[_Scorer]] = {
    ScoringMethod.MASKED_MARGINAL: _MaskedMarginal,
    ScoringMethod.WILDTYPE_MARGINAL: _WildTypeMarginal,
    ScoringMethod.PSEUDO_LIKELIHOOD: _PseudoLikelihood,
}
