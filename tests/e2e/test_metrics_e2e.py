"""GET /metrics against the real stack: the service's families counted exactly, Triton's merged once per scrape.

One service of this module's own, with two API workers (so that a scrape is answered by one of several) and its
own BENTOML_HOME: BentoML keeps the workers' metric files under it and empties that folder whenever a service
starts, which another test's service would otherwise do under this one.
"""

from __future__ import annotations

import re
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest
import requests
import tritonclient.http
from prometheus_client.parser import text_string_to_metric_families

from support.dashboards import dashboard_queries, metric_names
from support.service import RunningService, start_launcher, stop_service

pytestmark = pytest.mark.e2e

RESIDUES = "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"
SHORT = "MKTAYIAKQR"  # 10 residues: <cls> + 10 + <eos> = 12 tokens, the 16-token bucket
MIXED = [SHORT, RESIDUES[:30], RESIDUES[:41] + RESIDUES[:4]]  # 12, 32, 47 tokens: buckets 16, 32, 48
RECOVERY_TIMEOUT_S = 120
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def metered() -> Iterator[RunningService]:
    with tempfile.TemporaryDirectory(prefix="bentoml-home-") as home:
        running = start_launcher({"BENTOML_HOME": home, "BIONEMO_API_WORKERS": "2"})
        yield running
        stop_service(running)


