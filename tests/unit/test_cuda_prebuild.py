"""``reference_kernels.cuda.launch.prebuild`` compiles a sweep's builds side by side, with a stand-in CuPy (no GPU).

That the compiles overlap is shown without a clock: each waits at a barrier that only several compiles running
at once can pass. The real builds compile and launch in the stage sweep on the GPU
(reference_kernels/cuda/test_reference_cuda.py::test_k3_stage_sweep_against_the_cost_model).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from reference_kernels.cuda import launch

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (a stand-in CuPy)


class CompileException(Exception):
    def get_message(self) -> str:
        return "error: expected a ';'"


def _fake_cupy(barrier: threading.Barrier | None, fail_on: str | None = None,
               gate: threading.Event | None = None) -> tuple[Any, list[tuple[str, ...]]]:
    compiled: list[tuple[str, ...]] = []
    current = threading.local()

    class Device:
        def __init__(self, index: int | None = None) -> None:
            self.id = index if index is not None else getattr(current, "id", 0)
            self.compute_capability = "90"

        def __enter__(self) -> Device:
            current.id = self.id
            return self

        def __exit__(self, *exc: object) -> None:
            current.id = 0

    class RawModule:
        def __init__(self, code: str, options: tuple[str, ...], backend: str) -> None:
            assert backend == "nvrtc"
            self.options = options

        def get_function(self, entry: str) -> Any:
            if fail_on is not None and fail_on in self.options:
                raise CompileException()
            if barrier is not None:
                barrier.wait()
            if gate is not None and not gate.wait(60):  # a failsafe: the test opens it at once
                raise AssertionError("the compile was never let through")
            compiled.append(self.options)
            return SimpleNamespace(entry=entry, options=self.options)

    cupy = SimpleNamespace(cuda=SimpleNamespace(Device=Device, compiler=SimpleNamespace(CompileException=CompileException)),
                           RawModule=RawModule)
    return cupy, compiled


@pytest.fixture
def no_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_MODULES", {})  # stand-in builds never reach a real launch of this process
    monkeypatch.setattr(launch, "_BUILDING", {})
    monkeypatch.setattr(launch, "include_dirs", lambda: [str(launch.CUDA_DIR)])  # not CuPy's own headers


MACROS = ({}, {"PIPECHECK_LOAD_ONLY": 1}, {"PIPECHECK_COMPUTE_ONLY": 1})


def test_the_sweeps_builds_compile_at_once_and_launches_find_them(monkeypatch: pytest.MonkeyPatch, no_modules) -> None:
    cupy, compiled = _fake_cupy(threading.Barrier(4, timeout=60))  # passes only with 4 compiles at once
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    builds = [(s, m) for s in (1, 2, 3, 4) for m in MACROS]
    assert launch.prebuild("k3_cp_async", builds, threads=4) == 12
    assert len(compiled) == 12 and len(set(compiled)) == 12
    assert launch.prebuild("k3_cp_async", builds, threads=4) == 0  # in this process already
    src = launch.kernel_source("k3_cp_async")
    defs, _ = launch._launch_defines(launch.KERNELS["k3_cp_async"], src, 3, MACROS[1], "k3")
    assert "-DPIPECHECK_STAGES=3" in launch._function(src, "gemm_k3_cp_async", defs, "k3").options
    assert len(compiled) == 12  # the launch's build was one of them


def test_a_build_that_does_not_compile_raises_as_its_launch_would(monkeypatch: pytest.MonkeyPatch, no_modules) -> None:
    cupy, _ = _fake_cupy(None, fail_on="-DPIPECHECK_STAGES=2")
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    with pytest.raises(launch.CudaCompileError, match=r"(?s)NVRTC failed for sm_90.*PIPECHECK_STAGES=2.*expected a ';'"):
        launch.prebuild("k3_cp_async", [(s, {}) for s in (1, 2, 3)])


def test_a_stage_count_the_kernel_does_not_take_is_refused_before_any_compile(monkeypatch: pytest.MonkeyPatch,
                                                                             no_modules) -> None:
    cupy, compiled = _fake_cupy(None)
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    with pytest.raises(launch.CudaLaunchError, match="stages=9 is not supported"):
        launch.prebuild("k3_cp_async", [(2, {}), (9, {})])
    assert compiled == []


def test_every_rungs_default_build_compiles_at_once(monkeypatch: pytest.MonkeyPatch, no_modules) -> None:
    """What the bundled CUDA module's fixture compiles before its first test: each kernel's default build,
    side by side (the barrier passes only with all of them compiling at once)."""
    cupy, compiled = _fake_cupy(threading.Barrier(len(launch.KERNELS), timeout=60))
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    assert launch.prebuild_many([(name, None, None) for name in launch.KERNELS]) == len(launch.KERNELS)
    for name, k in launch.KERNELS.items():  # each launch finds its build: nothing compiles again
        defs, _ = launch._launch_defines(k, launch.kernel_source(k), None, None, name)
        launch._function(launch.kernel_source(k), k.entry, defs, name)
    assert len(compiled) == len(launch.KERNELS)


def test_a_build_left_to_its_launch_compiles_there_and_raises_there(monkeypatch: pytest.MonkeyPatch,
                                                                    no_modules) -> None:
    """raise_errors=False: the other builds compile; the failing one is not kept, so its own launch compiles
    it again and raises the compiler's message (in its own test, not in every test of the module)."""
    cupy, compiled = _fake_cupy(None, fail_on="-DPIPECHECK_K3_WIDE=1")
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    assert launch.prebuild_many([(name, None, None) for name in launch.KERNELS], raise_errors=False) \
        == len(launch.KERNELS) - 1
    with pytest.raises(launch.CudaCompileError, match="expected a ';'"):
        launch.prebuild_many([("k3_cp_async_wide", None, None)])
    k = launch.KERNELS["k3_cp_async_wide"]
    defs, _ = launch._launch_defines(k, launch.kernel_source(k), None, None, k.name)
    with pytest.raises(launch.CudaCompileError, match="k3_cp_async_wide: NVRTC failed"):
        launch._function(launch.kernel_source(k), k.entry, defs, k.name)
    assert len(compiled) == len(launch.KERNELS) - 1


