"""The exporter: generated configs parse as Triton's ModelConfig, and the parity gate refuses bad models."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from transformers import AutoConfig

from exporter import export_model
from exporter.architectures import CheckpointError, create_default_checkpoint, load_for_export
from exporter.graph_inputs import encoder_inputs, trace_inputs, verification_inputs
from exporter.onnx_export import export_onnx
from exporter.triton_config import build_config, config_path, render_config
from exporter.verify import ParityError, check_parity
from model_catalog import MODELS, GraphRole, Target
from reference import CHECKPOINTS

ESM2 = MODELS["esm2nv"]


def test_config_parses_as_model_config_and_follows_the_description() -> None:
    config = text_format.Parse(render_config(ESM2, ESM2.graphs[0], {"hidden_size": 320}), model_config_pb2.ModelConfig())
    assert config.name == "esm2nv" and config.backend == "python"
    assert config.max_batch_size == ESM2.batching.max_batch_size > 0
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type)) for t in config.input] == [
        (spec.name, spec.data_type) for spec in ESM2.graphs[0].inputs
    ]
    assert [(t.name, tuple(t.dims)) for t in config.output] == [("hidden_states", (-1, 320)), ("embeddings", (320,))]
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert list(config.dynamic_batching.preferred_batch_size) == list(ESM2.batching.preferred_batch_sizes)
    assert config.version_policy.latest.num_versions == 1 and not config.HasField("response_cache")


def test_version_policy_and_response_cache_follow_the_description() -> None:
    description = replace(ESM2, versions_served=3, response_cache=True)
    config = text_format.Parse(render_config(description, ESM2.graphs[0], {"hidden_size": 320}), model_config_pb2.ModelConfig())
    assert config.version_policy.latest.num_versions == 3 and config.response_cache.enable


@pytest.mark.parametrize("target", [Target.GPU, Target.GPU_TENSORRT])
def test_gpu_configs_run_the_same_onnx_file_in_the_native_backend(target: Target) -> None:
    cpu = build_config(ESM2, ESM2.graphs[0], {"hidden_size": 320})
    config = text_format.Parse(render_config(ESM2, ESM2.graphs[0], {"hidden_size": 320}, target), model_config_pb2.ModelConfig())
    assert (config.backend, config.default_model_filename) == ("onnxruntime", "model.onnx")
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert not config.parameters
    assert (config.input, config.output, config.dynamic_batching) == (cpu.input, cpu.output, cpu.dynamic_batching)
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    if target is Target.GPU_TENSORRT:
        assert [(a.name, dict(a.parameters)) for a in accelerators] == [("tensorrt", {"precision_mode": "FP16"})]
    else:
        assert not accelerators


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_default_export_parses_and_names_its_sizes(name: str) -> None:
    description = MODELS[name]
    repository = Path(__file__).resolve().parent.parent / "model_repository"
    checkpoint = AutoConfig.from_pretrained(CHECKPOINTS / name)
    sizes = {"hidden_size": checkpoint.hidden_size, "vocab_size": checkpoint.vocab_size}
    for graph, target in itertools.product(description.graphs, Target):
        text = (repository / description.triton_name(graph.role) / config_path(target)).read_text()
        assert text == render_config(description, graph, sizes, target)
        config = text_format.Parse(text, model_config_pb2.ModelConfig())
        assert config.name == description.triton_name(graph.role)
        assert [t.name for t in config.input] == [spec.name for spec in graph.inputs]


TINY_SIZES = {
    "megamolbart": {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                    "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64},
    "esm1nv": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64},
    "esm2nv": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64},
    "prott5nv": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4},
}


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint") / "esm2"
    create_default_checkpoint(replace(ESM2, default_checkpoint_config=TINY_SIZES["esm2nv"]), folder, seed=1)
    return folder


@pytest.mark.parametrize("name", sorted(TINY_SIZES))
def test_every_architecture_exports_within_tolerance(name: str, tmp_path: Path) -> None:
    description = replace(MODELS[name], default_checkpoint_config=TINY_SIZES[name])
    create_default_checkpoint(description, tmp_path / "checkpoint", seed=2)
    report = export_model(description, tmp_path / "checkpoint", tmp_path / "repository")
    assert [graph.triton_name for graph in report.graphs] == [description.triton_name(g.role) for g in description.graphs]
    assert all(graph.parity.max_abs_diff < 1e-4 and graph.parity.batches == 3 for graph in report.graphs)


def test_export_writes_a_verified_version(tiny_checkpoint: Path, tmp_path: Path) -> None:
    report = export_model(ESM2, tiny_checkpoint, tmp_path, version=3)
    assert report.graphs[0].parity.max_abs_diff < 1e-4
    assert sorted(p.name for p in (tmp_path / "esm2nv" / "3").iterdir()) == ["model.onnx", "model.py"]
    assert (tmp_path / "esm2nv" / "config.pbtxt").read_text() == render_config(ESM2, ESM2.graphs[0], {"hidden_size": 32})


def test_external_data_keeps_the_weights_beside_the_graph(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The mechanism models over 2 GB need, forced on a small one: the gate runs on the split files."""
    report = export_model(ESM2, tiny_checkpoint, tmp_path, external_data=True)
    version_dir = tmp_path / "esm2nv" / "1"
    assert sorted(p.name for p in version_dir.iterdir()) == ["model.onnx", "model.onnx.data", "model.py"]
    graph = onnx.load(str(version_dir / "model.onnx"), load_external_data=False)
    locations = {entry.value for tensor in graph.graph.initializer for entry in tensor.external_data if entry.key == "location"}
    assert locations == {"model.onnx.data"}
    assert all(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in graph.graph.initializer)
    assert (version_dir / "model.onnx.data").stat().st_mode & 0o044 == 0o044  # readable by Triton's user
    assert report.graphs[0].onnx_bytes == sum(p.stat().st_size for p in version_dir.glob("model.onnx*"))
    assert report.graphs[0].parity.max_abs_diff < 1e-4
    assert not list(tmp_path.glob("**/.trace-*"))


