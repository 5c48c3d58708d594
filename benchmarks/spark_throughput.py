"""`make bench`'s Spark lines: `bentoml.batch.run_in_spark` of the built bento, in sequences/s, in Spark's local mode
and on a standalone cluster of two workers on this machine.

    python -m benchmarks.spark_throughput [--sequences 2000] [--partitions 2] [--master 'local[2]'] [--cluster 2]
    python -m benchmarks.spark_throughput --render benchmarks/results/spark.json [--doc docs/benchmarks-<cpu>.md]

The cpu bento of esm2nv alone on onnxruntime (`build_bento.py --models esm2nv --runtimes ...`: what the job's servers
load, 33 MB instead of the whole bento's 342 MB), built into a BentoML home of this run's own; N proteins of the
bench's workload
(benchmarks.workload: UniProt-like lengths, median about 270 residues) in a Parquet file; then the Spark job
(`embed_in_spark`, run as `python -m benchmarks.spark_throughput job ...` in a session of its own): the frame read
from the file, range-partitioned by id into --partitions, each partition embedded through /embed/dataframe by a
bento server of its task's own (run_in_spark starts one per task) that serves esm2nv alone (BIONEMO_MODELS), and
collected in id order. The figure is the sequences over the job's wall time from run_in_spark to the collected
answer: the bento's distribution to the executors and the servers' start-up are in it, as they are in any job.

The job runs against --master (local mode, or `spark://...` of a cluster already running), then on a standalone
cluster of --cluster one-core workers started on 127.0.0.1 (benchmarks.spark_cluster). On a cluster run_in_spark ships
the bento as it would to other machines (BentoML's `_distribute_bento`: the xz export, added to SparkFiles; each
executor imports it into its worker's own bento store); that export is also timed apart, before the job. Each answer
is checked (every protein once, in id order): a miss exits 1, after benchmarks/results/spark.json is written.

run_in_spark never stops the servers it starts, and they outlive Spark's Python workers: every process the job
started carries this run's marker in its environment (MARKER_VARIABLE), and `stop_job_processes` stops each of them by
PID once the job has ended (on a cluster through spark.executorEnv: EXECUTOR_VARIABLES). tests/e2e/test_spark_cluster_e2e.py
runs the same job on the cluster, one worker killed mid-job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks import record
from benchmarks.processes import terminate
from benchmarks.spark_cluster import StandaloneCluster
from benchmarks.workload import protein

ROOT = Path(__file__).resolve().parent.parent
BENTO_OPTIONS = ("--target", "cpu", "--models", "esm2nv", "--runtimes", "onnxruntime,onnxruntime-fused")
"""build_bento.py's options for the job's bento: the model and the runtime its servers serve (no launcher, so each
graph runs on what its config names: onnxruntime), nothing else for run_in_spark to compress and ship."""
API = "embed_dataframe"
"""The bento's API run_in_spark calls (bionemo_serving/fronts/dataframe/routes.py)."""
MODELS = "esm2nv"
"""What the job's bento servers load (BIONEMO_MODELS): /embed/dataframe's model alone, for a short start-up."""
MARKER_VARIABLE = "BIONEMO_SPARK_JOB"
EXECUTOR_VARIABLES = (
    MARKER_VARIABLE, "BIONEMO_MODELS", "BIONEMO_REQUEST_TIMEOUT_S", "BENTOML_CONFIG_OPTIONS", "BENTOML_DO_NOT_TRACK",
    "HF_HUB_OFFLINE",
)  # fmt: skip
"""The driver's variables given to a cluster's executors (spark.executorEnv.*, which reach their Python workers and
the bento servers those start); local mode's executors inherit the driver's whole environment. Not BENTOML_HOME:
a cluster's executors have a store of their own (on this machine's cluster, each worker's)."""
JOB_TIMEOUT_S = 900
STOP_GRACE_S = 30
SEED = 2_000_003
RECORDS_PER_BATCH = 250
"""Rows of each Arrow batch, each one request to a task's server (Spark's default, 10,000 UniProt-like proteins, takes
minutes on 2 cores): 250 took about 19 s with one server on 2 cores, 37 s each with two (docs/spark.md)."""
REQUEST_DEADLINE_S = 570
"""BIONEMO_REQUEST_TIMEOUT_S of the job's servers, and BentoML's own deadline 30 s past it: run_in_spark's servers are
`bentoml serve`s without the launcher, whose requests BentoML ends after its default 60 s (api_server.traffic.timeout),
which a batch on a slower or busier machine could reach."""


