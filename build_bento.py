"""Build the bento from `bentofile.yaml`, exporting the default models first if the repository has none.

    .venv/bin/python build_bento.py
"""

from __future__ import annotations

from pathlib import Path

import bentoml

from exporter.__main__ import main as export_main

ROOT = Path(__file__).resolve().parent


def build() -> str:
    repository = ROOT / "model_repository"
    if not any(repository.glob("*/[0-9]*/model.onnx")):
        if export_main(["defaults", "--repository", str(repository), "--checkpoints", str(ROOT / "checkpoints")]):
            raise SystemExit("export failed; nothing was built")
    bento = bentoml.bentos.build_bentofile(str(ROOT / "bentofile.yaml"), build_ctx=str(ROOT))
    return str(bento.tag)


if __name__ == "__main__":
    tag = build()
    print(f"built {tag}\nnext:\n  bentoml containerize {tag}\n  docker run --gpus all -p 3000:3000 {tag} serve")
