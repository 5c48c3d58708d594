"""ESM-2 at a size (8M, the default's own, or a published one: 150M, 650M), in-process and side by side on esm.cpp's
own two workloads, on the same weights (issue 38, item 4); its JSON, its targets.

    python -m benchmarks.real_sizes [--size 8M] [--fp32 model_repository] [--int8 REPOSITORY] [--repeats 5]
    python -m benchmarks.real_sizes --render benchmarks/results/real-sizes-8M-<cpu>.json

`make bench MODEL_SIZE=150M` exports both repositories first (`exporter defaults --size`). Contenders, each on every
core of this machine, each given the same batches (the workload sorted by length, BATCH sequences a call, padded to
the longest of the call; esm-cpp takes its rows unpadded):
- this project's encoder graph, FP32, on each runtime the export wrote (onnxruntime, onnxruntime-fused, OpenVINO);
  the headline is the one the service serves here (bionemo_serving.runtimes.choice on the repository, as a start would choose), not
  the fastest;
- its INT8 graph (bionemo_serving/exporter/quantize.py) on onnxruntime, where the export's gate let it be INT8, and the INT8
  export's OpenVINO file (NNCF, bionemo_serving/exporter/quantize_openvino.py) where its gate let it be written; where the gate kept
  the encoder FP32, the whole encoder is quantized here the same way and timed as "not served";
- transformers' EsmModel, eager torch with sdpa: the reference;
- esm-cpp 0.2.1 FP32 and INT8 (W8A8, SmoothQuant) on the same weights (benchmarks/esm_cpp.py).
transformers first answers every call of every workload untimed (embeddings and logits); every timed call of every
contender is then held to it: FP32 and INT8 embeddings with the exporter's own bounds (benchmarks.accuracy),
esm-cpp's logits (FP32 within accuracy.ESM_CPP_LOGITS_TOLERANCE, INT8 reported as top-1 agreement). The contenders
run in alternation, A B C A B C ..., --repeats times (benchmarks.repeats); each time is a figure's sample, reported as
the median and range; ratios are taken repeat by repeat. The matmul reference (benchmarks.flops: one layer's GEMMs at
a call's mean tokens, FP32 in torch and INT8 in onnxruntime with the served recipe) is sampled before the first
contender and after each one. Every contender runs the short workload (8 x 256); the long one (256 proteins, mean
about 126 residues) transformers, the served FP32 runtime, INT8 and esm-cpp. Without AVX-512, esm-cpp 0.2.1 runs
scalar kernels on one thread: it runs the short workload once, and above 150M not at all, and its target does not
apply. `--workloads 8x256` runs the short workload alone; `--proteins N` keeps the first N proteins of each (a smoke
run). The JSON (benchmarks/results/real-sizes-<size>-<cpu>.json) holds every sample; a missed target (TARGETS) exits
1 after it is written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import accuracy, record
from benchmarks.flops import EncoderShape, GemmReference, Int8GemmReference, ReferenceSamples
from benchmarks.repeats import MIN_REPEATS, Spread, alternating, paired_ratios
from benchmarks.workload import protein
from bionemo_serving.exporter.quantize import Recipe, has_vnni, quantize_onnx, worst_cosine
from bionemo_serving.exporter.triton_config import read_exports
from bionemo_serving.model_catalog import MODELS, Precision
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.runtimes.choice import RUNTIME_VARIABLE, choose_runtimes, forced_runtimes
from bionemo_serving.runtimes.engines import Runtime, open_engine

_LENGTHS = random.Random(38)
WORKLOADS = {
    "8 x 256": [256] * 8,
    "256 x mean 126": [max(20, min(1022, int(_LENGTHS.lognormvariate(4.75, 0.45)))) for _ in range(256)],
}
"""esm.cpp's benchmarks: 256 proteins of variable length (mean about 126 residues), and 8 of 256 residues."""
BATCH = 16
SEED = 38
DEFAULT_SIZE = "8M"
"""The default export's own shape: checkpoints/esm2nv, model_repository."""
FP32_RUNTIMES = (Runtime.ONNXRUNTIME, Runtime.ONNXRUNTIME_FUSED, Runtime.OPENVINO)
SHORT, LONG = "8 x 256", "256 x mean 126"
TRANSFORMERS = "transformers (eager, sdpa)"
ESM_CPP_FP32, ESM_CPP_INT8 = "esm-cpp FP32", "esm-cpp INT8"
ESM_CPP_SCALAR_UP_TO = 150_000_000
"""Without AVX-512, esm-cpp is timed once at sizes up to this many parameters: beyond, its scalar kernels take longer
than the rest of the run."""

