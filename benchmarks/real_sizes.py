"""ESM-2 at a published size (150M, 650M), in-process and side by side on esm.cpp's own two workloads, on the same
weights (issue 38, item 4).

    python -m benchmarks.real_sizes --size 150M --fp32 model_repository-150M --int8 model_repository-150M-int8

`make bench MODEL_SIZE=150M` exports both repositories first (`exporter defaults --size`). Contenders, each on every
core of this machine, each given the same batches (the workload sorted by length, BATCH sequences a call, padded to
the longest of the call; esm-cpp takes its rows unpadded):
- this project's encoder graph, FP32, on each runtime the export wrote (onnxruntime, onnxruntime-fused, OpenVINO):
  the fastest is what the start-up timings would pick;
- its INT8 graph (exporter/quantize.py) on onnxruntime, where the export's gate let it be INT8, and the INT8
  export's OpenVINO file (NNCF, exporter/quantize_openvino.py) where its gate let it be written;
- transformers' EsmModel, eager torch with sdpa;
- esm-cpp 0.2.1 FP32 and INT8 (W8A8, SmoothQuant) on the same weights (benchmarks/esm_cpp.py).
Every contender is checked before it is timed: FP32 embeddings within 1e-3 of transformers', INT8 embeddings at
cosine 0.99 or more; esm-cpp's logits against transformers' (FP32 within 1e-3, INT8 top-1 agreement). Where the INT8
export's gate kept the encoder FP32, the whole encoder is quantized here the same way and timed as "not served". Each
repeat runs the contenders in turn; the best time counts. Every contender runs the short workload (8 x 256); the long
one is run by transformers, the fastest FP32 runtime, INT8 and esm-cpp. On a CPU without AVX-512, esm-cpp 0.2.1 runs
scalar kernels on one thread: its comparison does not count there, so it runs the short workload once, and above
150M not at all (a 650M run of 8 x 256 would take some 12 minutes), and the report says so. `--workloads 8x256` runs
the short workload alone (650M: about 20 s a call of 16 proteins in FP32). The rates are held to this CPU's peaks,
measured the same way: FP32 to torch's float32 matrix product, INT8 to onnxruntime's int8 one of the served recipe
(benchmarks/flops.py).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.flops import EncoderShape, int8_matmul_gops, matmul_gflops
from benchmarks.workload import protein
from exporter.quantize import Recipe, has_vnni, quantize_onnx, worst_cosine
from exporter.triton_config import read_exports
from model_catalog import MODELS, Precision
from preprocessing import tokenizer_for
from runtimes.choice import cpu_model
from runtimes.engines import Runtime, open_engine

_LENGTHS = random.Random(38)
WORKLOADS = {
    "8 x 256": [256] * 8,
    "256 x mean 126": [max(20, min(1022, int(_LENGTHS.lognormvariate(4.75, 0.45)))) for _ in range(256)],
}
"""esm.cpp's benchmarks: 256 proteins of variable length (mean about 126 residues), and 8 of 256 residues."""
BATCH = 16
SEED = 38
FP32_RUNTIMES = (Runtime.ONNXRUNTIME, Runtime.ONNXRUNTIME_FUSED, Runtime.OPENVINO)
SHORT, LONG = "8 x 256", "256 x mean 126"
TRANSFORMERS, INT8 = "transformers (eager, sdpa)", "this INT8 (onnxruntime)"
INT8_OPENVINO = "this INT8 (openvino, NNCF)"
ESM_CPP_SCALAR_UP_TO = 150_000_000
"""Without AVX-512, esm-cpp is timed once at sizes up to this many parameters: beyond, its scalar kernels take longer
than the rest of the run."""
TARGETS = {"INT8 / esm-cpp INT8": 1.0, "FP32 / transformers": 1.5}

Embed = Callable[[list[np.ndarray]], np.ndarray]
"""Token id rows (specials included) of one call to [rows, ...] outputs."""


@dataclass(frozen=True)
class Contender:
    name: str
    run: Embed
    check: str
    """How its outputs were held to transformers', or why it is not timed (starting with "not timed")."""


def has_avx512() -> bool:
    return "avx512f" in Path("/proc/cpuinfo").read_text().split()


def batches(lengths: list[int], tokenizer) -> list[list[np.ndarray]]:  # noqa: ANN001
    rng = random.Random(SEED)
    rows = sorted((tokenizer.encode(protein(rng, length)) for length in lengths), key=len)
    return [rows[start : start + BATCH] for start in range(0, len(rows), BATCH)]


def graph_contender(name: str, runtime: Runtime, path: Path, tokenizer) -> Embed:  # noqa: ANN001
    engine = open_engine(runtime, path)
    threads = len(os.sched_getaffinity(0))

    def embed(rows: list[np.ndarray]) -> np.ndarray:
        return engine.run(["embeddings"], tokenizer.pad(rows).model_inputs(), threads)[0]

    return embed


