"""How long a request's work will take: first from the start-up timings of the graphs that run it, then corrected by
what this API worker's own requests took.

A 300-residue scan at ESM-2 650M is 300 passes of 302 tokens: minutes on two cores. Rather than start it and end in
a 504 at the request timeout, the engine refuses at once what the timings say cannot finish in time, naming the
limit and how to split the work (bionemo_serving/engine/language_model.py); and the scheduler (scheduler.py) refuses any
request that the work queued ahead of it would keep past its deadline.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, replace

from bionemo_serving.triton.models import TritonGraph

UNTIMED_MS_PER_TOKEN = 0.05
"""A graph's cost per token where it was not timed (a remote repository, a GPU target, the layers and contacts
graphs): about the 8M encoder's on two cores; the first answers correct it (CostModel)."""


@dataclass(frozen=True)
class Estimate:
    seconds: float
    per_row_ms: float
    """One row of the request's width, as the timings give it."""


def estimate(graph: TritonGraph, rows: int, tokens: int) -> Estimate | None:
    """`rows` rows of `tokens` tokens on `graph`: per row, the time of the timed shape of most rows at the narrowest
    timed width of at least `tokens` (else the widest), scaled to `tokens`, one instance's speed: the instances are
    not counted on to share the rows (esm2nv 150M on the 2-core AMD EPYC: a range of 119 passes, sized for its 2
    instances, ran past 120 s; one of 59, sized for one, was answered in 42 s). Conservative, then: a refusal's ranges
    finish. None where the graph was not timed (a remote repository, a GPU target)."""
    timed = graph.runtime.timed_shapes
    if not timed:
        return None
    wide_enough = [shape for shape in timed if shape[1] >= tokens] or [max(timed, key=lambda shape: shape[1])]
    width = min(shape[1] for shape in wide_enough)
    shape_rows, shape_tokens, ms = max((shape for shape in wide_enough if shape[1] == width), key=lambda shape: shape[0])
    per_row_ms = ms / shape_rows * tokens / shape_tokens
    return Estimate(rows * per_row_ms / 1000, per_row_ms)


def nominal_seconds(graph: TritonGraph, tokens_per_row: Iterable[int], repeats: int = 1) -> float:
    """Seconds of `graph`'s work on rows of these token counts, each `repeats` times (a score's passes), as the
    start-up timings give them; UNTIMED_MS_PER_TOKEN per token where the graph was not timed."""
    total = 0.0
    for tokens, rows in collections.Counter(tokens_per_row).items():
        timed = estimate(graph, rows * repeats, tokens)
        total += timed.seconds if timed else rows * repeats * tokens * UNTIMED_MS_PER_TOKEN / 1000
    return total


@dataclass(frozen=True)
class Work:
    """What one engine call asks of Triton, before it runs."""

    kind: str
    """What its correction is learned on: the model and the capability, e.g. `esm2nv/embed`."""
    nominal_s: float = 0.0
    """Its graphs' seconds by the start-up timings (nominal_seconds)."""
    shares_steps: bool = False
    """Whether calls of its kind running at once share their graph runs (a decoder's steps batch the rows of every
    decoding in flight): such calls start beside the others rather than wait for a place."""

    def on(self, graph: TritonGraph, tokens_per_row: Iterable[int], repeats: int = 1) -> Work:
        """This work and `graph`'s on rows of these token counts, each `repeats` times (a decoder's rows: the tokens
        each may generate)."""
        return replace(self, nominal_s=self.nominal_s + nominal_seconds(graph, tokens_per_row, repeats))


LEARNING_RATE = 0.2
"""Weight of each answered request's own time in its kind's correction: about the last ten count."""
SAMPLE_SPAN = 4.0
"""Most one answer may count as, against the current correction, in either direction: one odd request (a pause of
the machine) moves the estimates by at most LEARNING_RATE * 3."""
FACTOR_RANGE = (0.02, 50.0)
"""Bounds of a correction."""


class CostModel:
    """Per kind of work, the ratio of the time its requests took in this API worker to their nominal seconds: the
    API side's tokenizing and rendering, Triton's batching across requests, all in one number, kept current as
    requests are answered (the time a call is charged is its share of the machine: the scheduler leaves the other
    API workers' load out, and plans with it in view)."""

    def __init__(self) -> None:
        self.factors: dict[str, float] = {}

    def seconds(self, work: Work) -> float:
        """The worker's seconds `work` will take, by the latest correction of its kind (1 before any answer)."""
        return work.nominal_s * self.factors.get(work.kind, 1.0)

    def learn(self, work: Work, took_s: float) -> None:
        """Fold in that `work` took `took_s` of the worker's time (its share while it ran with others)."""
        if work.nominal_s <= 0:
            return
        factor = self.factors.get(work.kind, 1.0)
        sample = min(max(took_s / work.nominal_s, factor / SAMPLE_SPAN), factor * SAMPLE_SPAN)
        factor += LEARNING_RATE * (sample - factor)
        self.factors[work.kind] = min(max(factor, FACTOR_RANGE[0]), FACTOR_RANGE[1])