def output_schema(id_type: Any) -> Any:
    """The StructType to pass run_in_spark for /embed/dataframe: BentoML 1.4.39 cannot make it (docs/spark.md).
    `id_type`: the Spark type of the input's id column (`frame.schema["id"].dataType`), which the answer keeps."""
    from pyspark.sql.types import ArrayType, FloatType, StructField, StructType

    return StructType([StructField("id", id_type), StructField("embedding", ArrayType(FloatType()))])


def skip_shipping_the_bento() -> None:
    """run_in_spark's first step, `_distribute_bento`, exports the bento as an xz archive (`.bento`) and adds it to
    Spark's files, for executors whose bento store lacks it. In local mode the executors read the driver's store, and
    the archive is never opened; xz over this bento's 340 MB of weights took 215 s on a busy 2-core AMD EPYC
    (2026-11-28). Replaced here by the name of the archive alone: no export. A BentoML without that function fails."""
    from bentoml._internal.batch import spark

    if not callable(getattr(spark, "_distribute_bento", None)):
        raise RuntimeError("BentoML's spark._distribute_bento is gone: see benchmarks/spark_throughput.py")
    spark._distribute_bento = lambda session, bento: f"{bento.tag.name}-{bento.tag.version}.bento"


def embed_in_spark(
    bento_tag: str,
    source: Path,
    destination: Path,
    partitions: int,
    master: str,
    records_per_batch: int | None = None,
    ship_bento: bool = False,
) -> float:
    """The job, in this process: `source`'s proteins (Parquet: id, sequence) embedded by run_in_spark of the bento
    `bento_tag` over `partitions` partitions in id order, written to `destination` (Parquet: id, embedding) in that
    order; the seconds from run_in_spark to the collected answer. Without `ship_bento`, in local mode, run_in_spark
    does not export the bento for its executors (`skip_shipping_the_bento`)."""
    import bentoml
    from pyspark.sql import SparkSession

    local = master.startswith("local")
    if local and not ship_bento:
        skip_shipping_the_bento()

    builder = (
        SparkSession.builder.master(master)
        .appName("bionemo-embed")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", tempfile.gettempdir())
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if not local:
        # Every executor registered before the first task, and no task held back for locality: one partition to
        # each executor's slot.
        builder = builder.config("spark.scheduler.minRegisteredResourcesRatio", "1.0").config("spark.locality.wait", "0")
        for name in EXECUTOR_VARIABLES:
            if name in os.environ:
                builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    if records_per_batch:
        builder = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(records_per_batch))
    spark = builder.getOrCreate()
    try:
        frame = spark.read.parquet(str(source))
        frame = frame.repartitionByRange(partitions, "id").sortWithinPartitions("id")
        started = time.perf_counter()
        schema = output_schema(frame.schema["id"].dataType)
        embedded = bentoml.batch.run_in_spark(bentoml.get(bento_tag), frame, spark, api_name=API, output_schema=schema)
        answer = embedded.toPandas()
        seconds = time.perf_counter() - started
    finally:
        spark.stop()
    answer.to_parquet(destination)
    return seconds


@dataclass(frozen=True)
class JobRun:
    marker: str
    """The value of MARKER_VARIABLE in the environment of every process the job started."""
    seconds: float
    """From run_in_spark to the collected answer, as the job measured it."""
    wall_s: float
    """The job's whole process: Spark's start and stop too."""
    stopped: list[int]
    """PIDs of the processes the job left running, stopped here."""


class JobFailed(RuntimeError):
    """The job exited with an error or ran past its time; the message holds the tail of its log."""


def _marked(process: psutil.Process, marker: str) -> bool:
    try:
        return process.pid != os.getpid() and process.environ().get(MARKER_VARIABLE) == marker
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def job_processes(marker: str) -> list[psutil.Process]:
    """Every process still running that the job with `marker` started, directly or not."""
    return [process for process in psutil.process_iter() if _marked(process, marker)]


def stop_job_processes(marker: str) -> list[int]:
    """SIGTERM every process the job with `marker` left (tritonserver ends its python-backend stubs and removes their
    shared memory on it), then SIGKILL what is left after STOP_GRACE_S; the PIDs stopped."""
    return terminate(job_processes(marker), STOP_GRACE_S)


