"""When an API worker asks Triton again what it serves: a model loaded elsewhere, a failed call, shared look-ups.

The runner here answers from the exported repository's own configs (what Triton would return), with the set of
loaded models under the test's control; tests/test_admin_e2e.py does the same against the real Triton.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from support.paths import DEFAULT_REPOSITORY
from model_catalog import Capability
from serving.errors import DeadlineExceeded, ModelUnavailable, UnknownModel
from serving.triton.registry import ModelRegistry, triton_call

pytestmark = pytest.mark.e2e


class RepositoryRunner:
    """The runner's client methods the registry uses, over the exported configs; counts index look-ups."""

    def __init__(self, loaded: set[str]) -> None:
        self.loaded = loaded
        self.index_calls = 0
        self.reachable = True
        self.answer_after = asyncio.Event()
        self.answer_after.set()

    async def get_model_repository_index(self) -> list[dict[str, str]]:
        self.index_calls += 1
        index = [{"name": name, "version": "1", "state": "READY"} for name in sorted(self.loaded)]  # as asked
        await self.answer_after.wait()
        if not self.reachable:
            raise InferenceServerException("connection refused")
        return index

    async def get_model_config(self, name: str) -> dict[str, Any]:
        config = text_format.Parse((DEFAULT_REPOSITORY / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        return json_format.MessageToDict(config, preserving_proto_field_name=True)


def test_a_model_loaded_through_another_worker_is_found_by_the_next_request_for_it() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv"})
        registry = ModelRegistry(runner)
        assert set(await registry.served()) == {"esm2nv"}
        runner.loaded.add("prott5nv")  # an admin loads it through another worker
        assert (await registry.model("prott5nv", Capability.EMBED)).name == "prott5nv"
        await registry.model("esm2nv", Capability.EMBED)
        assert runner.index_calls == 2  # a served model is not looked up again

    asyncio.run(scenario())


def test_a_name_outside_the_catalog_is_a_422_without_asking_triton() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv"})
        registry = ModelRegistry(runner)
        await registry.served()
        with pytest.raises(UnknownModel, match="esm9"):
            await registry.model("esm9", Capability.EMBED)
        assert runner.index_calls == 1

    asyncio.run(scenario())


def test_a_failed_call_makes_the_next_request_ask_again() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv", "prott5nv"})
        registry = ModelRegistry(runner)
        await registry.model("prott5nv", Capability.EMBED)
        runner.loaded.discard("prott5nv")  # unloaded through another worker; this one still lists it
        with pytest.raises(ModelUnavailable), registry.calling("prott5nv version 1"):
            raise InferenceServerException("Request for unknown model: 'prott5nv' is not found")
        with pytest.raises(UnknownModel, match="not served"):
            await registry.model("prott5nv", Capability.EMBED)

    asyncio.run(scenario())


def test_concurrent_requests_share_one_look_up_and_a_cancelled_one_does_not_end_it() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv"})
        registry = ModelRegistry(runner)
        runner.answer_after.clear()
        waiting = [asyncio.ensure_future(registry.served()) for _ in range(5)]
        await asyncio.sleep(0.01)
        waiting[0].cancel()  # its deadline passed
        runner.answer_after.set()
        answers = await asyncio.gather(*waiting[1:])
        assert runner.index_calls == 1
        assert all(set(answer) == {"esm2nv"} for answer in answers)

    asyncio.run(scenario())


def test_a_look_up_under_way_does_not_answer_one_asked_for_after_a_change() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv"})
        registry = ModelRegistry(runner)
        runner.answer_after.clear()
        before = asyncio.ensure_future(registry.served())  # asks Triton, which has not answered yet
        await asyncio.sleep(0.01)
        runner.loaded.add("prott5nv")  # loaded meanwhile, e.g. by this worker's own /admin/load
        after = asyncio.ensure_future(registry.served(rediscover=True))
        await asyncio.sleep(0.01)
        runner.answer_after.set()
        assert "prott5nv" in await after
        assert runner.index_calls == 2
        await before

    asyncio.run(scenario())


def test_triton_unreachable_is_a_503_and_the_next_request_tries_again() -> None:
    async def scenario() -> None:
        runner = RepositoryRunner({"esm2nv"})
        runner.reachable = False
        registry = ModelRegistry(runner)
        with pytest.raises(ModelUnavailable):
            await registry.served()
        runner.reachable = True
        assert set(await registry.served()) == {"esm2nv"}

    asyncio.run(scenario())


def test_a_triton_call_past_the_clients_limit_is_a_504_that_says_so_not_the_requests_deadline() -> None:
    """tritonclient's session ends a call after 60 s, queueing included (aiohttp raises TimeoutError)."""
    with pytest.raises(DeadlineExceeded, match="esm2nv version 1 did not answer one call within 60 s"):
        with triton_call("esm2nv version 1"):
            raise TimeoutError
