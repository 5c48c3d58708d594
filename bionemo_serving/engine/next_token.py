"""Choosing the next token from decoder logits: greedy, top-k/top-p sampling, and beam search.

Pure numpy on one step's logits; the loop that calls the decoder lives in generation.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def greedy(logits: np.ndarray) -> np.ndarray:
    """[rows, vocab] -> [rows]: the most likely token of each row."""
    return logits.argmax(axis=-1)


def sample_top_k_top_p(
    logits: np.ndarray, temperature: float, top_k: int, top_p: float, rng: np.random.Generator
) -> np.ndarray:
    """[rows, vocab] -> [rows]: a sample from the tempered distribution cut to the top k tokens and the top-p nucleus.

    `top_k` 0 and `top_p` 1.0 switch the cuts off.
    """
    scores = logits / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = np.partition(scores, -top_k, axis=-1)[:, -top_k][:, None]
        scores = np.where(scores < kth, -np.inf, scores)
    probabilities = np.exp(log_softmax(scores))
    if top_p < 1.0:
        order = np.argsort(-probabilities, axis=-1)
        sorted_probabilities = np.take_along_axis(probabilities, order, axis=-1)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        outside = np.cumsum(sorted_probabilities, axis=-1) - sorted_probabilities >= top_p
        np.put_along_axis(probabilities, order, np.where(outside, 0.0, sorted_probabilities), axis=-1)
        probabilities /= probabilities.sum(axis=-1, keepdims=True)
    cumulative = np.cumsum(probabilities, axis=-1)
    draws = rng.random((len(probabilities), 1)) * cumulative[:, -1:]
    return np.minimum((cumulative < draws).sum(axis=-1), probabilities.shape[-1] - 1)


@dataclass
class BeamSearch:
    """Beam search for one source: `size` hypotheses, scored by summed log-probability / length."""

    size: int
    begin_id: int
    end_id: int
    live: list[tuple[list[int], float]] = field(default_factory=list)
    finished: list[tuple[list[int], float]] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    """Each live hypothesis's place in the previous step's `live` (-1 before the first step): beams fork."""

    def __post_init__(self) -> None:
        self.live, self.parents = [([self.begin_id], 0.0)], [-1]

    @property
    def done(self) -> bool:
        """Stop once `size` hypotheses finished and no live one scores better than the worst of them.

        Like transformers' default (`early_stopping=False`), a heuristic: a live
        hypothesis could still improve its length-normalised score later.
        """
        if not self.live:
            return True
        if len(self.finished) < self.size:
            return False
        worst_finished = sorted(score for _, score in self.finished)[-self.size]
        return max(self._normalised(ids, score) for ids, score in self.live) <= worst_finished

    def step(self, log_probs: np.ndarray) -> None:
        """Advance with [len(live), vocab] log-probabilities of the live hypotheses' next tokens."""
        totals = np.array([score for _, score in self.live])[:, None] + log_probs
        best = np.argsort(-totals, axis=None)[: 2 * self.size]
        survivors, parents = [], []
        for flat in best:
            row, token = divmod(int(flat), log_probs.shape[1])
            ids = self.live[row][0] + [token]
            if token == self.end_id:
                self.finished.append((ids, self._normalised(ids, float(totals[row, token]))))
            elif len(survivors) < self.size:
                survivors.append((ids, float(totals[row, token])))
                parents.append(row)
        self.live, self.parents = survivors, parents

    def best(self) -> list[int]:
        """The best finished hypothesis, or the best live one when the length limit stopped the search."""
        candidates = self.finished or [(ids, self._normalised(ids, score)) for ids, score in self.live]
        return max(candidates, key=lambda candidate: candidate[1])[0]

    @staticmethod
    def _normalised(ids: list[int], score: float) -> float:
        return score / max(len(ids) - 1, 1)