def _default_build(name: str) -> tuple[str, str, dict[str, Any]]:
    k = launch.KERNELS[name]
    src = launch.kernel_source(k)
    defs, _ = launch._launch_defines(k, src, None, None, name)
    return src, k.entry, defs


def test_a_launch_waits_for_its_build_compiling_in_the_background(monkeypatch: pytest.MonkeyPatch, no_modules) -> None:
    """What the bundled CUDA module's fixture does: the default builds compile on threads while the first tests
    run. A launch whose build is still compiling waits for that compile rather than compiling it again."""
    gate = threading.Event()
    cupy, compiled = _fake_cupy(None, gate=gate)
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    futures = launch.prebuild_in_background([(name, None, None) for name in launch.KERNELS], threads=2)
    assert len(futures) == len(launch.KERNELS) and compiled == []  # returned at once: nothing compiled yet
    src, entry, defs = _default_build("k1_sync_tiled")
    key = launch._module_key(src, entry, defs, 0)
    awaited: list[bool] = []
    building = launch._BUILDING[key]

    class Watched:  # the launch's wait on the build opens the gate: a launch that compiled itself would not get here
        def result(self) -> Any:
            awaited.append(True)
            gate.set()
            return building.result()

    launch._BUILDING[key] = Watched()  # type: ignore[assignment]
    fn = launch._function(src, entry, defs, "k1_sync_tiled")
    assert awaited == [True] and fn is building.result()
    for future in futures:
        future.result()
    assert len(compiled) == len(launch.KERNELS)  # each build once
    assert launch.prebuild_in_background([(name, None, None) for name in launch.KERNELS]) == []  # all there


def test_a_build_that_failed_in_the_background_raises_in_its_launch(monkeypatch: pytest.MonkeyPatch,
                                                                   no_modules) -> None:
    cupy, compiled = _fake_cupy(None, fail_on="-DPIPECHECK_K3_WIDE=1")
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    for future in launch.prebuild_in_background([(name, None, None) for name in launch.KERNELS]):
        future.exception()  # every build has ended
    assert len(compiled) == len(launch.KERNELS) - 1
    src, entry, defs = _default_build("k3_cp_async_wide")
    with pytest.raises(launch.CudaCompileError, match=r"(?s)k3_cp_async_wide: NVRTC failed.*expected a ';'"):
        launch._function(src, entry, defs, "k3_cp_async_wide")
    src, entry, defs = _default_build("k1_sync_tiled")
    launch._function(src, entry, defs, "k1_sync_tiled")
    assert len(compiled) == len(launch.KERNELS) - 1  # the others' launches found their builds
