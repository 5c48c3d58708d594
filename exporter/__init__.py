"""Checkpoint -> Triton model repository: load, convert to ONNX, verify against torch, write."""

from exporter.pipeline import ExportReport, export_model

__all__ = ["ExportReport", "export_model"]
