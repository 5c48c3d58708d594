"""operations/tools/java_runtime.py, `make test`'s Java for pyspark: the java pyspark would run, its version, and what is said or
installed where there is none (without running apt: its calls are recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operations.tools import java_runtime


def fake_java(folder: Path, first_line: str) -> Path:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{first_line}' >&2\n")
    java.chmod(0o755)
    return java


@pytest.mark.parametrize(
    ("line", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
    ],
)
def test_java_home_s_java_comes_first_and_its_major_version_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, major: int
) -> None:
    java = fake_java(tmp_path, line)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert java_runtime.java() == str(java)
    assert java_runtime.version(str(java)) == (major, line)


def without_java(monkeypatch: pytest.MonkeyPatch, root: bool) -> list[list[str]]:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java_runtime.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    monkeypatch.setattr(java_runtime.os, "geteuid", lambda: 0 if root else 1000)
    ran: list[list[str]] = []
    monkeypatch.setattr(java_runtime.subprocess, "run", lambda command, **_: ran.append(command))
    return ran


def test_without_java_and_root_it_stops_naming_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    ran = without_java(monkeypatch, root=False)
    assert java_runtime.main(["--provision"]) == 1
    assert "apt-get install default-jre-headless" in capsys.readouterr().err and not ran


def test_as_root_it_installs_the_jre_with_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = without_java(monkeypatch, root=True)
    with pytest.raises(java_runtime.JavaMissing, match="still no java"):  # apt was not really run
        java_runtime.provision()
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "default-jre-headless"]
    assert ran == [["apt-get", "update", "-qq"], install]


def test_a_java_that_fails_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "java"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(java_runtime.JavaMissing, match="-version failed"):
        java_runtime.version(str(broken))
