"""tritonserver provisioning is idempotent, its wrapper takes the python backend stubs down with the server,
and every readiness wait ends with a clear message.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from operations.tritonserver_setup.provision import provision
from bionemo_serving.startup.readiness import (
    EPHEMERAL_PORTS,
    LOWEST_CHOSEN_PORT,
    ReadinessTimeout,
    free_loopback_port,
    wait_until_ready,
)


def test_provision_is_idempotent() -> None:
    first_path, first_origin = provision()
    first = first_path.read_bytes()
    second_path, second_origin = provision()
    assert (second_path, second_origin) == (first_path, first_origin)
    assert second_path.read_bytes() == first
    usage = subprocess.run([str(second_path), "--help"], check=False, capture_output=True, timeout=60)
    assert b"Usage: tritonserver" in usage.stderr


def test_wait_times_out_with_a_hint() -> None:
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(ReadinessTimeout, match="not ready after 1 s.*stub"):
            wait_until_ready(f"http://127.0.0.1:{free_loopback_port()}/v2/health/ready", silent, 1, "tritonserver")
    finally:
        silent.kill()
        silent.wait()


def test_wait_reports_an_early_exit() -> None:
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(ReadinessTimeout, match="exited with status 3"):
        wait_until_ready(f"http://127.0.0.1:{free_loopback_port()}/", failing, 30, "tritonserver")


def test_a_chosen_port_lies_below_the_ephemeral_range_and_is_free() -> None:
    """Outgoing connections take their local ports from the ephemeral range: a port chosen there for a server that
    binds it seconds later can be gone by then (a tritonserver of `make test` lost its metrics port so)."""
    ephemeral_low = int(EPHEMERAL_PORTS.read_text().split()[0])
    ports = {free_loopback_port() for _ in range(20)}
    assert all(LOWEST_CHOSEN_PORT <= port < ephemeral_low for port in ports), ports
    assert len(ports) > 1  # drawn at random: two launches at once rarely meet
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


# An installed tritonserver's stand-in: it starts one child that ignores SIGTERM, as the python backend stubs do,
# then reports its own pid, the child's and its arguments, and sleeps like a server.
FAKE_INSTALLED_SERVER = """#!{python}
import json, os, subprocess, sys, time
stub = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
     "time.sleep(300)"],
    stdout=subprocess.PIPE,
)
stub.stdout.readline()  # its SIGTERM is ignored from here on
report = {{"server": os.getpid(), "stub": stub.pid, "arguments": sys.argv[1:]}}
with open({report!r} + ".partial", "w") as partial:
    json.dump(report, partial)
os.replace({report!r} + ".partial", {report!r})
time.sleep(300)
"""
ARGUMENTS = ["--model-repository=/models/with space", "", "--log-verbose", "1", "$HOME", "*", "a'b\"c", "--x=\\n"]
WAIT_S = 10


@dataclass(frozen=True)
class SupervisedServer:
    wrapper: subprocess.Popen
    server: psutil.Process
    stub: psutil.Process
    arguments: list[str]


def ended(process: psutil.Process) -> bool:
    """Gone, or a zombie waiting for init to reap it: either way it holds no memory."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until_ended(process: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not ended(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def fake_installed_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fake tritonserver, first on PATH, outside any venv; its path and the report it writes once started."""
    installed = tmp_path / "installed"
    installed.mkdir()
    server = installed / "tritonserver"
    report = tmp_path / "started.json"
    server.write_text(FAKE_INSTALLED_SERVER.format(python=sys.executable, report=str(report)))
    server.chmod(0o755)
    monkeypatch.setenv("PATH", f"{installed}{os.pathsep}{os.environ['PATH']}")
    return server, report


