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


def test_search_order_explicit_then_pip_then_path_then_toolkit(clean_env: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's pip package (the [sanitizer] extra) wins over PATH and the toolkits; only the explicit
    variable wins over it. The layout is the wheel's: nvidia/cu13/bin/compute-sanitizer (a wrapper)
    and nvidia/cu13/compute-sanitizer/compute-sanitizer."""
    cuda_home = clean_env / "cuda-13.0"
    tk_exe = _exe(cuda_home / "bin" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(tk_exe), "CUDA_HOME")

    on_path = _exe(clean_env / "usr-bin" / "compute-sanitizer")
    monkeypatch.setenv("PATH", os.pathsep.join([str(on_path.parent)]))
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(on_path), "PATH")

    old_site = clean_env / "site-old"
    api_exe = _exe(old_site / "nvidia" / "cuda_sanitizer_api" / "compute-sanitizer" / "compute-sanitizer")
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(old_site)])
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(api_exe), "pip package")

    site_dir = clean_env / "site-packages"
    real = _exe(site_dir / "nvidia" / "cu13" / "compute-sanitizer" / "compute-sanitizer")
    wrapper = _exe(site_dir / "nvidia" / "cu13" / "bin" / "compute-sanitizer")
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(site_dir)])
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(wrapper), "pip package")
    assert found.version == "2099.1.0" and found.version_tuple == (2099, 1)
    assert "pip package" in found.describe() and "2099.1.0" in found.describe()
    wrapper.unlink()
    locate.find_compute_sanitizer.cache_clear()
    assert locate.find_compute_sanitizer().path == str(real)  # type: ignore[union-attr]

    explicit = _exe(clean_env / "mine" / "cs")
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(explicit))
    locate.find_compute_sanitizer.cache_clear()
    found = locate.find_compute_sanitizer()
    assert found is not None and (found.path, found.found_via) == (str(explicit), "PIPECHECK_COMPUTE_SANITIZER")


def test_other_tools_keep_the_toolkit_before_pip_packages(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site_dir = clean_env / "site-packages"
    _exe(site_dir / "nvidia" / "cu13" / "bin" / "nvcc")
    cuda_home = clean_env / "cuda"
    tk = _exe(cuda_home / "bin" / "nvcc")
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(site_dir)])
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    found = toolkit.find_tool("nvcc")
    assert found is not None and found.path == str(tk)


@pytest.mark.parametrize(("printed", "text", "parsed"), [
    # compute-sanitizer 2025.3.1 of the CUDA 13.0 toolkit, and 2026.4.0 of nvidia-cuda-sanitizer-api 13.5.25
    ("NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2025 NVIDIA Corporation\nVersion 2025.3.1.0 "
     "(build 36400806) (public-release)", "2025.3.1.0", (2025, 3, 1)),
    ("NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2026 NVIDIA Corporation\nVersion 2026.4.0.0 "
     "(build 39022338) (public-release)", "2026.4.0.0", (2026, 4)),
    ("NVIDIA (R) Compute Sanitizer\nVersion 2025.3.1", "2025.3.1", (2025, 3, 1)),
    ("no version here", None, None),
])
def test_the_version_is_read_in_both_formats_and_compares(tmp_path: Path, printed: str, text: str | None,
                                                          parsed: tuple[int, ...] | None) -> None:
    exe = tmp_path / "cs"
    exe.write_text(f"#!/bin/sh\nprintf '{printed}\\n'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert toolkit.tool_version(str(exe)) == text
    assert toolkit.version_tuple(text) == parsed
    assert toolkit.version_tuple("2025.3.1") < toolkit.version_tuple("2026.4.0")  # type: ignore[operator]
    assert toolkit.version_tuple("2026.4.0") == toolkit.version_tuple("2026.4.0.0")


def test_site_dirs_are_absolute_and_exclude_the_working_directory(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    dirs = toolkit.site_dirs()
    assert dirs and all(os.path.isabs(d) for d in dirs)
    assert str(tmp_path) not in dirs
