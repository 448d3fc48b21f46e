"""``--pipecheck-sanitizer=consan`` end to end through real pytest runs, without a GPU.

The run looks like the GPU tier (a fake device, tests/plugin/_sanitizer_fake.py); the ConSan children
are real child pytest processes with the knob set. The tests stand in for kernels through Triton's own
hook chains: they "load" the cache files of a kernel compiled ahead of time with or without ConSan
(tests/gpu/consan_targets/aot.py) and "launch" it, print a device assert the way the CUDA driver does
(C stdio, buffered on a pipe), abort the process, or die without a word.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ._sanitizer_fake import _results, _setup

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TESTS = '''
import ctypes, json, os
import pytest

GROUPS = json.loads(os.environ["CONSAN_TEST_GROUPS"])
IN_CHILD = os.environ.get("PIPECHECK_CHILD") == "consan"
ASSERT = ("k.py:3: kern: block: [0,0,0], thread: [0,0,0] Assertion `Buffer being accessed has outstanding "
          "writes.` failed.\\n")


def _launch(which, function):
    from triton import knobs
    g = GROUPS[which]
    knobs.runtime.kernel_load_end_hook(None, function, g["name"], g["group"], "hash")
    knobs.runtime.launch_enter_hook({"name": g["name"], "function": function, "stream": 0})


def test_no_kernel(pipecheck):
    assert os.environ.get("TRITON_INSTRUMENTATION_MODE") == ("consan" if IN_CHILD else None)


def test_instrumented(pipecheck):
    _launch("consan", 1)


def test_uninstrumented(pipecheck):
    _launch("plain", 2)


def test_violation(pipecheck):
    if IN_CHILD:
        _launch("consan", 3)
        ctypes.CDLL(None).printf(ASSERT.encode())  # stays in C's buffer unless flushed
        raise RuntimeError("CUDA error: device-side assert triggered")


def test_after_violation(pipecheck):
    _launch("consan", 4)


def test_abort(pipecheck):
    if IN_CHILD:
        _launch("consan", 5)
        os.write(1, ASSERT.encode())
        os.abort()


def test_silent_death(pipecheck):
    if IN_CHILD:
        os._exit(3)


def test_last(pipecheck):
    _launch("consan", 6)


@pytest.mark.pipecheck(sanitizer="racecheck")
def test_not_consan(pipecheck):
    pass
'''


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory, consan_aot: Any) -> str:
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("consan-aot")
    aot = consan_aot
    return json.dumps({"consan": aot.aot_groups(tmp / "consan", "consan")["90"],
                       "plain": aot.aot_groups(tmp / "plain", "")["90"]})


def test_consan_verdicts_crashes_and_reruns(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                            groups: str) -> None:
    monkeypatch.setenv("CONSAN_TEST_GROUPS", groups)
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("TRITON_INSTRUMENTATION_MODE", raising=False)
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(pytester.path / "no-such-compute-sanitizer"))
    _setup(pytester)
    pytester.makepyfile(test_k=TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=consan", "-p", "no:cacheprovider",
                                           "--pipecheck-sanitizer-jobs=1", timeout=600)
    text = result.stdout.str()
    res = _results(text)

    def verdict(name: str) -> tuple[str, str]:
        return res[(name, "sanitizer:consan")]

    assert verdict("test_no_kernel") == ("skip", "no Triton kernel launched"), text[-3000:]
    v, summary = verdict("test_instrumented")
    assert v == "pass" and summary.startswith("no violation; instrumented: overwrite_in_flight (")
    v, summary = verdict("test_uninstrumented")
    assert v == "error" and "was not compiled with ConSan" in summary
    assert verdict("test_violation") == ("fail", "ConSan violation: Buffer being accessed has outstanding writes.")
    assert verdict("test_after_violation")[0] == "pass"
    # the abort ends the child inside the test: a failure of that test, with the message it printed
    assert verdict("test_abort") == ("fail", "ConSan violation: Buffer being accessed has outstanding writes.")
    v, summary = verdict("test_silent_death")
    assert v == "error" and "died during this test" in summary
    assert verdict("test_last")[0] == "pass"  # run in a new child after the two deaths
    # ConSan is not run where the marker does not ask for it; racecheck there has no compute-sanitizer
    assert ("test_not_consan", "sanitizer:consan") not in res
    assert res[("test_not_consan", "sanitizer:racecheck")][0] == "skip"
    assert "Triton ConSan: ConSan violation: Buffer being accessed has outstanding writes." in text
    result.stdout.fnmatch_lines(["*reproduce: (cd * && env TRITON_INSTRUMENTATION_MODE=consan TRITON_CACHE_DIR=*"
                                 "--pipecheck-child=consan*test_violation*"])
    # the two errors are reported at teardown, after their calls passed
    result.assert_outcomes(passed=7, failed=2, errors=2)


def test_consan_without_a_gpu_is_a_skip_with_the_reason(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    _setup(pytester, fake_gpu=False)
    pytester.makepyfile(test_k="def test_one(pipecheck):\n    pass\n")
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=consan", "-p", "no:cacheprovider")
    verdict, summary = _results(result.stdout.str())[("test_one", "sanitizer:consan")]
    assert verdict == "skip" and summary.startswith("needs a CUDA GPU")
    result.assert_outcomes(passed=1)


def test_every_consan_child_of_a_session_shares_one_cache_removed_at_its_end(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two ConSan parts side by side (``--pipecheck-sanitizer-jobs=2``): both children compile into one cache of
    the session's own (each kernel compiled with ConSan once, not once per part), which is gone afterwards."""
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("TRITON_INSTRUMENTATION_MODE", raising=False)
    monkeypatch.setenv("PIPECHECK_COMPUTE_SANITIZER", str(pytester.path / "no-such-compute-sanitizer"))
    _setup(pytester)
    seen = tmp_path / "seen"
    seen.mkdir()
    pytester.makepyfile(test_c=f'''
import os

def _record(name):
    if os.environ.get("PIPECHECK_CHILD") == "consan":
        cache = os.environ["TRITON_CACHE_DIR"]
        with open(os.path.join({str(seen)!r}, name), "w") as fh:
            fh.write(f"{{cache}} {{os.path.isdir(cache)}} {{os.getpid()}}")
''' + "".join(f"\ndef test_{n}(pipecheck):\n    _record({n!r})\n" for n in "abcd"))
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=consan", "-p", "no:cacheprovider",
                                           "--pipecheck-sanitizer-jobs=2", timeout=600)
    result.assert_outcomes(passed=4)
    records = [(seen / n).read_text().split(" ") for n in "abcd"]
    assert len({pid for _, _, pid in records}) == 2, records  # two children
    assert len({cache for cache, _, _ in records}) == 1, records  # one cache
    cache, existed, _ = records[0]
    assert existed == "True" and not os.path.exists(cache)
