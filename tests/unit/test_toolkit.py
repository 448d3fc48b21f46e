"""The one search order for CUDA tools and headers (pytest_pipecheck.toolkit), on fake installs."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck import toolkit

_REAL_GLOB = toolkit.glob.glob


def _exe(path: Path, text: str = "echo 'Cuda compilation tools, release 99.1, V99.1.7'") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No variable, PATH entry, system prefix, pip package or Triton wheel of this machine counts."""
    for var in ("PIPECHECK_NVCC", "PIPECHECK_NVDISASM", "TRITON_NVDISASM_PATH", *toolkit.ENV_VARS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent-pipecheck-bin")
    prefixes = tmp_path / "prefixes"
    monkeypatch.setattr(toolkit.glob, "glob", lambda pattern, *a, **k: (
        _REAL_GLOB(str(prefixes / "cuda*"), *a, **k) if pattern == "/usr/local/cuda*" else _REAL_GLOB(pattern, *a, **k)))
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [])
    monkeypatch.setattr(toolkit, "_triton_dirs", lambda: [])
    yield tmp_path


def test_search_order_is_explicit_path_cuda_home_prefixes_pip_triton(env: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step is shadowed by the one before it: add installs from the last step to the first."""
    tool = "nvdisasm"
    triton = _exe(env / "triton" / "backends" / "nvidia" / "bin" / tool)
    monkeypatch.setattr(toolkit, "_triton_dirs", lambda: [str(triton.parent.parent)])
    steps = [(str(triton), "triton wheel")]

    pip = _exe(env / "site" / "nvidia" / "cuda_nvdisasm" / "bin" / tool)
    monkeypatch.setattr(toolkit, "site_dirs", lambda: [str(env / "site")])
    steps.append((str(pip), "pip package"))

    older = _exe(env / "prefixes" / "cuda-12.8" / "bin" / tool)
    newer = _exe(env / "prefixes" / "cuda-13.0" / "bin" / tool)
    assert (toolkit.find_tool(tool).path, toolkit.find_tool(tool).found_via) == (  # type: ignore[union-attr]
        str(newer), str(newer.parent.parent))  # newest prefix name first
    older.unlink()
    steps.append((str(newer), str(newer.parent.parent)))

    home = _exe(env / "cuda_path" / "bin" / tool)
    monkeypatch.setenv("CUDA_PATH", str(home.parent.parent))
    steps.append((str(home), "CUDA_PATH"))

    on_path = _exe(env / "usr-bin" / tool)
    monkeypatch.setenv("PATH", os.pathsep.join(["/nonexistent-pipecheck-bin", str(on_path.parent)]))
    steps.append((str(on_path), "PATH"))

    triton_override = _exe(env / "t" / "nvdisasm-for-triton")
    monkeypatch.setenv("TRITON_NVDISASM_PATH", str(triton_override))
    steps.append((str(triton_override), "TRITON_NVDISASM_PATH"))

    explicit = _exe(env / "mine" / "my-nvdisasm")
    monkeypatch.setenv("PIPECHECK_NVDISASM", str(explicit))
    steps.append((str(explicit), "PIPECHECK_NVDISASM"))

    found = toolkit.find_tool(tool)
    assert found is not None and (found.path, found.found_via) == steps[-1]
    # the whole order, as candidates() lists it: the installs above in reverse order of their adding
    listed = [c for c in toolkit.candidates(tool) if os.path.isfile(c[0])]
    assert listed == list(reversed(steps))


def test_relative_entries_never_search_the_working_directory(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = env / "checkout"
    ran = env / "executed"
    for rel in ("nvcc", "bin/nvcc", "nvidia/cu13/bin/nvcc"):
        _exe(checkout / rel, f"touch {ran}")
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "bin", "/nonexistent-pipecheck-bin"]))
    monkeypatch.setenv("CUDA_HOME", ".")
    monkeypatch.setenv("CUDA_ROOT", "bin/..")
    monkeypatch.setattr(sys, "path", ["", ".", *sys.path])  # python -m pytest puts the cwd first
    assert [p for p, _ in toolkit.candidates("nvcc") if not os.path.isabs(p)] == []
    assert toolkit.find_tool("nvcc") is None
    assert toolkit.which("nvcc") is None
    assert not ran.exists()


def test_explicit_variable_is_taken_as_written(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = _exe(env / "tools" / "nvcc-wrapper")
    monkeypatch.chdir(env)
    monkeypatch.setenv("PIPECHECK_NVCC", "tools/nvcc-wrapper")  # the user named this file
    found = toolkit.find_tool("nvcc")
    assert found is not None and found.found_via == "PIPECHECK_NVCC"
    assert os.path.samefile(found.path, mine)


def test_an_explicit_variable_naming_no_file_is_not_replaced_by_another_copy(env: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped PIPECHECK_COMPUTE_SANITIZER must not run whichever compute-sanitizer comes next (on the GPU
    machine: the pip package's, another version than the one asked for): not found, and the reason says why."""
    other = _exe(env / "cuda" / "bin" / "compute-sanitizer", "echo 'Version 2099.1.0'")
    monkeypatch.setenv("CUDA_HOME", str(other.parent.parent))
    assert toolkit.find_tool("compute-sanitizer") is not None
    assert "not on PATH" in toolkit.not_found_reason("nvcc")
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(env / "typo" / "compute-sanitiser"))
    assert toolkit.find_tool("compute-sanitizer") is None
    assert toolkit.not_found_reason("compute-sanitizer") == (
        f"PIPECHECK_COMPUTE_SANITIZER={env / 'typo' / 'compute-sanitiser'} is not an executable file")


