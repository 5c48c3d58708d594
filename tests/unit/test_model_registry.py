"""When an API worker asks Triton again what it serves: a model loaded elsewhere, a failed call, shared look-ups.

The runner here is the fake (support/fake_runner.py): the exporter's configs, the set of loaded models under the
test's control; tests/e2e/test_admin_e2e.py does the same against the real Triton.
"""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.utils import InferenceServerException

from bionemo_serving.model_catalog import MODELS, RANDOM_INIT_WEIGHTS, Capability
from bionemo_serving.errors import DeadlineExceeded, ModelLoadFailed, ModelUnavailable, UnknownModel
from bionemo_serving.triton.registry import QUEUE_TIMEOUT, ModelRegistry, triton_call
from support.fake_runner import FakeRunner


def serving_only(*served: str) -> FakeRunner:
    """Every catalogued model in the repository, only the graphs of `served` loaded."""
    runner = FakeRunner()
    for name, (description, _) in runner.graphs.items():
        if description.name not in served:
            runner.loaded[name] = set()
    return runner


def test_a_model_loaded_through_another_worker_is_found_by_the_next_request_for_it() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        registry = ModelRegistry(runner)
        assert set(await registry.served()) == {"esm2nv"}
        await runner.load_model("prott5nv")  # an admin loads it through another worker
        assert (await registry.model("prott5nv", Capability.EMBED)).name == "prott5nv"
        await registry.model("esm2nv", Capability.EMBED)
        assert runner.index_calls == 2  # a served model is not looked up again

    asyncio.run(scenario())


def test_a_name_outside_the_catalog_is_a_422_without_asking_triton() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        registry = ModelRegistry(runner)
        await registry.served()
        with pytest.raises(UnknownModel, match="esm9"):
            await registry.model("esm9", Capability.EMBED)
        assert runner.index_calls == 1

    asyncio.run(scenario())


def test_a_failed_call_makes_the_next_request_ask_again() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv", "prott5nv")
        registry = ModelRegistry(runner)
        await registry.model("prott5nv", Capability.EMBED)
        await runner.unload_model("prott5nv")  # unloaded through another worker; this one still lists it
        with pytest.raises(ModelUnavailable), registry.calling("prott5nv version 1"):
            raise InferenceServerException("Request for unknown model: 'prott5nv' is not found")
        with pytest.raises(UnknownModel, match="not served"):
            await registry.model("prott5nv", Capability.EMBED)

    asyncio.run(scenario())


def test_concurrent_requests_share_one_look_up_and_a_cancelled_one_does_not_end_it() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        registry = ModelRegistry(runner)
        runner.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(registry.served()) for _ in range(5)]
        await asyncio.sleep(0.01)
        waiting[0].cancel()  # its deadline passed
        runner.gate.set()
        answers = await asyncio.gather(*waiting[1:])
        assert runner.index_calls == 1
        assert all(set(answer) == {"esm2nv"} for answer in answers)

    asyncio.run(scenario())


def test_a_look_up_under_way_does_not_answer_one_asked_for_after_a_change() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        registry = ModelRegistry(runner)
        runner.gate = asyncio.Event()
        before = asyncio.ensure_future(registry.served())  # asks Triton, which has not answered yet
        await asyncio.sleep(0.01)
        runner.loaded["prott5nv"] = {1}  # loaded meanwhile, e.g. by this worker's own /admin/load
        after = asyncio.ensure_future(registry.served(rediscover=True))
        await asyncio.sleep(0.01)
        runner.gate.set()
        assert "prott5nv" not in await before
        assert "prott5nv" in await after
        assert runner.index_calls == 2

    asyncio.run(scenario())


def test_triton_unreachable_is_a_503_and_the_next_request_tries_again() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        runner.away = True
        registry = ModelRegistry(runner)
        with pytest.raises(ModelUnavailable, match="^model: the model repository is not available right now: Cannot"):
            await registry.served()
        runner.away = False
        assert set(await registry.served()) == {"esm2nv"}

    asyncio.run(scenario())