def scrape(service: RunningService) -> tuple[str, Samples]:
    """GET /metrics: its text, and every sample by name and labels (parsed by prometheus_client's own parser)."""
    answer = requests.get(f"{service.url}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    return answer.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def triton_statistics(service: RunningService, model: str) -> tuple[int, int, int]:
    """Triton's own count of `model`'s successful requests, inferences (rows) and executions (model runs)."""
    statistics = tritonclient.http.InferenceServerClient(service.triton_url).get_inference_statistics(model)
    (entry,) = statistics["model_stats"]
    return entry["inference_stats"]["success"]["count"], entry["inference_count"], entry["execution_count"]


def test_a_scrape_counts_what_was_served_exactly(metered: RunningService) -> None:
    triton_models = ("esm2nv", "megamolbart_encoder", "megamolbart_decoder")
    _, before = scrape(metered)
    triton_before = {model: triton_statistics(metered, model) for model in triton_models}

    statuses = [metered.post("/embed", {"sequences": [SHORT]}).status_code for _ in range(4)]
    statuses.append(metered.post("/embed", {"sequences": MIXED}).status_code)
    for seed in (1, 2):
        statuses.append(metered.post("/generate", {"smiles": ["CCO"], "num_samples": 2, "seed": seed}).status_code)
    bad = [
        # not an amino acid: esm2nv's tokenizer says so
        metered.post("/embed", {"sequences": [SHORT, "MKTJ"]}).status_code,
        metered.post("/embed", {"sequences": [SHORT], "model": "no-such-model"}).status_code,
        metered.post("/embed", "{not json").status_code,
    ]
    assert statuses == [200] * 7 and bad == [422, 422, 400]

    text, after = scrape(metered)
    triton_after = {model: triton_statistics(metered, model) for model in triton_models}

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    embed, generate = {"endpoint": "/embed", "model": "esm2nv"}, {"endpoint": "/generate", "model": "megamolbart"}
    assert moved("bionemo_requests_total", **embed, status_class="2xx") == 5
    assert moved("bionemo_requests_total", **embed, status_class="4xx") == 1
    assert moved("bionemo_requests_total", endpoint="/embed", model="", status_class="4xx") == 2
    assert moved("bionemo_requests_total", **generate, status_class="2xx") == 2
    assert moved("bionemo_request_errors_total", **embed, status="422", error="invalid_request") == 1
    assert moved("bionemo_request_errors_total", endpoint="/embed", model="", status="422", error="unknown_model") == 1
    assert moved("bionemo_request_errors_total", endpoint="/embed", model="", status="400", error="malformed_body") == 1
    assert moved("bionemo_request_duration_seconds_count", **embed) == 6
    assert moved("bionemo_request_duration_seconds_count", **generate) == 2
    assert moved("bionemo_request_duration_seconds_bucket", **embed, le="+Inf") == 6

    # Sequences and tokens of the requests that reached an encoder; padding to the length buckets (16, 20, ..., 48).
    esm2nv, megamolbart = {"model": "esm2nv", "graph": "encoder"}, {"model": "megamolbart", "graph": "encoder"}
    assert moved("bionemo_graph_request_sequences_count", **esm2nv) == 5
    assert moved("bionemo_graph_request_sequences_sum", **esm2nv) == 4 * 1 + 3
    assert moved("bionemo_graph_request_tokens_sum", **esm2nv) == 4 * 12 + (12 + 32 + 47)
    assert moved("bionemo_graph_batch_tokens_total", **esm2nv) == 4 * 16 + (16 + 32 + 48)
    assert moved("bionemo_graph_padding_tokens_total", **esm2nv) == 4 * 4 + (4 + 0 + 1)
    assert moved("bionemo_graph_request_tokens_sum", **megamolbart) == 2 * 3  # C C O, no special tokens
    assert moved("bionemo_graph_padding_tokens_total", **megamolbart) == 2 * (16 - 3)

    # Triton's families, merged, move as Triton's statistics API says; one call per length bucket of each request.
    for model in triton_models:
        (success, inferences, executions) = (a - b for a, b in zip(triton_after[model], triton_before[model]))
        labels = {"model": model, "version": "1"}
        assert moved("nv_inference_request_success_total", **labels) == success, model
        assert moved("nv_inference_count_total", **labels) == inferences, model
        assert moved("nv_inference_exec_count_total", **labels) == executions, model
        assert value(after, "nv_inference_request_failure_total", **labels, reason="OTHER") == 0
    assert triton_after["esm2nv"][0] - triton_before["esm2nv"][0] == 4 + 3
    assert triton_after["megamolbart_encoder"][0] - triton_before["megamolbart_encoder"][0] == 2
    # Every decoder step is one decoder execution; each request's batch run ends with one call that only releases
    # its caches, which is no step.
    decoder_executions = triton_after["megamolbart_decoder"][2] - triton_before["megamolbart_decoder"][2]
    assert moved("bionemo_decoder_step_rows_count", model="megamolbart") == decoder_executions - 2
    assert moved("bionemo_decoder_step_rows_sum", model="megamolbart") >= 2 * 2  # both samples on the first step

    assert value(after, "bionemo_triton_metrics_up") == 1
    assert value(after, "bionemo_in_flight_requests") == 0
    assert value(after, "nv_inference_queue_duration_us_total", model="esm2nv", version="1") > 0
    assert value(after, "nv_inference_pending_request_count", model="esm2nv", version="1") == 0
    assert "bionemo_model_discoveries_total" in {name for name, _ in after}


def test_triton_families_come_once_per_scrape_with_two_api_workers(metered: RunningService) -> None:
    for _ in range(6):  # each answered by one of the two workers (which one, the kernel decides)
        text, _ = scrape(metered)
        declared = Counter(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
        assert declared["nv_inference_request_success"] == 1 and declared["bionemo_in_flight_requests"] == 1
        assert [name for name, times in declared.items() if times > 1] == []


def test_triton_metrics_listen_on_loopback_only(metered: RunningService) -> None:
    server = metered.tritonserver()
    (port,) = [int(argument.split("=", 1)[1]) for argument in server.cmdline() if argument.startswith("--metrics-port=")]
    listening = [connection.laddr for connection in server.net_connections("inet") if connection.status == psutil.CONN_LISTEN]
    assert (("127.0.0.1", port) in [(address.ip, address.port) for address in listening]), listening
    assert {address.ip for address in listening} == {"127.0.0.1"}, listening  # its HTTP port too; nothing else


def test_every_dashboard_query_names_a_metric_the_service_exports(metered: RunningService) -> None:
    assert metered.post("/embed", {"sequences": [SHORT]}).status_code == 200
    assert metered.post("/generate", {"smiles": ["CCO"], "num_samples": 2, "seed": 3}).status_code == 200
    # so that the error counters have a sample
    assert metered.post("/embed", {"sequences": ["MKTJ"]}).status_code == 422
    text, _ = scrape(metered)
    # The names as Prometheus stores them: those of the exposition's lines (the parser would add _total to Triton's).
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", text, re.MULTILINE))
    used = {name for query in dashboard_queries() for name in metric_names(query)}
    assert used and used <= exposed, sorted(used - exposed)


def test_a_scrape_while_triton_is_killed_answers_the_service_families(metered: RunningService) -> None:
    """Last in this module: it kills the module's tritonserver (BentoML starts it again)."""
    metered.tritonserver().send_signal(signal.SIGKILL)
    started = time.monotonic()
    text, samples = scrape(metered)
    assert time.monotonic() - started < 3  # Triton's part waits 0.5 s at most
    names = {name for name, _ in samples}
    assert value(samples, "bionemo_triton_metrics_up") == 0
    assert "bionemo_requests_total" in names and "bionemo_request_duration_seconds_count" in names
    assert not [name for name in names if name.startswith("nv_")]
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while (
        requests.get(f"{metered.url}/readyz", timeout=30).status_code != 200
        or metered.post("/embed", {"sequences": [SHORT]}).status_code != 200
    ):
        assert time.monotonic() < deadline, "Triton did not come back"
        time.sleep(1)
    _, samples = scrape(metered)
    assert value(samples, "bionemo_triton_metrics_up") == 1
    assert value(samples, "nv_inference_request_success_total", model="esm2nv", version="1") >= 1
