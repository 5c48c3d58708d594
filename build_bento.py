"""Build the bento for one target with `bentoml.bentos.build`, from the options in `bentofile.yaml`.

    .venv/bin/python build_bento.py [--target cpu|gpu|gpu-tensorrt] [--models esm2nv,...] [--runtimes onnxruntime,...]

Every target carries the same model repository (each model has a config per
target); the target sets BIONEMO_TARGET in the image, which makes Triton load
that target's configs, and picks the lock of the onnxruntime those configs run
on (bionemo_serving/startup/target_runtime.py). The default models are exported first when the
repository has none.

By default the bento carries every model with every runtime's files. `--models` keeps those models' graphs alone
(a bento serves the models its repository holds), `--runtimes` those runtimes' files alone (onnxruntime's always:
every config names it; the choice at start-up times what is there): a bento for one job, such as Spark's
(docs/spark.md), where run_in_spark compresses the whole bento with xz at every call.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import bentoml
import yaml
from bentoml._internal.bento.build_config import BentoEnvSchema  # the type bentoml.bentos.build's `envs` takes

from bionemo_serving.exporter.__main__ import main as export_main
from bionemo_serving.exporter.triton_config import config_path
from bionemo_serving.model_catalog import MODELS, Target
from bionemo_serving.runtimes.engines import Runtime
from bionemo_serving.runtimes.served_repository import relink
from bionemo_serving.startup.target_runtime import TARGET_BUILDS

ROOT = Path(__file__).resolve().parent
REPOSITORY = ROOT / "model_repository"


def repository_is_complete(repository: Path) -> bool:
    """Every catalogued graph has its ONNX files and a config for every target (an optional graph, where exported)."""
    graphs = [
        (repository / description.triton_name(graph.role), graph)
        for description in MODELS.values()
        for graph in description.graphs
        if not graph.optional or (repository / description.triton_name(graph.role)).is_dir()
    ]
    return all(
        all(any(model_dir.glob(f"[0-9]*/{part.file}")) for part in graph.onnx_graphs)
        and all((model_dir / config_path(target)).is_file() for target in Target)
        for model_dir, graph in graphs
    )


def left_out(models: Sequence[str] | None = None, runtimes: Sequence[Runtime] | None = None) -> list[str]:
    """bentofile.yaml-style exclude patterns for the graphs of the catalogued models not in `models` and for the files
    of the runtimes not in `runtimes` (None: all of them); an unknown model, or runtimes without onnxruntime, is a
    SystemExit."""
    patterns = []
    if models is not None:
        unknown = sorted(set(models) - set(MODELS))
        if unknown or not models:
            raise SystemExit(f"--models: {', '.join(unknown) or 'none'}: expected some of {', '.join(MODELS)}")
        patterns += [
            f"{REPOSITORY.name}/{description.triton_name(graph.role)}/"
            for name, description in MODELS.items()
            if name not in models
            for graph in description.graphs
        ]
    if runtimes is not None:
        if Runtime.ONNXRUNTIME not in runtimes:
            raise SystemExit("--runtimes: onnxruntime is always carried (every graph's config names it)")
        for runtime in Runtime:
            if runtime not in runtimes:
                suffix = runtime.file("")
                patterns.append(f"{REPOSITORY.name}/**/*{suffix}")
                if suffix.endswith(".xml"):  # OpenVINO's IR: the .xml's weights in the .bin beside it
                    patterns.append(f"{REPOSITORY.name}/**/*{suffix.removesuffix('.xml')}.bin")
    return patterns


def build(
    target: Target = Target.CPU,
    base_image: str | None = None,
    python_version: str | None = None,
    lock: str | None = None,
    models: Sequence[str] | None = None,
    runtimes: Sequence[Runtime] | None = None,
) -> bentoml.Bento:
    """The bento for `target`; `base_image`, its `python_version` and the `lock` installed on it replace
    bentofile.yaml's and the target's (operations/container/image.py builds on a stand-in base with them); `models` and
    `runtimes` (None: all) keep those models' graphs and those runtimes' files alone (`left_out`)."""
    excluded = left_out(models, runtimes)
    exporting = ["defaults", "--repository", str(REPOSITORY), "--checkpoints", str(ROOT / "checkpoints")]
    if not repository_is_complete(REPOSITORY) and export_main(exporting):
        raise SystemExit("export failed; nothing was built")
    options = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    options["labels"] = {**options.get("labels", {}), "target": target.value}
    if models is not None:
        options["labels"]["models"] = "-".join(models)
    if runtimes is not None:
        options["labels"]["runtimes"] = "-".join(runtime.value for runtime in runtimes)
    options["exclude"] = [*options.get("exclude", []), *excluded]
    envs = [*options.get("envs", []), {"name": "BIONEMO_TARGET", "value": target.value}]
    options["envs"] = [BentoEnvSchema(**env) for env in envs]
    options["python"] = {**options["python"], "requirements_txt": lock or TARGET_BUILDS[target].lock}
    if base_image:
        options["docker"] = {**options["docker"], "base_image": base_image}
    if python_version:
        options["docker"] = {**options["docker"], "python_version": python_version}
    bento = bentoml.bentos.build(**options, build_ctx=str(ROOT))
    relink(Path(bento.path) / "src" / REPOSITORY.name)  # BentoML copies file by file: the graphs' weights linked again
    return bento


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=[target.value for target in Target], default=Target.CPU.value)
    parser.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    parser.add_argument(
        "--runtimes", help=f"comma-separated, of {', '.join(runtime.value for runtime in Runtime)} (default: all)"
    )
    args = parser.parse_args(argv)
    target = Target(args.target)
    models = args.models.split(",") if args.models else None
    try:
        runtimes = [Runtime(name) for name in args.runtimes.split(",")] if args.runtimes else None
    except ValueError as error:
        parser.error(f"--runtimes: {error}")
    bento = build(target, models=models, runtimes=runtimes)
    gpus = "" if target is Target.CPU else "--gpus all "
    # From the temp folder: BentoML 1.4.39 refuses a dockerfile_template outside the working directory (#5566).
    print(
        f"built {bento.tag} (target {target.value})\n"
        f"next:\n"
        f"  (cd /tmp && bentoml containerize {bento.tag})\n"
        f"  docker run --rm {gpus}--shm-size=1g -p 3000:3000 {bento.tag} serve "
        "--triton-options model-control-mode=explicit --triton-options load-model=esm2nv"
    )


if __name__ == "__main__":
    main()
