"""An s3:// model repository, read before anything starts, with the credentials tritonserver will use.

tritonserver given an S3 repository it cannot open (no such bucket, credentials refused, endpoint unreachable) logs
one line ("Unable to create S3 filesystem client") and keeps running, not ready, for good: the service then waited
for it without end. The launcher lists the repository first and refuses to start, saying what is wrong, within
seconds. Only S3 is read (boto3, as tritonserver's AWS SDK reads the AWS_* variables); gs:// and as:// go to
tritonserver unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bionemo_serving.startup.settings import MODEL_REPOSITORY, SettingsError

S3_WITH_ENDPOINT = re.compile(
    r"s3://(http://|https://|)([0-9a-zA-Z\-.]+):([0-9]+)/([0-9a-z.\-]+)((/[0-9a-zA-Z.\-_]+)*)/?"
)
"""tritonserver's form with a host and port (`s3_regex_` in its S3 filesystem); without a scheme it speaks HTTP."""
TIMEOUT_S = 10.0
"""Connecting to the endpoint, and each answer: the launcher gives up within about twice this."""


class RemoteRepositoryError(SettingsError):
    """The repository BIONEMO_MODEL_REPOSITORY names cannot be read; the message says why."""


@dataclass(frozen=True)
class S3Location:
    endpoint: str | None
    """`http(s)://host:port`, or None for AWS's own endpoint of AWS_DEFAULT_REGION."""
    bucket: str
    prefix: str
    """The repository's folder in the bucket, without slashes at either end ('' for the bucket's top)."""


def s3_location(url: str) -> S3Location:
    """Where `url` points, read as tritonserver reads it: `s3://host:port/bucket/path` (optionally
    `s3://http[s]://host:port/...`) or `s3://bucket/path`."""
    match = S3_WITH_ENDPOINT.fullmatch(url)
    if match:
        scheme, host, port, bucket, path = match.group(1) or "http://", *match.group(2, 3, 4, 5)
        return S3Location(f"{scheme}{host}:{port}", bucket, path.strip("/"))
    bucket, _, path = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise RemoteRepositoryError(f"{MODEL_REPOSITORY.variable}={url}: no bucket in the URL")
    return S3Location(None, bucket, path.strip("/"))


def check_s3_repository(url: str) -> list[str]:
    """The model folders of the S3 repository at `url`; a RemoteRepositoryError if it cannot be listed or holds none."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    location = s3_location(url)
    where = f"{MODEL_REPOSITORY.variable}={url}"
    client = boto3.session.Session().client(  # a new session: the environment as it is now
        "s3",
        endpoint_url=location.endpoint,
        config=Config(connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S, retries={"total_max_attempts": 1}),
    )
    folder = f"{location.prefix}/" if location.prefix else ""
    try:
        listing = client.list_objects_v2(Bucket=location.bucket, Prefix=folder, Delimiter="/")
    except NoCredentialsError:
        raise RemoteRepositoryError(
            f"{where}: no AWS credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_DEFAULT_REGION), "
            "which tritonserver reads too"
        ) from None
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if code == "NoSuchBucket":
            raise RemoteRepositoryError(f"{where}: bucket {location.bucket!r} does not exist") from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
            raise RemoteRepositoryError(
                f"{where}: the AWS credentials were refused ({code}: {message}); check AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY"
            ) from None
        raise RemoteRepositoryError(f"{where}: the bucket could not be listed ({code}: {message})") from None
    except BotoCoreError as error:  # unreachable endpoint, timeouts
        raise RemoteRepositoryError(f"{where}: {location.endpoint or 'S3'} could not be reached ({error})") from None
    folders = [entry["Prefix"][len(folder) :].strip("/") for entry in listing.get("CommonPrefixes", [])]
    if not folders:
        raise RemoteRepositoryError(f"{where}: no model folders in bucket {location.bucket!r} under {folder or '/'}")
    return folders
