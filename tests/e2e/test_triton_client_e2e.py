"""tritonclient straight to the service's tritonserver, as docs/clients.md's example does it: the Triton model answers
what transformers computes, and what /embed answers, for tensors a client tokenized itself."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.http as triton

from support.service import RunningService
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing import tokenizer_for
from support.reference import TOLERANCE, TransformersReference

pytestmark = pytest.mark.e2e

CLIENTS_DOC_IDS = [0, 20, 15, 11, 2]
"""docs/clients.md's `ids` of "MKT" for esm2nv: <cls> M K T <eos>."""


def test_the_readme_example_embeds_what_transformers_and_embed_compute(service: RunningService) -> None:
    batch = tokenizer_for(MODELS["esm2nv"]).pad([tokenizer_for(MODELS["esm2nv"]).encode("MKT")])
    assert batch.input_ids.tolist() == [CLIENTS_DOC_IDS]
    ids = np.array([CLIENTS_DOC_IDS], dtype=np.int64)
    residues = np.array([[0, 1, 1, 1, 0]], dtype=np.int64)
    client = triton.InferenceServerClient(service.triton_url)
    inputs = [triton.InferInput(name, ids.shape, "INT64") for name in ("input_ids", "attention_mask", "pooling_mask")]
    for tensor, array in zip(inputs, (ids, np.ones_like(ids), residues)):
        tensor.set_data_from_numpy(array)
    outputs = [triton.InferRequestedOutput("embeddings")]
    embedding = client.infer("esm2nv", inputs, outputs=outputs).as_numpy("embeddings")
    client.close()
    assert embedding.shape == (1, 320)
    assert np.abs(embedding[0] - TransformersReference("esm2nv").mean_embedding("MKT")).max() < TOLERANCE
    answer = requests.post(f"{service.url}/embed", json={"model": "esm2nv", "sequences": ["MKT"]}, timeout=60)
    # /embed pads "MKT" to its length bucket: the same values to float32 rounding
    assert np.abs(embedding[0] - np.asarray(answer.json()["embeddings"][0])).max() < 1e-5
