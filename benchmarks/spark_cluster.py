"""A Spark standalone cluster on 127.0.0.1: a master and workers started from pyspark's own `spark-class`, stopped by PID.

    with StandaloneCluster(workdir, workers=2) as cluster:
        ...  # spark-submit / SparkSession.builder.master(cluster.master_url)

What `make bench`'s cluster line (`python -m benchmarks.spark_throughput --cluster 2`) and
tests/e2e/test_spark_cluster_e2e.py run `bentoml.batch.run_in_spark` against. Each daemon is
`spark-class org.apache.spark.deploy.master.Master` or `...deploy.worker.Worker` from pyspark's bundled jars and
scripts (spark-class execs the JVM: the PID started is the JVM's), on ports found free on 127.0.0.1 with
SPARK_LOCAL_IP=127.0.0.1, logging to a file in `workdir`; its PID is recorded and, at the end, it and every process
under it are stopped by PID (SIGTERM, then SIGKILL). Each worker is a machine of its own as far as the job can see:
WORKER_CORES core, WORKER_MEMORY for its executor's JVM, a work directory of its own (executors' folders, SparkFiles)
and a bento store of its own, empty at the start (BENTOML_HOME in its environment, which its executors inherit), so
that run_in_spark's executors import the bento the driver ships instead of reading the driver's store. The master
gives up on a worker that has not sent a heartbeat for WORKER_TIMEOUT_S (spark.worker.timeout; a worker whose JVM
ends is dropped at once, as its connection closes).

`lose_worker` is a machine lost mid-job: SIGKILL to a worker's JVM and to its executors' JVMs, by PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.processes import terminate

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
HOST = "127.0.0.1"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
"""What each worker offers: one executor of spark.executor.memory's default (1g) per worker. The bento server a task
starts runs beside the JVM, outside this memory."""
WORKER_TIMEOUT_S = 10
START_TIMEOUT_S = 120
STOP_GRACE_S = 20
LOST_GRACE_S = 10


class ClusterError(RuntimeError):
    """A daemon did not start, or ended; the message holds its log's tail."""


def spark_home() -> Path:
    """pyspark's folder: its jars/ and bin/spark-class are Spark's own."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


@dataclass
class Daemon:
    role: str
    """`master`, `worker-1`, ..."""
    process: subprocess.Popen
    port: int
    webui_port: int
    log: Path
    home: Path
    """Its folder in the cluster's workdir (a worker's work directory, bento store and temporary files are in it)."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, characters: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-characters:] if self.log.exists() else "(no log)"


