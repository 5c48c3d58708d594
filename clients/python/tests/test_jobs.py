"""Files through a job against the stand-in service: order, the errors file, outputs, and resume after a stop or a
`kill -9` at any point giving the uninterrupted run's file."""

from __future__ import annotations

import fcntl
import gzip
import os
import pty
import select
import random
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from bionemo_client import Client, InputError, JobFailed
from bionemo_client.jobs import chunks
from bionemo_client.journal import Journal, JournalMismatch
from bionemo_client.records import read
from bionemo_client.tasks import Embed
from conftest import vector

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"


def fasta(path: Path, count: int, bad: tuple[int, ...] = ()) -> list[tuple[str, str]]:
    """`count` proteins of 5-60 residues, two lines each, lower case; those at `bad` carry a J."""
    generator = random.Random(count)
    proteins = []
    for index in range(count):
        sequence = "".join(generator.choice(AMINO_ACIDS) for _ in range(generator.randint(5, 60)))
        proteins.append((f"p{index}", sequence[:3] + "J" + sequence[3:] if index in bad else sequence))
    path.write_text("".join(f">{name} protein {name}\n{seq[:20].lower()}\n{seq[20:]}\n" for name, seq in proteins))
    return proteins


def test_embed_writes_every_good_record_in_order_and_the_refused_to_the_errors_file(stand_in, tmp_path: Path) -> None:
    proteins = fasta(tmp_path / "in.fasta", 300, bad=(5, 130))
    summary = Client(stand_in.url, concurrency=3).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    kept = [(name, seq.upper()) for i, (name, seq) in enumerate(proteins) if i not in (5, 130)]
    assert table.column("id").to_pylist() == [name for name, _ in kept]
    np.testing.assert_array_equal(np.asarray(table.column("embedding").to_pylist(), np.float32),
                                  np.stack([vector(seq) for _, seq in kept]))  # fmt: skip
    errors = pacsv.read_csv(tmp_path / "out.errors.csv").to_pylist()
    assert [(row["id"], row["line"]) for row in errors] == [("p5", 16), ("p130", 391)]
    assert "HTTP 422 invalid_request: sequences[" in errors[0]["reason"] and "'J' is not an amino acid" in errors[0]["reason"]
    assert (summary.records, summary.failed, summary.done) == (300, 2, 298)
    assert not (tmp_path / "out.parquet.partial").exists()
    assert max(len(body["sequences"]) for body in stand_in.bodies) == 64


def test_npz_holds_ids_and_embeddings(stand_in, tmp_path: Path) -> None:
    proteins = fasta(tmp_path / "in.fasta", 70)
    Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.npz")
    saved = np.load(tmp_path / "out.npz")
    assert saved["ids"].tolist() == [name for name, _ in proteins]
    np.testing.assert_array_equal(saved["embeddings"], np.stack([vector(seq.upper()) for _, seq in proteins]))


def test_a_refusal_every_record_shares_stops_the_job(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 10)
    with pytest.raises(JobFailed, match="HTTP 422 unknown_model"):  # the stand-in serves megamolbart's /models only
        Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet", model="megamolbart")
    with pytest.raises(InputError, match="model 'esm2nv-typo' is not served here; served: esm2nv, megamolbart"):
        Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet", model="esm2nv-typo")


def test_chunks_are_the_same_every_time_and_within_the_limits(tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 500)
    task = Embed("esm2nv", max_items=64, max_residues=1000)
    first = [[r.index for r in chunk.records] for chunk in chunks(read(tmp_path / "in.fasta"), task)]
    again = [[r.index for r in chunk.records] for chunk in chunks(read(tmp_path / "in.fasta"), task)]
    assert first == again and sum(len(indices) for indices in first) == 500
    assert all(len(indices) <= 64 for indices in first)


def test_a_stopped_job_resumes_sending_only_what_is_missing_and_writes_the_same_bytes(
    stand_in, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proteins = [sequence.upper() for _, sequence in fasta(tmp_path / "in.fasta", 1000, bad=(7,))]
    monkeypatch.setattr(Journal, "FLUSH_ROWS", 100)
    Client(stand_in.url, concurrency=1).embed_file(tmp_path / "in.fasta", tmp_path / "whole.parquet")
    stand_in.bodies.clear()
    stand_in.fail_after = 6
    with pytest.raises(JobFailed, match="HTTP 500"):
        Client(stand_in.url, concurrency=1).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet")
    assert list((tmp_path / "out.parquet.partial").glob("*-*.arrow")), "nothing was journaled"
    stand_in.bodies.clear()
    stand_in.fail_after = None
    summary = Client(stand_in.url, concurrency=1).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet")
    sent_after = [seq for body in stand_in.bodies for seq in body["sequences"]]
    assert summary.resumed > 0 and summary.records == 1000 and summary.failed == 1
    # the journaled records are not sent again; every other one is
    assert not set(proteins[: summary.resumed]) & set(sent_after)
    assert sorted(set(sent_after)) == sorted(proteins[summary.resumed :])
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert (tmp_path / "out.errors.csv").read_bytes() == (tmp_path / "whole.errors.csv").read_bytes()


def test_another_jobs_partial_results_are_not_resumed(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 10)
    stand_in.fail_after = 0
    with pytest.raises(JobFailed):
        Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet")
    stand_in.fail_after = None
    with pytest.raises(JournalMismatch, match="--restart"):
        Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet", pooling="cls")
    Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet", pooling="cls", restart=True)
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 10


def cli(stand_in, *args: str) -> list[str]:
    return [sys.executable, "-m", "bionemo_client.cli", *args, "--url", stand_in.url]


def test_kill_9_at_any_point_then_the_same_command_gives_the_uninterrupted_file(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 6000, bad=(11, 5500))
    command = cli(stand_in, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "out.parquet"), "--concurrency", "2")
    whole = cli(stand_in, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "whole.parquet"))
    assert subprocess.run(whole, capture_output=True).returncode == 3  # done, two records refused
    stand_in.delay = 0.1  # a few seconds a run: a segment every 2 s
    partial = tmp_path / "out.parquet.partial"

    def segments() -> int:
        return len([path for path in partial.glob("*-*.arrow") if not path.name.endswith(".errors.arrow")])

    for new_segments in (0, 1, 1):  # killed before the first segment, then each time one more is journaled
        before = segments()
        running = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while (segments() < before + new_segments or not partial.exists()) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(running.pid, signal.SIGKILL)
        running.wait()
        assert segments() >= before + new_segments and not (tmp_path / "out.parquet").exists()
    stand_in.delay = 0.0
    finished = subprocess.run(command, capture_output=True, text=True)
    assert finished.returncode == 3, finished.stderr
    assert "from an earlier run" in finished.stderr
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert (tmp_path / "out.errors.csv").read_bytes() == (tmp_path / "whole.errors.csv").read_bytes()


