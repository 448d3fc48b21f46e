"""Tiers: detection without a GPU, skip with the reason, --pipecheck-tier=gpu as a hard requirement."""

from __future__ import annotations

import json
import os

import pytest

from pytest_pipecheck import device

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    device.detect_device.cache_clear()
    yield
    device.detect_device.cache_clear()


def test_header_names_cpu_tier_and_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["pipecheck: tier cpu (no GPU: PIPECHECK_NO_GPU is set), seed *, torch *, triton *"])


def test_gpu_marker_and_require_gpu_skip_with_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_marked():
            raise AssertionError("must not run")

        def test_required(pipecheck):
            pipecheck.require_gpu("sanitizer")
            raise AssertionError("must not run")

        def test_runs_on_the_cpu():
            pass  # a run in which nothing passed would fail as having checked nothing (docs/verdicts.md)
        """
    )
    result = pytester.runpytest("-rs", "--pipecheck", "--pipecheck-sanitizer=none")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "*needs a CUDA GPU: PIPECHECK_NO_GPU is set*",
        "*sanitizer needs a CUDA GPU: PIPECHECK_NO_GPU is set*",
    ])
    # the summary reports the skipped check as skipped, never as passed
    result.stdout.fnmatch_lines(["*skipped checks*", "*sanitizer x1: sanitizer needs a CUDA GPU*", "*0 pass, 0 fail, 1 skip, 0 error*"])


def test_tier_gpu_without_gpu_is_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--pipecheck-tier=gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: --pipecheck-tier=gpu but no usable CUDA GPU: PIPECHECK_NO_GPU is set*"])


def test_cpu_tier_sets_triton_interpreter(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makepyfile(
        """
        import os
        def test_env():
            assert os.environ.get("TRITON_INTERPRET") == "1"
        """
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_visible_devices_hiding_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPECHECK_NO_GPU")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    device.detect_device.cache_clear()
    dev, reason = device.detect_device()
    assert dev is None and "CUDA_VISIBLE_DEVICES" in reason


def test_an_in_process_session_takes_back_what_it_put_into_the_environment(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU tier sets TRITON_INTERPRET=1 and a sanitizer child PIPECHECK_CHILD for the session; left
    behind in a process that goes on (an xdist worker on a GPU machine running pipecheck's own tests),
    they would send the worker's later compiled launches and sanitizer children down the interpreter's
    paths."""
    from pytest_pipecheck.children import CHILD_ENV

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(CHILD_ENV, raising=False)
    first = pytester.makepyfile(test_unset="""
        import os

        def test_inside():
            assert os.environ["TRITON_INTERPRET"] == "1" and os.environ["PIPECHECK_CHILD"] == "racecheck"
        """)
    result = pytester.runpytest_inprocess("--pipecheck", "--pipecheck-child=racecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "TRITON_INTERPRET" not in os.environ and CHILD_ENV not in os.environ
    # a value that was there before the session is left as it was
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(CHILD_ENV, "synccheck")
    # a second module, not the first one rewritten: the same name and size written within the same second
    # would be served from the first run's rewritten bytecode (pytest keys that cache on mtime and size)
    first.unlink()
    pytester.makepyfile(test_set="""
        import os

        def test_inside():
            assert os.environ["TRITON_INTERPRET"] == "0" and os.environ["PIPECHECK_CHILD"] == "racecheck"
        """)
    pytester.runpytest_inprocess("--pipecheck", "--pipecheck-child=racecheck", "-p", "no:cacheprovider"
                                 ).assert_outcomes(passed=1)
    assert os.environ["TRITON_INTERPRET"] == "0" and os.environ[CHILD_ENV] == "synccheck"
    # nor the sanitizer child's autotune policy (one launch per config, no benchmark): every later
    # autotuned launch of the process would skip the benchmark
    autotuner = pytest.importorskip("triton.runtime.autotuner")
    import inspect

    assert type(inspect.getattr_static(autotuner.Autotuner, "do_bench")).__name__ != "property"


KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x, y):
    copy_kernel[(triton.cdiv(x.numel(), 16),)](x, y, x.numel(), BLOCK=16)
'''

CHECKS = '''
import pytest
from pytest_pipecheck import KernelSpec, Tensor

import mykernels

SPEC = KernelSpec("copy", lambda a, d: mykernels.copy(a["x"], a["y"]), lambda a, d: {"y": a["x"].double()},
                  [Tensor("x", ("N",), "float32"), Tensor("y", ("N",), "float32", role="output")], {"N": 16}, "N")


def test_copy(pipecheck):
    pipecheck.check_kernel(SPEC, "N40")


@pytest.mark.pipecheck(expect_failures=True)
def test_not_a_mutant_caught(pipecheck):
    pipecheck.check_kernel(SPEC, "N40")
'''


def test_a_kernel_library_imported_by_the_conftest_is_named_with_what_to_do(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conftest.py is imported before pipecheck sets TRITON_INTERPRET=1 on the CPU tier: the kernels it
    imports are compiled, and every check of them used to fail with Triton's bare "0 active drivers",
    blamed on the kernel (and counted as a mutant caught). Now each check is an ERROR that names the kernel,
    says what happened and what to do; the same kernel imported by the test module passes."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # this session's own value must not leak in
    pytester.makepyfile(mykernels=KERNELS, test_k=CHECKS)
    pytester.makeconftest("import mykernels  # noqa: F401  (the kernel library, before pipecheck configures)")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                           "--pipecheck-json=r.json")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    for test in ("test_copy", "test_not_a_mutant_caught"):
        result.stdout.fnmatch_lines([
            "*PipecheckError: copy at N40: the kernel launched the compiled Triton kernel mykernels.copy_kernel (a "
            "triton JITFunction), but this is the CPU tier, where Triton kernels run in Triton's interpreter: "
            "triton.jit decided to compile it when the kernel was defined, before pipecheck set TRITON_INTERPRET=1: "
            "its module was imported before pytest configured pipecheck (by a conftest.py or a plugin).*",
            "*What to do: set TRITON_INTERPRET=1 before that import (in the environment of CPU runs, or in the first "
            "lines of the conftest.py when there is no GPU), or move that import out of the conftest.py*",
            f"*reproduce: pytest test_k.py::{test} --pipecheck --pipecheck-seed=*",
        ])
    assert "0 active drivers" in out or "(cpu tensor?)" in out  # Triton's own words stay in the message
    doc = json.loads((pytester.path / "r.json").read_text())
    assert {(r["check"], r["verdict"], r["expected"]) for r in doc["results"]} == {("coverage", "error", False)}

    # the control: the same kernel imported by the test module only (after pipecheck configured) runs
    pytester.makeconftest("")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_not_a_mutant_caught expected at least one check to catch a bug, but none did*"])
