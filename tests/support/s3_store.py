"""An S3 endpoint on loopback for the tests: moto's server, credentials enforced, holding the default repository's
esm2nv folder as a user would upload it, its config recording onnxruntime: start-up times no runtime for a remote
repository, and onnxruntime runs wherever the service does (the image has no torch for TorchScript)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import boto3
from support.paths import DEFAULT_REPOSITORY
from support.service import stop_process_group

from bionemo_serving.runtimes.choice import choose_runtimes, write_into_configs
from bionemo_serving.runtimes.engines import Runtime
from bionemo_serving.startup.readiness import free_loopback_port

BUCKET, FOLDER, MODEL = "models", "repo", "esm2nv"
ANYTHING = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
SETUP_ACTIONS = 3
"""Calls moto answers without credentials before it enforces them: the user, its policy and its key."""
START_TIMEOUT_S = 30


@dataclass(frozen=True)
class S3Store:
    port: int
    credentials: dict[str, str] = field(repr=False)
    """AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION of a user allowed everything."""

    def url(self, bucket: str = BUCKET, folder: str = FOLDER, host: str = "127.0.0.1") -> str:
        """The repository as tritonserver takes it: `s3://host:port/bucket/folder`."""
        return f"s3://{host}:{self.port}/{bucket}/{folder}"


def _wait_for_port(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's server exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()  # no HTTP call: it would count
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s")


@contextmanager
def s3_store() -> Iterator[S3Store]:
    """moto's server on a free loopback port, started and stopped by its PID."""
    port = free_loopback_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for_port(port, process)
        anonymous = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup", "region_name": "us-east-1"}
        iam = boto3.session.Session().client("iam", endpoint_url=endpoint, **anonymous)
        iam.create_user(UserName="serving")
        iam.put_user_policy(UserName="serving", PolicyName="anything", PolicyDocument=ANYTHING)
        key = iam.create_access_key(UserName="serving")["AccessKey"]
        credentials = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        s3 = boto3.session.Session(
            aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1"
        ).client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=BUCKET)
        with tempfile.TemporaryDirectory() as repository:
            shutil.copytree(DEFAULT_REPOSITORY / MODEL, Path(repository) / MODEL)
            write_into_configs(choose_runtimes(Path(repository), {MODEL: Runtime.ONNXRUNTIME}, [MODEL]))
            for path in sorted(Path(repository).rglob("*")):
                if path.is_file():
                    s3.upload_file(str(path), BUCKET, f"{FOLDER}/{path.relative_to(repository)}")
        yield S3Store(port, credentials)
    finally:
        stop_process_group(process, grace_s=10)