TARGETS: dict[str, record.Target] = {
    "served FP32 / transformers": record.Target(">=", 1.5),
    "served FP32 share of the matmul reference": record.Target(">=", 0.85),
    "served INT8 / esm-cpp INT8": record.Target(">=", 1.0),
    "served contenders with an output off transformers'": record.Target("<=", 0),
    "repeats": record.Target(">=", MIN_REPEATS),
}
"""Checked on each workload run (the name then ends with it), ratios as medians of the repeats' ratios:
- FP32 / transformers 1.5x: issue 38's; an exported graph with a runtime chosen on this CPU must beat eager torch on
  the same weights by half again, or serving an export is not worth its machinery;
- share 0.85: the FP32 graph spends nearly all its time in the layers' matrix products; at 85 % of what those
  products alone run at on this CPU (the reference, at the call's tokens), what is left (attention, LayerNorm,
  padding) is small. At 8M (hidden 320) the non-GEMM work weighs more, and the bound is harder to hold;
- INT8 / esm-cpp INT8 1.0x: issue 38's; the served INT8 graph must be at least as fast as esm.cpp's W8A8 on the same
  weights; it applies only with AVX-512 (esm-cpp's vector kernels) and an INT8 export whose gate passed;
- outputs 0: every timed call of a served contender within the exporter's own bound (benchmarks.accuracy);
- repeats: benchmarks.repeats.MIN_REPEATS."""

Embed = Callable[[list[np.ndarray]], Any]
"""Token id rows (specials included) of one call to its outputs: [rows, hidden] embeddings, or esm-cpp's logits."""


@dataclass(frozen=True)
class Contender:
    name: str
    run: Embed
    kind: str
    """FP32 or INT8 (an embedding graph, checked as the exporter's gate of that precision checks), or ESM_CPP_FP32,
    ESM_CPP_INT8 (logits), or TRANSFORMERS."""
    served: bool = False
    """What the service serves from the repository on this CPU (bionemo_serving.runtimes.choice)."""


@dataclass
class Check:
    """A contender's outputs against transformers' over every timed call: the worst figure seen."""

    figure: str
    worst: float
    calls: int = 0

    def add(self, value: float) -> None:
        self.worst = min(self.worst, value) if self.higher_is_better else max(self.worst, value)
        self.calls += 1

    @property
    def higher_is_better(self) -> bool:
        return self.figure != "max abs difference"


def has_avx512() -> bool:
    return "avx512f" in record.vector_flags()


def batches(lengths: list[int], tokenizer) -> list[list[np.ndarray]]:  # noqa: ANN001
    rng = random.Random(SEED)
    rows = sorted((tokenizer.encode(protein(rng, length)) for length in lengths), key=len)
    return [rows[start : start + BATCH] for start in range(0, len(rows), BATCH)]


def graph_contender(runtime: Runtime, path: Path, tokenizer) -> Embed:  # noqa: ANN001
    engine = open_engine(runtime, path)
    threads = len(os.sched_getaffinity(0))
    return lambda rows: engine.run(["embeddings"], tokenizer.pad(rows).model_inputs(), threads)[0]


