"""One weights file per exported model version, read by every ONNX file of its graphs.

Each head graph of a model (language model, layers, contacts) holds the whole
encoder again, and Triton runs each graph's instances in stubs of their own:
esm2nv at 150M held its weights 12.6 times over (docs/performance.md). So every
tensor of every ONNX file of one export, the fused-attention variants and INT8
graphs included, is written once into `model.weights` (ONNX external data, the same
bytes once whichever graphs name them), and that file is hardlinked into each
graph's version folder: one inode, so the page cache holds it once for every
stub that maps it. Each tensor starts at a multiple of ALIGNMENT, which is what
lets onnxruntime map it where it lies instead of reading it into its heap
(bionemo_serving/runtimes/engines.py says when the engine keeps it there).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from bionemo_serving.runtimes.engines import SHARED_WEIGHTS

ALIGNMENT = 64 * 1024
"""Where each tensor starts: onnxruntime maps external data in place at offsets aligned to the allocation granularity
(4 KiB on Linux, 64 KiB on Windows)."""
INLINE_BELOW = 1024
"""Bytes under which a tensor stays inside its graph (biases of the contact head, shape constants): nothing to share."""


@dataclass(frozen=True)
class SharedWeights:
    path: Path
    """The file in the first graph's folder; each other graph's folder has a link to it of the same name."""
    bytes: int
    tensors: int
    """Distinct tensors in it."""
    named_bytes: int
    """What the ONNX files' tensors add up to, each file counted alone: what they held before sharing."""
    linked: int
    """Folders holding a hardlink of it (the others hold a copy: their filesystem would not link)."""

    def __str__(self) -> str:
        return (
            f"weights: {self.path.name}, {self.bytes / 2**30:.2f} GiB, {self.tensors} tensors, read by every ONNX file "
            f"of the version ({self.named_bytes / 2**30:.2f} GiB as separate files); "
            f"the {self.linked} other graph folder(s) link to it"
        )


def share_weights(version_dirs: Sequence[Path]) -> SharedWeights:
    """Move the tensors of every `*.onnx` file in `version_dirs` (one model's graphs, one version) into one
    `model.weights` file in the first folder, linked into the others; the files they lay in before are removed."""
    target = version_dirs[0] / SHARED_WEIGHTS
    offsets: dict[bytes, int] = {}
    replaced: set[Path] = set()
    named = 0
    with target.open("wb") as weights:
        for graph_path in sorted(path for folder in version_dirs for path in folder.glob("*.onnx")):
            graph = onnx.load(str(graph_path), load_external_data=False)
            for tensor in graph.graph.initializer:
                data, source = _tensor_bytes(tensor, graph_path.parent)
                if source is not None:
                    replaced.add(source)
                if data is None:
                    continue  # values in typed fields (float_data, ...): small constants, left where they are
                if len(data) < INLINE_BELOW:
                    _inline(tensor, data)
                    continue
                named += len(data)
                digest = hashlib.blake2b(data, digest_size=32).digest()
                if digest not in offsets:
                    weights.write(b"\0" * (-weights.tell() % ALIGNMENT))
                    offsets[digest] = weights.tell()
                    weights.write(data)
                _point(tensor, offsets[digest], len(data))
            onnx.save_model(graph, str(graph_path))
    for source in replaced:  # the traced graphs' own external data files
        source.unlink(missing_ok=True)
    target.chmod(0o644)  # Triton may run as another user
    linked = 0
    for folder in version_dirs[1:]:
        (folder / SHARED_WEIGHTS).unlink(missing_ok=True)
        try:
            os.link(target, folder / SHARED_WEIGHTS)
            linked += 1
        except OSError:  # another filesystem: a copy, served right but mapped apart
            shutil.copyfile(target, folder / SHARED_WEIGHTS)
    return SharedWeights(target, target.stat().st_size, len(offsets), named, linked)


def _tensor_bytes(tensor: onnx.TensorProto, folder: Path) -> tuple[bytes | None, Path | None]:
    """A tensor's bytes as ONNX lays them out, and the external file they come from, if any."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return (tensor.raw_data if tensor.HasField("raw_data") else None), None
    entries = {entry.key: entry.value for entry in tensor.external_data}
    source = folder / entries["location"]
    with source.open("rb") as file:
        file.seek(int(entries.get("offset", 0)))
        data = file.read(int(entries["length"])) if "length" in entries else file.read()
    return data, source


def _inline(tensor: onnx.TensorProto, data: bytes) -> None:
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = data


def _point(tensor: onnx.TensorProto, offset: int, length: int) -> None:
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", SHARED_WEIGHTS), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
