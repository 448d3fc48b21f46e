"""``--pipecheck-compare=REV`` times what REV contains, or says it could not: submodules, the head's files, and
the REVs that could not be timed.

Real pytest runs in temporary git repositories with the test seam ``PIPECHECK_TEST_FAKE_TIMER=return`` (both
processes take the number the timed callable returns as its time in us; ``test_compare_plugin.py`` says why),
as ``test_compare_plugin.py`` runs them. In every scenario the head's kernel is 1.5x slower than REV's, so a
comparison that timed the two would fail: a pass would mean REV's process timed the head's code, and a skip
"new at REV" that a REV that could not be timed was taken for a new check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_compare_plugin import KERNEL, TESTS, _git, _perf, _run

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
              pytest.mark.cpu_only]  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

#: the test of the submodule scenarios: its kernel comes from the submodule ``kern``
SUB_TESTS = TESTS.replace("from kernel import make", "from kern.kernel import make")


def _out(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def seam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_TEST_FAKE_TIMER", "return")


def _kernel_repo(where: Path, factor: float) -> Path:
    """The kernel library's own repository (the submodule's upstream), one commit with FACTOR = ``factor``."""
    where.mkdir()
    _git(where, "init", "-q")
    (where / "__init__.py").write_text("")
    (where / "kernel.py").write_text(KERNEL.format(factor=factor, mode="ok"))
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "kernel")
    return where


def _superproject(pytester: pytest.Pytester, upstream: Path) -> Path:
    """pytester's directory as a repository with ``upstream`` as its submodule ``kern``, tagged ``base``."""
    top = pytester.path
    _git(top, "init", "-q")
    _git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "kern")
    (top / "test_k.py").write_text(SUB_TESTS)
    _git(top, "add", "-A")
    _git(top, "commit", "-q", "-m", "base")
    _git(top, "tag", "base")
    return top


def _bump(top: Path, factor: float) -> str:
    """A new commit of the submodule's checkout with FACTOR = ``factor``; returns its sha (not committed in the
    superproject: the caller does that or leaves it as the working tree's change)."""
    sub = top / "kern"
    (sub / "kernel.py").write_text(KERNEL.format(factor=factor, mode="ok"))
    _git(sub, "commit", "-q", "-am", f"factor {factor}")
    return _out(sub, "rev-parse", "HEAD")


def _rev_and_head(pytester: pytest.Pytester, rev_test: str, gitattributes: str | None = None) -> None:
    """pytester's directory as a repository whose one commit, REV, holds REV's kernel (FACTOR 1.0), ``rev_test``
    as test_k.py and, where given, ``gitattributes`` as its .gitattributes; the working tree over it is the
    head's: kernel.py with FACTOR 1.5 and TESTS as test_k.py, not committed."""
    _git(pytester.path, "init", "-q")
    (pytester.path / "kernel.py").write_text(KERNEL.format(factor=1.0, mode="ok"))
    (pytester.path / "test_k.py").write_text(rev_test)
    if gitattributes is not None:
        (pytester.path / ".gitattributes").write_text(gitattributes)
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "REV")
    (pytester.path / "kernel.py").write_text(KERNEL.format(factor=1.5, mode="ok"))
    (pytester.path / "test_k.py").write_text(TESTS)


