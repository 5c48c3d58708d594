"""The image as users run it (issue 28): built by `make image`'s code on the stand-in base (the real tritonserver
image cannot be pulled here), then started as BentoML's Triton guide writes the command,

    <engine> run --init --rm -p 127.0.0.1:PORT:3000 IMAGE serve --production \
        --triton-options model-control-mode=explicit --triton-options load-model=esm2nv

and called from this machine with the real clients. Where no engine can run containers the tests fail naming what to
install (`make test` installs podman as root with apt: operations/container/engine.py)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bentoml
import numpy as np
import pytest
import requests
import yaml
from bentoml.client import Client
from bentoml.exceptions import NotFound
from support.image_build import ImageBuild
from support.paths import ROOT
from support.service import STARTUP_TIMEOUT_S, stop_with_requests_in_flight
from support.reference import TransformersReference
from support.s3_store import s3_store

import bionemo_serving.fronts.bentoml.grpc_stubs  # noqa: F401  (before BentoML's client: its stubs for protobuf 6)
from operations.container.engine import engine, engine_environment, missing_tools
from operations.container.image import STAND_IN
from bionemo_serving.startup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready, wait_until_serving

pytestmark = [pytest.mark.e2e, pytest.mark.container]

LOADED = "esm2nv"
GUIDE_OPTIONS = ["--triton-options", "model-control-mode=explicit", "--triton-options", f"load-model={LOADED}"]
PROTEINS = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "MKT", "XBUZOACDEFGHIKLMNPQRSTVWYMKTAYIAKQRQISFVKSHFSRQ"]
STOP_GRACE_S = 60
IMAGE_BUILD_TIMEOUT_S = 900
"""From nothing (no base image, no cached layer) the build took 141 s here."""
PROCESSES = (
    "import json, psutil; print(json.dumps([{'name': p.name(), 'user': p.username(), 'listening': "
    "[c.laddr.ip for c in p.net_connections('inet') if c.status == 'LISTEN']} for p in psutil.process_iter()]))"
)
"""Run inside the container (psutil is in the image): each process's name, user and listening addresses, as the
container's own network namespace shows them."""


def engine_output(runner: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [runner, *arguments], capture_output=True, text=True, check=False, timeout=300, env=engine_environment()
    )


@dataclass
class Container:
    """A `<engine> run` in the foreground, as a user starts it; `url` is the published port on 127.0.0.1."""

    engine: str
    name: str
    url: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]

    def execute(self, *command: str) -> str:
        done = engine_output(self.engine, "exec", self.name, *command)
        done.check_returncode()
        return done.stdout

    def stop(self) -> int:
        """`<engine> stop`: SIGTERM to the container's init, which hands it on; the run's exit status."""
        engine_output(self.engine, "stop", "--time", str(STOP_GRACE_S), self.name)
        return self.process.wait(timeout=30)

    def remove(self) -> None:
        """Whatever is left of it, by its name; then nothing of that name may remain."""
        if self.process.poll() is None:
            self.stop()
        engine_output(self.engine, "rm", "--force", self.name)
        left = engine_output(self.engine, "ps", "--all", "--quiet", "--filter", f"name=^{self.name}$").stdout.strip()
        assert not left, f"container {self.name} still there: {left}"
        self.log_path.unlink(missing_ok=True)


