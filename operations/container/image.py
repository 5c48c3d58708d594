"""`make image`: the bento's image, built with the container engine this machine has (docker with its daemon
running, else podman, else buildah), on the real tritonserver base image or on a stand-in built here.

    .venv/bin/python -m operations.container.image [--base-image IMAGE|stand-in] [--target cpu|gpu|gpu-tensorrt]

`--base-image stand-in` first builds the stand-in base (operations/container/stand_in/Containerfile) where the real
`nvcr.io/nvidia/tritonserver` cannot be pulled: Debian 12 from its mirror (debootstrap, as root), the
tritonserver that nvidia-pytriton bundles, the host's CA certificates. Its Python is Debian's 3.11, not the real
image's 3.12, so the bento built on it installs operations/container/requirements-cpu-stand-in.lock: the cpu lock's own pins,
resolved again for that Python and glibc (`make lock`). Every image built on it is tagged `...-stand-in`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import build_bento
from operations.container.engine import EngineError, engine, engine_environment, image_exists, run
from bionemo_serving.model_catalog import Target

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = "stand-in"
"""What --base-image takes for the stand-in base."""
STAND_IN_PYTHON = "3.11"
"""Debian 12's Python: the stand-in's, and the python backend stub's it takes from nvidia-pytriton."""
STAND_IN_LOCK = "operations/container/requirements-cpu-stand-in.lock"
STAND_IN_IMAGE = "localhost/bionemo-tritonserver-stand-in"
DEBIAN_IMAGE = "localhost/bionemo-debian12-minbase"
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")


class ImageError(RuntimeError):
    """The image cannot be built here; the message says what to install or fix."""


def debian_base(builder: str, work: Path) -> str:
    """Debian 12 minbase with Python 3.11 and libpython, from DEBIAN_MIRROR, imported as an image (kept for the next
    build)."""
    image = f"{DEBIAN_IMAGE}:bookworm"
    if image_exists(builder, image):
        return image
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise ImageError("the stand-in's Debian base is built with debootstrap, as root (apt-get install debootstrap)")
    tree, archive = work / "debian", work / "debian.tar"
    packages = f"python{STAND_IN_PYTHON},libpython{STAND_IN_PYTHON},ca-certificates"
    run(["debootstrap", "--variant=minbase", f"--include={packages}", "bookworm", str(tree), DEBIAN_MIRROR])
    run(["tar", "-C", str(tree), "-cf", str(archive), "."])
    if builder == "buildah":
        container = subprocess.run(
            ["buildah", "from", "scratch"], check=True, capture_output=True, text=True, env=engine_environment()
        ).stdout.strip()
        run(["buildah", "add", container, str(archive), "/"])
        run(["buildah", "commit", "--rm", container, image])
    else:
        run([builder, "import", str(archive), image])
    return image


def stand_in_context(context: Path) -> Path:
    """The stand-in's build context: nvidia-pytriton's tritonserver laid out as the real image has it
    (/opt/tritonserver: bin, lib, backends/python with the stub for STAND_IN_PYTHON), uv, the host's CAs."""
    import pytriton

    bundle = Path(pytriton.__file__).parent / "tritonserver"
    server = context / "tritonserver"
    python_backend = server / "backends" / "python"
    python_backend.mkdir(parents=True)
    (server / "bin").mkdir()
    shutil.copy2(bundle / "bin" / "tritonserver", server / "bin")
    shutil.copytree(bundle.parent.parent / "nvidia_pytriton.libs", server / "lib")  # the binary's RPATH: ../lib
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(bundle / "backends" / "python" / name, python_backend)
    shutil.copy2(bundle / "python_backend_stubs" / STAND_IN_PYTHON / "triton_python_backend_stub", python_backend)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise ImageError("uv is not installed (make install installs it)")
    shutil.copy2(uv, context / "uv")
    certificates = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    shutil.copy2(certificates, context / "host-ca-certificates.crt")
    return context


def stand_in(builder: str) -> str:
    """The stand-in base image, built unless this engine already has it: its tag names nvidia-pytriton's version and
    the Containerfile's content, so that changing either builds it anew."""
    containerfile = ROOT / "operations" / "container" / "stand_in" / "Containerfile"
    content = hashlib.sha256(containerfile.read_bytes()).hexdigest()[:12]
    image = f"{STAND_IN_IMAGE}:pytriton-{version('nvidia-pytriton')}-{content}"
    if image_exists(builder, image):
        return image
    with tempfile.TemporaryDirectory(prefix="stand-in-") as work:
        debian = debian_base(builder, Path(work))
        context = stand_in_context(Path(work) / "context")
        build = ["buildah", "bud"] if builder == "buildah" else [builder, "build"]
        run([*build, "--build-arg", f"DEBIAN_BASE={debian}", "-f", str(containerfile), "-t", image, str(context)])
    return image


def build_image(base_image: str | None, target: Target) -> str:
    """Build the bento for `target` on `base_image` (bentofile.yaml's when None) and its image; returns the image."""
    builder = engine()
    if base_image == STAND_IN:
        if target is not Target.CPU:
            raise ImageError("the stand-in has no GPU: only --target cpu builds on it")
        print(
            "building on a STAND-IN base, not nvcr.io/nvidia/tritonserver (operations/container/stand_in/Containerfile)"
        )
        bento = build_bento.build(
            target, base_image=stand_in(builder), python_version=STAND_IN_PYTHON, lock=STAND_IN_LOCK
        )
        image = f"{bento.tag.name}:{bento.tag.version}-{STAND_IN}"
    else:
        bento = build_bento.build(target, base_image=base_image)
        image = f"{bento.tag.name}:{bento.tag.version}"
    # From the temporary folder, where BentoML copies the bento to build it: BentoML 1.4.39 refuses a
    # dockerfile_template outside the working directory (#5566).
    bentoml_cli = str(Path(sys.executable).parent / "bentoml")
    run([bentoml_cli, "containerize", str(bento.tag), "--backend", builder, "-t", image], cwd=tempfile.gettempdir())
    return image


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", help=f"any image with tritonserver on PATH, or `{STAND_IN}`")
    parser.add_argument("--target", choices=[target.value for target in Target], default=Target.CPU.value)
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        image = build_image(args.base_image, Target(args.target))
    except (ImageError, EngineError, subprocess.CalledProcessError) as error:
        print(f"make image: {error}", file=sys.stderr)
        return 1
    print(f"built {image} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