def test_on_a_pipe_there_is_no_progress_bar_only_the_summary(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 100, bad=(3,))
    done = subprocess.run(cli(stand_in, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "o.parquet")),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 3 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("embed: 99 done, 1 failed (see ") and "records/s" in line, line


def test_an_output_the_command_cannot_write_is_a_usage_error(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 3)
    done = subprocess.run(cli(stand_in, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "o.csv")),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "embed writes parquet, npz, not csv" in done.stderr


def test_on_a_terminal_a_progress_bar_shows_the_rate_and_the_time_left(stand_in, tmp_path: Path) -> None:
    fasta(tmp_path / "in.fasta", 400)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    done = subprocess.run(cli(stand_in, "embed", str(tmp_path / "in.fasta"), "-o", str(tmp_path / "o.parquet")),
                          stdout=subprocess.DEVNULL, stderr=terminal, timeout=60)  # fmt: skip
    os.close(terminal)
    shown = b""
    while select.select([controller], [], [], 0.5)[0]:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert done.returncode == 0
    text = shown.decode(errors="replace")
    assert "400/400" in text and "seq/s" in text and "<00:" in text, text  # done of total, the rate, the time left
    assert text.rstrip().splitlines()[-1].startswith("embed: 400 done, 0 failed")


def test_embed_in_memory_chunks_within_the_limits(stand_in) -> None:
    sequences = ["mkt" * (i % 7 + 1) for i in range(150)]
    vectors = Client(stand_in.url).embed(sequences)
    np.testing.assert_array_equal(vectors, np.stack([vector(sequence.upper()) for sequence in sequences]))
    assert [len(body["sequences"]) for body in stand_in.bodies] == [64, 64, 22]
    with pytest.raises(JobFailed, match=r"sequences\[1\]: HTTP 422"):
        Client(stand_in.url).embed(["MKT", "MJK"])


def test_chunks_are_sized_by_the_limit_the_service_publishes(stand_in, tmp_path: Path) -> None:
    """A service limited to 8 sequences a request: the file's 100 records go 8 at a time, every one answered."""
    stand_in.max_sequences = 8
    proteins = fasta(tmp_path / "in.fasta", 100)
    summary = Client(stand_in.url).embed_file(tmp_path / "in.fasta", tmp_path / "out.parquet")
    assert (summary.records, summary.failed) == (100, 0)
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == [name for name, _ in proteins]
    assert max(len(body["sequences"]) for body in stand_in.bodies) == 8
    assert len(Client(stand_in.url).embed(["MKT"] * 20)) == 20


def test_a_job_with_records_refused_exits_3_and_a_whole_one_0(stand_in, tmp_path: Path) -> None:
    """As rsync's partial transfer: a pipeline must not go on as if the output held every record."""
    fasta(tmp_path / "bad.fasta", 20, bad=(3,))
    fasta(tmp_path / "good.fasta", 20)
    partial = subprocess.run(cli(stand_in, "embed", str(tmp_path / "bad.fasta"), "-o", str(tmp_path / "b.parquet")),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert partial.returncode == 3 and "19 done, 1 failed" in partial.stderr
    whole = subprocess.run(cli(stand_in, "embed", str(tmp_path / "good.fasta"), "-o", str(tmp_path / "g.parquet")),
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert whole.returncode == 0, whole.stderr


@pytest.mark.parametrize(("name", "given"), [("in.smi.gz", None), ("in.txt", "smi")])
def test_smiles_files_go_to_the_molecule_model(stand_in, tmp_path: Path, name: str, given: str | None) -> None:
    """`.smi.gz` and `--format smi` are molecules as `.smi` is: embed sends them to megamolbart."""
    path = tmp_path / name
    text = "CCO ethanol\nc1ccccc1 benzene\n"
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    subprocess.run(cli(stand_in, "embed", str(path), "-o", str(tmp_path / "o.parquet"), *(["--format", given] if given else [])),
                   capture_output=True, text=True, timeout=120)  # fmt: skip
    assert [body["model"] for body in stand_in.bodies] == ["megamolbart"]
