"""Tiers: detection without a GPU, skip with the reason, --pipecheck-tier=gpu as a hard requirement."""

from __future__ import annotations

import os

import pytest

from pytest_pipecheck import device


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
        """
    )
    result = pytester.runpytest("-rs", "--pipecheck", "--pipecheck-sanitizer=none")
    result.assert_outcomes(skipped=2)
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
    pytester.makepyfile("""
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
    pytester.makepyfile("""
        import os

        def test_inside():
            assert os.environ["TRITON_INTERPRET"] == "0" and os.environ["PIPECHECK_CHILD"] == "racecheck"
        """)
    pytester.runpytest_inprocess("--pipecheck", "--pipecheck-child=racecheck", "-p", "no:cacheprovider"
                                 ).assert_outcomes(passed=1)
    assert os.environ["TRITON_INTERPRET"] == "0" and os.environ[CHILD_ENV] == "synccheck"