def run_image(
    runner: str, image: str, command: list[str], grpc: bool = False, environment: dict[str, str] | None = None
) -> Container:
    """`<runner> run --init --rm -p 127.0.0.1:PORT:3000 IMAGE COMMAND`, ready. With `environment` (settings, secrets:
    passed by name, not on the command line) the container shares this machine's network instead, so that it reaches
    what listens on its loopback, and serves on PORT there."""
    port = free_loopback_port()
    name = f"bionemo-test-{port}"
    log_path = Path(tempfile.mkstemp(prefix="image-run-", suffix=".log")[1])
    if environment is None:
        network = ["-p", f"127.0.0.1:{port}:3000"]
    else:
        environment = {**environment, "BIONEMO_HOST": "127.0.0.1", "BIONEMO_PORT": str(port)}
        if grpc:  # the gRPC server's metrics port too, on this machine's loopback
            environment["BIONEMO_GRPC_METRICS_PORT"] = str(free_loopback_port())
        network = ["--network", "host", *(argument for key in environment for argument in ("-e", key))]
    run = [runner, "run", "--init", "--rm", "--name", name, *network, image, *command]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            run, stdout=log, stderr=subprocess.STDOUT, env={**engine_environment(), **(environment or {})}
        )
    container = Container(runner, name, f"127.0.0.1:{port}" if grpc else f"http://127.0.0.1:{port}", process, log_path)
    try:
        if grpc:
            wait_until_serving(container.url, process, STARTUP_TIMEOUT_S, f"{runner} run {image} serve-grpc")
        else:
            wait_until_ready(f"{container.url}/readyz", process, STARTUP_TIMEOUT_S, f"{runner} run {image} serve")
    except ReadinessTimeout as error:
        log = container.log_tail()
        container.remove()
        pytest.fail(f"{error}\n--- log ---\n{log}")
    return container


@pytest.fixture(scope="module")
def runner() -> str:
    missing = missing_tools()
    if missing:
        pytest.fail(f"the image's tests need {'; '.join(missing)}: `make test` installs them as root with apt")
    return engine(runs_containers=True)


TESTS_IMAGE = f"localhost/bionemo:make-test-{STAND_IN}"
"""A second tag on the image the tests built last, so that the next run removes it (and its bento)."""


def replace_the_previous_test_image(runner: str, built: str) -> None:
    """Tag `built` as TESTS_IMAGE and remove the image the tests built before, and its bento: every `make test` builds
    anew, and the layers the two share (the base, the installed packages) stay cached for the next build."""
    previous = engine_output(runner, "image", "inspect", "--format", "{{json .RepoTags}}", TESTS_IMAGE)
    engine_output(runner, "tag", built, TESTS_IMAGE).check_returncode()
    if previous.returncode != 0:
        return
    for tag in json.loads(previous.stdout):
        if tag != TESTS_IMAGE and not tag.endswith(built.split("/")[-1]):
            engine_output(runner, "rmi", tag)
            with contextlib.suppress(NotFound):  # deleted by hand since
                bentoml.bentos.delete(tag.split("/")[-1].removesuffix(f"-{STAND_IN}"))


@pytest.fixture(scope="module")
def image(runner: str, image_build: ImageBuild | None) -> str:
    """The cpu bento's image on the stand-in base, built by what `make image BASE_IMAGE=stand-in` runs, started with
    the session (support/image_build.py)."""
    assert image_build is not None
    returncode, output = image_build.result(IMAGE_BUILD_TIMEOUT_S)
    assert returncode == 0, output[-8000:]
    (built,) = re.findall(r"^built (\S+) in \d+ s$", output, re.MULTILINE)
    print(f"built {built}")
    assert built.endswith(f"-{STAND_IN}") and "STAND-IN" in output  # never passed off as the real base
    replace_the_previous_test_image(runner, built)
    return built


@pytest.fixture(scope="module")
def served(runner: str, image: str) -> Iterator[Container]:
    container = run_image(runner, image, ["serve", "--production", *GUIDE_OPTIONS])
    yield container
    container.remove()


def expected_embeddings() -> np.ndarray:
    reference = TransformersReference(LOADED)
    return np.stack([reference.mean_embedding(sequence) for sequence in PROTEINS])


def test_the_image_embeds_what_transformers_computes(served: Container) -> None:
    answer = requests.post(f"{served.url}/embed", json={"sequences": PROTEINS, "model": LOADED}, timeout=120)
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(np.asarray(answer.json()["embeddings"]), expected_embeddings(), rtol=0, atol=1e-4)


