"""The compute-sanitizer version decides the options pipecheck passes and the reviewed known false
positives it filters (pytest_pipecheck/sanitizer/known.py), on the fake tool, which prints the
configured version and refuses an option its version does not have."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ._sanitizer_fake import DATA, _fake, _results, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

OLD = "Version 2025.3.1.0 (build 36400806) (public-release)"
NEW = "Version 2026.4.0.0 (build 39022338) (public-release)"

TESTS = """
    def test_pipe(pipecheck):
        pass

    def test_gluon(pipecheck):
        pass

    def test_other(pipecheck):
        pass
"""


#: tests that launch Triton kernels the way Triton does it (its hook chains: a kernel's load with the cache
#: files it was loaded from, then its launch), which is what a sanitizer child records; the kernels are in
#: the environment variable KERNELS (fixture ``kernels``)
TRITON_TESTS = """
    import json, os
    import triton  # imported at collection, as a Triton suite does

    KERNELS = json.loads(os.environ["KERNELS"])

    def _launch(*names):
        from triton import knobs
        for name in names:
            k = KERNELS[name]
            knobs.runtime.kernel_load_end_hook(None, k["function"], k["name"], k["group"], "hash")
            knobs.runtime.launch_enter_hook({"name": k["name"], "function": k["function"], "stream": 0})

    def test_pipe(pipecheck):
        _launch("triton_gemm_ws")

    def test_gluon(pipecheck):
        _launch("gluon_masked", "gluon_tma")

    def test_other(pipecheck):
        _launch("gluon_masked", "gluon_tma")

    def test_user_kernel(pipecheck):
        _launch("triton_gemm_plain")

    def test_no_launch(pipecheck):
        pass
"""


def _write_group(folder: Path, files: dict[str, bytes]) -> dict[str, str]:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: str(folder / name) for name in files}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The cache files of real kernels: the Gluon warp-specialized GEMM as Triton 3.6 compiled it on the GPU
    machine (tests/data/sanitizer/triton_3_6_gluon_ws_gemm, both epilogues), and tests/data/sass/triton_gemm.py's
    matmul_tma_kernel compiled here by the installed Triton with and without warp specialization."""
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("kernels")
    out: dict[str, Any] = {}
    for n, variant in enumerate(("masked", "tma")):
        src = DATA / "triton_3_6_gluon_ws_gemm" / variant
        files = {f.name.removesuffix(".gz"): gzip.decompress(f.read_bytes()) if f.name.endswith(".gz")
                 else f.read_bytes() for f in src.iterdir()}
        out[f"gluon_{variant}"] = {"name": "gluon_ws_gemm_kernel", "function": 101 + n,
                                   "group": _write_group(tmp / variant, files)}
    spec = importlib.util.spec_from_file_location("_pipecheck_sass_artifacts", DATA.parent / "sass" / "artifacts.py")
    assert spec is not None and spec.loader is not None
    art = sys.modules.get(spec.name)
    if art is None:
        art = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = art
        spec.loader.exec_module(art)
    for n, ws in enumerate((True, False)):
        k = art.triton_tma(ws)
        name = k.metadata["name"]
        files = {f"{name}.json": json.dumps(k.metadata).encode(), f"{name}.ttgir": k.asm["ttgir"].encode(),
                 f"{name}.llir": k.asm["llir"].encode()}
        key = "triton_gemm_ws" if ws else "triton_gemm_plain"
        out[key] = {"name": name, "function": 201 + n, "group": _write_group(tmp / key, files)}
    return json.dumps(out)


