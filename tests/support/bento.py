"""The bento as `build_bento.py` builds it, into a BentoML home of a test's own (BENTOML_HOME): test_bento.py's cpu
and gpu bentos, and the one test_spark_cluster_e2e.py ships to Spark (esm2nv on onnxruntime)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def bentoml_environment(home: Path) -> dict[str, str]:
    return dict(os.environ, BENTOML_HOME=str(home), BENTOML_DO_NOT_TRACK="true")


def build(home: Path, target: str, *options: str) -> Path:
    """`build_bento.py --target` (and `options`: `--models`, `--runtimes`), into the bento store in `home`; the built
    bento's folder (its name is the version)."""
    built = subprocess.run(
        [sys.executable, "build_bento.py", "--target", target, *options],
        cwd=ROOT, env=bentoml_environment(home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    tag = re.search(r"^built (bionemo:\w+) \(target (\S+)\)$", built.stdout, re.MULTILINE)
    assert tag and tag.group(2) == target, built.stdout
    assert f"bentoml containerize {tag.group(1)}" in built.stdout
    name, version = tag.group(1).split(":")
    return home / "bentos" / name / version


def tag_of(bento: Path) -> str:
    """`bionemo:<version>` of a bento folder `build` returned."""
    return f"{bento.parent.name}:{bento.name}"
