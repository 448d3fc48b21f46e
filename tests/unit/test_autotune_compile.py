"""The configs an Autotuner is about to benchmark compile side by side (``autotune.compile_configs_side_by_side``).

Triton's own ``Autotuner.prune_configs`` and ``AsyncCompileMode`` are used as they are; the kernel is a stand-in
whose ``run(warmup=True)`` hands its compile to the active ``AsyncCompileMode`` as ``JITFunction`` does. That the
compiles really overlap is shown without a clock: each compile waits at a barrier that only several compiles
running at once can pass. A real kernel's compiles are checked on the GPU (tests/gpu/test_autotune_gpu.py).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

# a stand-in kernel, and a session of its own that must find Triton's Autotuner as Triton made it: the CPU job
# runs these (tests/conftest.py); on the GPU tier the session has wrapped the Autotuner already
pytestmark = pytest.mark.cpu_only
triton = pytest.importorskip("triton")
pytest.importorskip("triton.runtime._async_compile")

from triton.runtime import _async_compile  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

from pytest_pipecheck.model import autotune  # noqa: E402


class StandInKernel:
    """Compiles as ``JITFunction.run(warmup=True)`` does under an active ``AsyncCompileMode``: the compile goes
    to the mode's executor, and the kernel lands in ``kernels`` when the mode finalizes it."""

    def __init__(self, barrier: threading.Barrier | None = None, fails: tuple[int, ...] = ()) -> None:
        self.barrier = barrier
        self.fails = fails
        self.kernels: dict[int, str] = {}
        self.threads: dict[int, str] = {}
        self.calls: list[dict[str, Any]] = []

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        self.calls.append(dict(kwargs, grid=grid, warmup=warmup))
        warps = kwargs["num_warps"]

        def compile() -> str:
            self.threads[warps] = threading.current_thread().name
            if self.barrier is not None:
                self.barrier.wait()
            if warps in self.fails:
                raise RuntimeError(f"out of resources at num_warps={warps}")
            return f"binary for {warps} warps"

        mode = _async_compile.active_mode.get()
        if mode is None:
            self.kernels[warps] = compile()
            return self.kernels[warps]
        return mode.submit(("k", warps), compile, lambda kernel: self.kernels.__setitem__(warps, kernel),
                           lambda future: None)


def _tuner(kernel: StandInKernel, warps: tuple[int, ...] = (1, 2, 4, 8)) -> Any:
    """What ``Autotuner.run`` has set when it calls ``prune_configs``: the configs and the launch's arguments."""
    return SimpleNamespace(configs=[triton.Config({"BLOCK": 64}, num_warps=w) for w in warps],
                           early_config_prune=None, perf_model=None, configs_top_k=1.0, fn=kernel,
                           nargs={"x": "x-tensor", "n": 100})


@pytest.fixture
def side_by_side():  # type: ignore[no-untyped-def]
    original = Autotuner.__dict__["prune_configs"]
    assert autotune.compile_configs_side_by_side(threads=4)
    yield
    autotune.restore_compile()
    assert Autotuner.__dict__["prune_configs"] is original


def test_the_configs_compile_at_once_before_the_benchmark_with_the_launchs_arguments(side_by_side) -> None:
    kernel = StandInKernel(barrier=threading.Barrier(4, timeout=60))  # passes only if 4 compiles run at once
    tuner = _tuner(kernel)
    chosen = Autotuner.prune_configs(tuner, {"grid": (3,), "warmup": False, "BLOCK_K": 32})
    assert chosen == tuner.configs  # what the Autotuner benchmarks is unchanged
    assert kernel.kernels == {w: f"binary for {w} warps" for w in (1, 2, 4, 8)}  # each finalized (cached)
    assert all(name.startswith("pipecheck-compile") for name in kernel.threads.values()), kernel.threads
    # every compile had the launch's own arguments (what the benchmark's launch will look up), and only compiled
    assert all(c["x"] == "x-tensor" and c["n"] == 100 and c["BLOCK_K"] == 32 and c["BLOCK"] == 64
               and c["grid"] == (3,) and c["warmup"] is True for c in kernel.calls), kernel.calls


def test_a_config_that_fails_to_compile_is_left_to_the_benchmark(side_by_side) -> None:
    kernel = StandInKernel(fails=(8,))
    tuner = _tuner(kernel)
    assert Autotuner.prune_configs(tuner, {"grid": (1,)}) == tuner.configs  # no error escapes here
    assert sorted(kernel.kernels) == [1, 2, 4]  # the others compiled; 8 is compiled (and fails) by the benchmark


@pytest.mark.parametrize("case", ["one config", "a mode already active", "no launch arguments"])
def test_nothing_is_compiled_ahead_where_there_is_nothing_to_gain_or_someone_else_compiles(side_by_side,
                                                                                         case: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    kernel = StandInKernel()
    tuner = _tuner(kernel, warps=(4,) if case == "one config" else (1, 2))
    if case == "no launch arguments":
        tuner.nargs = None
    if case == "a mode already active":
        with ThreadPoolExecutor(1) as pool, _async_compile.AsyncCompileMode(pool):
            Autotuner.prune_configs(tuner, {"grid": (1,)})
    else:
        Autotuner.prune_configs(tuner, {"grid": (1,)})
    assert kernel.calls == []


def test_in_place_once_and_taken_back_by_whoever_put_it_there(side_by_side) -> None:
    wrapped = Autotuner.__dict__["prune_configs"]
    assert not autotune.compile_configs_side_by_side()  # a nested session finds it in place: not its to undo
    assert Autotuner.__dict__["prune_configs"] is wrapped


def test_a_cpu_tier_session_leaves_the_autotuner_as_it_was(pytester: pytest.Pytester) -> None:
    """The CPU tier runs kernels in Triton's interpreter, which compiles nothing: the Autotuner is untouched,
    during the session and after it."""
    original = Autotuner.__dict__["prune_configs"]
    pytester.makepyfile(test_a='''
        from triton.runtime.autotuner import Autotuner

        def test_untouched():
            assert not hasattr(Autotuner.__dict__["prune_configs"], "__wrapped__")
    ''')
    result = pytester.runpytest_inprocess("--pipecheck", "--pipecheck-tier=cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert Autotuner.__dict__["prune_configs"] is original
