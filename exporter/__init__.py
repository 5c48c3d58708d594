"""Checkpoint -> Triton model repository: load, convert to ONNX, verify against torch, write.

`export_model` is imported on first use: the serving side imports `exporter.triton_backend` and
`exporter.decoder_caches`, which need neither torch nor transformers (the image has neither).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExportReport", "export_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from exporter import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'exporter' has no attribute {name!r}")