def transformers_contender(checkpoint: Path, tokenizer) -> tuple[Embed, Callable]:  # noqa: ANN001
    """transformers' embeddings of one call (pooled as the graph pools: what is timed), and its embeddings and
    logits (the reference every contender's outputs are held to)."""
    from transformers import EsmForMaskedLM

    masked_lm = EsmForMaskedLM.from_pretrained(checkpoint, attn_implementation="sdpa").eval()

    @torch.inference_mode()
    def embed(rows: list[np.ndarray]) -> tuple[np.ndarray, torch.Tensor]:
        feeds = tokenizer.pad(rows).model_inputs()
        mask = torch.from_numpy(feeds["attention_mask"])
        hidden = masked_lm.esm(input_ids=torch.from_numpy(feeds["input_ids"]), attention_mask=mask).last_hidden_state
        weights = torch.from_numpy(feeds["pooling_mask"]).unsqueeze(-1).float()
        return ((hidden * weights).sum(1) / weights.sum(1)).numpy(), hidden

    @torch.inference_mode()
    def outputs(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        embeddings, hidden = embed(rows)
        return embeddings, masked_lm.lm_head(hidden).numpy()

    return (lambda rows: embed(rows)[0]), outputs


def esm_cpp_contenders(checkpoint: Path, size: str) -> list[Contender]:
    """esm-cpp FP32 and INT8 on the checkpoint's weights."""
    import esm_cpp
    from transformers import EsmForMaskedLM

    from benchmarks.esm_cpp import convert

    folder = Path(tempfile.mkdtemp(prefix=f"esm-cpp-{size}-"))
    weights = convert(EsmForMaskedLM.from_pretrained(checkpoint).eval(), folder)
    found = []
    for name, quantized in ((ESM_CPP_FP32, False), (ESM_CPP_INT8, True)):
        model = esm_cpp.Model.load_from_safetensors(str(weights))
        if quantized:
            model.quantize_weights()
        run = lambda rows, model=model: model.forward_batch([row.astype(np.int32) for row in rows])  # noqa: E731
        found.append(Contender(name, run, name))
    return found


def served_runtime(repository: Path) -> tuple[Runtime, str]:
    """What the service serves esm2nv's encoder on from `repository` on this CPU, and why: bionemo_serving.runtimes.choice, as a start
    chooses (BIONEMO_RUNTIME honoured; timed here where no record holds for this machine)."""
    forced = forced_runtimes(os.environ.get(RUNTIME_VARIABLE, "auto"), ["esm2nv"])
    choice = choose_runtimes(repository, forced, ["esm2nv"])["esm2nv"]
    return choice.runtime, choice.chosen_by


def contenders(
    size: str, checkpoint: Path, fp32: Path, int8: Path | None, tokenizer  # noqa: ANN001
) -> tuple[list[Contender], dict[str, Any]]:
    """Every contender, and what is served (FP32 and INT8 runtimes, why) and what was left out (why)."""
    served_fp32, why_fp32 = served_runtime(fp32)
    found, notes = [], {"served": {"FP32": {"runtime": served_fp32.value, "chosen_by": why_fp32}}, "left_out": {}}
    for runtime in FP32_RUNTIMES:
        path = fp32 / "esm2nv" / "1" / runtime.file("model")
        if path.is_file():
            name = f"this FP32 ({runtime.value})"
            found.append(Contender(name, graph_contender(runtime, path, tokenizer), "FP32", runtime is served_fp32))
    if int8 is not None:
        gate_passed = read_exports(int8 / "esm2nv")[0][1].precision is Precision.INT8
        served_int8, why_int8 = served_runtime(int8) if gate_passed else (None, "")
        if gate_passed:
            notes["served"]["INT8"] = {"runtime": served_int8.value, "chosen_by": why_int8}
            path = int8 / "esm2nv" / "1" / "model.onnx"
            files = [(Runtime.ONNXRUNTIME, path, "this INT8 (onnxruntime)")]
            if (openvino := int8 / "esm2nv" / "1" / Runtime.OPENVINO.file("model")).is_file():
                files.append((Runtime.OPENVINO, openvino, "this INT8 (openvino, NNCF)"))
        else:
            notes["left_out"]["served INT8"] = "the INT8 export's gate kept the encoder FP32"
            path = Path(tempfile.mkdtemp(prefix="int8-")) / "model.onnx"
            quantize_onnx(fp32 / "esm2nv" / "1" / "model.onnx", path, Recipe(reduce_range=not has_vnni()))
            files = [(Runtime.ONNXRUNTIME, path, "this INT8 (onnxruntime), not served: gate failed")]
        for runtime, file, name in files:
            found.append(Contender(name, graph_contender(runtime, file, tokenizer), "INT8", runtime is served_int8))
    if not has_avx512() and parameters(checkpoint) > ESM_CPP_SCALAR_UP_TO:
        notes["left_out"]["esm-cpp"] = "scalar kernels on one thread without AVX-512: too slow at this size"
        return found, notes
    try:
        found += esm_cpp_contenders(checkpoint, size)
    except ImportError:
        notes["left_out"]["esm-cpp"] = "esm_cpp is not installed (the bench extra)"
    return found, notes


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
    unsigned = any(
        tensor.data_type == onnx.TensorProto.UINT8 and tensor.name.endswith("_quantized") for tensor in tensors
    )
    return Recipe(unsigned_weights=True) if unsigned else Recipe(reduce_range=not has_vnni())


def new_check(kind: str) -> Check:
    if kind in ("FP32", TRANSFORMERS, ESM_CPP_FP32):
        return Check("max abs difference", 0.0)
    return Check("top-1 agreement" if kind == ESM_CPP_INT8 else "worst cosine", 1.0)


def check_call(check: Check, kind: str, got: Any, expected: tuple[np.ndarray, np.ndarray]) -> None:
    """One call's outputs against transformers' (embeddings, logits): the figure of `kind` added to `check`."""
    embeddings, logits = expected
    if kind in ("FP32", TRANSFORMERS):
        check.add(float(np.abs(got - embeddings).max()))
    elif kind == "INT8":
        check.add(worst_cosine(got, embeddings))
    elif kind == ESM_CPP_FP32:
        check.add(max(float(np.abs(row - full[: len(row)]).max()) for row, full in zip(got, logits, strict=True)))
    else:
        agree = [(row.argmax(-1) == full[: len(row)].argmax(-1)).mean() for row, full in zip(got, logits, strict=True)]
        check.add(float(np.mean(agree)))


def within(kind: str, check: Check) -> bool | None:
    """Whether a contender's worst figure is within its bound; None for esm-cpp INT8, which has none (its logits are
    approximate by design)."""
    if kind in ("FP32", TRANSFORMERS):
        return accuracy.within(Precision.FP32.value, check.worst, 1.0)
    if kind == "INT8":
        return accuracy.within(Precision.INT8.value, 0.0, check.worst)
    if kind == ESM_CPP_FP32:
        return check.worst <= accuracy.ESM_CPP_LOGITS_TOLERANCE
    return None


def timed(contender: Contender, calls: list[list[np.ndarray]]) -> tuple[float, list[Any]]:
    """Seconds for every call, and each call's outputs."""
    outputs = []
    started = time.perf_counter()
    for rows in calls:
        outputs.append(contender.run(rows))
    return time.perf_counter() - started, outputs


def call_tokens(calls: list[list[np.ndarray]]) -> int:
    """The mean tokens of a call as the graph runs it, padded to its longest row: the reference's GEMM rows."""
    return round(np.mean([len(rows) * max(len(row) for row in rows) for rows in calls]))


def runs_on(contender: Contender, workload: str, counted: bool) -> bool:
    """Whether `contender` runs on `workload`: the long one is run by transformers, the served FP32 runtime, INT8 and
    esm-cpp (where its kernels are vector ones)."""
    if workload != LONG:
        return True
    if contender.name.startswith("esm-cpp"):
        return counted
    return contender.kind != "FP32" or contender.served


def measure_workload(
    workload: str, calls: list[list[np.ndarray]], found: list[Contender], expected: list[tuple[np.ndarray, np.ndarray]],
    reference: ReferenceSamples, repeats: int,
) -> tuple[dict[str, list[float]], dict[str, Check]]:  # fmt: skip
    """Every contender that runs `workload`, in alternation, each call's outputs checked; the reference sampled
    before the first and after each. Seconds per repeat, and the checks."""
    counted = has_avx512()
    here = [contender for contender in found if runs_on(contender, workload, counted)]
    seconds: dict[str, list[float]] = {contender.name: [] for contender in here}
    checks = {contender.name: new_check(contender.kind) for contender in here}
    reference.take("start")
    for repeat, contender in alternating(here, repeats):
        if contender.name.startswith("esm-cpp") and not counted and repeat:
            continue  # scalar kernels on one thread: once, on the short workload
        contender.run(calls[0])  # warm: the first call of a shape prepares kernels
        elapsed, outputs = timed(contender, calls)
        for got, wanted in zip(outputs, expected, strict=True):
            check_call(checks[contender.name], contender.kind, got, wanted)
        seconds[contender.name].append(elapsed)
        reference.take(f"{contender.name}, repeat {repeat}")
        print(f"{workload}, {contender.name}, repeat {repeat}: {elapsed:.2f} s", file=sys.stderr, flush=True)
    return seconds, checks


def workload_figures(
    seconds: dict[str, list[float]], flops: float, reference: dict[str, Any], found: list[Contender]
) -> dict[str, Any]:
    """A workload's figures: each contender's seconds and GFLOP/s over the repeats, the served FP32 one's share of
    the reference median, and the ratios, repeat by repeat."""
    served = {contender.kind: contender.name for contender in found if contender.served}
    timed_here = {name: times for name, times in seconds.items() if times}
    figures: dict[str, Any] = {
        "seconds": {name: vars(Spread.of(times)) for name, times in timed_here.items()},
        "gflops": {name: flops / Spread.of(times).median / 1e9 for name, times in timed_here.items()},
        "ratios": {},
    }
    fp32, int8 = served.get("FP32"), served.get("INT8")

    def ratio(label: str, slow: str | None, fast: str | None) -> None:
        ratios = paired_ratios(seconds.get(slow, []), seconds.get(fast, [])) if slow and fast else []
        figures["ratios"][label] = vars(Spread.of(ratios)) if ratios else None

    ratio("served FP32 / transformers", TRANSFORMERS, fp32)
    ratio("served INT8 / served FP32", fp32, int8)
    ratio("served INT8 / transformers", TRANSFORMERS, int8)
    ratio("served INT8 / esm-cpp INT8", ESM_CPP_INT8, int8)
    figures["share"] = {"served FP32 of the matmul reference": None}
    if fp32 in figures["gflops"]:
        figures["share"]["served FP32 of the matmul reference"] = figures["gflops"][fp32] / reference["gflops_median"]
    if int8 in figures["gflops"]:  # int8 products where it computes in int8; NNCF's INT8 weights compute in FP32
        rate = figures["gflops"][int8]
        if reference["int8_gops_median"] is not None:
            figures["share"]["served INT8 of the int8 reference"] = rate / reference["int8_gops_median"]
        else:
            figures["share"]["served INT8 (FP32 arithmetic) of the FP32 reference"] = rate / reference["gflops_median"]
    return figures


def checked_targets(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """TARGETS on each workload run, and what cannot apply here, with why."""
    targets, figures, not_applicable = {}, {}, {}
    for workload, result in run["workloads"].items():
        for name, target in TARGETS.items():
            targets[f"{name}, {workload}"] = target
        ratios = result["figures"]["ratios"]
        off = [name for name, check in result["checks"].items() if check["served"] and check["within"] is False]
        figures |= {
            f"served FP32 / transformers, {workload}": (ratios["served FP32 / transformers"] or {}).get("median"),
            f"served FP32 share of the matmul reference, {workload}": result["figures"]["share"][
                "served FP32 of the matmul reference"
            ],
            f"served INT8 / esm-cpp INT8, {workload}": (ratios["served INT8 / esm-cpp INT8"] or {}).get("median"),
            f"served contenders with an output off transformers', {workload}": len(off),
            f"repeats, {workload}": run["repeats"],
        }
        why = esm_cpp_target_void(run)
        if why:
            not_applicable[f"served INT8 / esm-cpp INT8, {workload}"] = why
    return record.checked(targets, figures, not_applicable)


def esm_cpp_target_void(run: dict[str, Any]) -> str:
    """Why INT8 / esm-cpp INT8 cannot apply to this run, or ""."""
    if "INT8" not in run["served"]:
        return run["left_out"].get("served INT8", "no INT8 repository (--int8)")
    if "avx512f" not in run["flags"]:
        return "no AVX-512: esm-cpp 0.2.1 runs scalar kernels on one thread"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default=DEFAULT_SIZE, choices=sorted(MODELS["esm2nv"].published_sizes))
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    parser.add_argument("--fp32", type=Path, help="the FP32 export's repository (default: the size's)")
    parser.add_argument("--int8", type=Path, help="the INT8 export's repository")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--workloads", choices=("both", "8x256"), default="both")
    parser.add_argument("--proteins", type=int, help="the first N proteins of each workload (a smoke run)")
    parser.add_argument("--json", type=Path, help="the raw results (default: benchmarks/results/real-sizes-...json)")
    parser.add_argument("--render", type=Path, help="print the markdown of a run's JSON, and nothing else")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    default = args.size == DEFAULT_SIZE
    checkpoint = args.checkpoints / ("esm2nv" if default else f"esm2nv-{args.size}")
    fp32 = args.fp32 or Path("model_repository" if default else f"model_repository-{args.size}")
    tokenizer = tokenizer_for(MODELS["esm2nv"])
    chosen = {SHORT: WORKLOADS[SHORT]} if args.workloads == "8x256" else WORKLOADS
    calls = {name: batches(lengths[: args.proteins], tokenizer) for name, lengths in chosen.items()}
    found, notes = contenders(args.size, checkpoint, fp32, args.int8, tokenizer)
    embed, reference_outputs = transformers_contender(checkpoint, tokenizer)
    found.insert(0, Contender(TRANSFORMERS, embed, TRANSFORMERS))
    shape = EncoderShape.from_checkpoint(checkpoint)
    computes_int8 = notes["served"].get("INT8", {}).get("runtime") == Runtime.ONNXRUNTIME.value
    int8_recipe = served_recipe(args.int8 / "esm2nv" / "1" / "model.onnx") if computes_int8 else None
    run = {**record.header("real-sizes", argv if argv is not None else sys.argv[1:], measured_at)}
    run |= {
        "size": args.size, "checkpoint": str(checkpoint),
        "repositories": {"fp32": str(fp32), "int8": args.int8 and str(args.int8)},
        "shape": vars(shape), "repeats": args.repeats, "batch": BATCH, "threads": len(os.sched_getaffinity(0)),
        **notes, "contenders": [{"name": c.name, "kind": c.kind, "served": c.served} for c in found], "workloads": {},
    }  # fmt: skip
    for workload, batched in calls.items():
        expected = [reference_outputs(rows) for rows in batched]  # transformers' answers, untimed
        tokens = call_tokens(batched)
        int8_reference = Int8GemmReference(shape, tokens, int8_recipe) if int8_recipe else None
        reference = ReferenceSamples(GemmReference(shape, tokens), int8_reference)
        seconds, checks = measure_workload(workload, batched, found, expected, reference, args.repeats)
        rows = [row for rows in batched for row in rows]
        flops = shape.flops(sum(map(len, rows)), sum(len(row) ** 2 for row in rows))
        summary = reference.summary(shape, run["flags"])
        kinds = {c.name: c for c in found}
        run["workloads"][workload] = {
            "proteins": len(rows), "calls": len(batched), "tokens": sum(map(len, rows)), "flops": flops,
            "samples": seconds, "reference": summary,
            "checks": {
                name: {**vars(check), "within": within(kinds[name].kind, check), "served": kinds[name].served}
                for name, check in checks.items()
            },
            "figures": workload_figures(seconds, flops, summary, found),
        }  # fmt: skip
    run["targets"] = checked_targets(run)
    destination = args.json or record.RESULTS / f"real-sizes-{args.size}-{record.cpu_slug(run['cpu'])}.json"
    record.write(run, destination)
    print(render(run))
    print(f"wrote {destination}")
    return record.exit_status(run["targets"])


def _spread(fields: dict[str, float] | None, digits: int = 2) -> str:
    return "–" if fields is None else Spread(**fields).shown(digits)


def _worst(check: dict[str, Any]) -> str:
    """A check's worst figure: a difference in scientific notation, a cosine or an agreement to 5 decimals."""
    return f"{check['worst']:.2e}" if check["figure"] == "max abs difference" else f"{check['worst']:.5f}"


def render(run: dict[str, Any]) -> str:
    """The run's markdown: what measured it, per workload each contender's check and times, the reference and the
    FMA ceiling, the ratios, and each target."""
    served = "; ".join(f"{precision} on {s['runtime']} ({s['chosen_by']})" for precision, s in run["served"].items())
    lines = [
        f"esm2nv {run['size']} in-process, {run['cpu']} ({run['threads']} cores used; {' '.join(run['flags'])}), "
        f"{run['date']}, commit {run['commit']}: `{run['command']}`. {run['repeats']} repeats in alternation, "
        f"median (range). Served: {served}."
        + "".join(f" {name}: not timed, {why}." for name, why in run["left_out"].items()),
    ]
    for workload, result in run["workloads"].items():
        reference, figures = result["reference"], result["figures"]
        ceiling = reference["fma_ceiling"]
        lines += [
            "",
            f"{workload}: {result['proteins']} proteins in {result['calls']} call(s) of up to {run['batch']}, "
            f"{result['flops'] / 1e9:.1f} GFLOP. Matmul reference at {reference['tokens']} tokens: median "
            f"{reference['gflops_median']:.0f} GFLOP/s over {len(reference['samples'])} samples"
            + (f", int8 {reference['int8_gops_median']:.0f} GOP/s" if reference["int8_gops_median"] else "")
            + (
                f"; FMA ceiling {ceiling['cores']} x {ceiling['flop_per_cycle']} FLOP/cycle ({ceiling['flag']}) x "
                f"{ceiling['mhz']:g} MHz = {ceiling['gflops']:.0f} GFLOP/s"
                if ceiling
                else ""
            )
            + ".",
            "",
            "| contender | served | check against transformers, every timed call | within | seconds | GFLOP/s |",
            "|---|---|---|---|---:|---:|",
        ]
        for name, check in result["checks"].items():
            within_cell = {True: "yes", False: "**no**", None: "no bound"}[check["within"]]
            lines.append(
                f"| {name} | {'yes' if check['served'] else ''} | {check['figure']} {_worst(check)} "
                f"({check['calls']} calls) | {within_cell} | {_spread(figures['seconds'].get(name))} "
                f"| {figures['gflops'].get(name, float('nan')):.0f} |"
            )
        shares = "; ".join(f"{label} {value:.0%}" for label, value in figures["share"].items() if value is not None)
        ratios = "; ".join(f"{label} {_spread(value)}x" for label, value in figures["ratios"].items() if value)
        lines += ["", f"Ratios, repeat by repeat: {ratios or 'none'}. Shares: {shares or 'none'}."]
    lines += ["", "| target | value | wanted | |", "|---|---:|---|---|"]
    for name, target in run["targets"].items():
        value = "not measured" if target["value"] is None else f"{target['value']:g}"
        lines.append(f"| {name} | {value} | {target['target']} | {record.met_cell(target)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
