"""Settings, `--triton-options` and the launcher's command line, without starting anything."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bentoml._internal.configuration.containers import BentoMLConfiguration

from bionemo_serving.startup.command_lines import graphs_of, serve_arguments, triton_arguments
from bionemo_serving.startup.launch import serve_command
from bionemo_serving.startup.settings import ALL_SETTINGS, PROJECT_ROOT, Settings, SettingsError
from bionemo_serving.triton.options import (
    TritonOption,
    TritonOptionError,
    parse_environment,
    render_environment,
    split_arguments,
)
from support.settings import ADMIN_TOKEN


def test_defaults_serve_every_model_on_loopback() -> None:
    settings = Settings.from_environment({})
    assert (settings.host, settings.port, settings.api_workers) == ("127.0.0.1", 3000, None)
    assert settings.model_repository == str(PROJECT_ROOT / "model_repository")
    assert settings.models is None
    assert triton_arguments(settings) == ["--allow-metrics=false", "--exit-on-error=false"]
    assert serve_arguments(settings) == ["--host", "127.0.0.1", "--port", "3000"]


def test_models_load_the_heads_their_local_repository_has(tmp_path: Path) -> None:
    """esm2nv_language_model exists only where esm2nv's checkpoint had a masked-LM head: Triton is asked to load it
    there alone (a missing model would leave Triton not ready); a remote repository must hold every graph."""
    for graph in ("esm1nv_language_model", "esm1nv_layers", "esm1nv_contacts", "esm2nv_layers"):
        (tmp_path / graph).mkdir()
    settings = Settings.from_environment({"BIONEMO_MODEL_REPOSITORY": str(tmp_path), "BIONEMO_MODELS": "esm1nv,esm2nv"})
    assert graphs_of(settings, "esm1nv") == ["esm1nv", "esm1nv_language_model", "esm1nv_layers", "esm1nv_contacts"]
    assert graphs_of(settings, "esm2nv") == ["esm2nv", "esm2nv_layers"]
    remote = Settings.from_environment({"BIONEMO_MODEL_REPOSITORY": "s3://bucket/models", "BIONEMO_MODELS": "esm2nv"})
    assert graphs_of(remote, "esm2nv") == ["esm2nv", "esm2nv_language_model", "esm2nv_layers", "esm2nv_contacts"]


def test_every_setting_reaches_its_argument(tmp_path: Path) -> None:
    settings = Settings.from_environment(
        {
            "BIONEMO_HOST": "0.0.0.0",
            "BIONEMO_PORT": "8080",
            "BIONEMO_API_WORKERS": "3",
            "BIONEMO_MODEL_REPOSITORY": str(tmp_path),
            "BIONEMO_MODELS": "esm2nv, megamolbart",
            "BIONEMO_TARGET": "gpu",
            "BIONEMO_TRITON_LOG_VERBOSE": "2",
            "BIONEMO_TRITON_OPTIONS": "strict-readiness=true 'exit-timeout-secs=5'",
            "BIONEMO_MAX_SEQUENCES_PER_REQUEST": "8",
        }
    )
    assert serve_arguments(settings) == ["--host", "0.0.0.0", "--port", "8080", "--api-workers", "3"]
    assert settings.model_repository == str(tmp_path)
    assert triton_arguments(settings) == [
        "--allow-metrics=false",
        "--exit-on-error=false",
        "--model-config-name=gpu",
        "--model-control-mode=explicit",
        "--load-model=esm2nv",
        "--load-model=megamolbart_encoder",
        "--load-model=megamolbart_decoder",
        "--strict-readiness=true",
        "--exit-timeout-secs=5",
    ]
    assert (settings.triton_log_verbose, settings.max_sequences_per_request) == (2, 8)


def test_remote_repositories_are_left_to_tritonserver() -> None:
    settings = Settings.from_environment({"BIONEMO_MODEL_REPOSITORY": "s3://bucket/models"})
    assert settings.model_repository == "s3://bucket/models"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("BIONEMO_PORT", "http", "a port number"),
        ("BIONEMO_PORT", "70000", "a port number"),
        ("BIONEMO_HOST", "", "a host name"),
        ("BIONEMO_API_WORKERS", "0", "a positive integer"),
        ("BIONEMO_MODEL_REPOSITORY", "/no/such/folder", "no such folder: /no/such/folder"),
        ("BIONEMO_MODELS", "esm2nv,esm3", "known models: esm1nv, esm2nv"),
        ("BIONEMO_TARGET", "tpu", "one of cpu, gpu, gpu-tensorrt"),
        ("BIONEMO_TRITON_LOG_VERBOSE", "-1", "an integer >= 0"),
        ("BIONEMO_MAX_SEQUENCES_PER_REQUEST", "many", "a positive integer"),
        ("BIONEMO_TRITON_OPTIONS", "http-address=0.0.0.0", "refused"),
        ("BIONEMO_TRITON_OPTIONS", "'unclosed", "No closing quotation"),
        ("BIONEMO_GRPC_METRICS_PORT", "0", "a port number"),
        ("BIONEMO_ESM1NV_GRPC_MODEL", "prott5nv", "one of esm1nv, esm2nv"),
    ],
)
def test_a_bad_value_names_its_setting(variable: str, value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_environment({variable: value})
    assert variable in str(raised.value) and expected in str(raised.value)


def test_a_runtime_forced_for_a_remote_repository_is_refused_not_ignored() -> None:
    """Start-up times and records runtimes only in a local repository: a remote one runs what its configs record."""
    with pytest.raises(SettingsError, match="BIONEMO_RUNTIME: refused with a remote BIONEMO_MODEL_REPOSITORY"):
        Settings.from_environment({"BIONEMO_MODEL_REPOSITORY": "s3://bucket/repo", "BIONEMO_RUNTIME": "onnxruntime"})


def test_models_chosen_twice_is_an_error() -> None:
    with pytest.raises(SettingsError, match="BIONEMO_MODELS and --triton-options load-model"):
        Settings.from_environment({"BIONEMO_MODELS": "esm2nv", "BIONEMO_TRITON_OPTIONS": "load-model=esm1nv"})


@pytest.mark.parametrize(
    ("environment", "loaded"),
    [
        ({}, None),
        ({"BIONEMO_MODELS": "esm2nv,megamolbart"}, ("esm2nv", "megamolbart")),
        ({"BIONEMO_TRITON_OPTIONS": "model-control-mode=explicit load-model=esm2nv"}, ("esm2nv",)),
        ({"BIONEMO_TRITON_OPTIONS": "model-control-mode=explicit load-model=megamolbart_decoder"}, ("megamolbart",)),
        ({"BIONEMO_TRITON_OPTIONS": "model-control-mode=explicit"}, ()),
        ({"BIONEMO_TRITON_OPTIONS": "model-control-mode=explicit load-model=*"}, None),
        ({"BIONEMO_TRITON_OPTIONS": "model-control-mode=poll load-model=esm2nv"}, None),
    ],
)
def test_the_models_triton_loads_are_those_the_settings_or_the_options_name(
    environment: dict[str, str], loaded: tuple[str, ...] | None
) -> None:
    """What the launcher times runtimes for: Triton loads at start only what BIONEMO_MODELS or, under explicit model
    control, `load-model` names; in the other modes it loads every model and ignores `load-model`."""
    assert Settings.from_environment(environment).loaded_models() == loaded


@pytest.mark.parametrize("token", ["too-short", ADMIN_TOKEN + " x", ADMIN_TOKEN + "\n"])
def test_a_weak_or_malformed_admin_token_is_refused_without_repeating_it(token: str) -> None:
    with pytest.raises(SettingsError, match="BIONEMO_ADMIN_TOKEN=\\(the value set\\): expected at least 32") as raised:
        Settings.from_environment({"BIONEMO_ADMIN_TOKEN": token})
    assert token not in str(raised.value)


def test_an_admin_token_refuses_model_selection_by_triton_options() -> None:
    with pytest.raises(SettingsError, match="model-control-mode: refused with BIONEMO_ADMIN_TOKEN set"):
        Settings.from_environment({"BIONEMO_ADMIN_TOKEN": ADMIN_TOKEN, "BIONEMO_TRITON_OPTIONS": "model-control-mode=poll"})


def test_split_takes_both_spellings_and_keeps_the_rest_in_order() -> None:
    options, rest = split_arguments(
        ["--triton-options", "model-control-mode=explicit", "--api-workers", "2", "--triton-options=load-model=esm2nv"]
    )
    assert options == (TritonOption("model-control-mode", "explicit"), TritonOption("load-model", "esm2nv"))
    assert rest == ["--api-workers", "2"]
    assert [option.argument() for option in options] == ["--model-control-mode=explicit", "--load-model=esm2nv"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--triton-options"], "needs a KEY=VALUE"),
        (["--triton-options", "--port", "1"], "needs a KEY=VALUE"),
        (["--triton-options", "model-control-mode"], "expected KEY=VALUE"),
        (["--triton-options", "=explicit"], "expected KEY=VALUE"),
        (["--triton-options", "load-model="], "expected KEY=VALUE"),
        (["--triton-options=--load-model=esm2nv"], "no leading dashes"),
        (["--triton-options", "Load_Model=x"], "expected KEY=VALUE"),
        (["--triton-options", "http-address=0.0.0.0"], "refused"),
        (["--triton-options", "grpc-port=8001"], "refused"),
        (["--triton-options", "allow-grpc=true"], "refused"),
        (["--triton-options", "allow-sagemaker=true"], "refused"),
        (["--triton-options", "metrics-address=0.0.0.0"], "runs Triton's metrics on a free 127.0.0.1 port"),
        (["--triton-options", "model-repository=/models"], "set BIONEMO_MODEL_REPOSITORY instead"),
        (["--triton-options", "log-verbose=1"], "set BIONEMO_TRITON_LOG_VERBOSE instead"),
        (["--triton-options", "model-config-name=h100"], "set BIONEMO_TARGET instead"),
    ],
)
def test_malformed_or_unsafe_options_are_rejected(argv: list[str], expected: str) -> None:
    with pytest.raises(TritonOptionError, match=expected):
        split_arguments(argv)


@pytest.mark.parametrize("option", ["metrics-address=127.0.0.1", "metrics-port=8002"])
def test_triton_metrics_endpoint_is_the_services(option: str) -> None:
    with pytest.raises(TritonOptionError, match="serves them in its own GET /metrics"):
        split_arguments(["--triton-options", option])


def test_what_triton_measures_stays_an_option() -> None:
    options, _ = split_arguments(["--triton-options", "allow-metrics=false", "--triton-options", "metrics-interval-ms=500"])
    assert [option.argument() for option in options] == ["--allow-metrics=false", "--metrics-interval-ms=500"]


def test_the_launcher_chooses_one_loopback_metrics_port_for_tritonserver_and_every_worker() -> None:
    _, environment = serve_command(["service:svc"], {})
    port = int(environment["BIONEMO_TRITON_METRICS_PORT"])
    settings = Settings.from_environment(environment)
    assert settings.triton_metrics_port == port
    assert triton_arguments(settings) == [
        "--allow-metrics=true", "--metrics-address=127.0.0.1", f"--metrics-port={port}", "--exit-on-error=false",
    ]  # fmt: skip
    with pytest.raises(SettingsError, match="BIONEMO_TRITON_METRICS_PORT='0': expected a port number"):
        Settings.from_environment({"BIONEMO_TRITON_METRICS_PORT": "0"})


def test_environment_form_round_trips() -> None:
    options = (TritonOption("load-model", "esm2nv"), TritonOption("backend-config", "python,shm-default-byte-size=1 2"))
    assert parse_environment(render_environment(options)) == options


def test_launcher_moves_options_into_the_environment_and_builds_bentoml_serve() -> None:
    command, environment = serve_command(
        ["service:svc", "--triton-options", "load-model=esm2nv", "--api-workers", "1"],
        {"BIONEMO_TRITON_OPTIONS": "model-control-mode=explicit", "BIONEMO_PORT": "3100"},
    )
    assert command == [
        sys.executable, "-m", "bentoml", "serve", "service:svc", "--production",
        "--host", "127.0.0.1", "--port", "3100", "--api-workers", "1",
    ]  # fmt: skip
    assert environment["BIONEMO_TRITON_OPTIONS"] == "model-control-mode=explicit load-model=esm2nv"
    assert environment["BIONEMO_PORT"] == "3100"


@pytest.mark.parametrize("grpc", [[], ["--grpc"]])
def test_bentomls_deadline_lies_past_the_services_own(grpc: list[str]) -> None:
    """BentoML cuts a request at its own deadline (60 s by default) with an answer that names no setting: it must
    come after BIONEMO_REQUEST_TIMEOUT_S, whose 504 says what ran out, whatever the environment's options said."""
    for timeout, expected in (("120", 150), ("3600", 3630), ("0.5", 30.5)):
        _, environment = serve_command(
            [*grpc, "service:svc"],
            {"BIONEMO_REQUEST_TIMEOUT_S": timeout, "BENTOML_CONFIG_OPTIONS": "api_server.traffic.timeout=60"},
        )
        config = BentoMLConfiguration(override_config_values=environment["BENTOML_CONFIG_OPTIONS"]).to_dict()
        assert config["api_server"]["traffic"]["timeout"] == expected

