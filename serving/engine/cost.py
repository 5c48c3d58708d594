"""How long a request's passes will take, from the start-up timings of the graph that runs them.

A 300-residue scan at ESM-2 650M is 300 passes of 302 tokens: minutes on two cores. Rather than start it and end in
a 504 at the request timeout, the engine refuses at once what the timings say cannot finish in time, naming the
limit and how to split the work (serving/engine/language_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.triton.models import TritonGraph


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
    timed = [(int(shape.split("x")[0]), int(shape.split("x")[1]), ms) for shape, ms in graph.runtime.milliseconds.items()]
    if not timed:
        return None
    wide_enough = [shape for shape in timed if shape[1] >= tokens] or [max(timed, key=lambda shape: shape[1])]
    width = min(shape[1] for shape in wide_enough)
    shape_rows, shape_tokens, ms = max((shape for shape in wide_enough if shape[1] == width), key=lambda shape: shape[0])
    per_row_ms = ms / shape_rows * tokens / shape_tokens
    return Estimate(rows * per_row_ms / 1000, per_row_ms)