def transformers_contender(checkpoint: Path, tokenizer) -> tuple[Embed, Callable]:  # noqa: ANN001
    from transformers import EsmForMaskedLM

    masked_lm = EsmForMaskedLM.from_pretrained(checkpoint, attn_implementation="sdpa").eval()

    @torch.inference_mode()
    def outputs(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        feeds = tokenizer.pad(rows).model_inputs()
        mask = torch.from_numpy(feeds["attention_mask"])
        hidden = masked_lm.esm(input_ids=torch.from_numpy(feeds["input_ids"]), attention_mask=mask).last_hidden_state
        weights = torch.from_numpy(feeds["pooling_mask"]).unsqueeze(-1).float()
        return ((hidden * weights).sum(1) / weights.sum(1)).numpy(), masked_lm.lm_head(hidden).numpy()

    return (lambda rows: outputs(rows)[0]), outputs


def esm_cpp_contender(weights: Path, int8: bool) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    import esm_cpp

    model = esm_cpp.Model.load_from_safetensors(str(weights))
    if int8:
        model.quantize_weights()
    return lambda rows: model.forward_batch([row.astype(np.int32) for row in rows])


def contenders(size: str, checkpoint: Path, fp32: Path, int8: Path | None, tokenizer, probe) -> list[Contender]:  # noqa: ANN001
    """Every contender, checked on `probe` (one call's rows) against transformers."""
    from transformers import EsmForMaskedLM

    from benchmarks.esm_cpp import convert

    embed, outputs = transformers_contender(checkpoint, tokenizer)
    expected, logits = outputs(probe)
    found = [Contender(TRANSFORMERS, embed, "the reference")]
    for runtime in FP32_RUNTIMES:
        path = fp32 / "esm2nv" / "1" / runtime.file("model")
        if not path.is_file():
            continue
        run = graph_contender(runtime.value, runtime, path, tokenizer)
        diff = float(np.abs(run(probe) - expected).max())
        check = f"max |diff| {diff:.1e}" if diff <= 1e-3 else f"not timed: max |diff| {diff:.1e} > 1e-3"
        found.append(Contender(f"this FP32 ({runtime.value})", run, check))
    if int8 is not None:
        path, name = int8 / "esm2nv" / "1" / "model.onnx", INT8
        if read_exports(int8 / "esm2nv")[0][1].precision is not Precision.INT8:  # the gate kept it FP32
            path, name = Path(tempfile.mkdtemp(prefix="int8-")) / "model.onnx", f"{INT8}, not served: gate failed"
            quantize_onnx(fp32 / "esm2nv" / "1" / "model.onnx", path, Recipe(reduce_range=not has_vnni()))
        int8_files = [(name, Runtime.ONNXRUNTIME, path)]
        if (openvino := int8 / "esm2nv" / "1" / Runtime.OPENVINO.file("model")).is_file() and name == INT8:
            int8_files.append((INT8_OPENVINO, Runtime.OPENVINO, openvino))
        for name, runtime, path in int8_files:
            run = graph_contender(name, runtime, path, tokenizer)
            worst = worst_cosine(run(probe), expected)
            check = f"cosine {worst:.5f}" if worst >= 0.99 else f"not timed: cosine {worst:.5f} < 0.99"
            found.append(Contender(name, run, check))
    if not has_avx512() and parameters(checkpoint) > ESM_CPP_SCALAR_UP_TO:
        return found  # not timed: scalar kernels on one thread, see the module's docstring
    weights = Path(tempfile.mkdtemp(prefix=f"esm-cpp-{size}-"))
    convert(EsmForMaskedLM.from_pretrained(checkpoint).eval(), weights)
    for quantized in (False, True):
        run = esm_cpp_contender(weights / "model.safetensors", quantized)
        got = run(probe)
        if quantized:
            agree = np.mean([(g.argmax(-1) == e[: len(g)].argmax(-1)).mean() for g, e in zip(got, logits)])
            check = f"top-1 agreement {agree:.3f}"
        else:
            diff = max(float(np.abs(g - e[: len(g)]).max()) for g, e in zip(got, logits))
            check = f"max |logit diff| {diff:.1e}" if diff <= 1e-3 else f"not timed: max |logit diff| {diff:.1e} > 1e-3"
        found.append(Contender(f"esm-cpp {'INT8' if quantized else 'FP32'}", run, check))
    return found


def parameters(checkpoint: Path) -> int:
    """About how many parameters the checkpoint has: its layers' matrices and the token embeddings."""
    from transformers import EsmConfig

    config = EsmConfig.from_pretrained(checkpoint)
    shape = EncoderShape.from_checkpoint(checkpoint)
    return shape.layers * shape.matmul_weights_per_layer + config.vocab_size * shape.hidden


def served_recipe(path: Path) -> Recipe:
    """The recipe of an INT8 ONNX file, as far as its kernels go: uint8 weights or int8 ones (7 bits without VNNI)."""
    import onnx

    tensors = onnx.load(str(path), load_external_data=False).graph.initializer
    unsigned = any(tensor.data_type == onnx.TensorProto.UINT8 and tensor.name.endswith("_quantized") for tensor in tensors)
    return Recipe(unsigned_weights=True) if unsigned else Recipe(reduce_range=not has_vnni())


def fastest_fp32(found: list[Contender], best: dict[tuple[str, str], float]) -> Contender:
    """The FP32 runtime the start-up timings would pick: the fastest on the short workload."""
    return min((c for c in found if c.name.startswith("this FP32")), key=lambda c: best[c.name, SHORT])


def timed(contender: Contender, calls: list[list[np.ndarray]]) -> float:
    started = time.perf_counter()
    for rows in calls:
        contender.run(rows)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", required=True, choices=sorted(MODELS["esm2nv"].published_sizes))
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    parser.add_argument("--fp32", type=Path, required=True, help="the FP32 export's repository")
    parser.add_argument("--int8", type=Path, help="the INT8 export's repository")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workloads", choices=("both", "8x256"), default="both")
    args = parser.parse_args(argv)

    description = MODELS["esm2nv"]
    tokenizer = tokenizer_for(description)
    checkpoint = args.checkpoints / f"esm2nv-{args.size}"
    calls = {name: batches(lengths, tokenizer) for name, lengths in WORKLOADS.items()}
    probe = calls[LONG][0]  # the shortest: esm-cpp without AVX-512 checks it on one thread
    if args.workloads == "8x256":
        del calls[LONG]
    found = contenders(args.size, checkpoint, args.fp32, args.int8, tokenizer, probe)
    best = {(contender.name, workload): float("inf") for contender in found for workload in calls}
    counted = has_avx512()
    for workload in calls:
        if workload == LONG:  # the long workload: the FP32 runtime the timings would pick, not its rivals
            pick = fastest_fp32(found, best)
            found_here = [c for c in found if not c.name.startswith("this FP32") or c is pick]
        else:
            found_here = found
        for repeat in range(args.repeats):
            for contender in found_here if repeat % 2 == 0 else found_here[::-1]:
                if contender.check.startswith("not timed"):
                    continue
                if contender.name.startswith("esm-cpp") and not counted and (workload == LONG or repeat):
                    continue  # scalar kernels on one thread: once, on the short workload
                contender.run(calls[workload][0])  # warm: the first call of a shape prepares kernels
                elapsed = timed(contender, calls[workload])
                best[contender.name, workload] = min(best[contender.name, workload], elapsed)
                print(f"{workload}, {contender.name}: {elapsed:.2f} s", file=sys.stderr, flush=True)

    shape = EncoderShape.from_checkpoint(checkpoint)
    peak = matmul_gflops()
    int8_name = next((contender.name for contender in found if contender.name.startswith(INT8)), None)
    int8_peak = int8_matmul_gops(served_recipe(args.int8 / "esm2nv" / "1" / "model.onnx")) if int8_name else None
    print(f"# esm2nv {args.size} in-process, {cpu_model()}, {len(os.sched_getaffinity(0))} cores, "
          f"AVX-512: {'yes' if has_avx512() else 'no'}, VNNI: {'yes' if has_vnni() else 'no'}; "
          f"torch float32 matmul peak {peak:.0f} GFLOP/s"
          + (f", onnxruntime int8 matmul peak {int8_peak:.0f} GOP/s" if int8_peak else ""))  # fmt: skip
    if not has_avx512():
        esm_cpp_run = "" if parameters(checkpoint) <= ESM_CPP_SCALAR_UP_TO else " (not timed at this size)"
        print(f"# no AVX-512: esm-cpp 0.2.1 runs scalar kernels on one thread here{esm_cpp_run}; its comparison does not count")
    header = "| contender | check | " + " | ".join(f"{name} (s)" for name in calls) + " | GFLOP/s (8 x 256) |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    flops = {
        name: shape.flops(sum(len(row) for rows in batched for row in rows), sum(len(row) ** 2 for rows in batched for row in rows))
        for name, batched in calls.items()
    }  # fmt: skip
    for contender in found:
        seconds = [best[contender.name, workload] for workload in calls]
        cells = " | ".join(f"{value:.2f}" if value < float("inf") else "-" for value in seconds)
        rate = flops[SHORT] / best[contender.name, SHORT] / 1e9
        print(f"| {contender.name} | {contender.check} | {cells} | {rate:.0f} |")
    pick = fastest_fp32(found, best)
    for workload in calls:
        ratios = [
            f"FP32 ({pick.name}) / transformers {best[TRANSFORMERS, workload] / best[pick.name, workload]:.2f}x (target 1.5x)",
            f"FP32 share of the matmul peak {flops[workload] / best[pick.name, workload] / 1e9 / peak:.0%} (target 85 %)",
        ]
        if int8_name and best[int8_name, workload] < float("inf"):
            ratios.append(f"INT8 / FP32 {best[pick.name, workload] / best[int8_name, workload]:.2f}x")
            ratios.append(f"INT8 share of the int8 peak {flops[workload] / best[int8_name, workload] / 1e9 / int8_peak:.0%}")
            if best.get(("esm-cpp INT8", workload), float("inf")) < float("inf"):
                ratio = best["esm-cpp INT8", workload] / best[int8_name, workload]
                ratios.append(f"INT8 / esm-cpp INT8 {ratio:.2f}x (target 1.0x{'' if counted else ': does not count, no AVX-512'})")
        print(f"- {workload}: " + "; ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
