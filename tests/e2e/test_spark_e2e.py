"""`bentoml.batch.run_in_spark` of the built bento in Spark's local mode (`local[2]`), as `make bench`'s Spark line runs
it (benchmarks/spark_throughput.py): 400 proteins read from a Parquet file, range-partitioned by id in two, each
partition embedded through /embed/dataframe by the bento server its task starts (esm2nv alone, BIONEMO_MODELS), in
Arrow batches of 100 rows. The answer comes back in id order, equal to /embed's for the same proteins (the session's
service, over HTTP) and, for a sample, to transformers' on the same weights. run_in_spark never stops the servers it
starts; every process the job started is stopped by PID after it, and no tritonserver of it is left."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.spark_throughput import job_processes, run_job
from bionemo_serving.preprocessing.protein_tokenizer import STANDARD_RESIDUES
from support.bento import tag_of
from support.reference import TOLERANCE, TransformersReference
from support.service import RunningService, triton_processes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROTEINS = 400
LENGTHS = (20, 150)
"""Residues per protein: short, so that the job and /embed's check of it fit make test's time (2,000 go through the
cluster in test_spark_cluster_e2e.py)."""
SAMPLE = (0, 1, 199, 200, 399)
"""Rows checked against transformers too: each partition's first and last."""


def test_run_in_spark_of_the_bento_answers_embed_s_embeddings_in_id_order_and_leaves_nothing(
    service: RunningService, bento_home: Path, cpu_bento: Path, tmp_path: Path
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs Java: `make test` installs it (python -m operations.tools.java_runtime --provision)")
    rng = np.random.default_rng(17)
    residues = list(STANDARD_RESIDUES)
    sequences = ["".join(rng.choice(residues, size=int(rng.integers(*LENGTHS)))) for _ in range(PROTEINS)]
    ids = [f"P{row:05d}" for row in range(PROTEINS)]
    source, destination = tmp_path / "proteins.parquet", tmp_path / "embeddings.parquet"
    pd.DataFrame({"id": ids, "sequence": sequences}).to_parquet(source)
    triton_before = triton_processes()

    run = run_job(bento_home, tag_of(cpu_bento), source, destination, tmp_path, partitions=2, records_per_batch=100)
    print(f"run_in_spark: {run.seconds:.1f} s; the job's process: {run.wall_s:.1f} s; stopped {len(run.stopped)} left")
    assert run.stopped, "the job left no server: run_in_spark started none?"
    assert not job_processes(run.marker)
    assert triton_processes() <= triton_before, "a tritonserver (or its stubs) of the job is left"
    shared_memory = {region.name for region in Path("/dev/shm").glob("triton_python_backend_shm_region_*")}
    assert not [name for name in shared_memory if any(f"_region_{pid}_" in name for pid in run.stopped)]

    answer = pd.read_parquet(destination)
    assert list(answer.columns) == ["id", "embedding"] and answer["id"].tolist() == ids
    vectors = np.stack(answer["embedding"].tolist())
    assert vectors.dtype == np.float32 and vectors.shape == (PROTEINS, 320)
    embedded = np.concatenate([
        np.asarray(service.answer("/embed", {"sequences": sequences[start : start + 64]})["embeddings"], np.float32)
        for start in range(0, PROTEINS, 64)
    ])  # fmt: skip
    np.testing.assert_allclose(vectors, embedded, rtol=0, atol=TOLERANCE)
    reference = TransformersReference("esm2nv")
    expected = np.stack([reference.mean_embedding(sequences[row]) for row in SAMPLE])
    np.testing.assert_allclose(vectors[list(SAMPLE)], expected, rtol=0, atol=TOLERANCE)
