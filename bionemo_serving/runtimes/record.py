"""What runs one graph and why, as its config records it: `runtimes.choice` writes it into the config Triton loads
(parameters `runtime` and `runtime_timings`), the service reads it back (GET /models; the cost estimates of
bionemo_serving/engine/cost.py). One type both ways, so that the two never disagree on the format."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bionemo_serving.runtimes.engines import RUNTIME_PARAMETER

TIMINGS_PARAMETER = "runtime_timings"
"""The config parameter holding the rest of the record, as JSON."""
TIMED_SHAPE = re.compile(r"(\d+)x(\d+)$")


@dataclass(frozen=True)
class RuntimeRecord:
    """What runs one graph and why (runtimes.choice chooses it; a start serves it from runtimes.served_repository)."""

    triton_model: str
    runtime: str
    """onnxruntime, onnxruntime-fused, torchscript or openvino."""
    chosen_by: str
    """`measurement`, `BIONEMO_RUNTIME`, or `default` (onnxruntime, not timed)."""
    cpu: str | None = None
    threads: int | None = None
    total_ms: dict[str, float] = field(default_factory=dict)
    """Each runtime's milliseconds over the timed batch shapes."""
    grown_mib: dict[str, float] = field(default_factory=dict)
    """How many MiB each runtime's memory grew over its timed runs."""
    milliseconds: dict[str, float] = field(default_factory=dict)
    """The chosen runtime's time on each timed batch shape, `<rows>x<tokens>`: what a request's cost is estimated
    from (bionemo_serving/engine/cost.py)."""

    @classmethod
    def from_parameters(cls, triton_model: str, parameters: Mapping[str, Any]) -> RuntimeRecord:
        """The record a config's `parameters` (a ModelConfig's map) hold; onnxruntime, chosen by default, where they
        hold none."""
        if RUNTIME_PARAMETER not in parameters:
            return cls(triton_model, "onnxruntime", "default")
        timings = json.loads(parameters[TIMINGS_PARAMETER].string_value)
        return cls(
            triton_model,
            parameters[RUNTIME_PARAMETER].string_value,
            timings["chosen_by"],
            timings.get("cpu"),
            timings.get("threads"),
            timings.get("total_ms", {}),
            timings.get("grown_mib", {}),
            timings.get("milliseconds", {}),
        )

    def write_into(self, parameters: Any) -> None:
        """Set the record's parameters in a ModelConfig's `parameters` map."""
        parameters[RUNTIME_PARAMETER].string_value = self.runtime
        parameters[TIMINGS_PARAMETER].string_value = json.dumps(
            {"chosen_by": self.chosen_by, "cpu": self.cpu, "threads": self.threads, "total_ms": self.total_ms,
             "grown_mib": self.grown_mib, "milliseconds": self.milliseconds}
        )  # fmt: skip

    @cached_property
    def timed_shapes(self) -> tuple[tuple[int, int, float], ...]:
        """(rows, tokens, milliseconds) of each timed shape (`<rows>x<tokens>`; the decoder's `generation
        <rows>x<tokens>`: rows generating that many tokens), read once: every request's estimate reads them."""
        return tuple(
            (int(shape.group(1)), int(shape.group(2)), ms)
            for name, ms in self.milliseconds.items()
            if (shape := TIMED_SHAPE.search(name))
        )
