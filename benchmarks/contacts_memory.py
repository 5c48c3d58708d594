"""The contacts graph's memory at a real checkpoint's depth: each layer's maps folded in as it runs, or every layer's
stacked first as transformers' `predict_contacts` holds them.

    python -m benchmarks.contacts_memory [--layers 33] [--residues 1022] [--threads 2]

Builds a random-init esm2nv of `--layers` layers (ESM-2 650M has 33, and 20 heads like esm2nv; the width stays
esm2nv's 320, which the attention maps do not depend on), exports its contacts graph both ways with the exporter's
own ONNX export, and runs each on onnxruntime (its arena on, as the backend runs it) in a fresh process for one
protein of `--residues`: resident MiB after the run, and its seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil
import torch

from exporter.architectures import create_default_checkpoint, load_for_export
from exporter.graph_inputs import trace_inputs
from exporter.onnx_export import export_onnx
from model_catalog import CONTACTS, MODELS, GraphRole
from preprocessing.vocabularies import ESM_ALPHABET


class StackedContacts(torch.nn.Module):
    """The graph before: transformers' predict_contacts, every layer's maps stacked before the head."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder.predict_contacts(input_ids, attention_mask)


def export_both(layers: int, folder: Path) -> dict[str, Path]:
    description = MODELS["esm2nv"]
    description = replace(
        description, default_checkpoint_config=description.default_checkpoint_config | {"num_hidden_layers": layers}
    )
    create_default_checkpoint(description, folder / "checkpoint", seed=0)
    graph = load_for_export(description, folder / "checkpoint", attention="eager").graphs[GraphRole.CONTACTS]
    (part,) = CONTACTS.onnx_graphs
    sample = trace_inputs(description, GraphRole.CONTACTS, {})
    modules = {"layer by layer": graph, "stacked": StackedContacts(graph.encoder)}
    files = {name: folder / f"{name.replace(' ', '_')}.onnx" for name in modules}
    for name, module in modules.items():
        export_onnx(module, part, sample, files[name])
    return files


def run_one(path: Path, residues: int, threads: int) -> dict[str, float]:
    """In this process: one protein of `residues` through the graph; resident MiB after, and seconds."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    residue_ids = np.random.default_rng(0).integers(4, 24, size=residues)
    ids = np.array([[ESM_ALPHABET.index("<cls>"), *residue_ids, ESM_ALPHABET.index("<eos>")]], dtype=np.int64)
    started = time.perf_counter()
    session.run(["contacts"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    return {"seconds": time.perf_counter() - started, "resident_mib": psutil.Process().memory_info().rss / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=33)
    parser.add_argument("--residues", type=int, default=1022)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the child's work
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.residues, args.threads)))
        return 0
    with tempfile.TemporaryDirectory(prefix="contacts-memory-") as scratch:
        files = export_both(args.layers, Path(scratch))
        print(f"contacts graph, {args.layers} layers, one protein of {args.residues} residues, onnxruntime, "
              f"{args.threads} threads\n\n| graph | resident MiB after | seconds |\n|---|---:|---:|")  # fmt: skip
        for name, path in files.items():
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.contacts_memory", "--one", str(path), "--residues",
                 str(args.residues), "--threads", str(args.threads)],
                capture_output=True, text=True, timeout=3600, check=True,
            )  # fmt: skip
            result = json.loads(child.stdout)
            print(f"| {name} | {result['resident_mib']:,.0f} | {result['seconds']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
