"""Triton python-backend model that runs one stateless exported graph on the runtime its config names.

The exporter copies this file into `<repository>/<model>/<version>/model.py`, and
`bionemo_serving/runtimes/engines.py` beside it as `engines.py`. Tensor names and dtypes come from the model's
`config.pbtxt`, the single source of truth; so do the graph (`model_file`), the
runtime (`runtime`, recorded by `bionemo_serving.runtimes.choice`; onnxruntime where none
is), the threads and the provider.
Requests that Triton's dynamic batcher hands over together are concatenated
into one run, grouped by shape and by the outputs they ask for;
only those outputs are copied back (an /embed asks for embeddings, not every
token's hidden state). A call over `attention_budget` rows x tokens² runs in
pieces, so that the runtime's memory stays bounded whatever Triton merges.
`initialize` runs one small batch through every output before Triton calls the
model ready: a graph its runtime cannot open or run fails the load, with the
runtime's own reason, instead of the first request.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).parent))  # engines.py, which the exporter copies beside this file
from engines import RUNTIME_PARAMETER, Arena, FreedMemory, Runtime, open_engine, run_in_pieces, thread_allotment  # noqa: E402

WARM_UP_TOKENS = 8


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.inputs = {
            tensor["name"]: pb_utils.triton_string_to_numpy(tensor["data_type"]) for tensor in config["input"]
        }
        self.outputs = {
            tensor["name"]: pb_utils.triton_string_to_numpy(tensor["data_type"]) for tensor in config["output"]
        }
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        graph = Path(args["model_repository"]) / args["model_version"] / parameters["model_file"]
        runtime = Runtime(parameters.get(RUNTIME_PARAMETER, Runtime.ONNXRUNTIME.value))
        provider, arena = parameters["execution_provider"], Arena(parameters["arena"])
        self.engine = open_engine(runtime, graph.with_name(runtime.file(graph.stem)), provider, arena)
        self.threads = thread_allotment(int(parameters["intra_op_threads"]))
        self.attention_budget = int(parameters["attention_budget"])
        self.freed_memory = FreedMemory()
        warm_up = {
            tensor["name"]: np.ones([1, *(WARM_UP_TOKENS if dim == -1 else dim for dim in tensor["dims"])], dtype)
            for tensor, dtype in zip(config["input"], self.inputs.values())
        }  # one row of WARM_UP_TOKENS tokens; ones are a real token id and a mask that keeps every token
        run_in_pieces(self.engine, list(self.outputs), warm_up, self.attention_budget, self.threads)

    def execute(self, requests: list) -> list:
        arrays = [
            {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(dtype, copy=False)
             for name, dtype in self.inputs.items()}
            for request in requests
        ]  # fmt: skip
        groups: dict[tuple, list[int]] = defaultdict(list)
        for index, (request, feeds) in enumerate(zip(requests, arrays)):
            # Triton lists no names when a client asks for no outputs in particular: then all of them.
            wanted = tuple(name for name in self.outputs if name in (request.requested_output_names() or self.outputs))
            groups[(wanted, *(feeds[name].shape[1:] for name in self.inputs))].append(index)
        responses: list = [None] * len(requests)
        for (wanted, *_), members in groups.items():
            feeds = {name: np.concatenate([arrays[i][name] for i in members]) for name in self.inputs}
            results = run_in_pieces(self.engine, list(wanted), feeds, self.attention_budget, self.threads)
            offsets = np.cumsum([0] + [len(arrays[i][next(iter(self.inputs))]) for i in members])
            for member, start, stop in zip(members, offsets[:-1], offsets[1:]):
                responses[member] = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor(name, results[name][start:stop].astype(self.outputs[name], copy=False))
                        for name in wanted
                    ]
                )
        self.freed_memory.release()
        return responses
