"""Calls to the service over HTTP (httpx): JSON in, JSON out, retried while the service says to come back later.

429 (this client over its share), 503 (overloaded, or Triton away) and 504 (past the request's time) are retried,
waiting as `Retry-After` says or else backing off; so are dropped connections (a server restarting). Every request
names its client (`X-Client-Id`), whose requests the service queues fairly against other clients'. Any other error is a `ServiceError` carrying the
service's own error body: its type, message and the fields at fault.
"""

from __future__ import annotations

import getpass
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

RETRIED_STATUSES = (429, 503, 504)
ITEM_FIELD = re.compile(r"^(\w+)\[(\d+)\]")


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def item(self, name: str) -> int | None:
        """The index this problem names in the list field `name` (`sequences[3]...` -> 3), else None."""
        match = ITEM_FIELD.match(self.field)
        return int(match.group(2)) if match and match.group(1) == name else None


class ServiceError(RuntimeError):
    """The service refused a request; `problems` are its error body's details (field, message)."""

    def __init__(self, path: str, status: int, kind: str, message: str, problems: list[Problem]) -> None:
        super().__init__(f"{path}: HTTP {status} {kind}: {message}")
        self.path, self.status, self.kind, self.message, self.problems = path, status, kind, message, problems

    @property
    def refuses_the_input(self) -> bool:
        """The request's content is at fault (4xx): the same request will be refused again."""
        return 400 <= self.status < 500


@dataclass
class RetryCount:
    """Retries so far, by status (or `connection`), for the job's summary; shared by the worker threads."""

    by_reason: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, reason: str) -> None:
        with self.lock:
            self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def __str__(self) -> str:
        return ", ".join(f"{count} x {reason}" for reason, count in sorted(self.by_reason.items())) or "none"


class Service:
    """One service at `url`; thread-safe, so that several requests are in flight at once.

    `retries`: how many times one request is sent again after a 429, 503, 504 or a dropped connection; `timeout`: the
    seconds one response may take (the service's own limit, BIONEMO_REQUEST_TIMEOUT_S, is 120 s by default);
    `client_id`: who the service serves fairly against others (default: this user at this host).
    """

    def __init__(
        self, url: str, *, retries: int = 8, timeout: float = 600.0, connections: int = 16, client_id: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self.retried = RetryCount()
        self._http = httpx.Client(
            base_url=self.url, timeout=httpx.Timeout(timeout, connect=30.0),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            headers={"X-Client-Id": client_id or default_client_id()},
        )  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, path: str) -> Any:
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", path, body)

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TransportError as error:
                if last:
                    raise ServiceError(path, 0, "unreachable", f"{type(error).__name__}: {error}", []) from None
                self.retried.add("connection")
                time.sleep(_backoff(attempt))
                continue
            if response.status_code in RETRIED_STATUSES and not last:
                self.retried.add(str(response.status_code))
                told = _retry_after(response)  # 0 is "now", not "not said"
                time.sleep(_backoff(attempt) if told is None else told)
                continue
            if response.is_success:
                return response.json()
            raise _refusal(path, response)
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt


def default_client_id() -> str:
    """`bionemo-client:<user>@<host>`: one user's jobs share one fair share of the service."""
    return f"bionemo-client:{getpass.getuser()}@{socket.gethostname()}"


def _backoff(attempt: int) -> float:
    return min(30.0, 0.5 * 2**attempt)


def _retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (RFC 9110 also allows a date; the service sends seconds)."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def _refusal(path: str, response: httpx.Response) -> ServiceError:
    try:
        error = response.json()["error"]
        problems = [Problem(str(item["field"]), str(item["message"])) for item in error.get("details", [])]
        return ServiceError(path, response.status_code, str(error["type"]), str(error["message"]), problems)
    except (ValueError, KeyError, TypeError):
        return ServiceError(path, response.status_code, "error", response.text[:500], [])