def test_grpc_launcher_builds_bentoml_serve_grpc_with_the_settings_grpc_configuration() -> None:
    """Same settings and Triton options as `serve`; messages bounded by BIONEMO_MAX_REQUEST_BYTES, reflection on,
    metrics on the API's host, after (so winning over) the BentoML options the environment already had."""
    command, environment = serve_command(
        ["--grpc", "bento:tag", "--triton-options", "load-model=esm2nv"],
        {
            "BIONEMO_PORT": "3100", "BIONEMO_MAX_REQUEST_BYTES": "4194304", "BIONEMO_GRPC_METRICS_PORT": "3102",
            "BENTOML_CONFIG_OPTIONS": "api_server.grpc.max_message_length=-1",
        },
    )  # fmt: skip
    assert command == [
        sys.executable, "-m", "bentoml", "serve-grpc", "bento:tag", "--production", "--host", "127.0.0.1", "--port", "3100",
    ]  # fmt: skip
    assert environment["BIONEMO_TRITON_OPTIONS"] == "load-model=esm2nv"
    assert environment["BENTOML_CONFIG_OPTIONS"].split() == [
        "api_server.grpc.max_message_length=-1",
        "api_server.traffic.timeout=150",
        "api_server.grpc.max_message_length=4194304",
        "api_server.grpc.reflection.enabled=true",
        "api_server.grpc.metrics.host=127.0.0.1",
        "api_server.grpc.metrics.port=3102",
        "tracing.excluded_urls=.*",  # no tracing exporter: no span made (tests/unit/test_tracing.py)
    ]
    # as BentoML reads them: valid keys, and the last of a repeated key wins
    config = BentoMLConfiguration(override_config_values=environment["BENTOML_CONFIG_OPTIONS"]).to_dict()
    assert config["api_server"]["grpc"]["max_message_length"] == 4194304
    assert config["api_server"]["grpc"]["reflection"]["enabled"] is True
    assert config["api_server"]["grpc"]["metrics"] == {"host": "127.0.0.1", "port": 3102}
    assert Settings.from_environment({}).esm1nv_grpc_model == "esm1nv"
    assert environment["GRPC_EXPERIMENTS"] == "-event_engine_listener,-event_engine_for_all_other_endpoints"
    _, environment = serve_command(["--grpc", "bento:tag"], {"GRPC_EXPERIMENTS": "event_engine_dns"})
    assert environment["GRPC_EXPERIMENTS"] == "event_engine_dns"  # the operator's own choice stays


def test_launcher_refuses_before_starting_anything() -> None:
    launched = subprocess.run(
        [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc", "--triton-options", "grpc-address=0.0.0.0"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert launched.returncode == 2
    assert "bionemo: --triton-options 'grpc-address=0.0.0.0': refused" in launched.stderr
    assert "Traceback" not in launched.stderr


def test_configuration_doc_table_lists_every_setting_with_its_default() -> None:
    """docs/configuration.md's settings table has one row per setting, with its default and meaning, and no other."""
    configuration = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    for setting in ALL_SETTINGS:
        default = f"`{setting.default}`" if setting.default else "unset"
        assert f"| `{setting.variable}` | {default} | {setting.meaning} |" in configuration, setting.variable
    assert len(re.findall(r"^\| `BIONEMO_\w+` \|", configuration, re.MULTILINE)) == len(ALL_SETTINGS)
