"""compute-sanitizer discovery searches only installed locations, never the working directory."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_pipecheck import toolkit
from pytest_pipecheck.sanitizer import locate

_REAL_SITE_DIRS = toolkit.site_dirs


def _exe(path: Path, marker: Path | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    run = f"touch {marker}\n" if marker else ""
    path.write_text(f"#!/bin/sh\n{run}echo 'Version 2099.1.0'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for var in ("PIPECHECK_COMPUTE_SANITIZER", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent-pipecheck-bin")
    monkeypatch.setattr(toolkit.glob, "glob", _no_system_toolkits(toolkit.glob.glob))
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [])
    monkeypatch.setattr(toolkit, "_triton_dirs", lambda: [])
    locate.find_compute_sanitizer.cache_clear()
    yield tmp_path
    locate.find_compute_sanitizer.cache_clear()


def _no_system_toolkits(real):  # type: ignore[no-untyped-def]
    # this machine's own toolkits must not decide the test
    return lambda pattern, *a, **k: [] if pattern.startswith("/usr/local/cuda") else real(pattern, *a, **k)


def test_the_working_directory_is_never_searched(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = clean_env / "checkout"
    ran = clean_env / "executed"
    for rel in ("compute-sanitizer", "bin/compute-sanitizer", "nvidia/cu13/bin/compute-sanitizer",
                "nvidia/cu13/compute-sanitizer/compute-sanitizer"):
        _exe(checkout / rel, ran)
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "bin", "/nonexistent-pipecheck-bin"]))
    monkeypatch.setenv("CUDA_HOME", ".")
    monkeypatch.setenv("CUDA_PATH", "")
    monkeypatch.setattr(sys, "path", ["", ".", *sys.path])  # python -m pytest puts the cwd first
    monkeypatch.setattr(toolkit, "site_dirs", _REAL_SITE_DIRS)
    assert [p for p, _ in toolkit.candidates("compute-sanitizer") if not os.path.isabs(p)] == []
    found = locate.find_compute_sanitizer()
    assert found is None or not os.path.realpath(found.path).startswith(str(checkout))
    assert not ran.exists(), "a compute-sanitizer in the checkout was executed"


def test_search_order_explicit_then_path_then_toolkit_then_pip(clean_env: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    site_dir = clean_env / "site-packages"
    pip_exe = _exe(site_dir / "nvidia" / "cu13" / "compute-sanitizer" / "compute-sanitizer")
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(site_dir)])
    found = locate.find_compute_sanitizer()
    assert found is not None and found.path == str(pip_exe) and found.found_via == "pip package"
    assert found.version == "2099.1.0"

    api_site = clean_env / "site2"
    api_exe = _exe(api_site / "nvidia" / "cuda_sanitizer_api" / "compute-sanitizer" / "compute-sanitizer")
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(api_site)])
    locate.find_compute_sanitizer.cache_clear()
    assert locate.find_compute_sanitizer().path == str(api_exe)  # type: ignore[union-attr]

    cuda_home = clean_env / "cuda-13.0"
    tk_exe = _exe(cuda_home / "bin" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(tk_exe), "CUDA_HOME")

    on_path = _exe(clean_env / "usr-bin" / "compute-sanitizer")
    monkeypatch.setenv("PATH", os.pathsep.join([str(on_path.parent)]))
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(on_path), "PATH")

    explicit = _exe(clean_env / "mine" / "cs")
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(explicit))
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(explicit), "PIPECHECK_COMPUTE_SANITIZER")


def test_site_dirs_are_absolute_and_exclude_the_working_directory(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    dirs = toolkit.site_dirs()
    assert dirs and all(os.path.isabs(d) for d in dirs)
    assert str(tmp_path) not in dirs
