"""Shared test set-up.

pytester's in-process runs restore ``sys.modules`` afterwards: a heavy library first imported inside
such a run is dropped from it, and importing it again later builds a second copy whose classes do
not match objects kept from the first (matplotlib then fails in ``set_clip_path``; torch refuses to
register its operators twice). Importing them here, once, keeps them out of that churn. Triton is
imported in ``pytest_configure`` instead: it must come after the plugin has chosen the tier (and set
``TRITON_INTERPRET`` on the CPU tier).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

# Every process the suite starts (the relay child that runs its tests, the nested sessions, the sanitizer
# children) imports pipecheck and rewrites the asserts of the modules it collects. Where
# PYTHONDONTWRITEBYTECODE is set, as on the project's CI machines, none of them kept what it compiled and each
# compiled it all again (a nested session: 0.79 s, 0.52 s with the bytecode kept). The bytecode goes to a
# cache outside the tree instead (PYTHONPYCACHEPREFIX), so the tree stays as clean as the setting meant. This
# process keeps its own there too, from here on: the test modules it collects are rewritten once, and the relay
# child that runs them under crash isolation (which collects them all again) reads them back.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    import sys
    import tempfile

    del os.environ["PYTHONDONTWRITEBYTECODE"]
    _uid = getattr(os, "getuid", lambda: 0)()
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"pipecheck-tests-pycache-{_uid}")
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False

# pipecheck's own spec and shape modules too: a spec built by a module imported in one run must
# match the KernelSpec class the shape generator checks against in the next
for _name in ("torch", "matplotlib.figure", "matplotlib.backends.backend_agg", "numpy", "scipy.stats",
              "pytest_pipecheck.model.spec", "pytest_pipecheck.model.shapes", "pytest_pipecheck.checks.correctness"):
    try:
        importlib.import_module(_name)
    except ImportError:  # optional extras: tests that need them skip on their own
        pass


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"cpu_only: {CPU_ONLY}")
    config.addinivalue_line("markers", f"gpu_evidence: {GPU_EVIDENCE}")
    for name in ("triton", "triton.language", "triton.compiler"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _LANG_ORIGINALS.update(_lang_attributes())


# Triton's interpreter (the CPU tier) patches triton.language while it runs a kernel and puts it back
# afterwards. After an in-process pytester run that launched an autotuned kernel
# (tests/plugin/test_autotune_plugin.py) the patches stayed (Triton 3.9; not seen when the same tests run
# in a pytest of their own), and a later AOT compile then went through the interpreter's builder and
# failed (tests/unit/test_gluon_*.py, whenever Triton's compile cache missed). After each test, the
# interpreter's patches still in place are put back.
_LANG_ORIGINALS: dict[tuple[int, str], tuple[Any, str, Any]] = {}


def _lang_attributes() -> dict[tuple[int, str], tuple[Any, str, Any]]:
    try:
        import triton.language as tl
    except ImportError:
        return {}
    owners = [tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base]
    return {(id(o), name): (o, name, value) for o in owners for name, value in list(vars(o).items())}


def _interpreter_patch(value: Any) -> bool:
    return getattr(value, "__module__", None) == "triton.runtime.interpreter" or (
        getattr(getattr(value, "func", None), "__module__", None) == "triton.runtime.interpreter")


@pytest.fixture(autouse=True)
def _triton_language_as_it_was() -> Any:
    yield
    for owner, name, value in _LANG_ORIGINALS.values():
        now = vars(owner).get(name)
        if now is not value and _interpreter_patch(now):
            setattr(owner, name, value)


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytester run is a session of its own, not a worker of the run around it. Under ``pytest -n``
    the outer worker's PYTEST_XDIST_* variables would reach it; pytest-benchmark reads
    PYTEST_XDIST_WORKER and disables itself with a warning (an INTERNALERROR under ``-W error``), which
    failed tests/plugin/test_perf_plugin.py's benchmark tests under ``-n 2`` only."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # The pytest sessions a test starts (pytester runs, the fake sanitizer's children) load every installed
    # pytest plugin; hypothesis's alone takes 0.6 s of a nested session's 1.0 s on a CPU-only machine, and
    # no nested session uses it. (Set per test, so the run's own xdist workers keep it.)
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    if NESTED_ADDOPTS not in addopts:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{addopts} {NESTED_ADDOPTS}".strip())


#: options of every pytest session a test starts
NESTED_ADDOPTS = "-p no:hypothesispytest"


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's pytester, whose set-up clears PYTEST_ADDOPTS: the nested-session options set again."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NESTED_ADDOPTS)
    return pytester


_OWN_TESTS = ("unit", "plugin")


def pytest_itemcollected(item: pytest.Item) -> None:
    """pipecheck's own unit and plugin tests are not sanitized on the GPU tier.

    They test pipecheck's machinery (the sanitizer paths through a fake compute-sanitizer), and many
    assert on a check's numbers, so a launch-scope child would have to run them whole again. The
    kernels the GPU tier exists to sanitize are in tests/gpu and reference_kernels. A test's own
    ``sanitizer=`` marker still wins (this one is the farthest).
    """
    parts = item.path.relative_to(item.config.rootpath).parts if item.path.is_relative_to(item.config.rootpath) else ()
    if len(parts) > 1 and parts[0] == "tests" and parts[1] in _OWN_TESTS:
        item.add_marker(pytest.mark.pipecheck(sanitizer="none"), append=True)


@pytest.fixture(scope="session")
def consan_aot() -> Any:
    """tests/gpu/consan_targets/aot.py (ConSan's test kernels compiled ahead of time), loaded from its path."""
    spec = importlib.util.spec_from_file_location("consan_aot", Path(__file__).parent / "gpu" / "consan_targets" / "aot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_job_summary_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytester run is not the CI step around it: under GitHub Actions each nested session would append
    its own verdict to the job's summary (``$GITHUB_STEP_SUMMARY``). The run around them read the variable
    when it was configured, before any test, and still writes its own. A test of the job summary sets it."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


#: why a test marked ``cpu_only`` is left out of the GPU tier (the marker's description and the deselection's note)
CPU_ONLY = ("tests pipecheck's own machinery with stand-ins (a fake GPU, compute-sanitizer, CUDA context or "
            "nvidia-smi) or with no device at all, which a GPU does not change: the CPU job runs it "
            "(pytest --pipecheck --pipecheck-tier=cpu); --pipecheck-tier=gpu leaves it out, unless "
            "PIPECHECK_GPU_TIER_ALL=1")
#: why a test marked ``gpu_evidence`` is left out of the per-merge GPU tier
GPU_EVIDENCE = ("proves one GPU-side claim with a nested session under a real tool (a hang the watchdog must "
                "kill, ConSan on every Gluon mutant, racecheck's view of a Hopper WGMMA release), 45-100 s each "
                "on an H100: the per-merge GPU tier leaves it out to fit one CI job; "
                "scripts/gpu-check.sh OUT evidence runs them, as does PIPECHECK_GPU_EVIDENCE=1")
_LEFT_OUT = pytest.StashKey[dict[str, int]]()


def _gpu_tier(config: pytest.Config) -> bool:
    """Whether this run is the GPU tier as CI runs it (``--pipecheck-tier=gpu``, or ini ``pipecheck_tier = gpu``)."""
    from pytest_pipecheck import state

    run_config = config.stash.get(state.RUN_CONFIG, None)
    return run_config is not None and run_config.tier == "gpu"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The GPU tier runs what needs a GPU and the few tests of pipecheck's own that check its GPU-side paths
    on the device; the tests marked ``cpu_only`` are the CPU job's (:data:`CPU_ONLY`). They are deselected,
    not skipped, so that they take no place in the xdist shares (priced by their CPU-job durations), and the
    run says how many and why at its end."""
    if not _gpu_tier(config) or os.environ.get("PIPECHECK_GPU_TIER_ALL") == "1":
        return
    markers = ["cpu_only"] + ([] if os.environ.get("PIPECHECK_GPU_EVIDENCE") == "1" else ["gpu_evidence"])
    left_out = {m: [item for item in items if item.get_closest_marker(m) is not None] for m in markers}
    gone = {id(item) for group in left_out.values() for item in group}
    if not gone:
        return
    config.hook.pytest_deselected(items=[item for item in items if id(item) in gone])
    items[:] = [item for item in items if id(item) not in gone]
    config.stash[_LEFT_OUT] = {m: len(group) for m, group in left_out.items() if group}


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _gpu_tier(config) or os.environ.get("PIPECHECK_GPU_TIER_ALL") == "1":
        return None
    evidence = ("" if os.environ.get("PIPECHECK_GPU_EVIDENCE") == "1" else
                f"; those marked gpu_evidence too: each {GPU_EVIDENCE}")
    return f"pipecheck's own tests: those marked cpu_only are deselected; each {CPU_ONLY}{evidence}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    why = {"cpu_only": CPU_ONLY, "gpu_evidence": GPU_EVIDENCE}
    for marker, count in config.stash.get(_LEFT_OUT, {}).items():
        terminalreporter.write_line(f"{count} {marker} test(s) deselected under --pipecheck-tier=gpu: each "
                                    f"{why[marker]}")
