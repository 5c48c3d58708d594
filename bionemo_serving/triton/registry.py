"""Which catalogued models Triton serves, kept current in each API worker; and the admin API's load and unload.

Discovery asks Triton (bionemo_serving/triton/models.py) once, then again whenever what
it serves may have changed: a request names a catalogued model that is not
served (an admin may have loaded it through another worker), a Triton call
failed (it may have been unloaded or Triton restarted), or a client asks
GET /models. Concurrent rediscoveries share one round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from tritonclient.utils import InferenceServerException

from bionemo_serving.model_catalog import MODELS, TRITON_CALL_TIMEOUT_S, Capability, ModelDescription
from bionemo_serving.errors import (
    CapabilityNotSupported,
    DeadlineExceeded,
    ModelLoadFailed,
    ModelUnavailable,
    UnknownModel,
)
from bionemo_serving.metrics import MODEL_DISCOVERIES
from bionemo_serving.triton.models import ServedModel, discover_models

TRITON_ERRORS = (InferenceServerException, aiohttp.ClientError, ConnectionError)
QUEUE_TIMEOUT = "Request timeout"
"""How Triton's error for a request its batcher dropped after waiting TRITON_CALL_TIMEOUT_S in its queue begins
(libtritonserver 2.51's own string)."""
TRITON_MODEL_OWNERS: dict[str, ModelDescription] = {
    description.triton_name(graph.role): description for description in MODELS.values() for graph in description.graphs
}
"""The catalogued model each Triton model is a graph of."""


@dataclass(frozen=True)
class GraphState:
    """One catalogued Triton model of the repository, loaded or not, as Triton reports it."""

    model: str
    """The catalogued model it is a graph of."""
    triton_model: str
    version: int | None
    """None for a model Triton has not loaded."""
    state: str
    """READY, UNAVAILABLE, LOADING, UNLOADING."""
    reason: str
    """Why it is not ready, e.g. `unloaded`, or Triton's load error."""


@contextmanager
def triton_call(what: str) -> Iterator[None]:
    """Triton unreachable, restarting or without the model: a 503 naming `what`; a call past the client's limit
    (TRITON_CALL_TIMEOUT_S): a 504 saying so, not the request's own deadline."""
    try:
        yield
    except TRITON_ERRORS as error:
        if QUEUE_TIMEOUT in str(error):  # the batcher dropped it at the same limit (model_catalog: default_queue_policy)
            raise _past_call_limit(what) from None
        raise ModelUnavailable.at("model", f"{what} is not available right now: {error}") from None
    except TimeoutError:  # the request's own deadline cancels this task instead: CancelledError here
        raise _past_call_limit(what) from None


def _past_call_limit(what: str) -> DeadlineExceeded:
    return DeadlineExceeded.at(
        "model",
        f"{what} did not answer one call within {TRITON_CALL_TIMEOUT_S:g} s, the limit BentoML's Triton runner "
        "sets on each call to Triton (waiting in Triton's queue included): the server is busier than it can answer",
    )


def select_model(
    served: dict[str, ServedModel], name: str, capability: Capability, version: int | None = None
) -> ServedModel:
    """The served model `name` at `version` (default: its newest), which must have `capability`.

    Otherwise a 422 naming the models that have it, or the versions that are served.
    """
    if name not in served:
        raise UnknownModel.at("model", f"{name!r} is not served; served models: {', '.join(sorted(served))}")
    model = served[name]
    if capability not in model.capabilities:
        able = ", ".join(sorted(n for n, m in served.items() if capability in m.capabilities)) or "none served"
        if capability in model.description.capabilities:
            why = model.unserved[model.description.graph_for(capability).role]
            raise CapabilityNotSupported.at("model", f"{name} cannot {capability.value}: {why}; models that can: {able}")
        raise CapabilityNotSupported.at("model", f"{name} cannot {capability.value}; models that can: {able}")
    if version is None:
        return model
    if version not in model.versions:
        raise UnknownModel.at(
            "model_version", f"{name} version {version} is not served; versions: {', '.join(map(str, model.versions))}"
        )
    return model.at_version(version)


class ModelRegistry:
    """The served models of one API worker, and the only place that asks Triton to change them."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self._served: dict[str, ServedModel] | None = None
        self._discovery: asyncio.Future[dict[str, ServedModel]] | None = None
        self._discoveries_started = 0

    async def served(self, rediscover: bool = False) -> dict[str, ServedModel]:
        """The models Triton serves: as last discovered, unless none are known yet or `rediscover`.

        With `rediscover` the answer comes from a look-up that starts after this call: one already under way
        may predate the change the caller knows of (its own load, say).
        """
        if self._served is not None and not rediscover:
            return self._served
        newer_than = self._discoveries_started if rediscover else self._discoveries_started - 1
        while True:
            if self._discovery is None or self._discovery.done():
                self._discovery = asyncio.ensure_future(self._discover())
                self._discovery.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved
                self._discoveries_started += 1
                MODEL_DISCOVERIES.inc()
            number, discovery = self._discoveries_started, self._discovery
            # shielded: a cancelled request (its deadline) must not cancel the look-up others wait on
            served = await asyncio.shield(discovery)
            if number > newer_than:
                self._served = served
                return served

    async def _discover(self) -> dict[str, ServedModel]:
        with triton_call("the model repository"):
            return await discover_models(self.runner)

    @contextmanager
    def calling(self, what: str) -> Iterator[None]:
        """A call of a served model: a failure is a 503, and what Triton serves is discovered again next time
        (the model may have been unloaded, or Triton restarted)."""
        try:
            with triton_call(what):
                yield
        except ModelUnavailable:
            self._served = None
            raise

    async def model(self, name: str, capability: Capability, version: int | None = None) -> ServedModel:
        served = await self.served()
        if name in MODELS and name not in served:
            served = await self.served(rediscover=True)  # loaded since, perhaps through another worker
        return select_model(served, name, capability, version)

    async def repository(self) -> list[GraphState]:
        """Every catalogued graph in Triton's model repository, loaded or not, with its state."""
        with triton_call("the model repository"):
            index = await self.runner.get_model_repository_index()
        return [
            GraphState(
                model=TRITON_MODEL_OWNERS[entry["name"]].name,
                triton_model=entry["name"],
                version=int(entry["version"]) if entry.get("version") else None,
                state=entry.get("state", "UNKNOWN"),
                reason=entry.get("reason", ""),
            )
            for entry in index
            if entry["name"] in TRITON_MODEL_OWNERS
        ]

    async def served_now(self) -> list[ServedModel]:
        """What Triton serves now, by name (rediscovered, so a change made through any worker shows): what the fronts
        list as the served models."""
        served = await self.served(rediscover=True)
        return [model for _, model in sorted(served.items())]

    async def load(self, description: ModelDescription) -> None:
        """Load (or reload) every graph of the model in Triton, all at once (Triton loads them on threads of its own,
        and an ESM model has four); a graph it cannot load is a ModelLoadFailed."""
        await asyncio.gather(*(self._load_graph(name) for name in await self._in_repository(description)))

    async def _load_graph(self, name: str) -> None:
        try:
            await self.runner.load_model(name)
        except InferenceServerException as error:
            self._served = None  # a failed reload leaves the model unloaded
            raise ModelLoadFailed.at("model", f"Triton could not load {name}: {error.message()}") from None
        except TRITON_ERRORS as error:
            raise ModelUnavailable.at("model", f"Triton is not available right now: {error}") from None

    async def unload(self, description: ModelDescription) -> None:
        """Unload every graph of the model; requests for it are 422s from then on, in every worker."""
        for name in await self._in_repository(description):
            with triton_call(name):
                await self.runner.unload_model(name)

    async def _in_repository(self, description: ModelDescription) -> list[str]:
        """The model's Triton models in the repository: every required one (else an UnknownModel) and the optional
        ones its checkpoint gave."""
        present = {entry.triton_model for entry in await self.repository()}
        names = {description.triton_name(graph.role): graph.optional for graph in description.graphs}
        missing = [name for name, optional in names.items() if not optional and name not in present]
        if missing:
            raise UnknownModel.at("model", f"{description.name} is not in the model repository (no {', '.join(missing)})")
        return [name for name in names if name in present]
