"""esm2nv's graphs at a published shape on CUDA in FP32, TF32, FP16 and BF16: parity against transformers on the CPU,
and tokens/s at 8 x 300.

The GPU targets serve the ONNX files on onnxruntime's CUDA provider (`operations/tools/gpu_gate.py` checks those). A GPU host
may have no onnxruntime-gpu (nor room to carry its wheel): this check then runs the modules the ONNX files are traced
from (`bionemo_serving.exporter.exportable`'s EncoderGraph and LanguageModelGraph) in torch, and says the ONNX path was not run.
The reference is transformers' EsmForMaskedLM on the CPU in FP32, eager attention: another device, another attention.

    python -m benchmarks.gpu_check --size 650M --out gpu-check.json      # on the GPU host, about 2 minutes
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bionemo_serving.exporter.exportable import ESM_COMMON, ESM_POSITIONS, EncoderGraph, LanguageModelGraph
from bionemo_serving.model_catalog import MODELS, SCORED_AMINO_ACIDS
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET

PARITY_LENGTHS = (300, 37, 180, 254, 12, 300, 99, 141)
"""Mixed lengths, padded to the longest, as the service batches them."""
MASKED_SHARE = 0.1
THROUGHPUT_SHAPES = ((8, 300), (64, 300))
"""esm.cpp's 8 x 256 workload at the issue's 300 residues; 64 rows show where the card saturates."""
PRECISIONS: dict[str, tuple[torch.dtype, bool]] = {
    "FP32": (torch.float32, False),
    "TF32": (torch.float32, True),
    "FP16": (torch.float16, False),
    "BF16": (torch.bfloat16, False),
}
"""Name: (weights' and activations' dtype, whether float32 matmuls may run in TF32)."""


def batch(lengths: tuple[int, ...], seed: int, masked_share: float = 0.0) -> dict[str, torch.Tensor]:
    """The service's tokenization of random proteins of `lengths`, `masked_share` of their residues `<mask>`:
    token ids, the attention mask and the pooling mask (residues alone), padded to the longest."""
    tokenizer = tokenizer_for(MODELS["esm2nv"])
    rng = np.random.default_rng(seed)
    rows = []
    for length in lengths:
        ids = tokenizer.encode("".join(rng.choice(list(SCORED_AMINO_ACIDS), size=length)))
        ids[np.flatnonzero(rng.random(length) < masked_share) + len(tokenizer.prefix_ids)] = tokenizer.mask_id
        rows.append(ids)
    return {name: torch.from_numpy(array) for name, array in tokenizer.pad(rows).model_inputs().items()}


def reference(masked_lm: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' own answer on the CPU in FP32: final hidden states, their residue means, and log-probs."""
    with torch.inference_mode():
        out = masked_lm(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], output_hidden_states=True
        )
    hidden = out.hidden_states[-1]
    weights = inputs["pooling_mask"].unsqueeze(-1).float()
    columns = [ESM_ALPHABET.index(letter) for letter in SCORED_AMINO_ACIDS]
    return {
        "hidden_states": hidden,
        "embeddings": (hidden * weights).sum(1) / weights.sum(1),
        "log_probs": torch.log_softmax(out.logits, dim=-1)[..., columns],
    }