def test_a_triton_call_past_the_clients_limit_is_a_504_that_says_so_not_the_requests_deadline() -> None:
    """tritonclient's session ends a call after 60 s, queueing included (aiohttp raises TimeoutError)."""
    with pytest.raises(DeadlineExceeded, match="esm2nv version 1 did not answer one call within 60 s"):
        with triton_call("esm2nv version 1"):
            raise TimeoutError


def test_a_call_tritons_batcher_dropped_at_the_same_limit_is_the_same_504() -> None:
    """Its queue policy drops a request queued as long as the client waits; the client may hear of it first."""
    with pytest.raises(DeadlineExceeded, match="esm2nv version 1 did not answer one call within 60 s"):
        with triton_call("esm2nv version 1"):
            raise InferenceServerException(msg=f"[503] {QUEUE_TIMEOUT}")


def test_an_optional_graph_not_served_is_reported_with_why() -> None:
    """Not in the repository (the checkpoint has no head), not loaded, or not at every version the model serves."""

    async def scenario() -> None:
        runner = FakeRunner(models=["esm1nv", "esm2nv"], versions=(1, 2), absent=["esm1nv_contacts"])
        runner.loaded["esm2nv_contacts"] = set()
        runner.loaded["esm2nv_layers"] = {2}
        runner.loaded["esm1nv_language_model"] = {1}
        served = await ModelRegistry(runner).served()
        assert served["esm1nv"].unserved == {
            MODELS["esm1nv"].graph_for(Capability.CONTACTS).role:
                "its checkpoint has no head for it (the model repository has no esm1nv_contacts)",
            MODELS["esm1nv"].graph_for(Capability.SCORE).role: "esm1nv_language_model is not loaded at version 2",
        }  # fmt: skip
        assert served["esm2nv"].unserved == {
            MODELS["esm2nv"].graph_for(Capability.CONTACTS).role:
                "esm2nv_contacts is not loaded (Triton: UNAVAILABLE: unloaded)",
            MODELS["esm2nv"].graph_for(Capability.LAYERS).role: "esm2nv_layers is not loaded at version 1",
        }  # fmt: skip
        expected = {Capability.EMBED, Capability.HIDDEN, Capability.LOGITS, Capability.SCORE}
        assert served["esm2nv"].capabilities == expected

    asyncio.run(scenario())


def test_a_load_triton_refuses_is_a_502_with_its_reason_and_the_model_is_looked_up_again() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        runner.broken.add("prott5nv")
        registry = ModelRegistry(runner)
        await registry.served()
        with pytest.raises(ModelLoadFailed, match="^model: Triton could not load prott5nv: failed to load 'prott5nv'"):
            await registry.load(MODELS["prott5nv"])
        calls = runner.index_calls
        assert set(await registry.served()) == {"esm2nv"} and runner.index_calls == calls + 1

    asyncio.run(scenario())


def test_load_and_unload_change_every_graph_of_the_model() -> None:
    async def scenario() -> None:
        runner = serving_only("esm2nv")
        registry = ModelRegistry(runner)
        await registry.load(MODELS["megamolbart"])
        assert "megamolbart" in await registry.served(rediscover=True)
        await registry.unload(MODELS["esm2nv"])
        assert set(await registry.served(rediscover=True)) == {"megamolbart"}
        states = {graph.triton_model: graph.state for graph in await registry.repository()}
        assert {name for name, state in states.items() if state == "READY"} == {
            "megamolbart_encoder", "megamolbart_decoder", "megamolbart_layers"
        }  # fmt: skip

    asyncio.run(scenario())


def test_the_default_exports_are_served_as_the_random_init_defaults() -> None:
    """`exporter defaults` records `checkpoint` in each config; the served model's record (GET /models: `weights`)
    reads it from there."""

    async def scenario() -> None:
        served = await ModelRegistry(serving_only("esm2nv", "prott5nv")).served()
        assert {name: model.weights for name, model in served.items()} == {
            "esm2nv": RANDOM_INIT_WEIGHTS, "prott5nv": RANDOM_INIT_WEIGHTS,
        }  # fmt: skip

    asyncio.run(scenario())
