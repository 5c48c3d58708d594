"""`bentoml.batch.run_in_spark` on a Spark standalone cluster: a master and two one-core workers on 127.0.0.1, started
from pyspark's own spark-class and stopped by PID (benchmarks/spark_cluster.py), with BentoML's own shipping of the
bento (its xz export in SparkFiles, imported by each executor into its worker's empty bento store). 2,000 proteins,
range-partitioned by id in two: one task on each worker, each starting its bento server (esm2nv alone). Once both
servers run, one worker's JVM and its executor's JVM are killed (SIGKILL, by PID), as a lost machine; Spark runs the
lost task again on the other worker, and the answer is complete, in id order and equal to /embed's (the session's
service) and, for a sample, to transformers' on the same weights. Nothing is stubbed; every process the job started,
and the cluster's, is stopped by PID after it, and no tritonserver of it is left. (Spark's local mode, `local[2]`,
runs the same job: `make bench`'s Spark line.)"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from benchmarks.spark_cluster import StandaloneCluster
from benchmarks.spark_throughput import BENTO_OPTIONS, job_processes, run_job
from bionemo_serving.preprocessing.protein_tokenizer import STANDARD_RESIDUES
from support import bento
from support.reference import TOLERANCE, TransformersReference
from support.service import RunningService, triton_processes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROTEINS = 2000
LENGTHS = (20, 150)
"""Residues per protein: short, so that the job, its lost task run again, and /embed's check fit make test's time."""
RECORDS_PER_BATCH = 125
"""Eight requests a partition: the lost worker has answered some of its partition, not all, when it is killed."""
SAMPLE = (0, 999, 1000, 1999)
"""Rows checked against transformers too: each partition's first and last."""
SERVED_S = 8
"""How long both workers' bento servers run before one worker is lost."""
SERVERS_TIMEOUT_S = 300
TASK_EVENT = re.compile(r"Executor: (Running|Finished) task \d+\.\d+ in stage (\d+)\.\d+ ")


def task_events(executor_log: str) -> list[tuple[str, int]]:
    """(Running or Finished, stage) of each task event in an executor's log."""
    return [(event, int(stage)) for event, stage in TASK_EVENT.findall(executor_log)]


def _of(region: Path, lost: dict[str, object]) -> bool:
    """Whether a python-backend stub's shared memory (`..._region_<tritonserver's pid>_<uuid>`) is the lost worker's."""
    return any(f"_region_{pid}_" in region.name for pid in lost.get("pids", []))  # type: ignore[attr-defined]


def test_run_in_spark_on_a_standalone_cluster_survives_a_lost_worker_and_answers_embed_s_embeddings_in_order(
    service: RunningService, tmp_path: Path
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs Java: `make test` installs it (python -m operations.tools.java_runtime --provision)")
    rng = np.random.default_rng(29)
    residues = list(STANDARD_RESIDUES)
    sequences = ["".join(rng.choice(residues, size=int(rng.integers(*LENGTHS)))) for _ in range(PROTEINS)]
    ids = [f"Q{row:05d}" for row in range(PROTEINS)]
    source, destination = tmp_path / "proteins.parquet", tmp_path / "embeddings.parquet"
    pd.DataFrame({"id": ids, "sequence": sequences}).to_parquet(source)
    driver_home = tmp_path / "bentoml-home"
    built = bento.build(driver_home, *BENTO_OPTIONS[1:])  # esm2nv on onnxruntime: what the executors serve
    shipped = {path.relative_to(built / "src").parts[0] for path in (built / "src").rglob("*")}
    assert not shipped & {"tests", "benchmarks", "docs", "clients", "checkpoints"}, f"the shipped bento holds {shipped}"
    graphs = [path.name for path in (built / "src" / "model_repository").iterdir() if path.is_dir()]
    assert graphs and all(name.startswith("esm2nv") for name in graphs), graphs
    triton_before = triton_processes()

    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        daemons = cluster.pids()
        lost: dict[str, object] = {}

        def lose_a_worker(marker: str) -> None:
            deadline = time.monotonic() + SERVERS_TIMEOUT_S
            while not cluster.runs_on_every_worker("tritonserver"):
                assert time.monotonic() < deadline, f"no bento server on both workers after {SERVERS_TIMEOUT_S} s"
                time.sleep(0.5)
            time.sleep(SERVED_S)
            lost["job running"] = bool(job_processes(marker)) and not destination.exists()
            lost["pids"] = cluster.lose_worker(1)

        run = run_job(
            driver_home, bento.tag_of(built), source, destination, tmp_path, partitions=2,
            master=cluster.master_url, records_per_batch=RECORDS_PER_BATCH, while_running=lose_a_worker,
        )  # fmt: skip
        print(f"run_in_spark on the cluster: {run.seconds:.1f} s; the job's process {run.wall_s:.1f} s; stopped "
              f"{len(run.stopped)} left; worker-2 lost, {len(lost['pids'])} processes")  # fmt: skip
        state = cluster.state()
        survivor, killed = task_events(cluster.executor_log(0)), task_events(cluster.executor_log(1))
        lost_executors = cluster.executor_ids(1)
        stores = [cluster.bento_store(worker) / "bentos" / built.parent.name / built.name for worker in (0, 1)]
        assert lost.get("job running"), "the worker was not lost mid-job"
        assert cluster.worker_state(1, state) == "DEAD" and cluster.worker_state(0, state) == "ALIVE", state["workers"]
        assert [app["state"] for app in state["completedapps"]] == ["FINISHED"] and not state["activeapps"]
        assert all(store.is_dir() for store in stores), "an executor did not import the shipped bento into its store"
    assert not [pid for pid in [*daemons, *lost["pids"]] if psutil.pid_exists(pid)], "a daemon of the cluster is left"

    # The lost worker's tritonserver ended without removing its stubs' shared memory, as on a lost machine, whose
    # memory goes with it; on this one its regions are removed here.
    lost_regions = [path for path in Path("/dev/shm").glob("triton_python_backend_shm_region_*") if _of(path, lost)]
    for path in lost_regions:
        path.unlink(missing_ok=True)
    driver_log = (tmp_path / "spark-job.log").read_text(errors="replace")
    assert [f"Lost executor {executor} on 127.0.0.1: worker lost" in driver_log for executor in lost_executors] == [True]
    embedding = max(stage for _, stage in survivor + killed)  # run_in_spark's mapInArrow, collected: the last stage
    assert ("Running", embedding) in killed and ("Finished", embedding) not in killed, killed
    assert survivor.count(("Finished", embedding)) == 2, f"the lost task was not run again on worker-1: {survivor}"
    assert run.stopped and not job_processes(run.marker)
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
