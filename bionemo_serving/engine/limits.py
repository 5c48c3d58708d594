"""How much one request may ask of the engine: handed in from the settings when service.py builds the engine, and
enforced there, the same for every front."""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass

from bionemo_serving.errors import InvalidRequest


@dataclass(frozen=True)
class RequestLimits:
    max_sequences: int
    """Most sequences, SMILES or latents in one request (BIONEMO_MAX_SEQUENCES_PER_REQUEST)."""
    max_score_passes: int
    """Most model passes one score request may take (BIONEMO_MAX_SCORE_PASSES)."""
    max_request_bytes: int
    """Largest request body the fronts read (BIONEMO_MAX_REQUEST_BYTES); GET /models publishes it with the rest."""
    request_seconds: float | None = None
    """How long a request may take (BIONEMO_REQUEST_TIMEOUT_S): a score request whose passes the start-up timings
    say take longer is refused at once (bionemo_serving/engine/cost.py)."""

    def check_count(self, field: str, items: Sized) -> None:
        """A 422 naming `field` unless it holds 1 to `max_sequences` items."""
        if not len(items):
            raise InvalidRequest.at(field, "has no items; send at least 1")
        if len(items) > self.max_sequences:
            limit = f"at most {self.max_sequences} in one request (BIONEMO_MAX_SEQUENCES_PER_REQUEST)"
            raise InvalidRequest.at(field, f"has {len(items)} items; {limit}")
