"""BioNeMo `.nemo` checkpoints: written in Megatron's layout from a small HF model (support/nemo_checkpoints.py, by
hand, so that a mistake in bionemo_serving/exporter/nemo/esm.py's tables cannot cancel itself out), loaded and exported
through the parity gate. What the loader refuses, and the loaded graphs' answers in torch, are
tests/unit/test_nemo_checkpoints.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.exportable import EncoderGraph
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.exporter.pipeline import ExportReport
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from support.nemo_checkpoints import (
    VOCABULARY_MEMBER,
    hf_model,
    hidden_states,
    masked_batch,
    megatron_config,
    megatron_state_dict,
    sentencepiece_vocabulary,
    source_log_probs,
    tokenizer_config,
    write_nemo,
)


def exported_log_probs(report: ExportReport, batch: GraphInputs) -> np.ndarray:
    """What onnxruntime answers with the exported language-model graph."""
    (graph,) = (graph for graph in report.graphs if graph.triton_name == f"{report.model}_language_model")
    session = onnxruntime.InferenceSession(str(graph.version_dir / graph.onnx_files[0]))
    return session.run(["log_probs"], batch.feeds)[0]


@pytest.mark.parametrize(("name", "compression"), [("esm2nv", ""), ("esm1nv", "gz")])
def test_nemo_checkpoint_loads_as_the_same_model_and_exports(name: str, compression: str, tmp_path: Path) -> None:
    description = MODELS[name]
    original = hf_model(name, seed=5)
    # Erf GELU, as ESM-2nv trains it (bias_gelu_fusion off); the fused tanh GELU has its own test.
    config = megatron_config(name, bias_gelu_fusion=False)
    # ESM-2nv names a HuggingFace tokenizer and packs no file; here ESM-1nv packs ESM's alphabet, sentencepiece style.
    artifacts = {} if name == "esm2nv" else {VOCABULARY_MEMBER: sentencepiece_vocabulary(ESM_ALPHABET)}
    if artifacts:
        config["tokenizer"] = tokenizer_config(VOCABULARY_MEMBER)
    nemo = write_nemo(tmp_path / f"{name}.nemo", config, megatron_state_dict(original), compression, artifacts)

    loaded = load_for_export(description, nemo).graphs[GraphRole.ENCODER]
    expected, _ = hidden_states(EncoderGraph(original.esm), description)
    np.testing.assert_allclose(hidden_states(loaded, description)[0], expected, rtol=0, atol=1e-5)

    report = export_model(description, nemo, tmp_path / "repository", runtimes=())
    exported = [(graph.triton_name, graph.parity.batches) for graph in report.graphs]
    assert exported == [(name, 3), (f"{name}_language_model", 3), (f"{name}_layers", 3)]
    assert all(graph.parity.max_abs_diff < 1e-4 for graph in report.graphs)
    batch = masked_batch(description)
    real = batch.compared["log_probs"]
    expected_log_probs = source_log_probs(original, batch)[real]
    np.testing.assert_allclose(exported_log_probs(report, batch)[real], expected_log_probs, rtol=0, atol=1e-4)


def test_a_nemo_without_the_head_exports_no_language_model_and_says_why(tmp_path: Path) -> None:
    original = hf_model("esm2nv", seed=10)
    nemo = write_nemo(tmp_path / "bare.nemo", megatron_config("esm2nv"), megatron_state_dict(original, head=False))
    report = export_model(MODELS["esm2nv"], nemo, tmp_path / "repository", runtimes=())
    assert [graph.triton_name for graph in report.graphs] == ["esm2nv", "esm2nv_layers"]
    why = "the checkpoint has no language-model head; esm2nv serves no logits, score"
    assert report.left_out["esm2nv_language_model"] == why
