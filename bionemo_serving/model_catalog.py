"""One description per served model.

Everything model-specific lives here: the exporter reads it to build the
architecture, name the ONNX tensors and generate `config.pbtxt`; the service
reads it to pick the tokenizer, enforce the length limit and advertise the
model's capabilities. Adding a model means adding a `ModelDescription`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bionemo_serving.runtimes.engines import Arena


class Architecture(str, enum.Enum):
    """Network families the exporter knows how to load and trace."""

    ESM1 = "esm1"
    ESM2 = "esm2"
    T5_ENCODER = "t5_encoder"
    MBART = "mbart"


class TokenizerKind(str, enum.Enum):
    """Tokenizers implemented in `preprocessing`."""

    ESM = "esm"
    PROTT5 = "prott5"
    SMILES = "smiles"


class Capability(str, enum.Enum):
    """What a client may ask of a model; each maps to an endpoint."""

    EMBED = "embed"
    HIDDEN = "hidden"
    DECODE = "decode"
    GENERATE = "generate"
    LOGITS = "logits"
    SCORE = "score"
    LAYERS = "layers"
    """/embed's and /hidden's `layers`: the hidden states of any layer, not only the last."""
    CONTACTS = "contacts"


class GraphRole(str, enum.Enum):
    """The exported graphs a model may consist of; each is one Triton model."""

    ENCODER = "encoder"
    """(input_ids, attention_mask, pooling_mask) -> hidden_states, embeddings"""
    DECODER = "decoder"
    """one token per row per call -> the logits of each row's next token; keeps each row's key-value cache"""
    LANGUAGE_MODEL = "language_model"
    """(input_ids, attention_mask) -> the log-probabilities of the 20 amino acids at every position (masked-LM head)"""
    LAYERS = "layers"
    """as the encoder, for the layers each row names: their hidden states and embeddings"""
    CONTACTS = "contacts"
    """(input_ids, attention_mask) -> contact probabilities between residues (ESM's contact head over its attentions)"""


class Backend(str, enum.Enum):
    """The python-backend model that serves a graph on CPU: `bionemo_serving/runtimes/backends/<value>.py`."""

    STATELESS_GRAPH = "stateless_graph"
    """Runs one stateless graph on the runtime its config names; Triton's dynamic batcher merges requests."""
    STATEFUL_DECODER = "stateful_decoder"
    """Keeps every row's key-value cache between calls: one instance, no Triton batching (the service batches)."""


@dataclass(frozen=True)
class TensorSpec:
    """A Triton tensor: its name, its Triton data type and its shape without the batch axis.

    A dimension is -1 (variable), a number, or the name of a checkpoint size
    (such as "hidden_size") that the exporter fills in from the checkpoint.
    """

    name: str
    data_type: str
    dims: tuple[int | str, ...]
    doc: str
    per_layer: bool = False
    """One tensor per decoder layer, `<name>_<layer>` (ONNX graphs only): onnxruntime reads each where it lies,
    where slicing one tensor of every layer copied all of it at every step."""


class Precision(str, enum.Enum):
    """The arithmetic a target runs the graphs in; the export's parity gate has a tolerance per precision."""

    FP32 = "FP32"
    FP16 = "FP16"
    INT8 = "INT8"
    """Weights and activations in 8 bits (exporter/quantize.py), where the accuracy gate lets the graph have them."""


class Target(str, enum.Enum):
    """Where Triton runs the exported ONNX graphs; each target has its own generated config.

    `cpu` is each model's default `config.pbtxt` (the python backend running
    onnxruntime, the only backend of the tritonserver that runs here); the
    others are `configs/<value>.pbtxt` beside it, chosen with tritonserver's
    `--model-config-name`.
    """

    CPU = "cpu"
    GPU = "gpu"
    """Triton's native onnxruntime backend on KIND_GPU instances."""
    GPU_TENSORRT = "gpu-tensorrt"
    """As `gpu`, with onnxruntime's TensorRT execution accelerator at FP16."""

    @property
    def precision(self) -> Precision:
        return Precision.FP16 if self is Target.GPU_TENSORRT else Precision.FP32


TRITON_CALL_TIMEOUT_S = 60
"""tritonclient's asyncio HTTP client, which BentoML's Triton runner opens with its defaults, ends any call after
60 s (`conn_timeout`, its session's total timeout), the time the call waits in Triton's queue included. So Triton's
batcher drops a request that has waited this long in its queue (`default_queue_policy`): nobody waits for its answer.
Without it, at 650M past capacity, the stubs computed such answers for 2 to 4 minutes after 30 s of load."""

class CallPriority(enum.IntEnum):
    """Triton's priority of a call (its batcher's `priority_levels`; 1 is served first): a client's lone request
    before the calls of a client with more in flight (engine/scheduler.py), so that a flood does not keep
    another client's few requests waiting behind its own in Triton's queue."""

    LONE = 1
    SHARED = 2


@dataclass(frozen=True)
class BatchingPolicy:
    """Triton's batching and execution knobs for one model (`config.pbtxt`: `dynamic_batching`, `instance_group`)."""

    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = (8, 16, 32)
    max_queue_delay_microseconds: int = 2000
    instance_count: int = 2
    """Model instances Triton runs side by side; they overlap the python backend's own work with each other's runs."""
    intra_op_threads: int = 0
    """Threads per instance on CPU (the python backend); 0: the cores shared among the instances busy at the moment
    (runtimes.engines.CoreShare), so that a lone request runs on all of them (docs/performance.md: threads)."""
    cache_idle_seconds: int = 60
    """A stateful graph forgets a row's cache unused this long: its client went away without releasing it."""
    attention_budget: int = 1024 * 1024
    """Most rows x tokens² in one onnxruntime run of a batched graph on the python backend; a merged batch over it
    runs in pieces (1 row at 1024 tokens, 4 at 512, 64 at 128). The attention scores of one run, and with them
    onnxruntime's arena, which keeps the largest working set it has met, stay bounded (docs/reliability.md: esm2nv
    over 200 batches of the service's shapes, in-process, 0.8 GB resident instead of 6.4 growing to 14.8 GB, at the
    same tokens per second)."""

    def with_max_batch_size(self, max_batch_size: int) -> BatchingPolicy:
        """This policy for another `max_batch_size`; Triton refuses preferred sizes above it."""
        preferred = tuple(size for size in self.preferred_batch_sizes if size <= max_batch_size) or (max_batch_size,)
        return replace(self, max_batch_size=max_batch_size, preferred_batch_sizes=preferred)


@dataclass(frozen=True)
class OnnxGraph:
    """One ONNX file behind a Triton model, traced from one torch module; its tensors all have a batch axis first."""

    name: str
    """The file is `<name>.onnx`; the torch module is the graph's own (one file) or its attribute `name`."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def file(self) -> str:
        return f"{self.name}.onnx"

    def spec(self, tensor: str) -> TensorSpec:
        """The spec of an ONNX tensor name, `<name>_<layer>` for a per-layer one."""
        for spec in self.inputs + self.outputs:
            stem, _, layer = tensor.rpartition("_")
            if tensor == spec.name or (spec.per_layer and stem == spec.name and layer.isdigit()):
                return spec
        raise KeyError(tensor)


@dataclass(frozen=True)
class GraphSpec:
    """One Triton model of a served model: its role, its Triton tensors, and the ONNX files its backend runs.

    Tensor dims omit the batch axis when Triton batches the model; a stateful
    model (no Triton batching) lists whole shapes.
    """

    role: GraphRole
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    capabilities: frozenset[Capability] = frozenset()
    """What the model can answer once this graph is loaded."""
    optional: bool = False
    """Not needed to serve the model: exported where the checkpoint has what it needs (a head), and the model is
    served without it (not exported, or not loaded), less its capabilities."""
    config_sizes: tuple[str, ...] = ()
    """Checkpoint sizes the service needs that no tensor dimension carries: config parameters of these names."""
    instances: int | None = None
    """Model instances of a stateless graph; None: the model's `BatchingPolicy.instance_count`. Each instance holds
    its own copy of the weights: a graph asked for rarely keeps one."""
    timed: bool = True
    """Its runtime is chosen by timing each on the serving machine (bionemo_serving/runtimes/choice.py); a graph asked
    for rarely runs onnxruntime untimed, even where BIONEMO_RUNTIME names another: timing it would add a minute to
    every start on a new machine (esm2nv's contacts: 15.7 s a round over the timed shapes, TorchScript 10.5 of them).
    The exporter writes such a graph's ONNX file alone."""
    arena: Arena = Arena.KEPT
    """What onnxruntime's CPU arena keeps between runs: a graph asked for now and then hands it back (SHRUNK), the
    incremental decoder, whose shapes never recur, runs without one (OFF)."""
    backend: Backend = Backend.STATELESS_GRAPH
    parts: tuple[OnnxGraph, ...] = ()
    """The ONNX files a stateful backend chains; a stateless graph is one file with its Triton tensors."""

    @property
    def stateful(self) -> bool:
        return self.backend is not Backend.STATELESS_GRAPH

    @property
    def onnx_graphs(self) -> tuple[OnnxGraph, ...]:
        return self.parts or (OnnxGraph("model", self.inputs, self.outputs),)


ENCODER = GraphSpec(
    GraphRole.ENCODER,
    inputs=(
        TensorSpec("input_ids", "TYPE_INT64", (-1,), "token ids: special tokens around each residue's, then padding"),
        TensorSpec("attention_mask", "TYPE_INT64", (-1,), "1 for real tokens (special tokens included), 0 for padding"),
        TensorSpec("pooling_mask", "TYPE_INT64", (-1,), "1 where embeddings averages: the residues, or <cls> alone"),
    ),
    outputs=(
        TensorSpec("hidden_states", "TYPE_FP32", (-1, "hidden_size"), "final-layer hidden states at every position"),
        # Pooled in the graph, so that /embed moves [batch, hidden_size] through Triton, not every token's state.
        TensorSpec("embeddings", "TYPE_FP32", ("hidden_size",), "mean of hidden_states where pooling_mask is 1"),
    ),
    capabilities=frozenset({Capability.EMBED, Capability.HIDDEN}),
)
SCORED_AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
"""The amino acids whose log-probabilities the language-model graph answers, in this order."""
LANGUAGE_MODEL = GraphSpec(
    GraphRole.LANGUAGE_MODEL,
    inputs=(
        *ENCODER.inputs[:2],
        TensorSpec("positions", "TYPE_INT64", (-1,), "the token positions whose log-probabilities the row asks for"),
    ),
    outputs=(
        TensorSpec(
            "log_probs",
            "TYPE_FP32",
            (-1, len(SCORED_AMINO_ACIDS)),
            "log-softmax over the whole vocabulary at each position asked, of the SCORED_AMINO_ACIDS in order",
        ),
    ),
    capabilities=frozenset({Capability.LOGITS, Capability.SCORE}),
    optional=True,
)
KEY_VALUES = ("decoder_layers", 2, "decoder_heads", -1, "head_dim")
"""Per row: for every decoder layer, keys and values of every head at each position."""
LAYER_KEYS = ("decoder_heads", -1, "head_dim")
"""Per row: one layer's keys (or values) of every head at each position."""
DECODER = GraphSpec(
    GraphRole.DECODER,
    inputs=(
        TensorSpec("row_ids", "TYPE_INT64", (-1,), "the id under which each row's cache is kept after this call"),
        TensorSpec("parent_ids", "TYPE_INT64", (-1,), "the cache each row extends (an earlier row id), or -1 to start"),
        TensorSpec("tokens", "TYPE_INT64", (-1,), "each row's newest token: the begin token for a row that starts"),
        TensorSpec("encoder_hidden_states", "TYPE_FP32", (-1, -1, "hidden_size"), "the source of each starting row"),
        TensorSpec("encoder_mask", "TYPE_INT64", (-1, -1), "the encoder's attention_mask of each starting row"),
        # Each row gets a new id at every step (beams fork); a client's rows that a call does not continue are dropped.
        TensorSpec("released_ids", "TYPE_INT64", (-1,), "the client's rows it is done with, e.g. of finished requests"),
    ),
    outputs=(TensorSpec("logits", "TYPE_FP32", (-1, "vocab_size"), "unnormalised scores of each row's next token"),),
    capabilities=frozenset({Capability.DECODE, Capability.GENERATE}),
    backend=Backend.STATEFUL_DECODER,
    arena=Arena.OFF,
    parts=(
        OnnxGraph(
            "cross_attention",
            inputs=(TensorSpec("encoder_hidden_states", "TYPE_FP32", (-1, "hidden_size"), "one source"),),
            outputs=(TensorSpec("cross_kv", "TYPE_FP32", KEY_VALUES, "cross-attention keys and values, once per source"),),
        ),
        OnnxGraph(
            "step",
            inputs=(
                TensorSpec("token", "TYPE_INT64", (), "the newest token"),
                TensorSpec("position", "TYPE_INT64", (), "its position: the number of tokens before it"),
                TensorSpec("self_mask", "TYPE_INT64", (-1,), "1 for the tokens before it, 0 for padding"),
                TensorSpec("encoder_mask", "TYPE_INT64", (-1,), "the source's attention_mask"),
                TensorSpec("self_keys", "TYPE_FP32", LAYER_KEYS, "the tokens before it (right-padded)", per_layer=True),
                TensorSpec("self_values", "TYPE_FP32", LAYER_KEYS, "the tokens before it", per_layer=True),
                TensorSpec("cross_keys", "TYPE_FP32", LAYER_KEYS, "cross_attention's (right-padded)", per_layer=True),
                TensorSpec("cross_values", "TYPE_FP32", LAYER_KEYS, "cross_attention's", per_layer=True),
            ),
            outputs=(
                TensorSpec("logits", "TYPE_FP32", ("vocab_size",), "unnormalised scores of the next token"),
                TensorSpec("token_kv", "TYPE_FP32", ("decoder_layers", 2, "decoder_heads", 1, "head_dim"), "its own"),
            ),
        ),
    ),
)
LAYERS = GraphSpec(
    GraphRole.LAYERS,
    inputs=(
        *ENCODER.inputs,
        TensorSpec("layers", "TYPE_INT64", (-1,), "the layers to return, numbered 0 (the embeddings) to hidden_layers - 1"),
    ),
    outputs=(
        TensorSpec("layer_hidden_states", "TYPE_FP32", (-1, -1, "hidden_size"), "each layer's hidden states"),
        TensorSpec("layer_embeddings", "TYPE_FP32", (-1, "hidden_size"), "each layer's mean where pooling_mask is 1"),
    ),
    capabilities=frozenset({Capability.LAYERS}),
    optional=True,
    instances=1,
    timed=False,
    arena=Arena.SHRUNK,
    config_sizes=("hidden_layers",),
)
"""Every encoder's hidden states as transformers' output_hidden_states numbers them: the embedding layer's output,
then each layer's; a graph apart from the encoder, which /embed and /hidden without `layers` keep to themselves."""
CONTACTS = GraphSpec(
    GraphRole.CONTACTS,
    inputs=ENCODER.inputs[:2],
    outputs=(
        TensorSpec(
            "contacts",
            "TYPE_FP32",
            (-1, -1),
            "[tokens - 2, tokens - 2]: the probability that residues i and j are in contact (special tokens dropped)",
        ),
    ),
    capabilities=frozenset({Capability.CONTACTS}),
    optional=True,
    instances=1,
    timed=False,
    arena=Arena.SHRUNK,
)
PROTEIN_LANGUAGE_MODEL = (ENCODER, LANGUAGE_MODEL, LAYERS, CONTACTS)
"""ESM's graphs: a checkpoint without its masked-LM head (a bare EsmModel) is served without the language model."""


PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class TrainedDefault:
    """Weights trained in this project and shipped in it: `python -m bionemo_serving.exporter defaults` exports them as the model's
    default instead of random-init ones."""

    folder: str
    """The checkpoint folder, from the project root, with its MODEL_CARD.md and training.json."""
    origin: str
    """How they were made, as GET /models says it."""

    @property
    def path(self) -> Path:
        return PROJECT_ROOT / self.folder

    @property
    def weights(self) -> str:
        """The export's record of them (config parameter `checkpoint`), naming their card."""
        return f"{self.origin} ({self.folder}/MODEL_CARD.md)"


@dataclass(frozen=True)
class ModelDescription:
    """Name, architecture, tokenizer, limits and Triton graphs (which give its capabilities) of one model."""

    name: str
    architecture: Architecture
    tokenizer: TokenizerKind
    max_length: int
    """Most residues (proteins) or SMILES tokens one input may have."""
    default_checkpoint_config: dict[str, Any]
    """The sizes of the default checkpoint (`python -m bionemo_serving.exporter defaults`): random-init unless `trained_default`."""
    graphs: tuple[GraphSpec, ...] = (ENCODER,)
    batching: BatchingPolicy = field(default_factory=BatchingPolicy)
    summary: str = ""
    versions_served: int = 1
    """Triton serves the newest N versions side by side (`version_policy: latest`); requests pick one."""
    response_cache: bool = False
    """Triton answers repeated identical requests from its cache (needs tritonserver's --cache-config)."""
    published_sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The shapes of the published checkpoints users serve, by size ("150M"): `make bench MODEL_SIZE=150M` exports a
    random-init checkpoint of that shape (no trained weights can be had here; speed does not depend on the values)."""
    trained_default: TrainedDefault | None = None
    """Weights trained here that the defaults export; None: a random-init checkpoint of `default_checkpoint_config`."""

    def at_size(self, size: str) -> "ModelDescription":
        """This model with its default checkpoint at a published shape (`published_sizes`)."""
        if size not in self.published_sizes:
            raise KeyError(f"{self.name} has no published size {size!r}; known: {', '.join(self.published_sizes)}")
        return replace(self, default_checkpoint_config=self.published_sizes[size], trained_default=None)

    @property
    def default_weights(self) -> str:
        """What the export of its default checkpoint records as the weights' origin (config parameter `checkpoint`)."""
        return self.trained_default.weights if self.trained_default else RANDOM_INIT_WEIGHTS

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Everything the model can answer with all of its graphs loaded."""
        return frozenset().union(*(graph.capabilities for graph in self.graphs))

    def graph(self, role: GraphRole) -> GraphSpec:
        return next(graph for graph in self.graphs if graph.role is role)

    def graph_for(self, capability: Capability) -> GraphSpec:
        """The graph that gives the model `capability`."""
        return next(graph for graph in self.graphs if capability in graph.capabilities)

    def triton_name(self, role: GraphRole) -> str:
        """A model with one graph that is not optional serves it under its own name; every other graph is
        `<name>_<role>` (esm2nv and esm2nv_language_model; megamolbart_encoder and megamolbart_decoder)."""
        required = [graph for graph in self.graphs if not graph.optional]
        return self.name if required == [self.graph(role)] else f"{self.name}_{role.value}"


MODELS: dict[str, ModelDescription] = {
    description.name: description
    for description in (
        ModelDescription(
            name="esm1nv",
            architecture=Architecture.ESM1,
            tokenizer=TokenizerKind.ESM,
            graphs=PROTEIN_LANGUAGE_MODEL,
            # BioNeMo's ESM-1nv has 512 positions (seq_length), <cls> and <eos> included.
            max_length=510,
            # ESM-1 layers (learned absolute positions) at a small width.
            default_checkpoint_config={
                "hidden_size": 256,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "intermediate_size": 1024,
            },
            summary="ESM-1 protein language model (learned absolute positions), residue embeddings",
        ),
        ModelDescription(
            name="esm2nv",
            architecture=Architecture.ESM2,
            tokenizer=TokenizerKind.ESM,
            graphs=PROTEIN_LANGUAGE_MODEL,
            max_length=1022,
            # The shape of facebook/esm2_t6_8M_UR50D: the real ESM-2 layer stack
            # (rotary positions, pre-LayerNorm, token dropout) at its smallest size.
            default_checkpoint_config={
                "hidden_size": 320,
                "num_hidden_layers": 6,
                "num_attention_heads": 20,
                "intermediate_size": 1280,
            },
            # The config.json of facebook/esm2_t30_150M_UR50D and esm2_t33_650M_UR50D; 8M is the default's own.
            published_sizes={
                "8M": {"hidden_size": 320, "num_hidden_layers": 6, "num_attention_heads": 20, "intermediate_size": 1280},
                "150M": {"hidden_size": 640, "num_hidden_layers": 30, "num_attention_heads": 20, "intermediate_size": 2560},
                "650M": {"hidden_size": 1280, "num_hidden_layers": 33, "num_attention_heads": 20, "intermediate_size": 5120},
            },
            summary="ESM-2 protein language model (rotary positions), residue embeddings",
        ),
        ModelDescription(
            name="prott5nv",
            architecture=Architecture.T5_ENCODER,
            tokenizer=TokenizerKind.PROTT5,
            graphs=(ENCODER, LAYERS),
            # BioNeMo's ProtT5nv has 512 positions (seq_length), </s> included.
            max_length=511,
            # ProtT5-XL's encoder layout (relative attention buckets, ReLU
            # feed-forward, no biases) at a small width.
            default_checkpoint_config={
                "d_model": 256,
                "d_kv": 32,
                "d_ff": 1024,
                "num_layers": 4,
                "num_heads": 8,
            },
            summary="ProtT5 encoder (T5 relative attention), residue embeddings",
        ),
        ModelDescription(
            name="megamolbart",
            architecture=Architecture.MBART,
            tokenizer=TokenizerKind.SMILES,
            max_length=510,
            graphs=(ENCODER, DECODER, LAYERS),
            # MegaMolBART's pre-LayerNorm encoder-decoder with learned positions
            # (BioNeMo: 6 layers, 512 wide, 8 heads) at a smaller width.
            default_checkpoint_config={
                "d_model": 256,
                "encoder_layers": 4,
                "decoder_layers": 4,
                "encoder_attention_heads": 8,
                "decoder_attention_heads": 8,
                "encoder_ffn_dim": 1024,
                "decoder_ffn_dim": 1024,
            },
            summary="MegaMolBART SMILES encoder-decoder: embeddings, latent decoding and sampling of molecules",
            trained_default=TrainedDefault("weights/megamolbart-moses", "trained here on MOSES train"),
        ),
    )
}

DEFAULT_MODEL = "esm2nv"
"""The model a protein request runs where it names none (/embed, /score, /embed/dataframe, the client's FASTA jobs)."""
DEFAULT_MOLECULE_MODEL = "megamolbart"
"""The model that decodes and generates where a request names none (/decode, /generate, MolMIM's dialect)."""

RANDOM_INIT_WEIGHTS = "random-init default"
EXPORTS_PARAMETER = "exports"
"""A graph's config parameter recording, per version, where its weights came from and the precision it runs in, as
JSON: {"1": {"checkpoint": "random-init default", "precision": "FP32"}}. `exporter defaults` leaves alone a version
it did not write; GET /models and every answer show the precision."""


@dataclass(frozen=True)
class ExportRecord:
    """What one export wrote into one version of a graph (EXPORTS_PARAMETER)."""

    checkpoint: str
    precision: Precision = Precision.FP32

    def as_json(self) -> dict[str, str]:
        return {"checkpoint": self.checkpoint, "precision": self.precision.value}


def recorded_exports(parameters: Any) -> dict[int, ExportRecord]:
    """The exports a config's `parameters` (a ModelConfig's map) record by version; for a config written before
    EXPORTS_PARAMETER was, none: its `checkpoint` parameter is all it says, for the version it does not name."""
    if EXPORTS_PARAMETER not in parameters:
        return {}
    return {
        int(version): ExportRecord(record["checkpoint"], Precision(record["precision"]))
        for version, record in json.loads(parameters[EXPORTS_PARAMETER].string_value).items()
    }
"""What a config's `checkpoint` parameter says of the weights `python -m bionemo_serving.exporter defaults` exported: the random-init
default checkpoint (default_checkpoint_config). A config of any other export names its checkpoint's file or folder;
GET /models shows it as the model's `weights`."""
