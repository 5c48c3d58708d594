"""The exporter: generated configs parse as Triton's ModelConfig, and the parity gate refuses bad models."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from google.protobuf import text_format
from transformers import AutoModel
from tritonclient.grpc import model_config_pb2

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import CheckpointError
from bionemo_serving.exporter.graph_inputs import encoder_inputs, trace_inputs, verification_inputs
from bionemo_serving.exporter.onnx_export import export_onnx
from bionemo_serving.exporter.runtime_export import CONVERTERS, written_files
from bionemo_serving.exporter.shared_weights import ALIGNMENT
from bionemo_serving.exporter.triton_config import build_config, config_path, read_exports, render_config
from bionemo_serving.exporter.verify import ParityError, ParityReport, check_parity
from bionemo_serving.model_catalog import (
    DECODER,
    ENCODER,
    MODELS,
    TRITON_CALL_TIMEOUT_S,
    ExportRecord,
    GraphRole,
    Precision,
    Target,
)
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from bionemo_serving.runtimes.engines import SHARED_WEIGHTS, Runtime
from support.checkpoints import EVERY_RUNTIME_FILE, TINY_SIZES, TinyModels, tiny
from support.paths import CHECKPOINTS, DEFAULT_REPOSITORY
from support.runtimes import DECODER_RUNTIMES

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
    abandoned = config.dynamic_batching.default_queue_policy  # queued as long as the runner's client waits: dropped
    assert abandoned.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert abandoned.default_timeout_microseconds == TRITON_CALL_TIMEOUT_S * 1_000_000
    assert config.dynamic_batching.priority_levels == 2 and config.dynamic_batching.default_priority_level == 2
    assert config.version_policy.latest.num_versions == 1 and not config.HasField("response_cache")
    assert config.parameters["attention_budget"].string_value == str(ESM2.batching.attention_budget)


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
    cuda = ("cuda", {"use_tf32": "0"})  # FP32 without TF32, as in the gate (bionemo_serving/exporter/verify.py) and the python backend
    expected = [("tensorrt", {"precision_mode": "FP16"}), cuda] if target is Target.GPU_TENSORRT else [cuda]
    assert [(a.name, dict(a.parameters)) for a in accelerators] == expected


def test_the_stateful_decoder_keeps_the_python_backend_in_one_instance_on_every_target() -> None:
    """Its caches live in one process; the service batches its rows, so Triton does not."""
    megamolbart = MODELS["megamolbart"]
    sizes = {"hidden_size": 32, "vocab_size": 50, "decoder_layers": 2, "decoder_heads": 4, "head_dim": 8}
    for target in Target:
        config = text_format.Parse(render_config(megamolbart, DECODER, sizes, target), model_config_pb2.ModelConfig())
        assert (config.backend, config.max_batch_size, config.instance_group[0].count) == ("python", 0, 1)
        assert not config.HasField("dynamic_batching")
        parameters = {key: value.string_value for key, value in config.parameters.items()}
        assert parameters["cross_attention_file"] == "cross_attention.onnx" and parameters["step_file"] == "step.onnx"
        threads = megamolbart.batching.intra_op_threads * megamolbart.batching.instance_count
        assert parameters["intra_op_threads"] == str(threads)  # the cores its model's other graph gets
        assert parameters["idle_seconds"] == str(megamolbart.batching.cache_idle_seconds)
        provider = "CPUExecutionProvider" if target is Target.CPU else "CUDAExecutionProvider"
        assert parameters["execution_provider"] == provider
    assert [tuple(t.dims) for t in config.input] == [(-1,), (-1,), (-1,), (-1, -1, 32), (-1, -1), (-1,)]


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_default_export_parses_and_names_its_sizes(name: str) -> None:
    description = MODELS[name]
    repository = DEFAULT_REPOSITORY
    sizes = load_for_export(description, CHECKPOINTS / name).sizes
    assert {"hidden_size"} <= sizes.keys()
    for graph, target in itertools.product(description.graphs, Target):
        text = (repository / description.triton_name(graph.role) / config_path(target)).read_text()
        exports, _ = read_exports(repository / description.triton_name(graph.role))
        weights = description.default_weights  # random-init, or the weights trained here (megamolbart's)
        assert [(version, record.checkpoint) for version, record in exports.items()] == [(1, weights)]
        rendered = render_config(description, graph, sizes, target, weights, exports)
        config = text_format.Parse(text, model_config_pb2.ModelConfig())
        # as the exporter wrote it: make models keeps its timings beside it, and each start serves its runtime choice
        # from a folder of its own (bionemo_serving/runtimes/served_repository.py)
        assert config == text_format.Parse(rendered, model_config_pb2.ModelConfig())
        assert text.split("\n\n")[0] == rendered.split("\n\n")[0]  # the header documenting each tensor
        assert config.name == description.triton_name(graph.role)
        assert [t.name for t in config.input] == [spec.name for spec in graph.inputs]
        assert config.parameters["checkpoint"].string_value == weights  # `exporter defaults` says so


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_models: TinyModels) -> Path:
    return tiny_models.checkpoint("esm2nv")


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(TINY_SIZES))
def test_every_architecture_exports_within_tolerance(name: str, tiny_models: TinyModels) -> None:
    report = tiny_models.export(name).report
    description = MODELS[name]
    assert [graph.triton_name for graph in report.graphs] == [description.triton_name(g.role) for g in description.graphs]
    assert all(graph.parity.max_abs_diff < 1e-4 and graph.parity.batches == 3 for graph in report.graphs)


@pytest.mark.e2e
def test_export_writes_a_verified_version(tiny_models: TinyModels) -> None:
    """Every runtime's file and the backend in the version's folder, the config beside them (other versions than 1:
    test_exporter_cli_e2e.py's --version)."""
    exported = tiny_models.export("esm2nv")
    assert exported.report.graphs[0].parity.max_abs_diff < 1e-4
    written = {path.name for path in (exported.repository / "esm2nv" / "1").iterdir()}
    assert written == EVERY_RUNTIME_FILE | {"model.py", "engines.py"}
    # the config records the checkpoint's folder name as where the weights came from (GET /models: `weights`)
    # and, for version 1, its precision too (model_catalog.EXPORTS_PARAMETER)
    record = {1: ExportRecord(exported.checkpoint.name, Precision.FP32)}
    rendered = render_config(ESM2, ESM2.graphs[0], {"hidden_size": 32}, checkpoint=exported.checkpoint.name, exports=record)
    assert (exported.repository / "esm2nv" / "config.pbtxt").read_text() == rendered


@pytest.mark.e2e
def test_a_graph_traced_into_external_data_ends_with_its_weights_in_the_shared_file(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The path of models over 2 GB, forced on a small one: the gate runs on the split files, then their tensors move
    into model.weights and the split files go. The encoder alone: every graph is written by the same code."""
    report = export_model(replace(ESM2, graphs=(ENCODER,)), tiny_checkpoint, tmp_path, external_data=True)
    version_dir = tmp_path / "esm2nv" / "1"
    assert {p.name for p in version_dir.iterdir()} == EVERY_RUNTIME_FILE | {"model.py", "engines.py"}
    for name in ("model.onnx", "model.fused.onnx"):
        graph = onnx.load(str(version_dir / name), load_external_data=False)
        assert _locations(graph) == {SHARED_WEIGHTS}
    assert (version_dir / SHARED_WEIGHTS).stat().st_mode & 0o044 == 0o044  # readable by Triton's user
    assert report.graphs[0].onnx_bytes == (version_dir / "model.onnx").stat().st_size
    assert report.graphs[0].parity.max_abs_diff < 1e-4 and report.weights.linked == 0
    assert not list(tmp_path.glob("**/.trace-*"))


@pytest.mark.e2e
def test_the_graphs_of_an_export_read_one_weights_file_holding_each_tensor_once(tiny_models: TinyModels) -> None:
    """Every head graph holds the whole encoder again: its tensors are the encoder's own bytes in model.weights, one
    file linked into each graph's folder, each tensor where onnxruntime maps it in place (aligned)."""
    exported = tiny_models.export("esm2nv")
    folders = [graph.version_dir for graph in exported.report.graphs]
    assert len(folders) == 4 and len({(folder / SHARED_WEIGHTS).stat().st_ino for folder in folders}) == 1
    assert exported.report.weights.linked == 3
    weights = (folders[0] / SHARED_WEIGHTS).read_bytes()
    spans: dict[str, dict[str, tuple[int, int]]] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.onnx")):
            graph = onnx.load(str(path), load_external_data=False)
            assert _locations(graph) == {SHARED_WEIGHTS}
            spans[f"{folder.parent.name}/{path.name}"] = _spans(graph)
            assert all(offset % ALIGNMENT == 0 for offset, _ in spans[f"{folder.parent.name}/{path.name}"].values())
    # the bytes are the checkpoint's (onnx.load refuses external data with several hard links: read them here)
    embeddings = AutoModel.from_pretrained(exported.checkpoint).embeddings.word_embeddings.weight.detach().numpy()
    encoder, language_model = spans["esm2nv/model.onnx"], spans["esm2nv_language_model/model.onnx"]
    (offset, length), = (span for name, span in language_model.items() if name.endswith("word_embeddings.weight"))
    assert np.array_equal(np.frombuffer(weights[offset : offset + length], np.float32).reshape(embeddings.shape), embeddings)
    # the graphs name the same tensors differently (masked_lm.esm.*, onnx::MatMul_*): the bytes are what is shared
    assert len(encoder) > 10 and set(encoder.values()) <= set(language_model.values())
    distinct = {span for graph in spans.values() for span in graph.values()}
    assert len(weights) < sum(length for _, length in distinct) + ALIGNMENT * len(distinct)
    assert exported.report.weights.named_bytes > 3 * sum(length for _, length in distinct)  # each graph counted alone
    assert f"weights: {SHARED_WEIGHTS}" in exported.report.summary()


def _locations(graph: onnx.ModelProto) -> set[str]:
    return {entry.value for tensor in graph.graph.initializer for entry in tensor.external_data if entry.key == "location"}


def _spans(graph: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """Each external tensor's (offset, length) in its file."""
    spans = {}
    for tensor in graph.graph.initializer:
        entries = {entry.key: entry.value for entry in tensor.external_data}
        if entries:
            spans[tensor.name] = (int(entries["offset"]), int(entries["length"]))
    return spans


@pytest.mark.e2e
def test_gate_refuses_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ParityError, match="was not written"):
        export_model(ESM2, tiny_checkpoint, tmp_path, tolerance=0.0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_gate_catches_a_graph_that_differs_from_the_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    graphs = load_for_export(ESM2, tiny_checkpoint).graphs
    module, graph = graphs[GraphRole.ENCODER], ESM2.graphs[0]
    export_onnx(module, graph.onnx_graphs[0], trace_inputs(ESM2, GraphRole.ENCODER, graphs), tmp_path / "model.onnx")
    torch.manual_seed(0)
    with torch.no_grad():  # the ONNX graph now holds weights the checkpoint no longer has
        weight = module.encoder.encoder.layer[0].output.dense.weight
        weight.add_(torch.randn_like(weight) * 1e-2)
    batches = verification_inputs(ESM2, GraphRole.ENCODER, graphs, seed=0)
    with pytest.raises(ParityError):
        check_parity(module, tmp_path / "model.onnx", graph.onnx_graphs[0], batches, "esm2nv")


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


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ["esm1nv", "esm2nv"])
def test_the_language_model_at_the_positions_asked_is_transformers_masked_lm(
    name: str, attention: str, tiny_models: TinyModels
) -> None:
    """The graph runs its last layer at the positions asked alone: what it answers there is what EsmForMaskedLM,
    which runs every layer at every token, answers (learned and rotary positions, padding, <mask>, both attentions)."""
    description = tiny(name)
    graphs = load_for_export(description, tiny_models.checkpoint(name), attention=attention).graphs
    graph = graphs[GraphRole.LANGUAGE_MODEL]
    batch = trace_inputs(description, GraphRole.LANGUAGE_MODEL, {})
    feeds = {tensor: torch.from_numpy(array) for tensor, array in batch.feeds.items()}
    assert (feeds["input_ids"] == ESM_ALPHABET.index("<mask>")).any() and not feeds["attention_mask"].all()
    with torch.inference_mode():
        logits = graph.masked_lm(input_ids=feeds["input_ids"], attention_mask=feeds["attention_mask"]).logits
        expected = torch.log_softmax(logits, dim=-1)[..., graph.amino_acids]
        at_positions = graph(**feeds)
    positions = feeds["positions"][:, :, None].expand(-1, -1, expected.shape[-1])
    np.testing.assert_allclose(at_positions.numpy(), torch.gather(expected, 1, positions).numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["esm1nv", "esm2nv"])
def test_contacts_layer_by_layer_are_transformers_predict_contacts(name: str, tiny_models: TinyModels) -> None:
    """The graph turns each layer's maps into contact logits as the layer runs; predict_contacts stacks them all
    first: the same contacts (learned and rotary positions, padded rows, <mask>)."""
    description = tiny(name)
    graph = load_for_export(description, tiny_models.checkpoint(name), attention="eager").graphs[GraphRole.CONTACTS]
    batch = trace_inputs(description, GraphRole.CONTACTS, {})
    feeds = {tensor: torch.from_numpy(array) for tensor, array in batch.feeds.items()}
    assert not feeds["attention_mask"].all()
    with torch.inference_mode():
        expected = graph.encoder.predict_contacts(feeds["input_ids"], feeds["attention_mask"])
        np.testing.assert_allclose(graph(**feeds).numpy(), expected.numpy(), rtol=0, atol=1e-6)


@pytest.mark.e2e
def test_the_decoder_exports_both_parts_verified_for_every_runtime(tiny_models: TinyModels) -> None:
    decoder = tiny_models.export("megamolbart").report.graphs[1]
    assert decoder.onnx_files == ["cross_attention.onnx", "step.onnx"]
    converted = [runtime for runtime in CONVERTERS if runtime in DECODER_RUNTIMES]
    written = [file.name for runtime in converted for part in DECODER.parts for file in written_files(runtime, part, Path())]
    expected = ["cross_attention.onnx", "engines.py", "model.py", "step.onnx", SHARED_WEIGHTS, *written]
    assert sorted(p.name for p in decoder.version_dir.iterdir()) == sorted(expected)
    assert all(isinstance(decoder.runtimes[runtime], ParityReport) and decoder.runtimes[runtime].max_abs_diff < 1e-4 for runtime in converted)
    assert "0 MultiHeadAttention" in decoder.runtimes[Runtime.ONNXRUNTIME_FUSED]  # left out, and why
    assert "keeps each row's key-value cache" in (decoder.version_dir / "model.py").read_text()  # the stateful one
    assert decoder.parity.max_abs_diff < 1e-4 and decoder.onnx_bytes == sum(
        (decoder.version_dir / name).stat().st_size for name in decoder.onnx_files
    )


def test_unreadable_checkpoint_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="config.json: missing"):
        load_for_export(ESM2, tmp_path)
