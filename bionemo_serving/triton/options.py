"""`--triton-options KEY=VALUE`: parsed, checked, and turned into tritonserver arguments.

`bentoml serve` dropped `--triton-options` in 1.0.16; the launcher takes them
instead, from the command line or from BIONEMO_TRITON_OPTIONS, and the service
hands them to tritonserver through the runner's `cli_args`. Options that would
move Triton off loopback, or that the service's settings own, are refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

FLAG = "--triton-options"
ENVIRONMENT_VARIABLE = "BIONEMO_TRITON_OPTIONS"

_KEY = re.compile(r"[a-z][a-z0-9-]*")

# The runner owns Triton's endpoint: HTTP on a free 127.0.0.1 port, nothing else listening.
_ENDPOINT_KEYS = frozenset(
    {
        "allow-http", "http-address", "http-port", "reuse-http-port",
        "allow-grpc", "grpc-address", "grpc-port", "reuse-grpc-port",
        "allow-sagemaker", "sagemaker-port", "sagemaker-safe-port-range",
        "allow-vertex-ai", "vertex-ai-port",
    }
)  # fmt: skip
# The service runs Triton's metrics on a free 127.0.0.1 port and merges them into its own GET /metrics.
_METRICS_ENDPOINT_KEYS = frozenset({"metrics-address", "metrics-port"})
SETTING_FOR_KEY = {
    "model-repository": "BIONEMO_MODEL_REPOSITORY",
    "model-store": "BIONEMO_MODEL_REPOSITORY",
    "log-verbose": "BIONEMO_TRITON_LOG_VERBOSE",
    "model-config-name": "BIONEMO_TARGET",
}
MODEL_SELECTION_KEYS = frozenset({"model-control-mode", "load-model"})


class TritonOptionError(ValueError):
    """A `--triton-options` value the service will not pass to tritonserver."""


@dataclass(frozen=True)
class TritonOption:
    key: str
    value: str

    def argument(self) -> str:
        return f"--{self.key}={self.value}"


def parse_option(text: str, source: str = FLAG) -> TritonOption:
    """One `KEY=VALUE` (as `model-control-mode=explicit`), or a TritonOptionError saying what is wrong."""
    key, separator, value = text.partition("=")
    if not separator or not _KEY.fullmatch(key) or not value:
        raise TritonOptionError(
            f"{source} {text!r}: expected KEY=VALUE with a tritonserver option name and no leading dashes, "
            "e.g. model-control-mode=explicit"
        )
    if key in _ENDPOINT_KEYS:
        raise TritonOptionError(
            f"{source} {text!r}: refused; the service runs tritonserver on a private 127.0.0.1 HTTP port "
            "and exposes only its own API"
        )
    if key in _METRICS_ENDPOINT_KEYS:
        raise TritonOptionError(
            f"{source} {text!r}: refused; the service runs Triton's metrics on a free 127.0.0.1 port and serves them "
            "in its own GET /metrics"
        )
    if key in SETTING_FOR_KEY:
        raise TritonOptionError(f"{source} {text!r}: refused; set {SETTING_FOR_KEY[key]} instead")
    return TritonOption(key, value)


def parse_environment(value: str) -> tuple[TritonOption, ...]:
    """BIONEMO_TRITON_OPTIONS: whitespace-separated KEY=VALUE items (shell quoting allowed)."""
    try:
        items = shlex.split(value)
    except ValueError as error:
        raise TritonOptionError(f"{ENVIRONMENT_VARIABLE}={value!r}: {error}") from None
    return tuple(parse_option(item, ENVIRONMENT_VARIABLE) for item in items)


def split_arguments(argv: Sequence[str]) -> tuple[tuple[TritonOption, ...], list[str]]:
    """Take every `--triton-options KEY=VALUE` and `--triton-options=KEY=VALUE` out of `argv`.

    Returns the options in order and the remaining arguments, untouched, for `bentoml serve`.
    """
    options: list[TritonOption] = []
    rest: list[str] = []
    arguments = iter(argv)
    for argument in arguments:
        if argument == FLAG:
            value = next(arguments, None)
            if value is None or value.startswith("--"):
                raise TritonOptionError(f"{FLAG} needs a KEY=VALUE after it, e.g. {FLAG} model-control-mode=explicit")
            options.append(parse_option(value))
        elif argument.startswith(FLAG + "="):
            options.append(parse_option(argument.removeprefix(FLAG + "=")))
        else:
            rest.append(argument)
    return tuple(options), rest


def render_environment(options: Sequence[TritonOption]) -> str:
    """The BIONEMO_TRITON_OPTIONS value that `parse_environment` reads back as `options`."""
    return " ".join(shlex.quote(f"{option.key}={option.value}") for option in options)
