"""The onnxruntime build each target installs: a runtime extra of pyproject.toml and the lock `make lock` resolves.

A python-backend model opens its onnxruntime session on the provider its config names (`execution_provider`:
CPUExecutionProvider on cpu; CUDAExecutionProvider for the stateful decoder, which keeps the python backend on gpu
and gpu-tensorrt). The CPU build has no CUDA provider, so the gpu targets install onnxruntime-gpu instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from model_catalog import Target


@dataclass(frozen=True)
class Runtime:
    """One onnxruntime build: a runtime extra of pyproject.toml, which `make lock` resolves into its own lock."""

    extra: str
    package: str

    @property
    def lock(self) -> str:
        """The pins a bento of this runtime installs, relative to the project."""
        return f"container/requirements-{self.extra}.lock"


CPU_RUNTIME = Runtime("cpu", "onnxruntime")
GPU_RUNTIME = Runtime("gpu", "onnxruntime-gpu")
TARGET_RUNTIMES: dict[Target, Runtime] = {
    Target.CPU: CPU_RUNTIME,
    Target.GPU: GPU_RUNTIME,
    Target.GPU_TENSORRT: GPU_RUNTIME,
}
"""The runtime `build_bento.py --target` installs; the two builds are never installed together (one module)."""