def _run(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
         plan: dict[str, object], tools: str, tests: str = TESTS, *args: str
         ) -> tuple[pytest.RunResult, list[list[str]]]:
    log = _fake(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("FAKE_SANITIZER_VERSION", version)
    _setup(pytester)
    pytester.makepyfile(test_k=tests)
    result = pytester.runpytest_subprocess("--pipecheck", f"--pipecheck-sanitizer={tools}", "-p", "no:cacheprovider",
                                           *args)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


def _options(calls: list[list[str]], tool: str) -> list[str]:
    """The sanitizer options (before the child's python) of every child of ``tool``."""
    out: list[str] = []
    for argv in calls:
        if argv[argv.index("--tool") + 1] == tool:
            out += argv[:next(i for i, a in enumerate(argv) if not a.startswith("-") and argv[i - 1] not in (
                "--tool", "--error-exitcode", "--print-limit", "--save", "--racecheck-report",
                "--initcheck-address-space", "--check-bulk-copy", "--check-warpgroup-mma", "--padding",
                "--report-api-errors"))]
    return out


def test_the_new_version_gets_every_option_where_it_applies(pytester: pytest.Pytester, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _run(pytester, tmp_path, monkeypatch, NEW, {}, "all")
    text = result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "2026.4.0.0, PIPECHECK_COMPUTE_SANITIZER)" in text  # the header: binary, version, how it was found
    assert "cannot" not in text and "known false positive" not in text  # nothing to say for the pinned version
    init = _options(calls, "initcheck")
    assert ["--initcheck-address-space", "all"] == init[init.index("--initcheck-address-space"):][:2]
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        opts = _options(calls, tool)
        assert opts[opts.index("--check-bulk-copy") + 1] == "yes", tool
    for tool in ("memcheck", "synccheck"):
        opts = _options(calls, tool)
        assert opts[opts.index("--check-warpgroup-mma") + 1] == "yes", tool
    assert "--check-warpgroup-mma" not in _options(calls, "racecheck")
    assert "--initcheck-address-space" not in _options(calls, "memcheck")


def test_an_old_version_gets_no_option_it_lacks_and_says_what_it_cannot_see(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _run(pytester, tmp_path, monkeypatch, OLD, {}, "all")
    text = result.stdout.str()
    result.assert_outcomes(passed=3)  # the fake refuses options 2025.3.1 lacks: none was given
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        opts = _options(calls, tool)
        assert not {"--initcheck-address-space", "--check-bulk-copy"} & set(opts), tool
        # 2025.3.1 has --check-warpgroup-mma (docs/validation/2026-11-25-h100-0950.md): given where it applies
        assert ("--check-warpgroup-mma" in opts) == (tool in ("memcheck", "synccheck")), tool
    said = [ln for ln in text.splitlines() if "compute-sanitizer 2025.3.1.0" in ln]
    assert any("cannot check shared memory in initcheck" in ln for ln in said)
    assert any("rule cuda-pipeline-producer-commit" in ln for ln in said)
    assert any("rule triton-ws-dispatch-state" in ln for ln in said)
    assert sum("cannot check shared memory" in ln for ln in text.splitlines()) == 1  # said once


def test_an_unknown_version_gets_no_gated_option_and_no_rule(pytester: pytest.Pytester, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_pipeline_producer_commit_2025_3_1.txt"}}}
    result, calls = _run(pytester, tmp_path, monkeypatch, "Version unreadable", plan, "synccheck,initcheck")
    text = result.stdout.str()
    assert "version unknown" in text
    assert not {"--initcheck-address-space", "--check-bulk-copy"} & set(_options(calls, "initcheck"))
    res = _results(text)
    assert res[("test_pipe", "sanitizer:synccheck")][0] == "fail"  # no rule for a version it could not read


def test_known_false_positives_are_filtered_counted_and_reported_only_for_the_old_version(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernels: str) -> None:
    monkeypatch.setenv("KERNELS", kernels)
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_pipeline_producer_commit_2025_3_1.txt",
                                     "test_other": "synccheck_divergent_hostbt.txt"}},
            "racecheck": {"inject": {"test_gluon": "racecheck_gluon_ws_gemm_hazard_2025_3_1.txt",
                                     "test_other": "racecheck_gluon_ws_gemm_ring_race_constructed.txt"}}}
    tests = TRITON_TESTS.split("    def test_user_kernel")[0]
    result, _ = _run(pytester, tmp_path, monkeypatch, OLD, plan, "racecheck,synccheck", tests)
    res = _results(result.stdout.str())
    verdict, summary = res[("test_pipe", "sanitizer:synccheck")]
    assert verdict == "pass"
    assert "3 findings filtered by rule cuda-pipeline-producer-commit for compute-sanitizer 2025.3.1.0" in summary
    verdict, summary = res[("test_gluon", "sanitizer:racecheck")]
    assert verdict == "pass" and "4 findings filtered by rule triton-ws-dispatch-state" in summary
    # every other finding still fails the test: a real barrier error, and a race on the kernel's own ring
    # next to two dispatch-state records, which are filtered and named in the failure
    assert res[("test_other", "sanitizer:synccheck")][0] == "fail"
    verdict, summary = res[("test_other", "sanitizer:racecheck")]
    assert verdict == "fail" and "1 RAW race" in summary and "gluon_gemm.py:262" in summary, summary
    result.stdout.fnmatch_lines(["*2 findings filtered by rule triton-ws-dispatch-state for compute-sanitizer*"])
    result.assert_outcomes(passed=2, failed=1)

    # the same records under the new version: nothing is filtered, each fails
    (tmp_path / "new").mkdir()
    result, _ = _run(pytester, tmp_path / "new", monkeypatch, NEW, plan, "racecheck,synccheck", tests)
    res = _results(result.stdout.str())
    assert res[("test_pipe", "sanitizer:synccheck")][0] == "fail"
    assert res[("test_gluon", "sanitizer:racecheck")][0] == "fail"
    assert "filtered by rule" not in result.stdout.str()


def test_a_race_of_the_dispatch_shape_in_a_kernel_not_warp_specialized_fails(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernels: str) -> None:
    """The child records what each test launched; only records of a kernel Triton warp-specialized may be
    the dispatch state. The same record shape in a user's kernel without warp specialization, or in a test
    whose child recorded no kernel, fails the test, and the JSON report keeps the finding."""
    monkeypatch.setenv("KERNELS", kernels)
    plan = {"racecheck": {"inject": {"test_gluon": "racecheck_gluon_ws_gemm_analysis_2025_3_1.txt",
                                     "test_user_kernel": "racecheck_triton_user_race_dispatch_shape_constructed.txt",
                                     "test_no_launch": "racecheck_gluon_ws_gemm_analysis_2025_3_1.txt"}}}
    tests = TRITON_TESTS.replace("    def test_pipe(pipecheck):\n        _launch(\"triton_gemm_ws\")\n", "")
    tests = tests.replace("    def test_other(pipecheck):\n        _launch(\"gluon_masked\", \"gluon_tma\")\n", "")
    result, _ = _run(pytester, tmp_path, monkeypatch, OLD, plan, "racecheck", tests, "--pipecheck-json=r.json")
    res = _results(result.stdout.str())
    verdict, summary = res[("test_gluon", "sanitizer:racecheck")]
    assert verdict == "pass" and "2 findings filtered by rule triton-ws-dispatch-state" in summary, summary
    verdict, summary = res[("test_user_kernel", "sanitizer:racecheck")]
    assert verdict == "fail" and "race in matmul_tma_kernel (triton_gemm.py:22" in summary, summary
    verdict, summary = res[("test_no_launch", "sanitizer:racecheck")]
    assert verdict == "fail" and "gluon_ws_gemm_kernel" in summary, summary
    result.stdout.fnmatch_lines(["*compute-sanitizer racecheck: 1 WAR race in matmul_tma_kernel*",
                                 "*1 x WAR race (error) in matmul_tma_kernel at triton_gemm.py:22 / triton_gemm.py:22*"])
    result.assert_outcomes(passed=1, failed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    found = {r["nodeid"].rsplit("::", 1)[-1]: r for r in report["results"] if r["check"] == "sanitizer:racecheck"}
    user = found["test_user_kernel"]
    assert user["verdict"] == "fail" and user["details"]["filtered"] == {}
    assert [(f["kernel"], f["line"], f["hazard"]) for f in user["details"]["findings"]] == [
        ("matmul_tma_kernel", 22, "WAR")]
    assert "PIPECHECK-LAUNCH" in user["details"]["output"] and '"warp_specialized": false' in user["details"]["output"]
    ws = found["test_gluon"]["details"]
    assert ws["findings"] == [] and ws["filtered"]["triton-ws-dispatch-state"]["records"] == 2
    assert [f["kernel"] for f in ws["filtered"]["triton-ws-dispatch-state"]["findings"]] == ["gluon_ws_gemm_kernel"] * 2


def test_a_toolchain_bug_is_filtered_and_a_child_it_kills_is_explained(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernels: str) -> None:
    """Triton 3.6's warp-specialize barrier re-init (rule triton-ws-barrier-reinit) under 2026.4.0: filtered and
    counted; where the tool's report then kills the child, the test is inconclusive, saying why, never a pass.
    The records come after the kernel's launch, so the child has recorded the kernel when it dies."""
    monkeypatch.setenv("KERNELS", kernels)
    plan = {"synccheck": {"inject": {"test_pipe": "synccheck_triton_ws_barrier_reinit_2026_4_0.txt",
                                     "test_gluon": "synccheck_triton_ws_barrier_reinit_2026_4_0.txt",
                                     "test_user_kernel": "synccheck_triton_ws_barrier_reinit_2026_4_0.txt"},
                          "dies_in": "test_gluon", "at_launch": "test_"}}
    log = _fake(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("FAKE_SANITIZER_VERSION", NEW)
    _setup(pytester)
    # the rule applies with Triton 3.6 (this machine may have another one) to a record at the def line of a
    # warp-specialized kernel the test launched
    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + "\n\nfrom pytest_pipecheck.sanitizer import known as _known\n"
                        "_known._triton_version = lambda: (3, 6, 0)\n")
    # test_gluon launches the same warp-specialized kernel (it dies there)
    pytester.makepyfile(test_k=TRITON_TESTS.replace('_launch("gluon_masked", "gluon_tma")\n\n    def test_other',
                                                    '_launch("triton_gemm_ws")\n\n    def test_other'))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=synccheck", "-p", "no:cacheprovider")
    assert log.exists()
    res = _results(result.stdout.str())
    verdict, summary = res[("test_pipe", "sanitizer:synccheck")]
    assert verdict == "pass" and "16 findings filtered by rule triton-ws-barrier-reinit" in summary
    verdict, summary = res[("test_gluon", "sanitizer:synccheck")]
    assert verdict == "error" and "16 records filtered by rule triton-ws-barrier-reinit" in summary, summary
    # the same records in the kernel built without warp specialization: Triton's bug is not in it, they fail
    verdict, summary = res[("test_user_kernel", "sanitizer:synccheck")]
    assert verdict == "fail" and "16 barrier errors in matmul_tma_kernel" in summary, summary
    assert "known bug of the toolchain" in result.stdout.str()  # the run header