@dataclass
class StandaloneCluster:
    workdir: Path
    workers: int = 2
    cores: int = WORKER_CORES
    memory: str = WORKER_MEMORY
    environment: dict[str, str] = field(default_factory=dict)
    """Added to every daemon's environment (the workers' executors inherit it)."""
    master: Daemon | None = None
    worker_daemons: list[Daemon] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    """PIDs `lose_worker` killed."""

    @property
    def master_url(self) -> str:
        assert self.master is not None, "the cluster is not started"
        return f"spark://{HOST}:{self.master.port}"

    @property
    def webui_url(self) -> str:
        assert self.master is not None, "the cluster is not started"
        return f"http://{HOST}:{self.master.webui_port}"

    def bento_store(self, worker: int) -> Path:
        """BENTOML_HOME of worker `worker`'s executors (0-based)."""
        return self.worker_daemons[worker].home / "bentoml"

    def pids(self) -> list[int]:
        return [daemon.pid for daemon in [self.master, *self.worker_daemons] if daemon is not None]

    def _environment(self, home: Path) -> dict[str, str]:
        scratch = home / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_DIRS": str(scratch),
            "SPARK_DAEMON_JAVA_OPTS": f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}",  # workers beat every quarter
            "BENTOML_HOME": str(home / "bentoml"),
            "BENTOML_DO_NOT_TRACK": "true",
            "TMPDIR": str(scratch),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYSPARK_PYTHON": sys.executable,
            **self.environment,
        }

    def _start(self, role: str, arguments: list[str], port: int, webui_port: int) -> Daemon:
        home = self.workdir / role
        home.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{role}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *arguments], cwd=home, env=self._environment(home),
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return Daemon(role, process, port, webui_port, log, home)

    def start(self) -> StandaloneCluster:
        """The master, then the workers; returns once the master counts every worker ALIVE (ClusterError past
        START_TIMEOUT_S, or where a daemon ends)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        port, webui = free_port(), free_port()
        arguments = [MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui)]
        self.master = self._start("master", arguments, port, webui)
        self._wait(lambda state: state.get("status") == "ALIVE", "the master to be ALIVE")
        for number in range(1, self.workers + 1):
            port, webui = free_port(), free_port()
            home = self.workdir / f"worker-{number}"
            arguments = [
                WORKER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui), "--cores",
                str(self.cores), "--memory", self.memory, "--work-dir", str(home / "work"), self.master_url,
            ]  # fmt: skip
            self.worker_daemons.append(self._start(f"worker-{number}", arguments, port, webui))
        self._wait(lambda state: len(self.alive_workers(state)) == self.workers, f"{self.workers} workers ALIVE")
        return self

    def state(self) -> dict[str, Any]:
        """The master's JSON (its web UI's /json): workers, their state, applications running and completed."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as answer:
            return json.loads(answer.read())

    def alive_workers(self, state: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return [worker for worker in (state or self.state())["workers"] if worker["state"] == "ALIVE"]

    def worker_state(self, worker: int, state: dict[str, Any] | None = None) -> str | None:
        """What the master says of worker `worker` (0-based): ALIVE, DEAD...; None where it does not list it."""
        port = self.worker_daemons[worker].port
        listed = [entry for entry in (state or self.state())["workers"] if entry["port"] == port]
        return listed[-1]["state"] if listed else None

    def _wait(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ended = [daemon for daemon in [self.master, *self.worker_daemons] if daemon and daemon.process.poll() is not None]
            if ended:
                daemon = ended[0]
                raise ClusterError(f"{daemon.role} exited with {daemon.process.returncode}:\n{daemon.log_tail()}")
            try:
                if condition(self.state()):
                    return
            except OSError:
                pass  # the web UI is not up yet
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} after {START_TIMEOUT_S} s:\n{self.master.log_tail() if self.master else ''}")
            time.sleep(0.5)

    def worker_processes(self, worker: int) -> list[psutil.Process]:
        """Every process under worker `worker`'s JVM (0-based): its executors' JVMs, their Python workers and what
        those started (run_in_spark's bento servers)."""
        try:
            return psutil.Process(self.worker_daemons[worker].pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def executors(self, worker: int) -> list[psutil.Process]:
        """The executor JVMs worker `worker` (0-based) runs."""
        return [process for process in self.worker_processes(worker) if _runs(process, EXECUTOR_CLASS)]

    def executor_ids(self, worker: int) -> list[str]:
        """The ids of the executors worker `worker` (0-based) has run (its work directory's app-*/<id>)."""
        return sorted(folder.name for folder in (self.worker_daemons[worker].home / "work").glob("app-*/*"))

    def executor_log(self, worker: int) -> str:
        """The stderr of every executor worker `worker` (0-based) has run (its work directory's app-*/<id>/stderr):
        Spark's INFO log, `Executor: Running task 1.0 in stage 4.0 (TID 4)`, `Finished task ...`."""
        logs = sorted((self.worker_daemons[worker].home / "work").glob("app-*/*/stderr"))
        return "".join(log.read_text(errors="replace") for log in logs)

    def runs_on_every_worker(self, command_part: str) -> bool:
        """Whether under every worker's JVM a process runs whose command line holds `command_part` (`tritonserver`:
        each worker's executor is running a task whose bento server has started)."""
        return all(
            any(command_part in " ".join(_command(process)) for process in self.worker_processes(worker))
            for worker in range(len(self.worker_daemons))
        )

    def lose_worker(self, worker: int) -> list[int]:
        """Worker `worker` (0-based) lost as a machine is: SIGKILL to its JVM and its executors' JVMs, by PID. What ran
        under them (the Python workers, the bento servers they started) is gone with a machine: pyspark's daemon ends
        its group as its executor's pipe closes, and what is left LOST_GRACE_S later is killed too, by PID. The PIDs
        killed or ended, the JVMs first."""
        daemon = self.worker_daemons[worker]
        under = self.worker_processes(worker)
        jvms = [daemon.pid, *(process.pid for process in under if _runs(process, EXECUTOR_CLASS))]
        for pid in jvms:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        daemon.process.wait(timeout=30)
        rest = [process for process in under if process.pid not in jvms]
        _, alive = psutil.wait_procs(rest, timeout=LOST_GRACE_S)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(under, timeout=30)
        self.lost += [*jvms, *(process.pid for process in rest)]
        return [*jvms, *(process.pid for process in rest)]

    def stop(self) -> list[int]:
        """SIGTERM to the workers, the master and every process under them, by PID; SIGKILL to what is left after
        STOP_GRACE_S. The PIDs stopped."""
        daemons = [*self.worker_daemons, *([self.master] if self.master else [])]
        under: list[psutil.Process] = []
        for daemon in daemons:
            process = _process(daemon.pid)
            if process is not None:
                under += process.children(recursive=True)
        processes = [process for process in [*map(_process, (d.pid for d in daemons)), *under] if process is not None]
        stopped = terminate(processes, STOP_GRACE_S)
        for daemon in daemons:
            try:
                daemon.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        return stopped

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _runs(process: psutil.Process, java_class: str) -> bool:
    return java_class in _command(process)