def test_a_submodule_bump_to_a_slower_kernel_fails_against_rev(pytester: pytest.Pytester, seam: None,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    upstream = _kernel_repo(tmp_path_factory.mktemp("up") / "kern", 1.0)
    top = _superproject(pytester, upstream)
    _bump(top, 1.5)
    _git(top, "commit", "-q", "-am", "bump the kernel submodule")  # the pull request: a submodule bump only
    result = _run(pytester, "--pipecheck-compare=base")
    # REV's tree holds the submodule at REV's commit (1.0), not the head's checkout of it (1.5)
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "fail", perf["summary"]
    cmp = perf["details"]["compare"]
    assert 1.45 < cmp["ratio"] < 1.55 and 95.0 < cmp["base_median_us"] < 105.0, perf["summary"]


def test_a_submodule_commit_not_here_is_an_error_that_says_so(pytester: pytest.Pytester, seam: None,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    upstream = _kernel_repo(tmp_path_factory.mktemp("up") / "kern", 1.5)
    top = _superproject(pytester, upstream)
    gone = _bump(top, 1.0)
    _git(top, "commit", "-q", "-am", "REV: the submodule at a commit only one clone had")
    _git(top, "tag", "rev")
    # the submodule's checkout forgets that commit (a force-push upstream, a fresh clone): REV cannot be read
    sub = top / "kern"
    _git(sub, "reset", "-q", "--hard", "HEAD~1")
    _git(sub, "reflog", "expire", "--expire=now", "--all")
    _git(sub, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "cat-file", "-e", f"{gone}^{{commit}}"], cwd=sub).returncode != 0
    result = _run(pytester, "--pipecheck-compare=rev")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "error" and perf["details"]["compare"]["status"] == "error"
    assert f"the submodule kern: REV records its commit {gone[:10]}, which is not in its local repository" \
        in perf["summary"]


def test_a_module_imported_from_the_head_checkout_is_an_error_naming_it(pytester: pytest.Pytester, seam: None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # REV has the test, not its kernel: kernel.py is untracked at the head (build output, a file not yet added),
    # and the head's checkout is on PYTHONPATH, so REV's process would import the head's kernel and time it twice
    _git(pytester.path, "init", "-q")
    (pytester.path / "test_k.py").write_text(TESTS)
    _git(pytester.path, "add", "-A")
    _git(pytester.path, "commit", "-q", "-m", "the test, without its kernel")
    (pytester.path / "kernel.py").write_text(KERNEL.format(factor=1.5, mode="ok"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "error" and perf["details"]["compare"]["status"] == "error", perf["summary"]
    assert "REV's process imported kernel (kernel.py) from the head's checkout" in perf["summary"]
    assert "outside REV's tree" in perf["summary"]


@pytest.mark.parametrize(
    ("rev_test", "said"),
    [
        pytest.param("import pytest\n\n\ndef test_gemm(pipecheck):\n    pytest.skip('no kernel library here')\n",
                     "test_k.py::test_gemm was skipped (no kernel library here) before it called "
                     "check_perf(case='a')", id="skipped-before-check_perf"),
        pytest.param("def test_gemm(pipecheck):\n    from kernel_v2 import make\n",
                     "test_k.py::test_gemm failed at call (ModuleNotFoundError: No module named 'kernel_v2') "
                     "before it called check_perf(case='a')", id="cannot-import-its-kernel"),
        pytest.param("import pytest\n\npytest.importorskip('kernel_lib_not_here')\n" + TESTS,
                     "collecting test_k.py was skipped at HEAD", id="module-skipped-at-collection"),
        pytest.param("import pytest\n\n\n@pytest.mark.xfail(reason='known broken')\ndef test_gemm(pipecheck):\n"
                     "    raise RuntimeError('broken')\n",
                     "test_k.py::test_gemm xfailed (known broken)", id="xfailed"),
    ],
)
def test_a_rev_that_could_not_be_timed_is_an_error_not_new(pytester: pytest.Pytester, seam: None,
                                                           rev_test: str, said: str) -> None:
    _rev_and_head(pytester, rev_test)
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "error" and perf["details"]["compare"]["status"] == "error", perf["summary"]
    assert said in perf["summary"] and "new at" not in perf["summary"]


def test_a_test_file_left_out_by_export_ignore_is_an_error_not_new(pytester: pytest.Pytester, seam: None) -> None:
    _rev_and_head(pytester, TESTS, gitattributes="test_k.py export-ignore\n")
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(failed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "error", perf["summary"]
    assert "test_k.py is in REV's commit" in perf["summary"] and "export-ignore" in perf["summary"]


def test_what_rev_genuinely_lacks_stays_new(pytester: pytest.Pytester, seam: None) -> None:
    # the counterpart of the errors above: a REV test that runs to the end and passes without the case
    _rev_and_head(pytester, "def test_gemm(pipecheck):\n    pass\n")
    result = _run(pytester, "--pipecheck-compare=HEAD")
    result.assert_outcomes(passed=1)
    perf = _perf(pytester)["test_k.py::test_gemm[a]"]
    assert perf["verdict"] == "skip" and perf["details"]["compare"]["status"] == "new"
    assert "does not call check_perf(case='a') there (the test passed; no check_perf call there)" in perf["summary"]