def served(graphs: tuple[EncoderGraph, LanguageModelGraph], inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder and language-model graphs' answers on their device, as float32 on the CPU."""
    encoder, language_model = graphs
    device = next(encoder.parameters()).device
    on = {name: tensor.to(device) for name, tensor in inputs.items()}
    positions = torch.arange(on["input_ids"].shape[1], device=device).expand(on["input_ids"].shape[0], -1)
    with torch.inference_mode():
        hidden, embeddings = encoder(on["input_ids"], on["attention_mask"], on["pooling_mask"])
        log_probs = language_model(on["input_ids"], on["attention_mask"], positions)
    return {
        "hidden_states": hidden.float().cpu(),
        "embeddings": embeddings.float().cpu(),
        "log_probs": log_probs.float().cpu(),
    }


def parity(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor], attention: torch.Tensor) -> dict[str, float]:
    """Worst-case agreement at the tokens that count (padding excluded)."""
    real = attention.bool()
    cosine = torch.nn.functional.cosine_similarity(got["embeddings"], expected["embeddings"], dim=-1)
    top = (got["log_probs"].argmax(-1) == expected["log_probs"].argmax(-1))[real]
    return {
        "hidden_states_max_abs": (got["hidden_states"] - expected["hidden_states"])[real].abs().max().item(),
        "embeddings_max_abs": (got["embeddings"] - expected["embeddings"]).abs().max().item(),
        "embeddings_min_cosine": cosine.min().item(),
        "log_probs_max_abs": (got["log_probs"] - expected["log_probs"])[real].abs().max().item(),
        "top1_agreement": top.float().mean().item(),
    }


def tokens_per_second(encoder: EncoderGraph, rows: int, residues: int, seconds: float) -> float:
    """The encoder graph's tokens (specials included) per second at `rows` x `residues`, after warm-up."""
    device = next(encoder.parameters()).device
    inputs = {name: tensor.to(device) for name, tensor in batch((residues,) * rows, seed=1).items()}
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        for _ in range(3):
            encoder(inputs["input_ids"], inputs["attention_mask"], inputs["pooling_mask"])
        synchronize()
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            encoder(inputs["input_ids"], inputs["attention_mask"], inputs["pooling_mask"])
            calls += 1
            synchronize()
        elapsed = time.perf_counter() - start
    return calls * rows * (residues + 2) / elapsed


def onnx_on_cuda() -> str:
    """Whether the served path (ONNX on onnxruntime's CUDA provider) can run here, and if not, why."""
    try:
        import onnxruntime
    except ImportError:
        return "not run: onnxruntime is not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return f"not run: onnxruntime {onnxruntime.__version__} here has no CUDA provider (onnxruntime-gpu missing)"
    return "available: run operations/tools/gpu_gate.py check on an exported repository"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="650M", choices=sorted(MODELS["esm2nv"].published_sizes))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed per precision and shape")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from transformers import EsmConfig, EsmForMaskedLM

    description = MODELS["esm2nv"].at_size(args.size)
    config = EsmConfig(
        **ESM_COMMON, **ESM_POSITIONS[description.architecture], **description.default_checkpoint_config
    )
    torch.manual_seed(0)
    started = time.perf_counter()
    cpu_model = EsmForMaskedLM(config).eval()
    cpu_model.set_attn_implementation("eager")
    built = time.perf_counter() - started
    inputs = batch(PARITY_LENGTHS, seed=0, masked_share=MASKED_SHARE)
    expected = reference(cpu_model, inputs)
    parameters = sum(parameter.numel() for parameter in cpu_model.parameters())

    report: dict[str, Any] = {
        "size": args.size,
        "parameters": parameters,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "build_seconds": round(built, 1),
        "onnx_on_cuda": onnx_on_cuda(),
        "precisions": {},
    }
    print(json.dumps({key: value for key, value in report.items() if key != "precisions"}), flush=True)
    for name, (dtype, tf32) in PRECISIONS.items():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        model = EsmForMaskedLM(config).eval()
        model.load_state_dict(cpu_model.state_dict())
        model.set_attn_implementation("sdpa")  # the attention the ONNX files are traced with
        encoder, language_model = EncoderGraph(model.esm), LanguageModelGraph(model)
        graphs = (encoder.to(args.device, dtype).eval(), language_model.to(args.device, dtype).eval())
        figures: dict[str, Any] = parity(expected, served(graphs, inputs), inputs["attention_mask"])
        for rows, residues in THROUGHPUT_SHAPES:
            figures[f"tokens_per_s_{rows}x{residues}"] = round(tokens_per_second(graphs[0], rows, residues, args.seconds))
        report["precisions"][name] = figures
        print(name, json.dumps(figures), flush=True)
        del model, graphs
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