def test_a_model_the_options_did_not_load_is_a_422_naming_it(served: Container) -> None:
    answer = requests.post(f"{served.url}/embed", json={"sequences": PROTEINS, "model": "esm1nv"}, timeout=60)
    assert answer.status_code == 422, answer.text
    assert "esm1nv" in answer.text and "model" in answer.text
    listed = [entry["name"] for entry in requests.get(f"{served.url}/models", timeout=60).json()["models"]]
    assert listed == [LOADED]


def test_tritonserver_listens_on_loopback_only_and_nothing_runs_as_root(
    runner: str, image: str, served: Container
) -> None:
    """BentoML's Dockerfile makes a `bentoml` user and runs as it; the service's processes, tritonserver and its stubs
    among them, all run as that user."""
    assert engine_output(runner, "image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "bentoml"
    processes = json.loads(served.execute("python", "-c", PROCESSES))
    (triton,) = [process for process in processes if process["name"] == "tritonserver"]
    assert triton["listening"] and set(triton["listening"]) == {"127.0.0.1"}, triton
    assert any(process["name"] == "triton_python_backend_stub" for process in processes), processes
    assert {process["user"] for process in processes} == {"bentoml"}, processes


WEIGHTS_FILES = (
    "import json, pathlib; print(json.dumps({str(path.parent.parent.name): path.stat().st_ino for path in "
    "pathlib.Path('/home/bentoml/bento/src/model_repository').glob('*/1/model.weights')}))"
)
"""Run inside the container: the inode of each graph's model.weights, by Triton model."""


def test_the_graphs_of_each_model_share_one_weights_file_in_the_image(served: Container) -> None:
    """The image's COPY keeps no hardlinks (buildah); its build links the graphs' weights again, so that every stub
    of a model maps one file (bionemo_serving/exporter/shared_weights.py)."""
    inodes = json.loads(served.execute("python", "-c", WEIGHTS_FILES))
    for model in ("esm2nv", "megamolbart"):
        graphs = {name: inode for name, inode in inodes.items() if name.startswith(model)}
        assert len(graphs) >= 3 and len(set(graphs.values())) == 1, inodes


def test_serve_grpc_answers_bentomls_grpc_client_from_a_repository_in_s3(runner: str, image: str) -> None:
    """The guide's CPU command for gRPC, `IMAGE serve-grpc --production --triton-options ...`, given the S3 repository
    the launcher's test reads (moto's server on this machine's loopback): one container for both, since the front and
    where the models come from are independent (the HTTP front and the image's own repository: `served`)."""
    with s3_store() as store:
        container = run_image(
            runner,
            image,
            ["serve-grpc", "--production", *GUIDE_OPTIONS],
            grpc=True,
            environment={"BIONEMO_MODEL_REPOSITORY": store.url(), **store.credentials},
        )
        try:
            answer = Client.from_url(container.url, kind="grpc").embed({"sequences": PROTEINS, "model": LOADED})
            np.testing.assert_allclose(np.asarray(answer["embeddings"]), expected_embeddings(), rtol=0, atol=1e-4)
        finally:
            container.remove()


MANIFEST = ROOT / "operations" / "deploy" / "kubernetes.yaml"
MANIFEST_IMAGE = "image: bionemo:latest"


def wait_for(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=3).status_code == 200:
                return
        time.sleep(1)
    pytest.fail(f"{url} did not answer 200 within {timeout_s} s")


@pytest.mark.slow
def test_the_manifests_pod_runs_under_podman_kube_play(image: str, tmp_path: Path) -> None:
    """operations/deploy/kubernetes.yaml with nothing changed but its image, under `podman kube play`: no Kubernetes API server
    or kubelet can run here. Two things a cluster gives that podman 4.3 does not, given from outside the manifest:
    - its memory-backed emptyDir for /dev/shm, a writable tmpfs in a cluster, is a root-owned folder under podman,
      and Triton's python backend then fails every model ("Unable to initialize shared memory key ... Permission
      denied"): the volume is made first, a tmpfs owned by the image's user;
    - podman publishes only hostPorts, which a Deployment rightly lacks: the pod is reached at its address on
      podman's network, as a Service reaches it.
    Then its probes' paths answer 200 on its port, and /embed answers as transformers computes."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman kube play needs podman: `make test` installs it as root with apt")
    text = MANIFEST.read_text()
    assert text.count(MANIFEST_IMAGE) == 1, f"{MANIFEST} no longer holds `{MANIFEST_IMAGE}`"
    played = tmp_path / "kubernetes.yaml"
    played.write_text(text.replace(MANIFEST_IMAGE, f"image: {TESTS_IMAGE}"))
    (deployment,) = [document for document in yaml.safe_load_all(text) if document["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (shm,) = [volume["name"] for volume in pod["volumes"] if volume.get("emptyDir", {}).get("medium") == "Memory"]
    owner = [
        engine_output(podman, "run", "--rm", "--entrypoint", "id", image, flag).stdout.strip() for flag in ("-u", "-g")
    ]
    engine_output(podman, "volume", "rm", "--force", shm)
    options = ["--opt", "type=tmpfs", "--opt", "device=tmpfs", "--opt", f"o=uid={owner[0]},gid={owner[1]}"]
    engine_output(podman, "volume", "create", *options, shm).check_returncode()
    try:
        play = engine_output(podman, "kube", "play", "--replace", str(played))
        assert play.returncode == 0, play.stdout + play.stderr
        (pod_id,) = play.stdout.split("Pod:\n")[1].split()[:1]
        (container_id,) = play.stdout.split("Container:\n")[1].split()[:1]
        infra = engine_output(podman, "pod", "inspect", "--format", "{{.InfraContainerID}}", pod_id).stdout.strip()
        address = engine_output(
            podman, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", infra
        ).stdout.strip()
        (port,) = [entry["containerPort"] for entry in container["ports"] if entry["name"] == "http"]
        url = f"http://{address}:{port}"
        wait_for(f"{url}{container['readinessProbe']['httpGet']['path']}", STARTUP_TIMEOUT_S)
        assert requests.get(f"{url}{container['livenessProbe']['httpGet']['path']}", timeout=10).status_code == 200
        assert requests.get(f"{url}{container['startupProbe']['httpGet']['path']}", timeout=10).status_code == 200
        answer = requests.post(f"{url}/embed", json={"sequences": PROTEINS, "model": LOADED}, timeout=120)
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(np.asarray(answer.json()["embeddings"]), expected_embeddings(), rtol=0, atol=1e-4)
        # As written: its settings and its limits reached the container.
        (inspected,) = json.loads(engine_output(podman, "inspect", container_id).stdout)
        assert {f"{item['name']}={item['value']}" for item in container["env"]} <= set(inspected["Config"]["Env"])
        assert inspected["HostConfig"]["Memory"] == 16 * 2**30 and inspected["HostConfig"]["NanoCpus"] == 8 * 10**9
        assert container["resources"]["limits"]["memory"] == "16Gi" and container["resources"]["limits"]["cpu"] == "8"
    finally:
        engine_output(podman, "kube", "down", str(played))
        engine_output(podman, "volume", "rm", "--force", shm)


def test_stop_lets_the_requests_in_flight_finish(served: Container) -> None:
    """`<engine> stop` (SIGTERM, through `--init`) while /embed requests of seconds each run: each gets its answer,
    then the container exits cleanly. Last in this module: it stops the shared container."""
    rng = np.random.default_rng(28)
    residues = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    body = {"sequences": ["".join(rng.choice(residues, 1000)) for _ in range(8)], "model": LOADED}
    answers, status, waited = stop_with_requests_in_flight(f"{served.url}/embed", body, 4, served.stop, head_start_s=1)
    assert answers == [200] * 4 and waited > 1, (answers, served.log_tail())  # in flight at the stop, answered
    assert status == 0, served.log_tail()
