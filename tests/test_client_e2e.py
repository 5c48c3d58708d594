"""The client CLI against the running service: encode to a file, decode the file, generate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from support.paths import ROOT
from support.service import RunningService

pytestmark = pytest.mark.e2e


def client(service: RunningService, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bionemo_client.py"), "--url", service.url, *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_encode_embeddings_to_a_file(service: RunningService, tmp_path: Path) -> None:
    done = client(service, "encode", "--model", "esm2nv", "--out", str(tmp_path / "e.npz"), "MKTAYIAKQR", "MSLK")
    assert done.returncode == 0, done.stderr
    saved = np.load(tmp_path / "e.npz")
    expected = requests.post(f"{service.url}/embed", json={"sequences": ["MKTAYIAKQR", "MSLK"]}, timeout=60).json()
    np.testing.assert_allclose(saved["embeddings"], expected["embeddings"], rtol=0, atol=1e-6)


def test_hiddens_file_decodes_like_the_service(service: RunningService, tmp_path: Path) -> None:
    (tmp_path / "in.smi").write_text("CCO\nc1ccccc1\n")
    out = tmp_path / "latents.npz"
    encoded = client(service, "encode", "--model", "megamolbart", "--what", "hiddens", "--out", str(out), "--input", str(tmp_path / "in.smi"))
    assert encoded.returncode == 0, encoded.stderr
    decoded = client(service, "decode", str(out), "--max-length", "10")
    assert decoded.returncode == 0, decoded.stderr
    saved = np.load(out)
    body = {"hiddens": saved["hiddens"].tolist(), "mask": saved["mask"].tolist(), "max_length": 10}
    expected = requests.post(f"{service.url}/decode", json=body, timeout=60).json()["smiles"]
    assert decoded.stdout.splitlines() == expected


def test_generate_prints_the_answer_and_errors_go_to_stderr(service: RunningService) -> None:
    done = client(service, "generate", "--num-samples", "2", "--seed", "3", "CCO")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["seed"] == 3
    failed = client(service, "generate", "C1CC")
    assert failed.returncode == 1 and "smiles[0]" in failed.stderr
