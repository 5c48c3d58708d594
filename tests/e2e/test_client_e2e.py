"""The client package's CLI, run from its own environment (.venv-client: no server package), against the real service:
every command's file equals what the service's own endpoints answer for the same records, refused records land in
the errors file, and a run killed with `kill -9` resumes into the file an uninterrupted run writes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from support.client_cli import cli, run
from support.paths import CLIENT_VENV
from support.service import RunningService

pytestmark = pytest.mark.e2e

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
SERVER_PACKAGES = ("bentoml", "tritonclient", "torch", "onnxruntime", "rdkit")


def proteins(count: int, seed: int, shortest: int = 20, longest: int = 60) -> list[tuple[str, str]]:
    generator = random.Random(seed)
    return [(f"p{i}", "".join(generator.choice(AMINO_ACIDS) for _ in range(generator.randint(shortest, longest))))
            for i in range(count)]  # fmt: skip


def write_fasta(path: Path, records: list[tuple[str, str]]) -> None:
    """Two lines a sequence, the first in lower case, a description after each ID."""
    path.write_text("".join(f">{name} a protein\n{seq[:15].lower()}\n{seq[15:]}\n" for name, seq in records))


def embeddings_of(service: RunningService, sequences: list[str], **options: object) -> np.ndarray:
    vectors = [service.answer("/embed", {"sequences": sequences[i : i + 64], **options})["embeddings"]
               for i in range(0, len(sequences), 64)]  # fmt: skip
    return np.concatenate([np.asarray(part, np.float32) for part in vectors])


def test_the_clients_environment_has_no_server_package() -> None:
    python = CLIENT_VENV / "bin" / "python"
    script = "import importlib.util, sys; print([n for n in sys.argv[1:] if importlib.util.find_spec(n)])"
    found = subprocess.run([str(python), "-c", script, *SERVER_PACKAGES], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_embed_a_fasta_with_a_bad_record_to_parquet_and_npz(service: RunningService, tmp_path: Path) -> None:
    records = proteins(150, seed=1)
    records[40] = ("bad", "MKTJLL")
    write_fasta(tmp_path / "in.fasta", records)
    done = run(service, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "out.parquet"), "--layers", "-1", "0",
               status=3)
    assert done.stdout == "" and done.stderr.startswith("embed: 149 done, 1 failed (see ")  # no bar on a pipe
    good = [(name, seq) for name, seq in records if name != "bad"]
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("id").to_pylist() == [name for name, _ in good]
    expected = embeddings_of(service, [seq for _, seq in good], layers=[-1, 0])
    np.testing.assert_allclose(np.asarray(table.column("embedding").to_pylist(), np.float32), expected, rtol=0, atol=1e-5)
    (error,) = pacsv.read_csv(tmp_path / "out.errors.csv").to_pylist()
    assert (error["id"], error["line"]) == ("bad", 121)
    assert error["reason"].startswith("HTTP 422 invalid_request: sequences[") and "'J'" in error["reason"]

    run(service, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "out.npz"), "--pooling", "cls", status=3)
    saved = np.load(tmp_path / "out.npz")
    assert saved["ids"].tolist() == [name for name, _ in good]
    np.testing.assert_allclose(saved["embeddings"], embeddings_of(service, [s for _, s in good], pooling="cls"), atol=1e-5)


def test_kill_9_then_the_same_command_finishes_the_file_without_loss_or_repeat(
    service: RunningService, tmp_path: Path
) -> None:
    records = proteins(500, seed=2, shortest=40, longest=90)
    write_fasta(tmp_path / "in.fasta", records)
    command = cli(service, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "out.parquet"), "--concurrency", "2")
    partial = tmp_path / "out.parquet.partial"
    running = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    segments = lambda: [path for path in partial.glob("*-*.arrow") if not path.name.endswith(".errors.arrow")]  # noqa: E731
    while not segments() and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(running.pid, signal.SIGKILL)  # as soon as the first segment is journaled, mid-run
    running.wait()
    assert not (tmp_path / "out.parquet").exists(), "the run finished before it could be killed"
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "from an earlier run" in resumed.stderr and "500 done, 0 failed" in resumed.stderr
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("id").to_pylist() == [name for name, _ in records]
    expected = embeddings_of(service, [seq for _, seq in records])
    np.testing.assert_allclose(np.asarray(table.column("embedding").to_pylist(), np.float32), expected, rtol=0, atol=1e-5)
    assert not partial.exists()


def test_scan_long_form_and_heatmap_equal_score(service: RunningService, tmp_path: Path) -> None:
    records = proteins(2, seed=3, shortest=40, longest=45)
    write_fasta(tmp_path / "in.fasta", records)
    run(service, "score", "--scan", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "scan.csv"),
        "--window", "16", "--heatmap", str(tmp_path / "scan.png"))  # fmt: skip
    rows = pacsv.read_csv(tmp_path / "scan.csv").to_pylist()
    for name, sequence in records:
        answer = service.answer("/score", {"sequence": sequence, "scan": True})
        expected = [(name, position + 1, sequence[position], mutant, score)
                    for position, scores in enumerate(answer["scores"])
                    for mutant, score in zip(answer["alphabet"], scores) if mutant != sequence[position]]  # fmt: skip
        got = [(r["id"], r["position"], r["wild_type"], r["mutant"], r["score"]) for r in rows if r["id"] == name]
        assert [row[:4] for row in got] == [row[:4] for row in expected]
        np.testing.assert_allclose([row[4] for row in got], [row[4] for row in expected], atol=1e-5)
        assert (tmp_path / f"scan-{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_variants_file_equals_score(service: RunningService, tmp_path: Path) -> None:
    wild_type = "MKTAYIAKQRQISFVKSHFSRQ"
    (tmp_path / "variants.csv").write_text("id,mutant\nv1,K2R\nv2,T3A:Y5W\nv3,W9A\nv4,A4G\n")
    run(service, "score", str(tmp_path / "variants.csv"), "--wild-type", wild_type, "-o", str(tmp_path / "scores.parquet"),
        status=3)  # its bad variant refused
    rows = pq.read_table(tmp_path / "scores.parquet").to_pylist()
    expected = service.answer("/score", {"sequence": wild_type, "mutations": ["K2R", "T3A:Y5W", "A4G"]})["scores"]
    assert [(r["id"], r["variant"], r["position"], r["wild_type"], r["mutant"]) for r in rows] == [
        ("v1", "K2R", 2, "K", "R"), ("v2", "T3A:Y5W", None, None, None), ("v4", "A4G", 4, "A", "G")
    ]  # fmt: skip
    np.testing.assert_allclose([r["score"] for r in rows], expected, atol=1e-5)
    (error,) = pacsv.read_csv(tmp_path / "scores.errors.csv").to_pylist()
    assert error["id"] == "v3" and error["line"] == 4 and "mutations[" in error["reason"]


def test_logits_and_contacts_with_a_plot_equal_the_endpoints(service: RunningService, tmp_path: Path) -> None:
    records = proteins(5, seed=4)
    write_fasta(tmp_path / "in.fasta", records)
    sequences = [seq for _, seq in records]
    run(service, "logits", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "logits.parquet"))
    logits = pq.read_table(tmp_path / "logits.parquet")
    assert logits.schema.metadata[b"alphabet"] == AMINO_ACIDS.encode()
    for got, expected in zip(logits.column("log_probs").to_pylist(), service.answer("/logits", {"sequences": sequences})["log_probs"]):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)
    run(service, "contacts", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "contacts.parquet"),
        "--plot", str(tmp_path / "contacts.png"))  # fmt: skip
    contacts = pq.read_table(tmp_path / "contacts.parquet")
    for got, expected in zip(contacts.column("contacts").to_pylist(), service.answer("/contacts", {"sequences": sequences})["contacts"]):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)
    assert all((tmp_path / f"contacts-{name}.png").is_file() for name, _ in records)


def test_smiles_latents_decode_and_generate_equal_the_endpoints(service: RunningService, tmp_path: Path) -> None:
    (tmp_path / "in.smi").write_text("CCO ethanol\nc1ccccc1O phenol\nC1CC broken\nCC(=O)Nc1ccc(O)cc1 paracetamol\n")
    run(service, "embed", str(tmp_path / "in.smi"), "-o", str(tmp_path / "latents.parquet"), "--per-token", status=3)
    run(service, "decode", str(tmp_path / "latents.parquet"), "-o", str(tmp_path / "decoded.csv"), "--max-length", "24")
    good = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"]
    hidden = service.answer("/hidden", {"model": "megamolbart", "sequences": good})
    decoded = service.answer("/decode", {"hiddens": hidden["hiddens"], "mask": hidden["mask"], "max_length": 24})
    rows = pacsv.read_csv(tmp_path / "decoded.csv").to_pylist()
    assert [(r["id"], r["smiles"]) for r in rows] == list(zip(["ethanol", "phenol", "paracetamol"], decoded["smiles"]))
    assert pacsv.read_csv(tmp_path / "latents.errors.csv").column("id").to_pylist() == ["broken"]

    run(service, "generate", str(tmp_path / "in.smi"), "-o", str(tmp_path / "generated.parquet"),
        "--num-samples", "2", "--seed", "5", "--max-length", "24", status=3)  # fmt: skip
    generated = pq.read_table(tmp_path / "generated.parquet").to_pylist()
    # one chunk: the seed is the job's seed plus the chunk's first record (0); the refused seed leaves the rest
    expected = service.answer("/generate", {"smiles": good, "num_samples": 2, "seed": 5, "max_length": 24})
    assert [(r["id"], r["sample"], r["smiles"]) for r in generated] == [
        (name, number, sample["smiles"])
        for name, result in zip(["ethanol", "phenol", "paracetamol"], expected["results"])
        for number, sample in enumerate(result["samples"])
    ]
