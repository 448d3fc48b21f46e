"""Fault injection: whatever compute-sanitizer (here a configurable fake) does wrong, no test reads pass.

Each case names the fault the fake injects (tests/data/sanitizer/fake_compute_sanitizer.py) and
asserts the verdict of the test it hits is never ``pass``; a clean test in the same run still passes,
so the suite cannot hold by erroring everything. Cases are batched into two pytester sessions (one
tool per fault family) to keep the suite fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._sanitizer_fake import GPU_CONFTEST, _fake, _results, _setup, noop_tests

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

TESTS = """
import pytest

def test_clean(pipecheck):
    pass

def test_noisy(pipecheck):
    pass

def test_later(pipecheck):
    pass

def test_unknown(pipecheck):
    pass

def test_garbled(pipecheck):
    pass

def test_hidden(pipecheck):
    pass
"""


def test_records_the_tool_did_not_print_or_pipecheck_could_not_read(pytester: pytest.Pytester, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake(tmp_path, monkeypatch, {
        # print limit exhausted by an earlier test: racecheck says only "N hazards displayed"
        "racecheck": {"inject": {"test_noisy": "racecheck_race_analysis.txt",
                                 "test_later": "racecheck_race_analysis.txt"},
                      "repeat": {"test_noisy": 1000}},
        # the same with the tool's own "N errors were not printed" line
        "initcheck": {"print_limit": 2, "inject": {"test_noisy": "initcheck_uninit.txt",
                                                   "test_later": "initcheck_uninit.txt"}},
        # unknown record kind, garbled record, summary count above the parsed records
        "synccheck": {"unknown": "test_unknown", "garble": "test_garbled", "hidden": "test_hidden"},
    })
    _setup(pytester)
    pytester.makepyfile(test_f=TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck,initcheck,synccheck",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    for tool in ("racecheck", "initcheck", "synccheck"):
        assert res[("test_clean", f"sanitizer:{tool}")] == ("pass", "0 hazards"), tool
    for tool in ("racecheck", "initcheck"):
        assert res[("test_noisy", f"sanitizer:{tool}")][0] == "fail", tool
        # the later test's finding was not printed in the batch: it is found when run without the noisy one
        verdict, summary = res[("test_later", f"sanitizer:{tool}")]
        assert verdict == "fail", (tool, verdict, summary)
    assert "as many as --print-limit 1000 allows" in text
    assert "did not print" in text
    verdict, summary = res[("test_unknown", "sanitizer:synccheck")]
    assert verdict == "fail" and "Warp Misaligned Address" in summary and "k.cu:7" in summary, summary
    verdict, summary = res[("test_garbled", "sanitizer:synccheck")]
    assert verdict == "fail" and "k.cu:21" in summary, summary
    verdict, summary = res[("test_hidden", "sanitizer:synccheck")]
    assert verdict == "error" and "does not reconcile" in summary, summary
    assert "in a child running this test alone" in text
    for argv in (json.loads(line) for line in log.read_text().splitlines()):
        assert argv[argv.index("--print-limit") + 1] == "1000"


def test_a_run_that_breaks_off_or_lies_about_its_exit(pytester: pytest.Pytester, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {
        "racecheck": {"silent": True},  # no sanitizer line at all, exit 0
        "synccheck": {"xml": "truncate"},  # the --save file is cut in the middle
        "memcheck": {"hang": "test_hang", "crash_mid": "test_crash_mid"},
        "initcheck": {"hidden": "test_victim", "exit": 0},  # counts an error, exits 0
    })
    _setup(pytester)
    pytester.makepyfile(test_b=noop_tests("test_victim", "test_hang", "test_crash_mid", "test_clean",
                                          timeouts={"test_hang": 1.5}))
    result = pytester.runpytest_subprocess("--pipecheck",
                                           "--pipecheck-sanitizer=racecheck,synccheck,memcheck,initcheck",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    names = ("test_victim", "test_hang", "test_crash_mid", "test_clean")
    for name in names:
        assert res[(name, "sanitizer:racecheck")][0] == "error", name  # silent
        assert res[(name, "sanitizer:synccheck")][0] == "error", name  # truncated XML
    assert "no compute-sanitizer summary line" in text
    assert "truncated or not well-formed XML" in text
    assert res[("test_hang", "sanitizer:memcheck")][0] == "fail"
    verdict, summary = res[("test_crash_mid", "sanitizer:memcheck")]
    assert verdict in ("fail", "error"), summary
    assert res[("test_clean", "sanitizer:memcheck")] == ("pass", "0 hazards")
    assert res[("test_victim", "sanitizer:initcheck")][0] == "error"
    result.stdout.fnmatch_lines(["*exit status 0 although the tool counted * errors*"])
    assert not any(v == "pass" for (n, c), (v, _) in res.items() if c != "sanitizer:memcheck" or n != "test_clean"
                   if (n, c) != ("test_victim", "sanitizer:memcheck"))


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_test_no_child_judged_is_an_error_not_a_silent_pass(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdist: bool) -> None:
    """A test that reaches its call with no verdict for a tool it wants (a plugin put it into the
    collection after pipecheck cut the shares, or the children never judged it) errors, naming why; it
    never passes as if the tool had found nothing."""
    _fake(tmp_path, monkeypatch, {})
    _setup(pytester)
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + """
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # after every other plugin, pipecheck's share cut included: a late plugin that adds a test
    yield
    extra = [i for i in items if i.name == "test_late"]
    for i in extra:
        items.remove(i)
    items.extend(pytest.Function.from_parent(i.parent, name=i.name, callobj=i.obj) for i in extra)
""")
    pytester.makepyfile(test_m=noop_tests("test_judged", "test_late"))
    args = ["--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider"]
    if xdist:
        args += ["-n", "2", "-p", "xdist"]
    result = pytester.runpytest_subprocess(*args)
    text = result.stdout.str()
    res = _results(text)
    assert res[("test_judged", "sanitizer:racecheck")][0] == "pass", text[-3000:]
    verdict, summary = res[("test_late", "sanitizer:racecheck")]
    assert verdict == "error" and "no sanitizer verdict" in summary, (verdict, summary)
    result.stdout.fnmatch_lines(["*no racecheck child judged this test*"])
    assert result.ret == 1
