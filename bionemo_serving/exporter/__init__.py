"""Checkpoint -> Triton model repository: load, convert to ONNX, verify against torch, write.

`export_model` is imported on first use, so that importing one of the exporter's modules does not load the whole
pipeline. The serving side imports no exporter module: what it shares with the exporter, the runtimes and the
decoder step's cache layout, is in `runtimes`, which needs neither torch nor transformers (the image has neither).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExportReport", "export_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from bionemo_serving.exporter import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'exporter' has no attribute {name!r}")