def test_gate_refuses_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ParityError, match="was not written"):
        export_model(ESM2, tiny_checkpoint, tmp_path, tolerance=0.0)
    assert list(tmp_path.iterdir()) == []


def test_gate_catches_a_graph_that_differs_from_the_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    graphs = load_for_export(ESM2, tiny_checkpoint).graphs
    module, graph = graphs[GraphRole.ENCODER], ESM2.graphs[0]
    export_onnx(module, graph, trace_inputs(ESM2, GraphRole.ENCODER, graphs), tmp_path / "model.onnx")
    torch.manual_seed(0)
    with torch.no_grad():  # the ONNX graph now holds weights the checkpoint no longer has
        weight = module.encoder.encoder.layer[0].output.dense.weight
        weight.add_(torch.randn_like(weight) * 1e-2)
    batches = verification_inputs(ESM2, GraphRole.ENCODER, graphs, seed=0)
    with pytest.raises(ParityError):
        check_parity(module, tmp_path / "model.onnx", graph, batches, "esm2nv")


def test_encoder_graph_embeddings_average_the_hidden_states_over_the_pooling_mask(tiny_checkpoint: Path) -> None:
    """The exported graph pools: over the residues by default, and at <cls> alone with a one-hot mask."""
    encoder = load_for_export(ESM2, tiny_checkpoint).graphs[GraphRole.ENCODER]
    feeds = encoder_inputs(ESM2, [3, 11, 6], np.random.default_rng(0)).feeds
    at_cls = np.zeros_like(feeds["pooling_mask"])
    at_cls[:, 0] = 1
    with torch.inference_mode():
        hidden, mean = (t.numpy() for t in encoder(**{k: torch.from_numpy(v) for k, v in feeds.items()}))
        _, cls = encoder(**{k: torch.from_numpy(v) for k, v in (feeds | {"pooling_mask": at_cls}).items()})
    for row, length in enumerate([3, 11, 6]):
        np.testing.assert_allclose(mean[row], hidden[row, 1 : 1 + length].mean(axis=0), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(cls.numpy(), hidden[:, 0])


def test_decoder_step_reads_each_rows_logits_at_its_own_last_token(tmp_path: Path) -> None:
    """Continuous batching puts rows of different lengths in one step: padded, a row gives the logits it gives alone."""
    description = replace(MODELS["megamolbart"], default_checkpoint_config=TINY_SIZES["megamolbart"])
    create_default_checkpoint(description, tmp_path / "checkpoint", seed=3)
    report = export_model(description, tmp_path / "checkpoint", tmp_path / "repository")
    session = onnxruntime.InferenceSession(str(report.graphs[1].version_dir / "model.onnx"))
    rng = np.random.default_rng(1)
    states = rng.normal(size=(2, 9, 32)).astype(np.float32)
    encoder_mask = np.array([[1] * 9, [1] * 5 + [0] * 4])
    prefixes = [rng.integers(4, 60, size=length) for length in (7, 2)]

    def step(ids: np.ndarray, mask: np.ndarray, rows: list[int]) -> np.ndarray:
        feeds = {"decoder_ids": ids, "decoder_mask": mask, "encoder_mask": encoder_mask[rows]}
        (logits,) = session.run(["logits"], feeds | {"encoder_hidden_states": states[rows]})
        return logits

    alone = [step(prefix[None], np.ones((1, len(prefix)), dtype=np.int64), [row]) for row, prefix in enumerate(prefixes)]
    padded = np.zeros((2, 7), dtype=np.int64)
    padded[0], padded[1, :2] = prefixes
    together = step(padded, (np.arange(7) < np.array([[7], [2]])).astype(np.int64), [0, 1])
    np.testing.assert_allclose(together, np.concatenate(alone), rtol=0, atol=1e-5)


def test_unreadable_checkpoint_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="config.json: missing"):
        load_for_export(ESM2, tmp_path)