def job_environment(bentoml_home: Path, workdir: Path, marker: str) -> dict[str, str]:
    """The job's environment: the bento store, the models to load, this venv's Python for Spark's workers and its
    bin (tritonserver's wrapper) first on PATH, temporary files (run_in_spark's export of the bento, Spark's
    scratch) under `workdir`, requests given REQUEST_DEADLINE_S, and the marker every process it starts inherits."""
    scratch = workdir / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        BENTOML_HOME=str(bentoml_home),
        BENTOML_DO_NOT_TRACK="true",
        BIONEMO_MODELS=MODELS,
        PYSPARK_PYTHON=sys.executable,
        TMPDIR=str(scratch),
        HF_HUB_OFFLINE="1",
        SPARK_LOCAL_IP="127.0.0.1",
        BIONEMO_REQUEST_TIMEOUT_S=str(REQUEST_DEADLINE_S),
        BENTOML_CONFIG_OPTIONS=f"api_server.traffic.timeout={REQUEST_DEADLINE_S + 30}",
        **{MARKER_VARIABLE: marker},
    )


def run_job(
    bentoml_home: Path,
    bento_tag: str,
    source: Path,
    destination: Path,
    workdir: Path,
    partitions: int = 2,
    master: str = "local[2]",
    records_per_batch: int | None = None,
    ship_bento: bool = False,
    timeout_s: float = JOB_TIMEOUT_S,
    while_running: Callable[[str], object] | None = None,
) -> JobRun:
    """`embed_in_spark` in a process (and session) of its own; then every process it left is stopped by PID.
    `while_running`, where given, is called with the job's marker in a thread as the job starts (what it raises is
    raised here once the job has ended and been cleaned up)."""
    marker = uuid.uuid4().hex
    log_path = workdir / "spark-job.log"
    report = workdir / "spark-job.json"
    command = [
        sys.executable, "-m", "benchmarks.spark_throughput", "job", "--bento", bento_tag, "--input", str(source),
        "--output", str(destination), "--partitions", str(partitions), "--master", master, "--report", str(report),
        *(["--records-per-batch", str(records_per_batch)] if records_per_batch else []),
        *(["--ship-bento"] if ship_bento else []),
    ]  # fmt: skip
    started = time.perf_counter()
    with log_path.open("wb") as log:
        job = subprocess.Popen(
            command, cwd=ROOT, env=job_environment(bentoml_home, workdir, marker), stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    watcher = _Watcher(while_running, marker) if while_running else None
    try:
        status = job.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status = None
    finally:
        stopped = _stop_group(job) + stop_job_processes(marker)
        if watcher:
            watcher.join(STOP_GRACE_S)
    wall_s = time.perf_counter() - started
    if watcher and watcher.error:
        raise watcher.error
    if status != 0:
        ran = "ran past its time" if status is None else f"exited with {status}"
        tail = log_path.read_text(errors="replace")[-6000:]
        raise JobFailed(f"the Spark job {ran}; stopped {len(stopped)} processes it left\n--- log (tail) ---\n{tail}")
    return JobRun(marker, json.loads(report.read_text())["seconds"], wall_s, sorted(set(stopped)))


class _Watcher(threading.Thread):
    """`run_job`'s `while_running`, in a thread; what it raised in `error`."""

    def __init__(self, function: Callable[[str], object], marker: str) -> None:
        super().__init__(name="spark-job-watcher", daemon=True)
        self.function, self.marker, self.error = function, marker, None
        self.start()

    def run(self) -> None:
        try:
            self.function(self.marker)
        except BaseException as error:  # noqa: BLE001 (raised again in the caller's thread)
            self.error = error


def _stop_group(job: subprocess.Popen) -> list[int]:
    """The job's own process group (its JVM among them), where anything of it runs still: SIGTERM, then SIGKILL."""
    members = [process for process in psutil.process_iter() if _in_group(process, job.pid)]
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(job.pid, sent)
        except ProcessLookupError:
            break
        try:
            job.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        _, alive = psutil.wait_procs(members, timeout=STOP_GRACE_S if sent == signal.SIGTERM else 5)
        if not alive:
            break
    return [process.pid for process in members]


def _in_group(process: psutil.Process, group: int) -> bool:
    try:
        return os.getpgid(process.pid) == group
    except (ProcessLookupError, PermissionError):
        return False


def build_bento(bentoml_home: Path, options: Sequence[str] = BENTO_OPTIONS) -> str:
    """build_bento.py's bento (BENTO_OPTIONS: esm2nv on onnxruntime) in `bentoml_home`; its tag."""
    environment = dict(os.environ, BENTOML_HOME=str(bentoml_home), BENTOML_DO_NOT_TRACK="true")
    built = subprocess.run(
        [sys.executable, "build_bento.py", *options], cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    tag = re.search(r"^built (bionemo:\w+) ", built.stdout, re.MULTILINE)
    if built.returncode != 0 or tag is None:
        raise SystemExit(f"build_bento.py failed:\n{built.stderr[-3000:]}")
    return tag.group(1)


def time_the_export(bentoml_home: Path, bento_tag: str, folder: Path) -> tuple[float, int, int]:
    """What run_in_spark's `_distribute_bento` makes, apart: `Bento.export` of `bento_tag` as its default `.bento` (xz)
    into `folder`, in a process of its own; its seconds, the archive's bytes and the bento's (its files, each once)."""
    environment = dict(os.environ, BENTOML_HOME=str(bentoml_home), BENTOML_DO_NOT_TRACK="true")
    command = [sys.executable, "-m", "benchmarks.spark_throughput", "export", "--bento", bento_tag, "--into", str(folder)]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the bento's export failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["seconds"], report["archive_bytes"], report["bento_bytes"]


def export_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_throughput export")
    parser.add_argument("--bento", required=True)
    parser.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    import bentoml

    bento = bentoml.get(args.bento)
    files = {path.stat().st_ino: path.stat().st_size for path in Path(bento.path).rglob("*") if path.is_file()}
    started = time.perf_counter()
    archive = bento.export(str(args.into))
    seconds = time.perf_counter() - started
    sizes = {"archive_bytes": os.path.getsize(archive), "bento_bytes": sum(files.values())}
    print(json.dumps({"seconds": seconds, **sizes}))
    return 0


def write_proteins(path: Path, count: int, seed: int = SEED) -> list[str]:
    """`count` proteins of the bench's workload, ids p000000, p000001, ... in order, as Parquet (id, sequence)."""
    import pandas as pd

    rng = random.Random(seed)
    sequences = [protein(rng) for _ in range(count)]
    pd.DataFrame({"id": [f"p{row:06d}" for row in range(count)], "sequence": sequences}).to_parquet(path)
    return sequences


@dataclass(frozen=True)
class ModeRun:
    """The job in one place: local mode, or the cluster."""

    where: str
    seconds: float
    sequences_per_s: float
    job_process_s: float
    processes_left: int
    """Processes the job left running (run_in_spark's servers), stopped by PID after it."""
    shipping: dict[str, float] | None
    """The bento's xz export, timed apart: seconds, MB as xz, MB of the bento; None in local mode."""
    complete_in_order: bool
    """The answer holds every protein once, in id order, each with an embedding of the model's width."""


def answer_is_complete(path: Path, count: int) -> bool:
    import pyarrow.parquet

    table = pyarrow.parquet.read_table(path).to_pydict()
    widths = {len(embedding) for embedding in table["embedding"]}
    return table["id"] == [f"p{row:06d}" for row in range(count)] and len(widths) == 1 and widths != {0}


def run_mode(workdir: Path, tag: str, count: int, partitions: int, records_per_batch: int, workers: int, master: str,
             ship_bento: bool) -> ModeRun:  # fmt: skip
    """The job against `master`, or with `workers` on a standalone cluster started here for it."""
    folder = Path(tempfile.mkdtemp(prefix="mode-", dir=workdir))
    shipping = None
    if workers or not master.startswith("local") or ship_bento:
        seconds, archive, size = time_the_export(workdir / "bentoml-home", tag, folder)
        shipping = {"export_s": round(seconds, 1), "archive_mb": round(archive / 1e6, 1), "bento_mb": round(size / 1e6, 1)}
    cluster = StandaloneCluster(folder / "cluster", workers=workers) if workers else None
    with cluster or contextlib.nullcontext():
        where = cluster.master_url if cluster else master
        run = run_job(
            workdir / "bentoml-home", tag, workdir / "proteins.parquet", folder / "embeddings.parquet", folder,
            partitions, where, records_per_batch, ship_bento,
        )  # fmt: skip
    return ModeRun(
        f"a standalone cluster of {workers} one-core workers" if workers else master, round(run.seconds, 1),
        round(count / run.seconds, 2), round(run.wall_s, 1), len(run.stopped), shipping,
        answer_is_complete(folder / "embeddings.parquet", count),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]", help="local[N], or spark://HOST:PORT of a cluster running")
    parser.add_argument("--cluster", type=int, default=2, metavar="WORKERS", help="then a cluster of WORKERS here (0: none)")
    parser.add_argument(
        "--records-per-batch", type=int, default=RECORDS_PER_BATCH, help="spark.sql.execution.arrow.maxRecordsPerBatch"
    )
    parser.add_argument("--ship-bento", action="store_true", help="in local mode, export the bento (xz) all the same")
    parser.add_argument("--whole-bento", action="store_true", help="build_bento.py's whole cpu bento: every model")
    parser.add_argument("--json", type=Path, help="where the raw results go (default: benchmarks/results/spark.json)")
    record.add_render_options(parser)
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_cpu_page(args.render, args.doc, render)
    measured_at = record.commit()
    options = ("--target", "cpu") if args.whole_bento else BENTO_OPTIONS
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as folder:
        workdir = Path(folder)
        tag = build_bento(workdir / "bentoml-home", options)
        sequences = write_proteins(workdir / "proteins.parquet", args.sequences)
        modes = [(0, args.master), *([(args.cluster, "")] if args.cluster else [])]
        runs = [
            run_mode(workdir, tag, len(sequences), args.partitions, args.records_per_batch, workers, master, args.ship_bento)
            for workers, master in modes
        ]
    for run in runs:
        print(f"spark: {run.where}: {run.seconds:.1f} s, {run.sequences_per_s:.1f} sequences/s, shipping {run.shipping}")
    targets = {
        f"{run.where}: every protein once, in id order": {"value": run.complete_in_order, "target": "complete", "met": run.complete_in_order}
        for run in runs
    }  # fmt: skip
    result = {
        **record.header("spark-throughput", argv if argv is not None else sys.argv[1:], measured_at),
        "sequences": len(sequences), "residues": sum(map(len, sequences)), "partitions": args.partitions,
        "records_per_batch": args.records_per_batch, "runs": [asdict(run) for run in runs], "targets": targets,
    }  # fmt: skip
    destination = args.json or record.RESULTS / "spark.json"
    return record.finish(result, destination, render)


def render(run: dict[str, Any]) -> str:
    """The run's markdown, between its markers in docs/benchmarks-<cpu>.md (`--render FILE`)."""
    lines = [
        "<!-- spark: begin -->",
        f"{run['sequences']:,} proteins of the bench's workload ({run['residues']:,} residues), {run['partitions']} "
        f"partitions, Arrow batches of {run['records_per_batch']}; {run['cpu']} ({run['cores']} cores), {run['date']}, "
        f"commit {run['commit']}: `{run['command']}`. Job: run_in_spark to the collected answer, start-up included.",
        "",
        "| where | job | sequences/s | the bento's xz export, timed apart | complete, in order |",
        "|---|---:|---:|---|---|",
    ]
    for mode in run["runs"]:
        shipping = mode["shipping"]
        shipped = (
            f"{shipping['export_s']} s ({shipping['bento_mb']} MB bento, {shipping['archive_mb']} MB as xz)" if shipping
            else "none (local mode reads the driver's store)"
        )  # fmt: skip
        lines.append(
            f"| {mode['where']} | {mode['seconds']} s | {mode['sequences_per_s']} | {shipped} | "
            f"{'yes' if mode['complete_in_order'] else '**no**'} |"
        )
    lines.append("<!-- spark: end -->")
    return "\n".join(lines)


def job_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_throughput job")
    parser.add_argument("--bento", required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--records-per-batch", type=int, default=None)
    parser.add_argument("--ship-bento", action="store_true")
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args(argv)
    seconds = embed_in_spark(
        args.bento, args.input, args.output, args.partitions, args.master, args.records_per_batch, args.ship_bento
    )
    args.report.write_text(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    commands = {"job": job_main, "export": export_main}
    sys.exit(commands[sys.argv[1]](sys.argv[2:]) if sys.argv[1:2] and sys.argv[1] in commands else main())
