"""CUDA C++ resources: the ptxas log parser on recorded logs, and live nvcc compiles when present."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from pytest_pipecheck import toolkit
from pytest_pipecheck.arch import ArchError
from pytest_pipecheck.resources import cubin
from pytest_pipecheck.resources.cubin import (
    CompileError,
    KernelResources,
    compile_cubin,
    compile_resources,
    demangle,
    parse_ptxas_log,
    parse_res_usage,
)
from pytest_pipecheck.results import PipecheckError

DATA = Path(__file__).parent.parent / "data" / "ptxas"
KERNELS = DATA / "kernels.cu"
needs_nvcc = pytest.mark.skipif(toolkit.find_tool("nvcc") is None, reason="nvcc (CUDA toolkit) not found")


def _log(arch: str) -> str:
    return (DATA / f"ptxas_{arch}.log").read_text()


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_recorded_logs_parse_every_entry(arch: str) -> None:
    text = _log(arch)
    parsed = parse_ptxas_log(text, arch=arch)
    assert set(parsed) == {"_ZN5spill5heavyEPKfPfi", "_Z9pipelinedILi3EEvPKfPfi", "stage_copy"}
    # cross-check each number against the raw line it came from, so the test tracks the log
    for name, nums in parsed.items():
        block = text.split(f"Compiling entry function '{name}'")[1].split("Compile time")[0]
        used = re.search(r"Used (\d+) registers", block)
        assert used is not None and nums["registers"] == int(used.group(1))
        props = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
        assert props is not None
        assert (nums["stack_frame"], nums["spill_stores"], nums["spill_loads"]) == tuple(
            int(g) for g in props.groups())
    assert parsed["stage_copy"]["smem"] == 8192
    assert parsed["stage_copy"]["barriers"] == 1
    assert "smem" not in parsed["_Z9pipelinedILi3EEvPKfPfi"]  # dynamic shared memory only
    heavy = parsed["_ZN5spill5heavyEPKfPfi"]
    assert heavy["barriers"] == 0
    if arch in ("sm_80", "sm_90"):  # 2 x 1024 threads fit: launch bounds force 32 registers and spills
        assert heavy["registers"] == 32 and heavy["spill_stores"] > 0 and heavy["spill_loads"] > 0


def test_log_for_another_arch_is_filtered_out() -> None:
    assert parse_ptxas_log(_log("sm_80"), arch="sm_90") == {}
    assert parse_ptxas_log(_log("sm_90"), arch="sm_90a")  # same base target


def test_legacy_wording_items_parse_individually() -> None:
    parsed = parse_ptxas_log((DATA / "ptxas_legacy_wording.log").read_text())
    assert set(parsed) == {"_Z4gemmPKfS0_Pfi", "copy_kernel"}  # the helper is no entry function
    gemm = parsed["_Z4gemmPKfS0_Pfi"]
    assert gemm["registers"] == 64 and gemm["smem"] == 16384 and gemm["lmem"] == 16
    assert gemm["cmem"] == 380 and "barriers" not in gemm
    assert (gemm["spill_stores"], gemm["spill_loads"]) == (8, 12)
    assert parsed["copy_kernel"] == {"registers": 8, "cmem": 352, "stack_frame": 0, "spill_stores": 0,
                                     "spill_loads": 0}


def test_res_usage_parser() -> None:
    text = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z3dynPf:
  REG:12 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function plain:
  REG:10 STACK:16 SHARED:9216 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    usage = parse_res_usage(text)
    assert usage["plain"]["REG"] == 10 and usage["plain"]["SHARED"] == 9216 and usage["plain"]["STACK"] == 16
    assert usage["_Z3dynPf"]["CONSTANT[0]"] == 536
    assert "Common" not in usage


def test_demangle_strips_return_type_and_parameters() -> None:
    names = demangle(["plain", "_Z3dynPf", "_ZN2ns6spillyEPfi", "_Z4tmplILi256EEvPfi"])
    assert names["plain"] == "plain"
    assert names["_Z3dynPf"] == "dyn"
    assert names["_ZN2ns6spillyEPfi"] == "ns::spilly"
    if toolkit.which("c++filt") or toolkit.find_tool("cu++filt"):
        assert names["_Z4tmplILi256EEvPfi"] == "tmpl<256>"


def test_builtin_demangler_without_tools() -> None:
    assert cubin._mini_demangle("_Z3dynPf") == "dyn"
    assert cubin._mini_demangle("_ZN5spill5heavyEPKfPfi") == "spill::heavy"
    assert cubin._mini_demangle("_Z4tmplILi256EEvPfi") is None


def test_kernel_resources_occupancy() -> None:
    res = KernelResources(name="k", mangled="k", arch="sm_90", registers=168, static_smem=0)
    assert res.occupancy(128, 115712).blocks_per_sm == 2
    assert res.occupancy(128, 115713).blocks_per_sm == 1
    with pytest.raises(PipecheckError, match="give threads="):
        res.occupancy()
    triton_like = KernelResources(name="t", mangled="t", arch="sm_90", registers=196, dynamic_smem=131072,
                                  num_warps=4)
    assert triton_like.occupancy().blocks_per_sm == 1


# ----------------------------------------------------------------------------- live compiles


@needs_nvcc
def test_compile_resources_matches_recorded_log_for_same_toolkit() -> None:
    nvcc = toolkit.find_tool("nvcc")
    version = subprocess.run([nvcc.path if nvcc else "nvcc", "--version"], capture_output=True, text=True).stdout
    res = compile_resources(KERNELS, "sm_90")
    assert set(res) == {"stage_copy", "spill::heavy", "pipelined<3>"} or set(res) == {
        "stage_copy", "spill::heavy", "_Z9pipelinedILi3EEvPKfPfi"}
    sc = res["stage_copy"]
    assert (sc.static_smem, sc.barriers, sc.arch, sc.origin) == (8192, 1, "sm_90", "nvcc")
    assert res["spill::heavy"].spills > 0 and res["spill::heavy"].registers <= 32
    if "V13.0.88" in version:
        recorded = parse_ptxas_log(_log("sm_90"))
        for r in res.values():
            assert r.registers == recorded[r.mangled]["registers"]


@needs_nvcc
def test_source_text_and_options_and_cache() -> None:
    src = "__global__ void k(float* x) { __shared__ float s[N]; s[threadIdx.x] = 1; __syncthreads(); " \
          "x[threadIdx.x] = s[threadIdx.x ^ 1]; }\n"
    a = compile_resources(src, "sm_86", defines={"N": "512"})
    assert a["k"].static_smem == 2048
    b = compile_resources(src, "86", defines={"N": "1024"})
    assert b["k"].static_smem == 4096
    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again: the cache was not used")

    with pytest.MonkeyPatch.context() as mp:  # served from the cache: nothing is compiled (not timed)
        mp.setattr(cubin.toolkit, "_compile_nvcc", no_compile)
        mp.setattr(cubin.toolkit, "_compile_nvrtc", no_compile)
        again = compile_resources(src, "sm_86", defines={"N": "512"})
    assert again == a
    blob = compile_cubin(src, "sm_86", defines={"N": "512"})
    assert blob[:4] == b"\x7fELF"


@needs_nvcc
def test_compile_error_shows_compiler_output_and_target() -> None:
    with pytest.raises(CompileError) as info:
        compile_resources("__global__ void k(float* x) { x[0] = undefined_name; }\n", "sm_80")
    msg = str(info.value)
    assert "sm_80" in msg and "undefined_name" in msg and "nvcc failed" in msg


def test_bad_inputs() -> None:
    with pytest.raises(PipecheckError, match="does not exist"):
        compile_resources("/no/such/file.cu", "sm_90")
    with pytest.raises(ArchError, match="not a known architecture"):
        compile_resources(KERNELS, "sm_91")
    with pytest.raises(PipecheckError, match="empty"):
        compile_resources("   ", "sm_90")


@needs_nvcc
def test_a_compiler_log_without_a_resource_report_reads_the_cubin_and_says_what_it_cannot_know(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """NVRTC 13.0 from the pip wheel can leave its log empty: the resources then come from the cubin,
    which has no spill or barrier counts. They must not read as 0 spills from "nvrtc": the origin is
    cuobjdump, the spills are unknown (None in JSON, "?/?" in the table) and barriers None."""
    real = toolkit.compile_cuda(KERNELS, "sm_90")
    assert parse_ptxas_log(real.log, arch="sm_90"), "nvcc's own log must have the report"
    silent = toolkit.Compiled(real.cubin, "", "nvrtc", real.target)
    monkeypatch.setattr(cubin.toolkit, "compile_cuda", lambda *a, **k: silent)
    res = compile_resources(KERNELS, "sm_90")
    heavy = res["spill::heavy"]
    assert (heavy.origin, heavy.barriers, heavy.spills_known) == ("cuobjdump", None, False)
    assert heavy.to_json()["spill_stores"] is None and heavy.to_json()["spill_loads"] is None
    assert "nvrtc printed no resource report" in heavy.extra["note"] and heavy.extra["compiler"] == "nvrtc"
    assert heavy.registers > 0 and res["stage_copy"].static_smem == 8192  # what the cubin does say
    # with the report, the same kernel's spills are known, and it spills
    nvcc = parse_ptxas_log(real.log, arch="sm_90")
    assert any(v.get("spill_stores", 0) > 0 for v in nvcc.values())

    from pytest_pipecheck.cli import resources as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args([str(KERNELS), "--arch", "sm_90"])) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("spill::heavy"))
    assert "?/?" in row.split(), row
