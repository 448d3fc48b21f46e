"""The relay child of crash isolation (the CPU tier runs every test in one) works where pytest was started,
with the run's arguments meaning what they mean there, through real runs started in a subdirectory of the
rootdir: a test sees the working directory it sees without ``--pipecheck``, and relative ``-c`` and
``--rootdir`` values name the same files in the child as in the run."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

MODULE = '''
import json
import os
import sys
from pathlib import Path


def _note(request):
    with open(os.environ["RELAY_OUT"], "a") as fh:
        fh.write(json.dumps({"test": request.node.name, "relay": "--pipecheck-relay" in " ".join(sys.argv),
                             "cwd": os.getcwd(), "rootdir": str(request.config.rootpath),
                             "inifile": str(request.config.inipath)}) + "\\n")


def test_cwd(pipecheck, request):
    _note(request)
    assert os.getcwd() == str(Path(__file__).parent)


def test_relative_path(pipecheck, request):
    _note(request)
    assert Path("data.txt").read_text() == "beside the tests"
'''


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str, *args: str
         ) -> tuple[pytest.RunResult, list[dict[str, object]]]:
    out = pytester.path / f"notes-{len(list(pytester.path.glob('notes-*')))}.jsonl"
    monkeypatch.setenv("RELAY_OUT", str(out))
    # a top-level run on the CPU tier: crash isolation (auto) runs the tests in a relay child (pytest sets the
    # variable again at each phase of this test, so it goes here)
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.chdir(pytester.path / where)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args)
    notes = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return result, notes


@pytest.fixture
def layout(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    tests = pytester.mkdir("tests")
    (tests / "test_here.py").write_text(MODULE)
    (tests / "data.txt").write_text("beside the tests")
    return pytester


def test_a_run_started_in_a_subdirectory_runs_its_tests_there(layout: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    layout.makeini("[pytest]\n")
    plain, plain_notes = _run(layout, monkeypatch, "tests")
    plain.assert_outcomes(passed=2)
    result, notes = _run(layout, monkeypatch, "tests", "--pipecheck")
    result.assert_outcomes(passed=2)
    assert [n["relay"] for n in notes] == [True, True], "the tests ran in crash isolation's relay child"
    assert [n["cwd"] for n in notes] == [str(layout.path / "tests")] * 2
    assert [n["cwd"] for n in plain_notes] == [n["cwd"] for n in notes]


def test_relative_config_and_rootdir_name_the_same_files_in_the_relay_child(layout: pytest.Pytester,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``-c ../cfg/run.ini --rootdir=..`` from ``tests/``: from the rootdir these would name files outside the
    project (and the child's node ids would not be the run's)."""
    (layout.path / "cfg").mkdir()
    (layout.path / "cfg" / "run.ini").write_text("[pytest]\naddopts = --strict-markers\n")
    result, notes = _run(layout, monkeypatch, "tests", "--pipecheck", "-c", "../cfg/run.ini", "--rootdir=..")
    result.assert_outcomes(passed=2)
    assert [n["relay"] for n in notes] == [True, True]
    for note in notes:
        assert (note["cwd"], note["rootdir"], note["inifile"]) == (
            str(layout.path / "tests"), str(layout.path), str(layout.path / "cfg" / "run.ini")), note
    # the same with the options attached and a node id from the subdirectory
    result, notes = _run(layout, monkeypatch, "tests", "--pipecheck", "-c../cfg/run.ini", "--rootdir", "..",
                         "test_here.py::test_relative_path")
    result.assert_outcomes(passed=1)
    assert [(n["test"], n["relay"], n["rootdir"]) for n in notes] == [("test_relative_path", True, str(layout.path))]
    assert os.path.samefile(str(notes[0]["cwd"]), layout.path / "tests")