@pytest.fixture
def supervised(
    request: pytest.FixtureRequest, tmp_path: Path, fake_installed_server: tuple[Path, Path]
) -> Iterator[SupervisedServer]:
    """The fake installed server, started through the wrapper that `provision` writes around it, with ARGUMENTS
    (or the arguments a test's indirect parameter names)."""
    server_path, report = fake_installed_server
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper_path, origin = provision(bin_dir)
    assert (wrapper_path, origin) == (bin_dir / "tritonserver", f"wrapper around installed {server_path}")
    arguments = getattr(request, "param", ARGUMENTS)
    wrapper = subprocess.Popen([str(wrapper_path), *arguments], start_new_session=True)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not report.exists():
            assert wrapper.poll() is None, f"the wrapper exited with {wrapper.returncode} before the server started"
            assert time.monotonic() < deadline, f"the fake server did not start in {WAIT_S} s"
            time.sleep(0.05)
        pids = json.loads(report.read_text())
        started = [psutil.Process(pids["server"]), psutil.Process(pids["stub"])]
        yield SupervisedServer(wrapper, *started, pids["arguments"])
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):  # the wrapper is gone once a test has waited for it
            started += psutil.Process(wrapper.pid).children(recursive=True)
        for process in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        wrapper.kill()
        wrapper.wait(timeout=WAIT_S)


def own_shm_prefix(wrapper: subprocess.Popen) -> str:
    """The prefix the wrapper gives the python backend's shared-memory regions: one per wrapper."""
    return f"triton_python_backend_shm_region_{wrapper.pid}_"


def test_wrapper_passes_its_arguments_through_unchanged_after_its_shm_prefix(supervised: SupervisedServer) -> None:
    own_option = f"--backend-config=python,shm-region-prefix-name={own_shm_prefix(supervised.wrapper)}"
    assert supervised.arguments == [own_option, *ARGUMENTS]


USERS_PREFIX = ["--backend-config=python,shm-region-prefix-name=mine_", "--log-verbose=1"]


@pytest.mark.parametrize("supervised", [USERS_PREFIX], indirect=True)
def test_a_prefix_of_the_options_own_replaces_the_wrappers(supervised: SupervisedServer) -> None:
    assert supervised.arguments == USERS_PREFIX


def test_killed_server_leaves_no_shared_memory_region_of_its_stubs(supervised: SupervisedServer) -> None:
    """A killed server's stubs never remove their regions; the wrapper removes its own, and no other server's."""
    shm = Path("/dev/shm")
    own_region = shm / f"{own_shm_prefix(supervised.wrapper)}{supervised.stub.pid}"
    other_servers_region = shm / f"{own_shm_prefix(supervised.wrapper)[:-1]}0_{supervised.stub.pid}"
    for region in (own_region, other_servers_region):
        region.write_bytes(b"\0" * 4096)  # as the stub's shm_open and ftruncate would leave it
    try:
        supervised.server.send_signal(signal.SIGKILL)
        assert supervised.wrapper.wait(timeout=WAIT_S) == 128 + signal.SIGKILL
        assert not own_region.exists() and other_servers_region.exists()
    finally:
        own_region.unlink(missing_ok=True)
        other_servers_region.unlink(missing_ok=True)


def test_killed_installed_server_takes_its_stubs_with_it(supervised: SupervisedServer) -> None:
    supervised.server.send_signal(signal.SIGKILL)  # the server alone, not the wrapper
    assert supervised.wrapper.wait(timeout=WAIT_S) == 128 + signal.SIGKILL
    assert wait_until_ended(supervised.stub, WAIT_S), "the stub outlived its killed server"


def test_sigterm_to_the_wrapper_ends_the_installed_server_and_its_stubs(supervised: SupervisedServer) -> None:
    supervised.wrapper.send_signal(signal.SIGTERM)
    assert supervised.wrapper.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    assert wait_until_ended(supervised.server, WAIT_S), "the server outlived the wrapper"
    assert wait_until_ended(supervised.stub, WAIT_S), "the stub outlived its server"


def test_provisioning_replaces_an_earlier_link_instead_of_writing_through_it(
    tmp_path: Path, fake_installed_server: tuple[Path, Path]
) -> None:
    """Environments provisioned before the wrapper have `tritonserver` as a link to the installed binary."""
    server_path, _ = fake_installed_server
    installed_before = server_path.read_bytes()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonserver").symlink_to(server_path)
    first, _ = provision(bin_dir)
    wrapper = first.read_bytes()
    second, _ = provision(bin_dir)
    assert not second.is_symlink() and second.read_bytes() == wrapper
    assert server_path.read_bytes() == installed_before
    assert sorted(path.name for path in bin_dir.iterdir()) == ["tritonserver"]
