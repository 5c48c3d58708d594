"""Triton python-backend model that runs one stateless exported ONNX graph with onnxruntime.

The exporter copies this file into `<repository>/<model>/<version>/model.py`.
Tensor names and dtypes come from the model's `config.pbtxt`, the single
source of truth; so do the ONNX file (`model_file`), the threads and the provider.
Requests that Triton's dynamic batcher hands over together are concatenated
into one onnxruntime call, grouped by shape and by the outputs they ask for;
only those outputs are copied back (an /embed asks for embeddings, not every
token's hidden state). A call over `attention_budget` rows x tokens² runs in
pieces, so that onnxruntime's memory stays bounded whatever Triton merges.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


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
        onnx_path = Path(args["model_repository"]) / args["model_version"] / parameters["model_file"]
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(parameters["intra_op_threads"])
        self.attention_budget = int(parameters["attention_budget"])
        providers = [parameters["execution_provider"]]
        self.session = onnxruntime.InferenceSession(str(onnx_path), options, providers=providers)

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
            results = self.run(list(wanted), feeds)
            offsets = np.cumsum([0] + [len(arrays[i][next(iter(self.inputs))]) for i in members])
            for member, start, stop in zip(members, offsets[:-1], offsets[1:]):
                responses[member] = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor(name, results[name][start:stop].astype(self.outputs[name], copy=False))
                        for name in wanted
                    ]
                )
        return responses

    def run(self, wanted: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`wanted` outputs of one batch, run in pieces of at most `attention_budget` rows x tokens² (the second
        axis of the inputs): onnxruntime's arena keeps the largest working set it has met, so one merged batch of
        long rows would otherwise hold gigabytes for good."""
        batch = next(iter(feeds.values()))
        tokens = batch.shape[1] if batch.ndim > 1 else 1
        rows = max(1, self.attention_budget // tokens**2)
        if len(batch) <= rows:
            return dict(zip(wanted, self.session.run(wanted, feeds)))
        pieces = [
            self.session.run(wanted, {name: array[start : start + rows] for name, array in feeds.items()})
            for start in range(0, len(batch), rows)
        ]
        return {name: np.concatenate([piece[index] for piece in pieces]) for index, name in enumerate(wanted)}
