"""MegaMolBART's cached decoder in-process, on one runtime: its resident memory over many generations of ever-new
shapes, with the backend's own code (the repository's `model.py` and `engines.py`), no tritonserver.

    python -m benchmarks.decoder_memory --runtime openvino --generations 800 [--rows 8]

Each generation starts 1 to `--rows` rows over a source 5-60 wide, steps them 10-80 tokens and releases them, as the
service's decode batcher does; every execute ends as the backend's does (FreedMemory). Prints the process's RSS every
tenth of the run: flat once the runtime has met its largest shapes, or growing (issue 27).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import psutil
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from benchmarks.processes import ROOT
from model_catalog import MODELS
from runtimes.choice import cpu_model
from runtimes.engines import Runtime

DECODER = MODELS["megamolbart"].triton_name(MODELS["megamolbart"].graphs[-1].role)
NUMPY_TYPES = {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64, "TYPE_BOOL": np.bool_}


def backend(folder: Path, runtime: str) -> tuple[object, int]:
    """The decoder's TritonPythonModel from `folder`, initialized as Triton would, its config's runtime `runtime`, and
    the hidden size of its sources. Triton's `triton_python_backend_utils` is stood in for by what the backend reads
    of it (dtype names)."""
    utils = types.ModuleType("triton_python_backend_utils")
    utils.triton_string_to_numpy = lambda name: np.dtype(NUMPY_TYPES[name])  # type: ignore[attr-defined]
    sys.modules["triton_python_backend_utils"] = utils
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    config.parameters["runtime"].string_value = runtime
    spec = importlib.util.spec_from_file_location("decoder_backend", folder / "1" / "model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    arguments = json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))
    model.initialize({"model_config": arguments, "model_repository": str(folder), "model_version": "1"})
    (sources,) = [tensor for tensor in config.input if tensor.name == "encoder_hidden_states"]
    return model, int(sources.dims[-1])


def generate(model: object, rng: np.random.Generator, most_rows: int, next_id: int, hidden_size: int) -> int:
    """One generation, each call followed by what the backend's execute does last; returns the next free row id."""

    def call(*arrays: np.ndarray) -> None:
        model._decode(*arrays)  # type: ignore[attr-defined]
        model.freed_memory.release()  # type: ignore[attr-defined]

    rows, width, steps = int(rng.integers(1, most_rows + 1)), int(rng.integers(5, 61)), int(rng.integers(10, 81))
    none = np.zeros(0, dtype=np.int64)
    ids = np.arange(next_id, next_id + rows)
    sources = rng.standard_normal((rows, width, hidden_size)).astype(np.float32)
    call(ids, np.full(rows, -1), np.zeros(rows, dtype=np.int64), sources, np.ones((rows, width), np.int64), none)
    for _ in range(steps):
        continued = ids + rows
        no_sources = np.zeros((0, width, hidden_size), np.float32)
        call(continued, ids, rng.integers(0, 500, rows), no_sources, np.zeros((0, width), np.int64), none)
        ids = continued
    call(none, none, none, np.zeros((0, 1, hidden_size), np.float32), np.zeros((0, 1), np.int64), ids)
    return int(ids[-1]) + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=[r.value for r in Runtime if r is not Runtime.ONNXRUNTIME_FUSED], required=True)
    parser.add_argument("--generations", type=int, default=800)
    parser.add_argument("--rows", type=int, default=8, help="the most rows a generation starts")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    args = parser.parse_args(argv)
    model, hidden_size = backend(args.repository / DECODER, args.runtime)
    rng, process, started, next_id = np.random.default_rng(0), psutil.Process(), time.monotonic(), 1
    print(f"{cpu_model()}; {DECODER} on {args.runtime}, {args.generations} generations of 1-{args.rows} rows")
    for generation in range(1, args.generations + 1):
        next_id = generate(model, rng, args.rows, next_id, hidden_size)
        if generation % max(1, args.generations // 10) == 0:
            rss = process.memory_info().rss / 2**20
            print(f"generation {generation:5d}: {rss:7.1f} MiB ({time.monotonic() - started:6.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
