"""Export an encoder graph with every attention as onnxruntime's fused `com.microsoft.MultiHeadAttention` kernel.

torch.onnx writes `scaled_dot_product_attention` as MatMul, Add, Softmax, MatMul over [batch, heads, L, L],
which onnxruntime runs op by op, and its transformer optimizer fuses none of it in these graphs. Here a
symbolic registered only for the duration of the trace writes each call as one contrib node instead. The
module must run its attention through sdpa: `load_for_export(..., attention="sdpa")`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import torch
# The legacy (TorchScript) exporter's symbolic helpers: torch.onnx.symbolic_helper re-exports only some of them.
from torch.onnx._internal.torchscript_exporter import _type_utils, jit_utils, symbolic_helper

from bionemo_serving.exporter.errors import ExportError
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.exporter.onnx_export import ONNX_OPSET, export_onnx, external_data_path
from bionemo_serving.model_catalog import OnnxGraph

SDPA = "aten::scaled_dot_product_attention"
FUSED_OP, FUSED_DOMAIN = "MultiHeadAttention", "com.microsoft"
UNFUSED_OP = "Softmax"
"""Only attention computed op by op writes it in these graphs."""


def export_fused_attention_onnx(
    module: torch.nn.Module, graph: OnnxGraph, sample: GraphInputs, path: Path, external_data: bool = False
) -> None:
    """`bionemo_serving.exporter.onnx_export.export_onnx`, every sdpa call written as one MultiHeadAttention node.

    Raises `ExportError`, and leaves nothing at `path`, where the graph still computes attention op by op
    (the module's attention is not sdpa): an unfused graph must not pass for a fused one.
    """
    with _sdpa_as_multi_head_attention():
        export_onnx(module, graph, sample, path, external_data)
    ops = [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]
    if FUSED_OP not in ops or UNFUSED_OP in ops:
        path.unlink()
        external_data_path(path).unlink(missing_ok=True)
        raise ExportError(
            f"{path}: {ops.count(FUSED_OP)} {FUSED_OP} and {ops.count(UNFUSED_OP)} {UNFUSED_OP} nodes; the module's "
            "attention does not run through scaled_dot_product_attention (load_for_export(..., attention='sdpa'))"
        )


@contextmanager
def _sdpa_as_multi_head_attention() -> Iterator[None]:
    """Override the exporter's sdpa symbolic while the trace runs; the default comes back afterwards."""
    torch.onnx.register_custom_op_symbolic(SDPA, _multi_head_attention, ONNX_OPSET)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic(SDPA, ONNX_OPSET)


@symbolic_helper.parse_args("v", "v", "v", "v", "f", "b", "v", "b")
def _multi_head_attention(
    g: jit_utils.GraphContext,
    query: torch._C.Value,
    key: torch._C.Value,
    value: torch._C.Value,
    attn_mask: torch._C.Value,
    dropout_p: float,
    is_causal: bool,
    scale: torch._C.Value,
    enable_gqa: bool,
) -> torch._C.Value:
    """sdpa([B, H, S, D] query, key and value, additive or boolean mask) -> [B, H, S, D], as MultiHeadAttention.

    The contrib op takes the query as [B, S, H*D] and keys and values as they are ([B, H, T, D], "BNSH"),
    and adds the mask as `attention_bias`; a boolean mask becomes 0 where attended, the dtype's lowest
    value elsewhere (every row attends to at least its own real tokens, so no row is all masked).
    """
    if is_causal or enable_gqa or dropout_p:
        raise ExportError(f"{FUSED_OP}: sdpa with is_causal, enable_gqa or dropout is not written as {FUSED_OP}")
    heads = g.original_node.output().type().sizes()[1]  # as traced: the exporter's own types lose the sizes here
    query_bsd = g.op("Reshape", g.op("Transpose", query, perm_i=[0, 2, 1, 3]), _shape(g, [0, 0, -1]))
    absent = symbolic_helper._optional_input_placeholder_tensor(g)
    scale_attribute = {} if symbolic_helper._is_none(scale) else {"scale_f": symbolic_helper._get_const(scale, "f", "")}
    attended_bsd = g.op(
        f"{FUSED_DOMAIN}::{FUSED_OP}",
        query_bsd,
        key,
        value,
        absent,  # bias of the projections: already added
        absent,  # key_padding_mask: the padding is in the mask
        absent if symbolic_helper._is_none(attn_mask) else _additive(g, attn_mask, query),
        num_heads_i=heads,
        **scale_attribute,
    )
    return g.op("Transpose", g.op("Reshape", attended_bsd, _shape(g, [0, 0, heads, -1])), perm_i=[0, 2, 1, 3])


def _additive(g: jit_utils.GraphContext, mask: torch._C.Value, query: torch._C.Value) -> torch._C.Value:
    """sdpa's mask as the bias added to the scores: a boolean one as 0 where attended, the lowest float elsewhere."""
    if _type_utils.JitScalarType.from_value(mask) is not _type_utils.JitScalarType.BOOL:
        return mask
    dtype = _type_utils.JitScalarType.from_value(query).dtype()
    attended, masked = (torch.tensor(bias, dtype=dtype) for bias in (0, torch.finfo(dtype).min))
    return g.op("Where", mask, g.op("Constant", value_t=attended), g.op("Constant", value_t=masked))


def _shape(g: jit_utils.GraphContext, dims: list[int]) -> torch._C.Value:
    return g.op("Constant", value_t=torch.tensor(dims, dtype=torch.int64))