def test_compute_sanitizer_also_in_its_own_directory(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _exe(env / "cuda" / "compute-sanitizer" / "compute-sanitizer", "echo 'Version 2099.1.0'")
    monkeypatch.setenv("CUDA_HOME", str(env / "cuda"))
    found = toolkit.find_tool("compute-sanitizer")
    assert found is not None and (found.path, found.found_via) == (str(exe), "CUDA_HOME")
    assert toolkit.tool_version(found.path) == "2099.1.0"
    assert toolkit.find_tool("nvcc") is None  # other tools: <root>/bin only


def test_headers_come_from_the_toolkit_of_the_nvcc_found_first(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for root in ("on-path", "cuda-home"):
        (env / root / "include").mkdir(parents=True)
        (env / root / "include" / "cuda_pipeline.h").write_text("")
    nvcc = _exe(env / "on-path" / "bin" / "nvcc")
    monkeypatch.setenv("CUDA_HOME", str(env / "cuda-home"))
    assert toolkit.find_include_dir("cuda_pipeline.h") == env / "cuda-home" / "include"  # nvcc not on PATH
    monkeypatch.setenv("PATH", str(nvcc.parent))
    assert toolkit.find_include_dir("cuda_pipeline.h") == env / "on-path" / "include"
    (env / "on-path" / "include" / "cccl").mkdir()
    assert toolkit.nvrtc_include_dirs() == [str(env / "on-path" / "include" / "cccl"),
                                            str(env / "on-path" / "include")]
    assert toolkit.find_include_dir("no_such_header.h") is None


def test_version_of_each_kind_of_tool(env: Path) -> None:
    assert toolkit.tool_version(str(_exe(env / "a"))) == "99.1"
    assert toolkit.tool_version(str(_exe(env / "b", "echo 'NVIDIA (R) Compute Sanitizer'; echo 'Version 2025.3.0.0'"))) \
        == "2025.3.0.0"
    assert toolkit.tool_version(str(_exe(env / "c", "echo hello"))) is None
    assert toolkit.tool_version(str(env / "missing")) is None


def test_nvcc_command_always_has_line_info_and_the_resource_report() -> None:
    flags = toolkit.compile_flags(["-std=c++17"], ["inc"], {"A": None, "B": "", "C": 3})
    assert flags == ["-std=c++17", "-Iinc", "-DA", "-DB", "-DC=3"]
    cmd = toolkit.nvcc_command("nvcc", "k.cu", "k.cubin", "sm_90a", flags)
    assert cmd[:3] == ["nvcc", "-cubin", "-arch=sm_90a"]
    assert {"-lineinfo", "-v", *flags} <= set(cmd)


def test_missing_source_and_unknown_target_are_named(tmp_path: Path) -> None:
    with pytest.raises(toolkit.ToolkitError, match=r"CUDA source '.*nope\.cu' does not exist"):
        toolkit.compile_cuda(tmp_path / "nope.cu", "sm_90")
    with pytest.raises(toolkit.ArchError, match="'sm_99' is not a known architecture"):
        toolkit.compile_cuda("__global__ void k() {}\n", "sm_99")


class _CachingNvrtc:
    """NVRTC as 12.9 and later behave with a driver on the machine: a compile it has done before comes from its
    cache, without ptxas, so the log has no resource report, unless ``--no-cache`` is given. ``version`` is
    what ``nvrtcVersion`` answers."""

    REPORT = ("ptxas info    : Compiling entry function 'scale' for 'sm_90'\n"
              "ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 356 bytes cmem[0]\n")

    def __init__(self, version: tuple[int, int]) -> None:
        self.version = version
        self.compiled: set[bytes] = set()
        self.options: list[list[str]] = []
        self.logs: dict[int, str] = {}

    def nvrtcVersion(self) -> tuple[int, int, int]:
        return (0, *self.version)

    def nvrtcCreateProgram(self, src: bytes, name: bytes, n: int, h: list[Any], i: list[Any]) -> tuple[int, Any]:
        return 0, src

    def nvrtcCompileProgram(self, prog: bytes, n: int, opts: list[bytes]) -> tuple[int]:
        options = [o.decode() for o in opts]
        self.options.append(options)
        cached = prog in self.compiled and "--no-cache" not in options
        self.compiled.add(prog)
        self.logs[id(prog)] = "" if cached else self.REPORT
        return (0,)

    def nvrtcGetProgramLogSize(self, prog: bytes) -> tuple[int, int]:
        return 0, len(self.logs[id(prog)]) + 1

    def nvrtcGetProgramLog(self, prog: bytes, buf: bytearray) -> tuple[int]:
        log = self.logs[id(prog)].encode()
        buf[:len(log)] = log
        return (0,)

    def nvrtcGetCUBINSize(self, prog: bytes) -> tuple[int, int]:
        return 0, 4

    def nvrtcGetCUBIN(self, prog: bytes, buf: bytearray) -> tuple[int]:
        buf[:4] = b"\x7fELF"
        return (0,)

    def nvrtcDestroyProgram(self, prog: bytes) -> tuple[int]:
        return (0,)


SCALE = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n'


@pytest.mark.parametrize("version", [(12, 9), (13, 0)])
def test_a_caching_nvrtc_still_writes_the_resource_report_on_every_compile(
        monkeypatch: pytest.MonkeyPatch, version: tuple[int, int]) -> None:
    """Compiled twice (this process's own cache cleared between), through an NVRTC that caches: both logs carry
    the ptxas report, because the compile asks for no cache. Without it the second log would be empty and the
    resources would fall back to the cubin, with spills and barriers unknown."""
    fake = _CachingNvrtc(version)
    monkeypatch.setattr(toolkit, "_nvrtc", lambda: fake)
    monkeypatch.setattr(toolkit, "find_tool", lambda name: None)
    monkeypatch.setattr(toolkit, "nvrtc_include_dirs", lambda: [])
    logs = []
    for _ in range(2):
        toolkit.clear_cache()
        compiled = toolkit.compile_cuda(SCALE, "sm_90")
        assert compiled.compiler == "nvrtc"
        logs.append(compiled.log)
    toolkit.clear_cache()
    assert all("ptxas info    : Used 10 registers" in log for log in logs), logs
    assert all("--no-cache" in opts for opts in fake.options)


def test_an_nvrtc_older_than_its_cache_is_not_given_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVRTC before 12.9 has no cache and would refuse an option it does not know."""
    fake = _CachingNvrtc((12, 8))
    monkeypatch.setattr(toolkit, "_nvrtc", lambda: fake)
    monkeypatch.setattr(toolkit, "find_tool", lambda name: None)
    monkeypatch.setattr(toolkit, "nvrtc_include_dirs", lambda: [])
    toolkit.clear_cache()
    toolkit.compile_cuda(SCALE, "sm_90")
    toolkit.clear_cache()
    assert fake.options and all("--no-cache" not in opts for opts in fake.options)
    assert all("-Xptxas=-v" in opts for opts in fake.options)
